"""``edgebert info``: versions, CPU flags and onnxruntime providers (torch-free)."""

from __future__ import annotations

from .app import app, console


@app.command("info")
def info() -> None:
    """Print versions, threads and the onnxruntime execution providers on this machine."""
    from ..environment import describe

    for key, value in describe().items():
        console.print(f"{key}: {value}", highlight=False)
