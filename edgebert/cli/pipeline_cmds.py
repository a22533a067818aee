"""``edgebert pipeline``: text -> teacher -> 4-layer student -> INT8 bundle -> benchmark, one summary."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from edgebert.cli import options as o
from edgebert.cli.app import app, console, say


@app.command("pipeline")
def pipeline_cmd(
    out: o.Out = Path("runs/pipeline"),
    overwrite: o.Overwrite = False,
    preset: o.preset_option("demo (the installed all-MiniLM-L6-v2, built-in corpus, ~3 min) | scratch "
                            "(pretrain the teacher here) | wiki (from scratch, needs --corpus)") = None,
    corpus: o.Corpus = None,
    eval_corpus: o.EvalCorpus = None,
    corpus_format: o.CorpusFormat = None,
    teacher: Annotated[Optional[Path], typer.Option(
        "--teacher", help="Distil this teacher (default: the installed all-MiniLM-L6-v2).")] = None,
    from_scratch: Annotated[Optional[bool], typer.Option(
        "--from-scratch", help="Pretrain a 12-layer teacher on the corpus, then MLM distillation.")] = None,
    pretrain_steps: Annotated[Optional[int], typer.Option("--pretrain-steps", help="With --from-scratch.")] = None,
    distill_steps: Annotated[Optional[int], typer.Option("--distill-steps", help="Student training steps.")] = None,
    layers: o.Layers = None,
    max_seq_len: o.MaxSeqLen = None,
    calib: o.Calib = None,
    max_accuracy_loss: o.MaxAccuracyLoss = None,
    lengths_from: o.LengthsFrom = None,
    threads: o.Threads = None,
    progress: o.Progress = None,
    downstream_data: Annotated[Optional[Path], typer.Option(
        "--downstream-data", help="Folder of held-out downstream sets (mrpc/dev.tsv, sst2/train.tsv, sst2/dev.tsv, "
                                  "wikitext-2-raw/wiki.test.raw; e.g. ../shared/data): teacher vs student on MRPC "
                                  "paraphrase AUC, an SST-2 probe and WikiText retrieval. Missing: skipped, said "
                                  "in one line.")] = None,
) -> None:
    """Text to benchmarked INT8 bundle: distil a teacher (default: the installed all-MiniLM-L6-v2) into a
    4-layer student, export it (fused fp32 + gated INT8), bench it against the fp32 PyTorch teacher.
    --max-seq-len sets the distillation's sequence length (the demo: 64)."""
    from edgebert.pipeline import build_pipeline_config, run_pipeline

    cfg = build_pipeline_config(out, preset, overwrite=overwrite, corpus=tuple(corpus or ()) or None,
                                eval_corpus=tuple(eval_corpus or ()) or None, corpus_format=corpus_format,
                                teacher=teacher,
                                from_scratch=from_scratch, pretrain_steps=pretrain_steps, distill_steps=distill_steps,
                                layers=layers, distill_max_seq_len=max_seq_len, calib=calib, max_accuracy_loss=max_accuracy_loss,
                                lengths_from=lengths_from, threads=threads, progress=progress,
                                downstream_data=downstream_data)
    result = run_pipeline(cfg, console=console, say=say)
    console.print()
    for line in result.lines:
        say(line)
