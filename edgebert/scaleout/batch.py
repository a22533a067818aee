"""``edgebert batch``: a bundle's task over a Parquet / JSONL / CSV file, into resumable Parquet parts.

``run_batch(BatchConfig(...))`` reads the input (``tables``), cuts it into parts of ``part_rows`` rows, runs
the pending ones on the engine (``engines``: local processes, Ray or Spark) and writes each one as it comes
(``parts``: the input's columns plus the task's result columns, atomically, recorded for ``resume``). A
progress bar with texts/s on a terminal (a plain line per part otherwise); ``_metrics.jsonl`` in the output
gets a line per part and one for the run; the summary's ``line()`` says rows, seconds, texts/s, engine and
workers x threads.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from edgebert.errors import ConfigError
from edgebert.scaleout.engines import Layout, plan, prepare, run_parts
from edgebert.scaleout.parts import BatchOutput
from edgebert.scaleout.tables import fingerprint, part_ranges, pyarrow, read_table
from edgebert.scaleout.tasks import AGGREGATIONS, task_columns

DEFAULT_PART_ROWS = 10_000


@dataclass
class BatchConfig:
    bundle: Path
    input: Path
    output: Path
    column: str = "text"                     # the text column (embed / cls / token-cls)
    question_column: str = "question"        # qa: the question and context columns
    context_column: str = "context"
    query_column: str = "query"              # rerank: the query and passage columns
    passage_column: str = "passage"
    engine: str = "local"
    workers: int | None = None
    threads: int | None = None
    batch_size: int = 32                     # texts per onnxruntime call
    part_rows: int = DEFAULT_PART_ROWS
    precision: str | None = None
    aggregation: str = "simple"              # token-cls: EdgeSession.tag's
    resume: bool = False
    overwrite: bool = False
    progress: bool | None = None             # None: a bar on a terminal
    pin: bool = False                        # local: each worker on its own core


@dataclass
class BatchSummary:
    output: Path
    task: str
    rows: int                 # in the input
    rows_run: int             # run by this run (the rest were resumed)
    parts: int
    parts_resumed: int
    seconds: float
    layout: Layout
    redone: list[str] = field(default_factory=list)

    @property
    def texts_per_s(self) -> float:
        return self.rows_run / self.seconds if self.seconds > 0 else 0.0

    def line(self) -> str:
        resumed = f", {self.parts_resumed} already written" if self.parts_resumed else ""
        return (f"batch: {self.rows_run} rows in {self.seconds:.1f} s ({self.texts_per_s:.1f} texts/s) on "
                f"{self.layout.line()} -> {self.output} ({self.parts} part{'s' if self.parts != 1 else ''}{resumed})")

    def as_dict(self) -> dict[str, Any]:
        return {"event": "run", "task": self.task, "rows": self.rows, "rows_run": self.rows_run,
                "parts": self.parts, "parts_resumed": self.parts_resumed, "seconds": round(self.seconds, 3),
                "texts_per_s": round(self.texts_per_s, 2), "engine": self.layout.engine,
                "workers": self.layout.workers, "threads": self.layout.threads}


def bundle_task_of(bundle: Path) -> str:
    """The bundle's task, read from its manifest (an archive is extracted into the cache first)."""
    from edgebert.bundle import read_manifest
    from edgebert.runtime.archive import bundle_folder

    return read_manifest(bundle_folder(bundle)).task


def opened_bundle(cfg: BatchConfig) -> tuple[str, str]:
    """(task, identity) of the bundle, opened once here in the driver as every worker will open it (its
    precision, graph, tokenizer, batch size): a setting or bundle a worker would refuse is one line here,
    before any worker or engine starts and before anything is written. The identity is the sha256 of its
    manifest.json, which holds every file's sha256: another model at the same path is another identity."""
    from edgebert.files.hashing import sha256_file
    from edgebert.runtime import EdgeSession

    session = EdgeSession(cfg.bundle, provider="cpu", precision=cfg.precision, threads=1,
                          batch_size=cfg.batch_size)
    task, identity = session.task, sha256_file(session.bundle_dir / "manifest.json")
    del session
    return task, identity


def run_batch(cfg: BatchConfig, say: Callable[[str], None] | None = None) -> BatchSummary:
    pa = pyarrow()
    layout = plan(cfg.engine, cfg.workers, cfg.threads)
    if cfg.aggregation not in AGGREGATIONS:
        raise ConfigError(f"--aggregation {cfg.aggregation} is not one of {', '.join(AGGREGATIONS)}")
    out = BatchOutput(cfg.output, resume=cfg.resume, overwrite=cfg.overwrite)     # checked: writes nothing
    task, bundle_id = opened_bundle(cfg)
    spec = task_columns(task)
    named = {"text": cfg.column, "question": cfg.question_column, "context": cfg.context_column,
             "query": cfg.query_column, "passage": cfg.passage_column}
    columns = tuple(named[role] for role in spec.inputs)
    table = read_table(cfg.input, columns)
    clash = [c for c in spec.outputs if c in table.column_names]
    if clash:
        raise ConfigError(f"--input {cfg.input} already has column(s) {', '.join(clash)}, which the results of a "
                          f"'{task}' bundle are named", "rename or drop those columns in the input")
    ranges = part_ranges(table.num_rows, cfg.part_rows)
    job = {"bundle": str(Path(cfg.bundle).resolve()), "bundle_manifest_sha256": bundle_id, "task": task,
           "input": fingerprint(cfg.input),
           "columns": list(columns), "part_rows": cfg.part_rows, "parts": len(ranges), "rows": table.num_rows,
           "precision": cfg.precision, "aggregation": cfg.aggregation, "engine": cfg.engine}
    options = {"bundle": str(cfg.bundle), "task": task, "precision": cfg.precision, "batch_size": cfg.batch_size,
               "aggregation": cfg.aggregation}
    prepare(layout)                     # the engine up (Ray / Spark) and its CPUs checked: before any write
    with out.dir.writing(keep=out.written):
        done = out.open(job)
        pending = [(i, table.slice(a, b - a)) for i, (a, b) in enumerate(ranges) if i not in done]
        rows_run = sum(t.num_rows for _, t in pending)
        start = time.perf_counter()
        with _Progress(rows_run, cfg.progress, say) as progress:
            starts = {i: ranges[i][0] for i, _ in pending}
            for index, results in run_parts(layout, options, spec, columns, pending, pin=cfg.pin, first_rows=starts):
                a, b = ranges[index]
                part = table.slice(a, b - a)
                for name in spec.outputs:
                    part = part.append_column(pa.field(name, results.schema.field(name).type), results.column(name))
                out.write_part(index, part)
                progress.advance(index, part.num_rows, len(ranges))
                out.log({"event": "part", "part": index, "rows": part.num_rows,
                         "seconds": round(time.perf_counter() - start, 3)})
        summary = BatchSummary(Path(cfg.output), task, table.num_rows, rows_run, len(ranges), len(done),
                               time.perf_counter() - start, layout, out.redone)
        out.log(summary.as_dict())
    return summary


class _Progress:
    """A rich bar with texts/s on a terminal (stderr); else one plain line per part through ``say``."""

    def __init__(self, total: int, enabled: bool | None, say: Callable[[str], None] | None):
        from rich.console import Console

        console = Console(stderr=True)
        self.say = say
        self.bar = None
        self.done, self.start = 0, time.perf_counter()
        if enabled is not False and console.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn("batch"), BarColumn(), MofNCompleteColumn(),
                                TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), console=console,
                                transient=True)
            self.task = self.bar.add_task("batch", total=total, rate="")

    def __enter__(self):
        if self.bar:
            self.bar.start()
        return self

    def __exit__(self, *exc):
        if self.bar:
            self.bar.stop()

    def advance(self, index: int, rows: int, parts: int) -> None:
        self.done += rows
        rate = self.done / max(time.perf_counter() - self.start, 1e-9)
        if self.bar:
            self.bar.update(self.task, advance=rows, rate=f"{rate:.1f} texts/s")
        elif self.say:
            self.say(f"batch: part {index + 1}/{parts} written ({rows} rows; {self.done} rows, {rate:.1f} texts/s)")
