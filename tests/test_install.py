"""The runtime install without torch (issue 13): a fresh virtual environment gets ``pip install
'<checkout>[cpu]'``, runs ``examples/embed_app.py`` on a bundle exported here with the full install,
and cannot import torch. Its size against the full environment is printed (run with ``-s``);
``benchmarks/install_size.py`` measures the same way and writes ``benchmarks/results/install_size/install_size.json``.
Skips, with the reason, when pip cannot reach the package index."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO
from runtime_fixtures import tiny_bundle

pytestmark = pytest.mark.install

spec = importlib.util.spec_from_file_location("install_size", REPO / "benchmarks" / "install_size.py")
install_size = importlib.util.module_from_spec(spec)
spec.loader.exec_module(install_size)


@pytest.fixture(scope="module")
def runtime_python(tmp_path_factory) -> Path:
    t0 = time.perf_counter()
    try:
        python = install_size.make_runtime_venv(tmp_path_factory.mktemp("venv") / "runtime")
    except install_size.IndexUnreachable as exc:
        pytest.skip(str(exc))
    print(f"\nruntime venv built and installed in {time.perf_counter() - t0:.0f} s")
    return python


def _run(python: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    # cwd outside the checkout and no PYTHONPATH: only what was installed can be imported
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd)}
    return subprocess.run([str(python), *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=300)


def test_runtime_install_runs_the_embed_app_without_torch(runtime_python, tmp_path_factory, tmp_path):
    _, bundle = tiny_bundle(tmp_path_factory.getbasetemp())     # exported with the full install
    app = _run(runtime_python, str(REPO / "examples" / "embed_app.py"), str(bundle), "a small cat resting",
               cwd=tmp_path)
    assert app.returncode == 0, app.stderr
    assert "'a small cat resting' -> " in app.stdout and "ran on cpu | " in app.stdout, app.stdout

    no_torch = _run(runtime_python, "-c", "import torch", cwd=tmp_path)
    assert no_torch.returncode == 1 and "No module named 'torch'" in no_torch.stderr
    where = _run(runtime_python, "-c", "import edgebert, onnxruntime; print(edgebert.__file__)", cwd=tmp_path)
    assert where.returncode == 0 and "site-packages" in where.stdout and str(REPO) not in where.stdout

    # runtime-side commands work; a training command says which extra it needs, in one line, exit 2
    edgebert = runtime_python.parent / "edgebert"
    check = _run(edgebert, "check", str(bundle), cwd=tmp_path)
    assert check.returncode == 0 and check.stdout.strip().splitlines()[-1].startswith("PASS: "), check.stdout + check.stderr
    info = _run(edgebert, "info", cwd=tmp_path)
    assert info.returncode == 0 and "onnxruntime_packages: ['onnxruntime']" in info.stdout, info.stdout + info.stderr
    bench = _run(edgebert, "bench", str(bundle), "--preset", "quick", "--batch", "1", "--seq", "8", "--iters", "3",
                 "--warmup", "0", "--report", str(tmp_path / "report"), cwd=tmp_path)
    assert bench.returncode == 0, bench.stderr
    assert "(latency.png needs matplotlib: pip install 'edgebert[train]')" in bench.stdout
    assert sorted(p.name for p in (tmp_path / "report").iterdir()) == [".edgebert-out.json", "bench.jsonl",
                                                                       "report.json", "report.md"]
    pre = _run(edgebert, "pretrain", "--out", str(tmp_path / "p"), cwd=tmp_path)
    assert pre.returncode == 2 and pre.stderr.strip() == (
        "error: edgebert pretrain needs PyTorch (pip install 'edgebert[train]')"), pre.stderr
    assert not (tmp_path / "p").exists()

    runtime = install_size.measure(runtime_python)
    full = install_size.measure(sys.executable)
    assert "torch" not in runtime["packages"] and "onnxruntime" in runtime["packages"]
    assert not {"onnx", "safetensors", "matplotlib", "transformers"} & set(runtime["packages"])
    assert "torch" in full["packages"]
    assert runtime["bytes"] < full["bytes"] / 4, (runtime["bytes"], full["bytes"])
    figures = {"runtime_bytes": runtime["bytes"], "runtime_packages": runtime["packages"],
               "runtime_largest": runtime["largest"], "full_bytes": full["bytes"], "full_prefix": sys.prefix,
               "full_largest": full["largest"]}
    out = tmp_path / "install_size.json"   # the figures for the README: benchmarks/install_size.py
    out.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    print(f"\nruntime install {runtime['bytes'] / 1e6:.0f} MB vs full {full['bytes'] / 1e6:.0f} MB ({out})")
