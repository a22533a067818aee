"""Node, the npm packages of examples/web and Debian's chromium for the transformers.js tests (not a test
module): each ``need_*`` skips the calling test with the reason where a piece is missing."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO

WEB = REPO / "examples" / "web"
CHROMIUM = Path("/usr/bin/chromium")
INSTALL = "make web-deps (npm ci --ignore-scripts in examples/web)"


def need_node() -> str:
    """The node executable, with examples/web's transformers.js installed; else skip, saying why."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the transformers.js tests need Node 18 or later")
    major = subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip().lstrip("v")
    if not major.split(".")[0].isdigit() or int(major.split(".")[0]) < 18:
        pytest.skip(f"node {major} is too old for transformers.js (18 or later)")
    if not (WEB / "node_modules" / "@huggingface" / "transformers" / "package.json").is_file():
        pytest.skip(f"transformers.js is not installed in {WEB}: {INSTALL}")
    return node


def need_chromium() -> Path:
    """Debian's chromium and playwright-core; else skip, saying why."""
    need_node()
    if not CHROMIUM.is_file():
        pytest.skip(f"{CHROMIUM} is absent (apt-get install -y chromium): the browser test needs it")
    if not (WEB / "node_modules" / "playwright-core" / "package.json").is_file():
        pytest.skip(f"playwright-core is not installed in {WEB}: {INSTALL}")
    return CHROMIUM


# V8's baseline WASM compiler only: under Node 20 the default tiers took 55-69 s and 2 GB to open onnxruntime-web's
# 27 MB asyncify / jsep builds (plain, 14 MB: 3.7 s); Liftoff alone opens them in ~1.5 s and runs the same WASM
# (the tiny test graphs need no optimized code). benchmarks/web_small_graph.py times with the default tiers.
NODE_FLAGS = ("--liftoff-only",)


def run_node(script: str, spec: dict, work: Path, timeout: int = 300) -> object:
    """Run ``examples/web/<script>`` on ``spec`` (written as JSON) and parse the JSON it prints."""
    node = need_node()
    spec_file = Path(work) / f"{Path(script).stem}.json"
    spec_file.write_text(json.dumps(spec))
    done = subprocess.run([node, *NODE_FLAGS, str(WEB / script), str(spec_file)], cwd=WEB, capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
