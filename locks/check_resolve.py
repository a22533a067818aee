"""``make check-resolve``: do pyproject.toml's ranges resolve, without the lock, today?

For each install the README offers, ``pip install --dry-run`` in one fresh venv (the pip a fresh Python 3.11
brings, the registry as it is now, torch 2.13.0 named first as the README does), timed, its backtracking
counted (pip's "looking at multiple versions of X" lines). Fails (exit 1) on ResolutionImpossible, on more
backtracking than BACKTRACK_BUDGET or on a resolution slower than SECONDS_BUDGET; writes what it saw to
benchmarks/results/install_resolve/resolve.json. Not part of CI: the lock keeps CI independent of upstream,
this says when the ranges users install from have broken, so it is run each stop and reported."""

from __future__ import annotations

import json
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "benchmarks" / "results" / "install_resolve" / "resolve.json"
INSTALLS = ["all", "cpu", "cpu,train", "cpu,train,hf", "cpu,openvino", "cpu,batch", "cpu,ray", "cpu,spark",
            "cpu,triton", "cpu,train,optimum", "gpu,train,hf"]
BACKTRACK_BUDGET = 5        # pip's "looking at multiple versions" lines; the ranges resolved with 0 when written
SECONDS_BUDGET = 240        # per install; the ranges resolved in 4-60 s when written
KEY_PACKAGES = ("torch", "transformers", "sentence-transformers", "huggingface-hub", "onnxruntime",
                "onnxruntime-gpu", "optimum-onnx", "numpy", "tokenizers", "onnx", "ray", "pyspark", "openvino")


def dry_run(python: Path, extras: str, report: Path) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.run([str(python), "-m", "pip", "install", "--dry-run", "--ignore-installed", "--report",
                           str(report), "torch==2.13.0", f".[{extras}]"], cwd=REPO, capture_output=True, text=True,
                          timeout=SECONDS_BUDGET * 3)
    seconds = time.perf_counter() - t0
    output = proc.stdout + proc.stderr
    backtracks = len(re.findall(r"pip is looking at multiple versions of", output))
    picked = {}
    if proc.returncode == 0:
        for item in json.loads(report.read_text())["install"]:
            name = item["metadata"]["name"].lower()
            if name in KEY_PACKAGES:
                picked[name] = item["metadata"]["version"]
    failure = None
    if proc.returncode != 0:
        failure = "ResolutionImpossible" if "ResolutionImpossible" in output else output.strip().splitlines()[-1]
    elif backtracks > BACKTRACK_BUDGET:
        failure = f"backtracked {backtracks} times (budget {BACKTRACK_BUDGET})"
    elif seconds > SECONDS_BUDGET:
        failure = f"took {seconds:.0f} s (budget {SECONDS_BUDGET} s)"
    return {"install": f".[{extras}]", "seconds": round(seconds, 1), "backtracks": backtracks, "ok": failure is None,
            "failure": failure, "picked": picked}


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="edgebert-resolve-") as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        python = venv / "bin" / "python"
        pip_version = subprocess.run([str(python), "-m", "pip", "--version"], capture_output=True,
                                     text=True).stdout.split()[1]
        rows = []
        for extras in INSTALLS:
            row = dry_run(python, extras, Path(tmp) / "report.json")
            rows.append(row)
            mark = "ok  " if row["ok"] else "FAIL"
            print(f"{mark} {row['install']:<22} {row['seconds']:6.1f} s  backtracks {row['backtracks']:<3} "
                  f"{row['failure'] or ' '.join(f'{k} {v}' for k, v in row['picked'].items())}", flush=True)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    result = {"when": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "python": platform.python_version(),
              "pip": pip_version, "machine": platform.machine(), "budgets": {"backtracks": BACKTRACK_BUDGET,
                                                                            "seconds": SECONDS_BUDGET},
              "installs": rows}
    tmp_out = OUT.with_suffix(".json.tmp")
    tmp_out.write_text(json.dumps(result, indent=1) + "\n")
    tmp_out.replace(OUT)
    failed = [r["install"] for r in rows if not r["ok"]]
    print(f"check-resolve: {len(rows) - len(failed)} of {len(rows)} resolve"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
