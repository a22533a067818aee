"""Refresh the locks (``make lock``): resolve pyproject.toml's ranges anew with uv for Python 3.11 on Linux
x86-64, torch's CPU wheel, and write one pip constraints file per venv family (locks/README.md).

Run from the repository root with uv on PATH or beside this interpreter; prints what moved."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

LOCKS = Path(__file__).resolve().parent
REPO = LOCKS.parent
# torch's CPU build lies on this kind of machine's disk; where it does not, the lock names PyPI's torch
WHEELS = Path("/opt/wheels")
# name: (extras of pyproject.toml, extra inputs, manylinux platform)
LOCK_FILES = {
    # .venv (every extra make can install there: ORT=gpu, EXTRAS=openvino / peers), .venv-runtime, .venv-lint:
    # one resolution, each venv installs its part of it
    "main": (("cpu", "gpu", "train", "hf", "dev", "batch", "openvino", "peers"), ("torch.in",),
             "x86_64-manylinux_2_28"),
    # .venv-scaleout, apart: Ray and tritonclient hold protobuf < 7, which sentencepiece 0.2.3's model reader
    # (import-hf of an XLM-R sentencepiece.bpe.model, in .venv) cannot run on
    "scaleout": (("cpu", "batch", "ray", "spark", "triton"), ("scaleout.in",), "x86_64-manylinux_2_28"),
    # .venv-optimum: the older majors (optimum-onnx needs transformers < 4.58, so sentence-transformers 5)
    "optimum": (("cpu", "train", "optimum", "dev"), ("torch.in",), "x86_64-manylinux_2_28"),
    # .venv-triton: nvidia-pytriton (numpy < 2; its wheels are manylinux_2_35 only)
    "triton": (("cpu",), ("triton.in",), "x86_64-manylinux_2_35"),
}


def uv() -> str:
    beside = Path(sys.executable).parent / "uv"
    found = str(beside) if beside.exists() else shutil.which("uv")
    if not found:
        raise SystemExit("make lock: uv not found (make lock installs it into .venv-lock)")
    return found


def pins(path: Path) -> dict[str, str]:
    if not path.exists():
        return {}
    found = (re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", line) for line in path.read_text().splitlines())
    return {m.group(1).lower(): m.group(2) for m in found if m}


def compile_lock(name: str) -> None:
    extras, inputs, platform = LOCK_FILES[name]
    out = LOCKS / f"{name}.txt"
    before = pins(out)
    command = [uv(), "pip", "compile", "--quiet", "--upgrade", "pyproject.toml", *(f"locks/{i}" for i in (*inputs, "tools.in")),
               *(a for e in extras for a in ("--extra", e)), "--python-version", "3.11",
               "--python-platform", platform, "--custom-compile-command", "make lock", "-o", str(out)]
    if WHEELS.is_dir():
        command += ["--find-links", str(WHEELS)]
    subprocess.run(command, cwd=REPO, check=True)
    after = pins(out)
    moved = sorted(k for k in after.keys() | before.keys() if after.get(k) != before.get(k))
    print(f"locks/{name}.txt: {len(after)} pins, {len(moved)} moved"
          + "".join(f"\n  {k}: {before.get(k, '-')} -> {after.get(k, '-')}" for k in moved))


if __name__ == "__main__":
    for lock_name in sys.argv[1:] or LOCK_FILES:
        compile_lock(lock_name)
