"""Shared by the distillation benchmark scripts: run one ``edgebert`` CLI stage (or reuse its
finished output) and read the wall time the CLI reported for it. Not a benchmark by itself."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
SHARED = REPO.parent / "shared" / "data"
EDGEBERT = str(Path(sys.executable).with_name("edgebert"))


def reported_seconds(log: str) -> float | None:
    """The wall time a stage's CLI printed ('... steps in 412 s' / '(938 steps, 517 s)')."""
    text = " ".join(log.split())
    m = re.search(r"steps in (\d+) s", text) or re.search(r"steps, (\d+) s\)", text)
    return float(m.group(1)) if m else None


def run_stage(name: str, argv: list, out_dir: Path, runs: Path, reuse: bool, done_file: str = "config.json") -> dict:
    """Run ``edgebert ARGV`` (output to ``runs/<name>.log``), or with ``reuse`` take the finished
    ``out_dir`` (it holds ``done_file``) and its log as they are."""
    command = "edgebert " + " ".join(map(str, argv))
    log_path = runs / f"{name}.log"
    if reuse and (out_dir / done_file).is_file():
        log = log_path.read_text() if log_path.is_file() else ""
        return {"command": command, "reused": True, "wall_s": reported_seconds(log)}
    t0 = time.perf_counter()
    proc = subprocess.run([EDGEBERT, *map(str, argv)], capture_output=True, text=True, cwd=REPO)
    log_path.write_text(proc.stdout + proc.stderr)
    if proc.returncode:
        raise SystemExit(f"{name} failed: {proc.stderr.strip()}")
    wall = time.perf_counter() - t0
    return {"command": command, "reused": False, "wall_s": reported_seconds(proc.stdout) or wall,
            "process_wall_s": wall}
