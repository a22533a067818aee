"""``edgebert info``: versions, CPU flags and onnxruntime providers (torch-free)."""

from __future__ import annotations

from .app import app, console


@app.command("info")
def info() -> None:
    """Print versions, threads and the onnxruntime execution providers on this machine."""
    from edgebert.system.environment import describe

    info = describe()
    for key, value in info.items():
        console.print(f"{key}: {value}", highlight=False)
    if len(info["onnxruntime_packages"]) > 1:
        console.print(f"warning: {' and '.join(info['onnxruntime_packages'])} are both installed and share one "
                      "module; uninstall all of them and install one (pip install 'edgebert[cpu]' or "
                      "'edgebert[gpu]')", highlight=False, markup=False, soft_wrap=True)
