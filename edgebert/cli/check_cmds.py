"""``edgebert check``: verify a bundle on the device that will run it. Thin: parse, call
``edgebert.runtime.check.check_bundle``, print the report; exit 0 on pass, 1 on fail."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from .app import app, console

EXIT_CHECK_FAILED = 1


@app.command("check")
def check(
    bundle_dir: Path = typer.Argument(..., help="Bundle directory written by `edgebert export`."),
    data: Optional[Path] = typer.Option(None, "--data", help="Texts to measure on (text, TSV or WikiText; "
                                        "default: the built-in held-out text the export gated on)."),
    max_texts: int = typer.Option(256, "--max-texts", min=1, help="Measure on at most this many texts."),
    max_accuracy_loss: Optional[float] = typer.Option(None, "--max-accuracy-loss",
                                                      help="Budget (default: the one the export gated with)."),
    target: Optional[str] = typer.Option(None, "--target", help="Check the INT8 graph made for this target "
                                         "instead of the one the runtime picks here."),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, help="onnxruntime intra-op threads."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Check a bundle on this device: file hashes, this CPU's INT8 kernels vs the bundle's targets, and
    INT8 accuracy re-measured against fp32 here. Exit 0 on pass, 1 on fail (with the reason)."""
    from ..runtime.check import check_bundle

    report = check_bundle(bundle_dir, data, max_texts=max_texts, max_accuracy_loss=max_accuracy_loss,
                          int8_target=target, threads=threads)
    if as_json:
        typer.echo(json.dumps(report.as_dict(), indent=2))
    else:
        for line in report.lines():
            console.print(line, highlight=False, markup=False, soft_wrap=True)
    if not report.passed:
        raise typer.Exit(EXIT_CHECK_FAILED)
