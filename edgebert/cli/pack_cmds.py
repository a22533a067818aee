"""``edgebert pack``: a bundle cut down to what one device runs. Thin: parse, call
``edgebert.runtime.pack.pack_bundle``, print."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from edgebert.cli import options as o
from edgebert.cli.app import app, say


@app.command("pack")
def pack(
    bundle: Annotated[Path, typer.Argument(metavar="BUNDLE", help="Bundle folder or archive written by "
                                                                  "`edgebert export --int8`.")],
    target: o.PackTarget,
    out: o.PackOut,
    overwrite: o.Overwrite = False,
    ort_format: Annotated[bool, typer.Option(
        "--ort-format", help="Ship the graph in onnxruntime's .ort format instead of .onnx, with the "
                             "required_operators.config a reduced (mobile) onnxruntime build needs (default: the .onnx "
                             "alone, also from a bundle exported with --ort-format).")] = False,
    as_json: o.Json = False,
) -> None:
    """Write the bundle for one device: its INT8 graph, tokenizer and model files, the manifest (saying what was
    left out and why) and the fp32 outputs on the held-out texts, so `edgebert check` verifies the graph on the
    device without the fp32 graph."""
    from edgebert.runtime.pack import pack_bundle

    result = pack_bundle(bundle, target, out, overwrite=overwrite, ort_format=ort_format)
    if as_json:
        typer.echo(json.dumps({"out": str(result.out), "target": result.target, "model": result.model,
                               "bytes": result.bytes, "files": result.kept, "left_out": result.left_out,
                               "reference": result.reference, "ort": result.ort}, indent=2))
        return
    for line in result.lines():
        say(line)
