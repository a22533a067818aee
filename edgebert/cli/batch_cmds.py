"""``edgebert batch``: a bundle's task over a Parquet / JSONL / CSV file into Parquet parts, on local worker
processes, Ray or Spark (torch-free; pyarrow from ``edgebert[batch]``). Thin: parse, ``scaleout.batch.run_batch``,
print the summary."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from edgebert.cli import options as o
from edgebert.cli.app import app, say


@app.command("batch")
def batch_cmd(
    bundle: Annotated[Path, typer.Argument(metavar="BUNDLE", help="A bundle written by `edgebert export` (embed, "
                                                                "cls, token-cls, qa or rerank), or its archive.")],
    input: Annotated[Path, typer.Option("--input", "-i", help="The rows: a .parquet (or a folder of them), "
                                                              ".jsonl or .csv file.")],
    output: Annotated[Path, typer.Option("--output", help="Folder of Parquet parts: the input's columns plus "
                                                          "the task's results, written as they complete.")],
    column: Annotated[str, typer.Option("--column", help="The text column (embed, cls, token-cls).")] = "text",
    question_column: Annotated[str, typer.Option("--question-column", help="qa: the question column.")
                               ] = "question",
    context_column: Annotated[str, typer.Option("--context-column", help="qa: the context column.")] = "context",
    query_column: Annotated[str, typer.Option("--query-column", help="rerank: the query column.")] = "query",
    passage_column: Annotated[str, typer.Option("--passage-column", help="rerank: the passage column (one row "
                                                                         "per (query, passage) pair).")] = "passage",
    engine: Annotated[str, typer.Option("--engine", help="local (worker processes here) | ray (the running "
                                                         "cluster, or a local one) | spark (the active session, "
                                                         "or local[N]).")] = "local",
    workers: Annotated[Optional[int], typer.Option("--workers", min=1, help="Worker processes / actors / Spark "
                                                                            "tasks (default: the CPUs / "
                                                                            "--threads).")] = None,
    threads: o.RuntimeThreads = None,
    batch_size: o.RuntimeBatchSize = 32,
    part_rows: Annotated[int, typer.Option("--part-rows", min=1, help="Input rows per output part (the unit a "
                                                                      "resumed run skips).")] = 10_000,
    precision: Annotated[Optional[str], typer.Option(
        "--precision", help="int8 | fp32 (default: the best the bundle has here).")] = None,
    aggregation: Annotated[str, typer.Option("--aggregation", help="token-cls: none | simple | first, as "
                                                                   "EdgeSession.tag groups entities.")] = "simple",
    resume: o.BatchResume = False,
    overwrite: o.BatchOverwrite = False,
) -> None:
    """Run a bundle over a table of texts: embeddings, labels, entities, answers or relevance scores, one Parquet part at a
    time. A killed run continues with --resume; workers x threads never oversubscribe the cores."""
    from edgebert.scaleout.batch import BatchConfig, run_batch

    summary = run_batch(BatchConfig(bundle=bundle, input=input, output=output, column=column,
                                    question_column=question_column, context_column=context_column,
                                    query_column=query_column, passage_column=passage_column,
                                    engine=engine, workers=workers, threads=threads, batch_size=batch_size,
                                    part_rows=part_rows, precision=precision, aggregation=aggregation,
                                    resume=resume, overwrite=overwrite), say=say)
    for name in summary.redone:
        say(f"batch: {name} did not match its record and was written again")
    say(summary.line())
