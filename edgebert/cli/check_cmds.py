"""``edgebert check``: verify a bundle on the device that will run it. Thin: parse, call
``edgebert.runtime.check.check_bundle``, print the report; exit 0 on pass, 1 on fail."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from edgebert.cli import options as o
from edgebert.cli.app import app, console

EXIT_CHECK_FAILED = 1


@app.command("check")
def check(
    bundle_dir: Annotated[Path, typer.Argument(metavar="BUNDLE", help="Bundle folder or archive written by "
                                                                    "`edgebert export`.")],
    data: Annotated[Optional[Path], typer.Option(
        "--data", help="Texts to measure on (text, TSV, WikiText or CoNLL; default: the built-in held-out "
                       "text the export gated on). A CoNLL file with a token-cls bundle: entity F1 too.")] = None,
    max_texts: Annotated[int, typer.Option("--max-texts", min=1, help="Measure on at most this many texts. "
                                           "Without --data: the texts the export's gate measured the graph on "
                                           "(the first --gate-size built-in held-out ones, 200 by default), so "
                                           "a graph it accepted passes here; questions: the built-in 439.")] = 512,
    max_accuracy_loss: o.CheckMaxAccuracyLoss = None,
    target: o.CheckTarget = None,
    threads: o.RuntimeThreads = None,
    as_json: o.Json = False,
) -> None:
    """Check a bundle on this device: file hashes, this CPU's INT8 kernels vs the bundle's targets, and
    INT8 accuracy re-measured against fp32 here. Exit 0 on pass, 1 on fail (with the reason)."""
    from edgebert.runtime.archive import bundle_folder
    from edgebert.runtime.check import check_bundle

    report = check_bundle(bundle_folder(bundle_dir), data, max_texts=max_texts, max_accuracy_loss=max_accuracy_loss,
                          int8_target=target, threads=threads)
    if as_json:
        typer.echo(json.dumps(report.as_dict(), indent=2))
    else:
        for line in report.lines():
            console.print(line, highlight=False, markup=False, soft_wrap=True)
    if not report.passed:
        raise typer.Exit(EXIT_CHECK_FAILED)
