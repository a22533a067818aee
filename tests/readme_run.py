"""``make test-readme``: run the README's commands in order, as a newcomer would, in a new temporary folder.

Each command of the README's ``bash`` blocks (``tests/test_readme_path.commands``: the install lines and the two
make commands left out) runs in ``bash`` there, with ``D`` the shared data (``../shared/data``), ``examples/``
linked in, the project venv first on ``PATH`` and every training run capped at ``$EDGEBERT_MAX_STEPS`` steps
(default 20 here). A command whose optional extra is not installed here (its one-line ``needs X (pip install
'edgebert[...]')``, exit 2) is counted as skipped, naming the extra; any other non-zero exit fails the walk.
Writes ``benchmarks/results/readme_run/readme_run.json`` (each command's exit, seconds and last line; the CPU and
versions); exit 1 if a command failed. Not a pytest module (it takes tens of minutes)::

    .venv/bin/python tests/readme_run.py [--steps 20] [--timeout 1200] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from test_readme_path import commands  # noqa: E402

OUT = REPO / "benchmarks" / "results" / "readme_run" / "readme_run.json"
NEEDS_EXTRA = re.compile(r"\(pip install '(edgebert\[[a-z-]+\])'")        # a missing extra's one-line error


def _cpu() -> str:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    family = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("cpu family")), "?")
    return f"{model} (family {family}), {os.cpu_count()} CPUs"


def run(steps: int, timeout: int, keep: Path | None) -> int:
    work = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="edgebert-readme-"))
    work.mkdir(parents=True, exist_ok=True)
    if not (work / "examples").exists():
        (work / "examples").symlink_to(REPO / "examples")
    data = (REPO.parent / "shared" / "data").resolve()
    venv = Path(sys.executable).parent
    env = {**os.environ, "D": str(data), "EDGEBERT_MAX_STEPS": str(steps), "PATH": f"{venv}:{os.environ['PATH']}",
           "PYTHONUNBUFFERED": "1"}
    rows, t_all = [], time.perf_counter()
    lines = commands((REPO / "README.md").read_text(encoding="utf-8"))
    for i, line in enumerate(lines, 1):
        t0 = time.perf_counter()
        try:
            done = subprocess.run(["bash", "-c", line], cwd=work, env=env, capture_output=True, text=True,
                                  timeout=timeout)
            code, output = done.returncode, (done.stdout + done.stderr).strip()
        except subprocess.TimeoutExpired as exc:
            code, output = 124, f"timed out after {timeout} s: {(exc.stderr or b'')[-300:]!r}"
        seconds = time.perf_counter() - t0
        last = output.splitlines()[-1] if output else ""
        extra = NEEDS_EXTRA.search(output) if code == 2 else None
        verdict = "ok" if code == 0 else f"skipped: needs {extra.group(1)}" if extra else "FAILED"
        rows.append({"command": line, "exit": code, "seconds": round(seconds, 1), "verdict": verdict, "last": last})
        print(f"[{i}/{len(lines)}] {verdict:<34} {seconds:7.1f} s  {line[:110]}", flush=True)
        if verdict == "FAILED":
            print(f"    {last[:300]}", flush=True)
    total = time.perf_counter() - t_all
    failed = [r for r in rows if r["verdict"] == "FAILED"]
    skipped = [r for r in rows if r["verdict"].startswith("skipped")]
    import onnxruntime
    import torch

    result = {"when": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "cpu": _cpu(), "steps_cap": steps,
              "load_average": os.getloadavg(), "seconds": round(total, 1), "commands": len(rows),
              "ok": len(rows) - len(failed) - len(skipped), "skipped": len(skipped), "failed": len(failed),
              "versions": {"python": platform.python_version(), "torch": torch.__version__,
                           "onnxruntime": onnxruntime.__version__}, "rows": rows}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    tmp = OUT.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    tmp.replace(OUT)
    print(f"readme: {result['ok']} ok, {len(skipped)} skipped (extras not installed), {len(failed)} failed, "
          f"{len(rows)} commands in {total / 60:.1f} min ({_cpu()}; training capped at {steps} steps)")
    if not keep:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="EDGEBERT_MAX_STEPS for every training run")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds one command may take")
    parser.add_argument("--keep", type=Path, help="run in this folder and keep it (default: a temporary one)")
    args = parser.parse_args()
    sys.exit(run(args.steps, args.timeout, args.keep))
