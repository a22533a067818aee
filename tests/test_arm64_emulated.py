"""The runtime on an ARM64 CPU, emulated: ``../shared/tools/arm64-python`` (QEMU user mode, an aarch64
CPython with aarch64 wheels of onnxruntime, numpy, tokenizers, typer and rich) runs this checkout's
``edgebert.runtime`` on a tiny bundle exported here with ``--target portable,arm64``, under three QEMU
CPU models: ``max`` (i8mm + SVE), ``neoverse-n1`` (dot product) and ``cortex-a72`` (no dot product,
the Raspberry Pi 4's core). On each it asserts:

* onnxruntime's U8S8 ``MatMulInteger`` is exact: full-range uint8 x int8 products over 512 terms equal
  numpy's int64 products bit for bit (no saturation on any of the three kernel families);
* the host line names the CPU and its kernel family, and ``EdgeSession`` picks the ``arm64`` graph;
* that graph's output equals what this x86 machine computes for the same graph with exact products
  (to 1e-5), and the fp32 graph's equals x86's fp32 (to 1e-5);
* the INT8 embeddings agree with fp32 (cosine), and ``edgebert check`` passes there (``max`` only).

Marker ``arm64`` (part of ``make test``). The aarch64 wheels are installed on first use with
``arm64-python --pip-install`` into a git-ignored folder (``.venv/arm64-site-*``) and reused; the
test skips, saying why, where QEMU, the tool or the wheels cannot be had.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO
from edgebert.bundle import model_path
from edgebert.runtime import EdgeSession, pad_batch
from edgebert.runtime.hostcpu import PRECISION_OPTION

ARM64_PYTHON = REPO.parent / "shared" / "tools" / "arm64-python"
CPU_MODELS = {"max": "i8mm", "neoverse-n1": "dotprod", "cortex-a72": "neon"}
TEXTS = ["a charming film", "the actors are wonderful but the script is terrible and far too long",
         "beautiful music", "one of the best films of the year , and the plot is good"]
K = 512                          # terms per product in the MatMulInteger check

pytestmark = pytest.mark.arm64

_EMULATED = r"""
import json, sys, platform
import numpy as np, onnxruntime as ort
from edgebert.runtime import EdgeSession
from edgebert.runtime.hostcpu import detect_host
bundle, feeds_file, matmul, out = sys.argv[1:5]
feeds = {k: np.asarray(v, np.int64) for k, v in json.loads(open(feeds_file).read()).items()}
mm = ort.InferenceSession(matmul, providers=["CPUExecutionProvider"])
a = np.load(matmul + ".a.npy")
got = {"machine": platform.machine(), "onnxruntime": ort.__version__, "host": detect_host().summary(),
       "host_cpu": detect_host().as_dict(), "matmul": mm.run(None, {"a": a})[0].tolist()}
for precision in ("int8", "fp32"):
    s = EdgeSession(bundle, provider="cpu", precision=precision, threads=1)
    got[precision] = s.run(feeds)["last_hidden_state"].tolist()
    got[precision + "_describe"] = {k: s.describe()[k] for k in ("model", "int8", "provider_notes")}
open(out, "w").write(json.dumps(got))
"""


# --------------------------------------------------------------------------- setup (or a clear skip)
def _pins() -> list[str]:
    """The host's numpy / onnxruntime / tokenizers versions (the same numerics on both sides), typer, rich."""
    pins = []
    for name, dists in (("numpy", ("numpy",)), ("onnxruntime", ("onnxruntime", "onnxruntime-gpu")),
                        ("tokenizers", ("tokenizers",))):
        version = next((v for v in map(_version, dists) if v), None)
        pins.append(f"{name}=={version}" if version else name)
    return pins + ["typer", "rich"]


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def _run(args: list, timeout: int = 900, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout, **kw)


@pytest.fixture(scope="module")
def arm64_site() -> Path:
    """aarch64 wheels for the runtime, installed once per pinned set into a git-ignored folder."""
    if sys.platform != "linux" or platform.machine() != "x86_64":
        pytest.skip(f"arm64-python emulates aarch64 on Linux x86-64; this is {sys.platform} {platform.machine()}")
    if not ARM64_PYTHON.is_file():
        pytest.skip(f"{ARM64_PYTHON} is not here (the shared tools sit beside the checkout)")
    pins = _pins()
    root = REPO / ".venv" if (REPO / ".venv").is_dir() else REPO / "runs"     # both git-ignored
    site = root / f"arm64-site-{hashlib.sha256(' '.join(pins).encode()).hexdigest()[:10]}"
    if not (site / ".complete").is_file():
        prepared = _run([ARM64_PYTHON, "--prepare"])
        if prepared.returncode != 0:
            pytest.skip(f"QEMU / the aarch64 Python cannot be set up here: {_last_line(prepared)}")
        tmp = site.with_name(site.name + f".tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        installed = _run([ARM64_PYTHON, "--pip-install", tmp, *pins])
        if installed.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            pytest.skip(f"aarch64 wheels ({' '.join(pins)}) cannot be installed: {_last_line(installed)}")
        (tmp / ".complete").write_text(" ".join(pins) + "\n", encoding="utf-8")
        shutil.rmtree(site, ignore_errors=True)
        os.replace(tmp, site)
    return site


def _last_line(done: subprocess.CompletedProcess) -> str:
    lines = (done.stderr or done.stdout).strip().splitlines()
    return lines[-1][:300] if lines else f"exit {done.returncode}"


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("arm64")


@pytest.fixture(scope="module")
def bundle(work) -> Path:
    from edgebert.exporters import ExportConfig, export_bundle
    from runtime_fixtures import make_tiny_model_dir

    return export_bundle(ExportConfig(model_dir=make_tiny_model_dir(work / "model", seed=23), out_dir=work / "bundle",
                                      int8=True, int8_targets=("portable", "arm64"), max_accuracy_loss=0.5,
                                      validation_batch_sizes=(1, 3), validation_seq_lens=(7, 32))).bundle_dir


@pytest.fixture(scope="module")
def matmul(work) -> tuple[Path, np.ndarray]:
    """A u8 x s8 MatMulInteger over K terms with full-range values (the worst case for a saturating kernel
    first), its input saved beside it, and numpy's exact int64 result."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (8, K)).astype(np.uint8)
    b = rng.integers(-128, 128, (K, 16)).astype(np.int8)
    a[0], b[:, 0] = 255, 127
    graph = helper.make_graph([helper.make_node("MatMulInteger", ["a", "b"], ["y"])], "u8s8",
                              [helper.make_tensor_value_info("a", TensorProto.UINT8, [None, K])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, [None, 16])],
                              [numpy_helper.from_array(b, "b")])
    path = work / "u8s8.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))
    np.save(str(path) + ".a.npy", a)
    return path, a.astype(np.int64) @ b.astype(np.int64)


@pytest.fixture(scope="module")
def feeds(bundle) -> dict[str, np.ndarray]:
    s = EdgeSession(bundle, provider="cpu", precision="fp32")
    return pad_batch(s.tokenize(TEXTS), s.pad_id)


def _emulated(cpu: str, site: Path, bundle: Path, feeds, matmul: Path, work: Path) -> dict:
    script, feeds_file, out = work / "emulated.py", work / "feeds.json", work / f"out-{cpu}.json"
    script.write_text(_EMULATED, encoding="utf-8")
    feeds_file.write_text(json.dumps({k: v.tolist() for k, v in feeds.items()}), encoding="utf-8")
    env = {**os.environ, "ARM64_CPU": cpu, "PYTHONPATH": f"{site}{os.pathsep}{REPO}"}
    done = _run([ARM64_PYTHON, script, bundle, feeds_file, matmul, out], env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text(encoding="utf-8"))


def _x86(bundle: Path, feeds, precision: str) -> np.ndarray:
    """This machine's result for the same graph, with exact products whatever its CPU (on VNNI the option
    changes nothing; on AVX2 it makes the 8-bit graph exact)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.add_session_config_entry(PRECISION_OPTION, "1")
    path = model_path(bundle, precision, key="int8-arm64" if precision == "int8" else None)
    session = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return session.run(["last_hidden_state"], feeds)[0]


def _mean_pooled_cosine(a: np.ndarray, b: np.ndarray, mask: np.ndarray) -> np.ndarray:
    m = mask[:, :, None].astype(np.float64)
    pa, pb = (a * m).sum(1) / m.sum(1), (b * m).sum(1) / m.sum(1)
    return (pa * pb).sum(1) / np.linalg.norm(pa, axis=1) / np.linalg.norm(pb, axis=1)


# --------------------------------------------------------------------------- the test
@pytest.mark.parametrize("cpu", list(CPU_MODELS))
def test_runtime_on_emulated_arm64_is_exact_and_follows_fp32(cpu, arm64_site, bundle, feeds, matmul, work):
    path, exact = matmul
    got = _emulated(cpu, arm64_site, bundle, feeds, path, work)
    print(f"\n{cpu}: {got['host']}")
    assert got["machine"] == "aarch64" and got["host_cpu"]["arch"] == "arm64"
    assert got["host_cpu"]["u8s8"] == "exact" and got["host_cpu"]["int8_kernel"] == CPU_MODELS[cpu]
    assert got["host"].startswith("arm64 (Arm ") and got["host"].endswith(")")
    assert ("no dot product" in got["host"]) is (cpu == "cortex-a72")

    products = np.asarray(got["matmul"], np.int64)
    assert products[0, 0] == K * 255 * 127 and np.array_equal(products, exact)   # exact int32 sums, no saturation

    int8 = got["int8_describe"]
    assert int8["model"] == "int8-arm64" and int8["int8"]["target"] == "arm64" and int8["int8"]["session_config"] == {}
    assert any(n.startswith("int8: this arm64 CPU (Arm ") and "arm64 graph chosen (made for this CPU" in n
               for n in int8["provider_notes"]), int8["provider_notes"]

    arm_int8, arm_fp32 = np.asarray(got["int8"]), np.asarray(got["fp32"])
    assert np.abs(arm_int8 - _x86(bundle, feeds, "int8")).max() < 1e-5            # = x86 with exact products
    assert np.abs(arm_fp32 - _x86(bundle, feeds, "fp32")).max() < 1e-5
    cos = _mean_pooled_cosine(arm_int8, arm_fp32, feeds["attention_mask"])
    assert cos.min() > 0.9999, cos                                                   # INT8 follows fp32


@pytest.mark.slow   # the whole CLI twice under QEMU: 2-3 minutes; the exactness test above runs by default
def test_edgebert_check_and_info_on_emulated_arm64(arm64_site, bundle):
    env = {**os.environ, "ARM64_CPU": "max", "PYTHONPATH": f"{arm64_site}{os.pathsep}{REPO}"}
    check = _run([ARM64_PYTHON, "-m", "edgebert.cli", "check", bundle, "--max-texts", "64", "--json"], env=env)
    assert check.returncode == 0, check.stdout[-2000:] + check.stderr[-2000:]
    report = json.loads(check.stdout)
    assert report["passed"] and report["reason"].startswith("PASS: INT8 graph 'arm64' follows fp32 on this arm64 CPU")
    assert report["chosen"]["target"] == "arm64" and report["host"]["int8_kernel"] == "i8mm"
    assert [g["here"] for g in report["graphs"]] == ["exact (weights cannot saturate)",
                                                     "exact (this CPU's U8S8 kernel is exact)"]
    info = _run([ARM64_PYTHON, "-m", "edgebert.cli", "info"], env=env)
    assert info.returncode == 0, info.stderr[-2000:]
    lines = dict(line.split(": ", 1) for line in info.stdout.splitlines() if ": " in line)
    assert lines["machine"] == "aarch64" and lines["cpu"].startswith("Arm Neoverse")   # named, not "aarch64"
    assert lines["int8_host"].startswith(f"arm64 ({lines['cpu']}; dotprod i8mm sve)")
