"""The GPU check (``benchmarks/gpu_paths.py``, ``edgebert.bench.gpu_acceptance``) without a GPU: what passes, what
is a silent fallback, what is unmeasured, and the script stopping with exit code 2 and no figure here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from edgebert.bench.gpu_acceptance import FAILED, OK, UNMEASURED, bench_problems, check_path, to_markdown, verdict
from edgebert.errors import ProviderUnavailable
from edgebert.runtime import EdgeSession, probe
from edgebert.runtime.placement import Placement
from edgebert.runtime.providers import ProviderStatus
from edgebert.runtime.trt_profile import TrtProfile
from runtime_fixtures import tiny_bundle

REPO = Path(__file__).resolve().parents[1]
TEXTS = ["a charming film", "the worst movie of the year", "good", "the story is great but the end is a mess"]


def available(name):
    return ProviderStatus(name, True)


@pytest.fixture(scope="module")
def cpu_session(tmp_path_factory):
    return EdgeSession(tiny_bundle(tmp_path_factory.getbasetemp(), "embed")[1], provider="cpu", precision="fp32",
                       threads=1)


class Fake:
    """What an ``EdgeSession`` on a GPU provider looks like to the check; its answers are the CPU session's."""

    def __init__(self, real, provider, nodes, *, printed="", noise=0.0, profile=None, refuses=True):
        self.real, self.provider, self.printed, self.noise, self.refuses = real, provider, printed, noise, refuses
        self.placement = Placement(nodes)
        self.trt_profile = profile
        self.model_key, self.model_file = "fp32-trt" if profile else "fp32-cuda", real.model_file
        self.providers = [f"{provider}-ep", "CPUExecutionProvider"]
        self.provider_notes = ["running on " + provider]

    def embed(self, texts):
        if self.printed:
            print(self.printed)
        out = self.real.embed(texts)
        return out + self.noise * np.random.default_rng(0).standard_normal(out.shape).astype(np.float32)

    def run(self, feeds):
        if self.refuses:
            self.trt_profile.check(*feeds["input_ids"].shape)
        return {}


def test_an_honest_gpu_path_passes_with_its_figures(cpu_session):
    reference = cpu_session.embed(TEXTS)
    fake = Fake(cpu_session, "tensorrt", {"tensorrt": 30, "cpu": 2}, profile=TrtProfile((1, 1), (2, 8), (4, 32)))
    row = check_path(lambda **kw: fake, "tensorrt", "fp16", TEXTS, reference, available)
    assert row["status"] == OK and row["problems"] == [] and row["cosine_min"] > 0.999999
    assert row["placement"]["nodes"] == {"tensorrt": 30, "cpu": 2} and row["texts"] == 4
    assert row["trt_profile"] == {"min": [1, 1], "opt": [2, 8], "max": [4, 32]}


@pytest.mark.parametrize("case,problem", [
    ("switched", "asked for cuda, the session runs on cpu (silent fallback)"),
    ("no nodes", "onnxruntime assigned no node to cuda"),
    ("stdout", "onnxruntime printed on stdout (a rerouted session?): EP Error: CUDA failure 100 Falling back"),
    ("wrong", "cosine to the CPU fp32 embeddings"),
])
def test_every_kind_of_dishonest_path_fails(cpu_session, case, problem):
    reference = cpu_session.embed(TEXTS)
    fake = {"switched": Fake(cpu_session, "cpu", {"cpu": 30}),
            "no nodes": Fake(cpu_session, "cuda", {"cuda": 0, "cpu": 30}),
            "stdout": Fake(cpu_session, "cuda", {"cuda": 30},
                           printed="EP Error: CUDA failure 100\nFalling back to ['CPUExecutionProvider']"),
            "wrong": Fake(cpu_session, "cuda", {"cuda": 30}, noise=0.5)}[case]
    row = check_path(lambda **kw: fake, "cuda", "fp32", TEXTS, reference, available)
    assert row["status"] == FAILED and any(p.startswith(problem) for p in row["problems"]), row["problems"]


def test_tensorrt_must_refuse_a_batch_above_its_profile(cpu_session):
    fake = Fake(cpu_session, "tensorrt", {"tensorrt": 30}, profile=TrtProfile((1, 1), (2, 8), (4, 32)), refuses=False)
    row = check_path(lambda **kw: fake, "tensorrt", "int8", TEXTS, cpu_session.embed(TEXTS), available)
    assert row["status"] == FAILED
    assert row["problems"] == ["batch 5 (above the profile's max 4) was run instead of refused"]


def test_unavailable_is_unmeasured_and_a_provider_that_probes_fine_then_fails_is_a_failure(cpu_session):
    def never(**kw):
        raise AssertionError("an unavailable provider must not be opened")

    row = check_path(never, "tensorrt", "fp32", TEXTS, None, lambda name: ProviderStatus(name, False, "no libnvinfer"))
    assert row == {"provider": "tensorrt", "precision": "fp32", "status": UNMEASURED, "reason": "no libnvinfer"}

    def broken(**kw):
        print("EP Error")
        raise ProviderUnavailable("provider 'cuda' is unavailable: model.cuda.onnx: [CUDA failure] 35")

    row = check_path(broken, "cuda", "fp16", TEXTS, None, available)
    assert row["status"] == FAILED and row["stdout"] == "EP Error\n"
    assert len(row["problems"]) == 1 and row["problems"][0].startswith(
        "probe says available, but: provider 'cuda' is unavailable: model.cuda.onnx: [CUDA failure] 35")


def test_bench_report_scrutiny_and_verdict():
    report = {"paths": [
        {"path": "onnx cuda fp32", "provider": "cuda", "available": True, "providers": ["CUDAExecutionProvider"],
         "placement": {"nodes": {"cuda": 40, "cpu": 2}}},
        {"path": "onnx tensorrt fp16", "provider": "tensorrt", "available": True,
         "providers": ["CPUExecutionProvider"], "placement": {"nodes": {"cpu": 40}}},
        {"path": "onnx tensorrt int8", "provider": "tensorrt", "available": True,
         "providers": ["TensorrtExecutionProvider"], "placement": {"nodes": {"tensorrt": 9}},
         "failed": "failed while timing: EPFail"},
        {"path": "onnx cuda int8", "provider": "cuda", "available": False, "reason": "x"},
        {"path": "torch cuda fp16", "provider": "torch-cuda", "available": True, "providers": ["torch (CUDA)"]}],
        "results": [{"path": "onnx cuda fp32", "provider": "cuda", "batch": 1, "seq": 16},
                    {"path": "onnx cuda fp32", "provider": "cpu", "batch": 8, "seq": 16},
                    {"path": "torch cuda fp16", "provider": "torch-cuda", "batch": 1, "seq": 16}]}
    assert bench_problems(report) == [
        "bench onnx tensorrt fp16: runs on CPUExecutionProvider",
        "bench onnx tensorrt fp16: no node assigned to tensorrt ({'cpu': 40})",
        "bench onnx tensorrt int8: failed while timing: EPFail",
        "bench onnx cuda fp32 b=8 s=16: timed on cpu"]
    ok = {"provider": "cuda", "precision": "fp32", "status": OK}
    gap = {"provider": "tensorrt", "precision": "int8", "status": UNMEASURED, "reason": "no TensorRT"}
    bad = {"provider": "cuda", "precision": "fp16", "status": FAILED, "problems": ["silent"]}
    assert verdict([ok], [])[0] == 0
    assert verdict([ok, gap], []) == (3, "no failure, but unmeasured here: tensorrt int8 (reasons in the report)")
    assert verdict([ok, gap, bad], [])[0] == 1 and verdict([ok], ["bench x"])[0] == 1
    env = {"gpu_summary": "none", "onnxruntime": "1.31.1", "onnxruntime_package": "onnxruntime-gpu",
           "onnxruntime_device": "GPU", "onnxruntime_providers": ["CPUExecutionProvider"]}
    md = to_markdown({"verdict": "v", "environment": env, "bundle": "b", "runtime": [ok, gap, bad],
                      "bench_problems": ["bench x"]})
    assert "| tensorrt | int8 | unmeasured | - | - | - | no TensorRT |" in md
    assert "| cuda | fp16 | FAILED | - | - | - | silent |" in md and "- bench x" in md


def test_gpu_check_stops_with_exit_code_2_and_no_figure_without_a_gpu(tmp_path):
    if probe("cuda").available or probe("tensorrt").available:
        pytest.skip("this machine has a usable GPU provider")
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_paths.py"), "--out", str(out),
                           "--bundle", str(tmp_path / "bundle")], capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 2 and done.stdout == ""
    err = done.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: no usable NVIDIA GPU provider on this machine, nothing "
                                               f"measured (cuda: {probe('cuda').reason}; tensorrt: ")
    assert not out.exists() and not (tmp_path / "bundle").exists()


def test_a_path_failing_with_any_exception_is_that_paths_failure(cpu_session):
    reference = cpu_session.embed(TEXTS)

    class Breaks(Fake):
        def embed(self, texts):
            raise RuntimeError("CUDA failure 700: an illegal memory access was encountered")

    row = check_path(lambda **kw: Breaks(cpu_session, "cuda", {"cuda": 30}), "cuda", "fp16", TEXTS, reference,
                     available)
    assert row["status"] == FAILED and "RuntimeError: CUDA failure 700" in row["problems"][0]


def test_the_cpu_int8_graph_on_cuda_is_reported_hybrid_not_ok(cpu_session):
    reference = cpu_session.embed(TEXTS)
    fake = Fake(cpu_session, "cuda", {"cuda": 89, "cpu": 25})
    fake.placement = Placement({"cuda": 2, "cpu": 1}, named=(("cuda", "Attention", "a"), ("cuda", "MatMul", "m"),
                                                             ("cpu", "MatMulIntegerToFloat", "q")))
    row = check_path(lambda **kw: fake, "cuda", "int8", TEXTS, reference, available)
    assert row["status"] == "hybrid" and row["problems"] == ["hybrid: compute nodes on the CPU, not cuda "
                                                             "(MatMulIntegerToFloat 1)"]
