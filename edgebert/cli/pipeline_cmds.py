"""``edgebert pipeline``: pretrain -> distill -> export --int8 -> bench in one command. Thin: parse, call
``edgebert.pipeline.run_pipeline``, print."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .app import app, console


@app.command("pipeline")
def pipeline_cmd(
    out: Path = typer.Option(Path("runs/pipeline"), "--out", help="New folder for every stage's output."),
    preset: str = typer.Option("demo", "--preset", help="demo (built-in corpus, minutes) | wiki (needs --corpus)."),
    corpus: Optional[list[Path]] = typer.Option(None, "--corpus", help="Training text (repeatable); "
                                                "default: the built-in corpus."),
    eval_corpus: Optional[list[Path]] = typer.Option(None, "--eval-corpus", help="Held-out text (repeatable)."),
    teacher: Optional[Path] = typer.Option(None, "--teacher", help="Use this teacher instead of pretraining one."),
    pretrain_steps: Optional[int] = typer.Option(None, "--pretrain-steps"),
    distill_steps: Optional[int] = typer.Option(None, "--distill-steps"),
    student_layers: Optional[int] = typer.Option(None, "--student-layers", help="Default 4."),
    calib: Optional[Path] = typer.Option(None, "--calib", help="INT8 calibration/guard text (default: "
                                         "held-out corpus text)."),
    max_accuracy_loss: Optional[float] = typer.Option(None, "--max-accuracy-loss", help="INT8 budget, "
                                                      "1 - mean cosine (default 0.01)."),
    lengths_from: Optional[Path] = typer.Option(None, "--lengths-from", help="Length mix to replay in the "
                                                "benchmark, e.g. SST-2 dev.tsv (default: the calibration text)."),
    threads: Optional[int] = typer.Option(None, "--threads", help="Benchmark threads (default: all cores)."),
    progress: bool = typer.Option(True, "--progress/--no-progress"),
) -> None:
    """Text to benchmarked INT8 bundle: pretrain a 12-layer teacher, distil a 4-layer student, export it
    (fused fp32 + guarded INT8), bench it against the fp32 PyTorch teacher; one report."""
    from ..pipeline import PipelineConfig, run_pipeline

    given = dict(corpus=tuple(corpus) if corpus else None, eval_corpus=tuple(eval_corpus) if eval_corpus else None,
                 teacher=teacher, pretrain_steps=pretrain_steps, distill_steps=distill_steps,
                 student_layers=student_layers, calib=calib, max_accuracy_loss=max_accuracy_loss,
                 lengths_from=lengths_from, threads=threads)
    cfg = PipelineConfig.preset(preset, out, progress=progress, **{k: v for k, v in given.items() if v is not None})
    result = run_pipeline(cfg, console=console,
                          say=lambda line: console.print(line, highlight=False, markup=False, soft_wrap=True))
    for key, value in result.summary["headline"].items():
        console.print(f"{key}: {value}x" if value is not None else f"{key}: not measured", highlight=False)
    console.print(f"report: {result.out / 'pipeline.md'}", highlight=False, soft_wrap=True)
