"""``edgebert info``: versions, the CPU (its name, SIMD flags, and what INT8 runs on it), and the
onnxruntime providers (torch-free)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from edgebert.cli.app import app, console
from edgebert.cli.info_lines import bundle_lines, runtime_lines


@app.command("info")
def info(bundle: Annotated[Optional[Path], typer.Argument(
        metavar="BUNDLE", help="Also describe this bundle (folder or archive): graphs, the precision and "
                               "pooling a default EdgeSession uses here.")] = None) -> None:
    """Print versions, threads, the CPU and its INT8 kernels, and the onnxruntime execution providers."""
    from edgebert.runtime.hostcpu import detect_host
    from edgebert.system.environment import describe

    info = describe()
    info["int8_host"] = detect_host().summary()     # e.g. arm64 (Arm Cortex-A72; no dot product); ...
    for key, value in info.items():
        console.print(f"{key}: {value}", highlight=False, markup=False, soft_wrap=True)
    for line in runtime_lines() + (bundle_lines(bundle) if bundle is not None else []):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    if len(info["onnxruntime_packages"]) > 1:
        console.print(f"warning: {' and '.join(info['onnxruntime_packages'])} are both installed and share one "
                      "module; uninstall all of them and install one (pip install 'edgebert[cpu]' or "
                      "'edgebert[gpu]')", highlight=False, markup=False, soft_wrap=True)
