"""Installed size of the runtime install (``pip install '.[cpu]'``: no torch) against the full one.

    python benchmarks/install_size.py [--full-venv .venv] [--out benchmarks/results/install_size/install_size.json]

Builds a fresh virtual environment in a temp folder, installs the checkout with the ``cpu`` extra, and
measures both environments' ``site-packages`` (bytes of every file, the largest distributions named).
For reference it also asks pip what Optimum's ``ORTModelForFeatureExtraction`` would pull in
(``pip install --dry-run --report`` of ``optimum[onnxruntime]`` in the runtime environment: nothing
is installed). ``tests/test_install.py`` calls the same functions.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


class IndexUnreachable(RuntimeError):
    """pip could not reach the package index (offline machine): the measurement cannot be made."""


NETWORK_SIGNS = ("NewConnectionError", "Failed to establish a new connection", "Temporary failure in name resolution",
                 "Network is unreachable", "No matching distribution found", "Could not find a version",
                 "ConnectTimeout", "ReadTimeout", "ProxyError")


def make_runtime_venv(venv: Path, extra: str = "cpu", timeout: int = 600) -> Path:
    """A fresh venv at ``venv`` with ``pip install '<checkout>[extra]'``; returns its python."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    python = venv_python(venv)
    proc = subprocess.run([str(python), "-m", "pip", "install", "-q", f"{REPO}[{extra}]"], capture_output=True,
                          text=True, timeout=timeout)
    if proc.returncode != 0 and any(sign in proc.stderr + proc.stdout for sign in NETWORK_SIGNS):
        raise IndexUnreachable(f"pip cannot reach the package index: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    if proc.returncode != 0:
        raise RuntimeError(f"pip install '.[{extra}]' failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return python


def site_packages(python: str | os.PathLike) -> Path:
    out = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True).stdout.strip()
    return Path(out)


def tree_bytes(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            p = os.path.join(root, name)
            if not os.path.islink(p):
                total += os.lstat(p).st_size
    return total


def measure(python: str | os.PathLike, top: int = 8) -> dict:
    """Total bytes of the environment's site-packages, the installed distributions and the largest."""
    site = site_packages(python)
    sizes = {p.name: tree_bytes(p) if p.is_dir() else p.stat().st_size for p in site.iterdir()}
    listing = subprocess.run([str(python), "-m", "pip", "list", "--format=json"], capture_output=True, text=True,
                             check=True).stdout
    return {"site_packages": str(site), "bytes": sum(sizes.values()),
            "packages": sorted(d["name"].lower() for d in json.loads(listing)),
            "largest": [{"entry": k, "bytes": v} for k, v in sorted(sizes.items(), key=lambda kv: -kv[1])[:top]]}


def optimum_requirements(python: str | os.PathLike, spec: str = "optimum[onnxruntime]") -> dict:
    """What pip would install for ``spec`` (dry run, nothing installed): names and versions."""
    proc = subprocess.run([str(python), "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed",
                           "--report", "-", spec], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        return {"spec": spec, "error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    report = json.loads(proc.stdout)
    names = sorted(f"{i['metadata']['name'].lower()}=={i['metadata']['version']}" for i in report["install"])
    return {"spec": spec, "would_install": names,
            "needs_torch": any(n.startswith("torch==") for n in names),
            "needs_transformers": any(n.startswith("transformers==") for n in names)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--full-venv", type=Path, default=Path(sys.prefix), help="the full install to compare with")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "install_size" / "install_size.json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="edgebert-venv-") as tmp:
        t0 = time.perf_counter()
        try:
            python = make_runtime_venv(Path(tmp) / "venv")
        except IndexUnreachable as exc:
            print(f"skipped: {exc}")
            return 1
        runtime = measure(python)
        runtime["install_s"] = round(time.perf_counter() - t0, 1)
        optimum = optimum_requirements(python)
    full = measure(venv_python(args.full_venv))
    result = {"runtime (pip install '.[cpu]')": runtime, f"full ({args.full_venv})": full,
              "optimum ORTModelForFeatureExtraction": optimum}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    mb = lambda b: f"{b / 1e6:,.0f} MB"  # noqa: E731
    print(f"runtime install: {mb(runtime['bytes'])} ({len(runtime['packages'])} distributions, torch: "
          f"{'torch' in runtime['packages']})")
    print(f"full install:    {mb(full['bytes'])} ({len(full['packages'])} distributions)")
    print(f"optimum[onnxruntime] needs torch: {optimum.get('needs_torch')}, transformers: "
          f"{optimum.get('needs_transformers')} ({len(optimum.get('would_install', []))} distributions)")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
