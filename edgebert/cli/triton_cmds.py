"""``edgebert triton-repo``: a bundle as an NVIDIA Triton model repository. Thin: parse, call
``edgebert.scaleout.triton_repo.write_triton_repo``, print."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from edgebert.cli import options as o
from edgebert.cli.app import app, say


@app.command("triton-repo")
def triton_repo(
    bundle: Annotated[Path, typer.Argument(metavar="BUNDLE", help="Bundle folder or archive written by "
                                                                  "`edgebert export`.")],
    out: o.Out,
    backend: Annotated[str, typer.Option(
        "--backend", help="python: one model, text in and the task's result out (EdgeSession inside); "
                          "onnxruntime: the graph on Triton's onnxruntime backend behind a tokenizer model and "
                          "an ensemble.")] = "python",
    instances: Annotated[Optional[int], typer.Option(
        "--instances", help="Model instances (default: 2, or 1 on one core; with --threads: cores / threads).")] = None,
    threads: o.RuntimeThreads = None,
    cores: Annotated[Optional[int], typer.Option(
        "--cores", help="The server's cores: instances x threads may not exceed them (default: this machine's).")
    ] = None,
    max_batch: Annotated[int, typer.Option(
        "--max-batch", help="Triton's max_batch_size: texts one dynamic batch may hold.")] = 64,
    target: o.PackTarget = None,
    precision: Annotated[Optional[str], typer.Option(
        "--precision", help="int8 | fp32 (default: the INT8 graph where the bundle has one).")] = None,
    gpu: Annotated[bool, typer.Option(
        "--gpu", help="With --backend onnxruntime: the bundle's TensorRT graph on GPU instances.")] = False,
    name: Annotated[Optional[str], typer.Option(
        "--name", help="The model clients call (default: edgebert_<task>).")] = None,
    overwrite: o.Overwrite = False,
    as_json: o.Json = False,
) -> None:
    """Write a Triton model repository serving the bundle: each of --instances model instances runs --threads
    onnxruntime threads, instances x threads at most --cores. Every config.pbtxt is parsed with Triton's own schema
    (tritonclient) and checked against the bundle's manifest first; the INT8 target defaults to portable."""
    from edgebert.scaleout.triton_repo import write_triton_repo

    repo = write_triton_repo(bundle, out, backend=backend, instances=instances, threads=threads, cores=cores,
                             max_batch=max_batch, target=target, precision=precision, gpu=gpu, name=name,
                             overwrite=overwrite)
    if as_json:
        typer.echo(json.dumps({"out": str(repo.out), "backend": repo.backend, "model": repo.model,
                               "models": repo.models, "instances": repo.instances, "threads": repo.threads,
                               "cores": repo.cores, "max_batch": repo.max_batch, "inputs": repo.inputs,
                               "outputs": repo.outputs, "notes": repo.notes}, indent=2))
        return
    for line in repo.lines():
        say(line)
