"""GPU paths of the runtime, proven without a GPU: provider options per precision, the graph each provider
gets, the availability probe on simulated machines, ``auto`` through simulated failures of every kind
(onnxruntime raising EPFail, CUDA failure text, missing libraries, a silent fallback) ending on the CPU
with every reason kept and nothing on stdout, and a TensorRT session that refuses a batch above its
profile and never reroutes a failed call."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnxruntime.capi.onnxruntime_pybind11_state import EPFail

from edgebert.bundle import model_path, read_manifest
from edgebert.errors import BundleError, ConfigError, ProviderUnavailable
from edgebert.runtime import EdgeSession, gpu_probe, providers
from edgebert.runtime.attempts import classify
from edgebert.runtime.graphs import choose_model
from edgebert.runtime.hostcpu import detect_host
from edgebert.runtime.placement import RECORD_CONFIG
from edgebert.runtime.providers import provider_options, trt_cache_dirs
from edgebert.runtime.text import pad_batch
from edgebert.runtime.trt_profile import TrtProfile
from runtime_fixtures import tiny_bundle, tiny_gpu_bundle

NAMES = ["input_ids", "attention_mask", "token_type_ids"]
TEXTS = ["a charming film", "the worst movie of the year", "good", "the story is great but the end is a mess"]
REAL_SESSION = ort.InferenceSession


@pytest.fixture(scope="module")
def gpu_bundle(tmp_path_factory):
    return tiny_gpu_bundle(tmp_path_factory.getbasetemp())[1]


@pytest.fixture(scope="module")
def cpu_bundle(tmp_path_factory):
    return tiny_bundle(tmp_path_factory.getbasetemp(), "embed")[1]


# --------------------------------------------------------------------------- provider options
def test_provider_options_per_precision(tmp_path):
    profile = TrtProfile.parse("min=1x1,opt=8x128,max=32x512")
    common = dict(profile=profile, engine_cache=tmp_path / "engines", timing_cache=tmp_path / "timing")
    fp32, fp16, int8 = (provider_options("tensorrt", p, NAMES, **common) for p in ("fp32", "fp16", "int8"))
    assert (fp32["trt_fp16_enable"], fp32["trt_int8_enable"]) == (False, False)
    assert (fp16["trt_fp16_enable"], fp16["trt_int8_enable"]) == (True, False) and fp16["trt_layer_norm_fp32_fallback"]
    assert (int8["trt_fp16_enable"], int8["trt_int8_enable"]) == (False, True)
    for options in (fp32, fp16, int8):
        assert options["trt_engine_cache_enable"] and options["trt_engine_cache_path"] == str(tmp_path / "engines")
        assert options["trt_timing_cache_enable"] and options["trt_timing_cache_path"] == str(tmp_path / "timing")
        assert options["trt_profile_min_shapes"] == "input_ids:1x1,attention_mask:1x1,token_type_ids:1x1"
        assert options["trt_profile_opt_shapes"] == "input_ids:8x128,attention_mask:8x128,token_type_ids:8x128"
        assert options["trt_profile_max_shapes"] == "input_ids:32x512,attention_mask:32x512,token_type_ids:32x512"
    for precision in ("fp32", "fp16", "int8"):
        assert provider_options("cuda", precision, NAMES)["use_tf32"] == 0      # fp32 really is fp32
    with pytest.raises(ConfigError, match="shape profile"):
        provider_options("tensorrt", "fp32", NAMES)
    assert provider_options("cpu", "int8", NAMES) == {}


def test_engine_cache_folder_per_model_precision_and_profile(gpu_bundle, tmp_path):
    model = model_path(gpu_bundle, key="fp32-trt")
    a = TrtProfile.parse("min=1x1,opt=8x64,max=32x128")
    b = TrtProfile.parse("min=1x1,opt=8x64,max=64x128")
    engines = {trt_cache_dirs(model, p, prof, tmp_path)[0] for p in ("fp32", "fp16") for prof in (a, b)}
    assert len(engines) == 4
    assert {trt_cache_dirs(model, "fp16", b, tmp_path)[1]} == {tmp_path / "timing"}   # one shared timing cache


def test_trt_profile_parsing_and_limits():
    p = TrtProfile.parse(" min=1x1 , opt=8x128,max=32x512")
    assert (p.min, p.opt, p.max) == ((1, 1), (8, 128), (32, 512)) and p.covers(32, 512) and not p.covers(33, 16)
    with pytest.raises(ConfigError, match="batch 33 x sequence 16 is outside"):
        p.check(33, 16)
    with pytest.raises(ConfigError, match="name min, opt and max once each"):
        TrtProfile.parse("min=1x1,min=2x2,max=4x4")
    assert TrtProfile.covering([1, 8, 128], [16, 512]) == TrtProfile((1, 1), (8, 128), (128, 512))
    with pytest.raises(ConfigError, match="differ between inputs"):
        TrtProfile.from_manifest({"a": {"min": [1, 1], "opt": [2, 2], "max": [4, 4]},
                                  "b": {"min": [1, 1], "opt": [2, 2], "max": [8, 4]}})


# --------------------------------------------------------------------------- graph per provider
def test_each_provider_gets_the_graph_made_for_it(gpu_bundle, cpu_bundle):
    host = detect_host()
    manifest = read_manifest(gpu_bundle)
    got = {(p, q): choose_model(manifest, p, q, host).key for p, q in
           [("tensorrt", "fp32"), ("tensorrt", "fp16"), ("tensorrt", "int8"), ("cuda", "fp32"), ("cuda", "fp16"),
            ("cuda", "int8"), ("cpu", "fp32"), ("cpu", "int8")]}
    assert got == {("tensorrt", "fp32"): "fp32-trt", ("tensorrt", "fp16"): "fp32-trt", ("tensorrt", "int8"): "int8-trt",
                   ("cuda", "fp32"): "fp32-cuda", ("cuda", "fp16"): "fp16-cuda", ("cuda", "int8"): "int8",
                   ("cpu", "fp32"): "fp32", ("cpu", "int8"): "int8"}
    assert "trt_fp16_enable" in choose_model(manifest, "tensorrt", "fp16", host).notes[0]
    cuda_int8 = choose_model(manifest, "cuda", "int8", host).notes[-1]
    assert "dynamic-format INT8 graph" in cuda_int8 and "run on the CPU" in cuda_int8
    with pytest.raises(BundleError, match="int8_target"):
        choose_model(manifest, "tensorrt", "int8", host, int8_target="portable")
    # a bundle without GPU graphs: TensorRT is refused with the reason, CUDA runs the CPU-fused graph
    plain = read_manifest(cpu_bundle)
    with pytest.raises(BundleError, match="dynamic-format .*not TensorRT layers") as refused:
        choose_model(plain, "tensorrt", "int8", host)
    assert "--tensorrt --int8" in refused.value.hint
    with pytest.raises(BundleError, match="standard-op TensorRT graph .*contrib ops"):
        choose_model(plain, "tensorrt", "fp32", host)
    fallback = choose_model(plain, "cuda", "fp32", host)
    assert fallback.key == "fp32" and "re-export with --cuda" in fallback.notes[0]


def test_static_qdq_graph_is_not_called_dynamic(gpu_bundle):
    from edgebert.runtime.graphs import _int8_note
    from edgebert.runtime.int8_choice import GraphChoice

    manifest = read_manifest(gpu_bundle)
    qdq = _int8_note("cuda", GraphChoice("int8-trt", manifest["models"]["int8-trt"]))
    dyn = _int8_note("cuda", GraphChoice("int8", manifest["models"]["int8"]))
    assert "static QDQ S8S8" in qdq and "dynamic" not in qdq
    assert "dynamic-format" in dyn and "QDQ" not in dyn


# --------------------------------------------------------------------------- availability probe
def _facts(**changes):
    facts = dict(in_build=True, ort_version="1.31.1", driver=gpu_probe.CudaDriver(version=13000, devices=1,
                                                                                  names=("GPU",)),
                 library_error=None, need_cuda_major=13)
    return {**facts, **changes}


def test_probe_verdicts_on_simulated_machines():
    assess = gpu_probe.assess
    assert assess("cuda", **_facts()).available
    cases = {
        "this onnxruntime build (1.31.1) has no CUDAExecutionProvider": _facts(in_build=False),
        "no NVIDIA GPU driver (libcuda.so.1: cannot open shared object file": _facts(
            driver=gpu_probe.CudaDriver(load_error="libcuda.so.1: cannot open shared object file")),
        "the NVIDIA driver supports CUDA 12.4, onnxruntime 1.31.1 needs CUDA 13": _facts(
            driver=gpu_probe.CudaDriver(version=12040, devices=1)),
        "CUDA failure 100: no CUDA-capable device is detected": _facts(
            driver=gpu_probe.CudaDriver(version=13000, init_error=gpu_probe._cuda_failure(100))),
        "no visible GPU (the driver reports 0 devices)": _facts(driver=gpu_probe.CudaDriver(version=13000, devices=0)),
        "needs libcublasLt.so.13, which is not installed": _facts(
            library_error="libcublasLt.so.13: cannot open shared object file: No such file or directory"),
        "cannot be loaded (libonnxruntime_providers_cuda.so: undefined symbol: cudnnCreate)": _facts(
            library_error="libonnxruntime_providers_cuda.so: undefined symbol: cudnnCreate"),
    }
    for reason, facts in cases.items():
        status = assess("cuda", **facts)
        assert not status.available and reason in status.reason, (reason, status.reason)
    missing = assess("tensorrt", **_facts(library_error="libnvinfer.so.10: cannot open shared object file",
                                          preload_notes=("Failed to load libcudnn.so.9: no such file",)))
    assert "TensorRT, CUDA and cuDNN libraries are missing" in missing.reason
    assert "preload_dlls: libcudnn.so.9 not found" in missing.reason


def test_probe_preloads_first_quietly_and_any_loader_error_counts(monkeypatch, capfd):
    order = []

    def fake_preload():
        order.append("preload")
        print("Failed to load libcublasLt.so.13: libcublasLt.so.13: cannot open shared object file")

    def fake_library(name):
        order.append(f"library {name}")
        return "libonnxruntime_providers_cuda.so: undefined symbol: cublasLtCreate"

    monkeypatch.setattr(ort, "preload_dlls", fake_preload)
    # a GPU build of onnxruntime, whichever is installed (make test installs the CPU one by default)
    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    monkeypatch.setattr(gpu_probe, "provider_library_error", fake_library)
    monkeypatch.setattr(gpu_probe, "read_cuda_driver", lambda: gpu_probe.CudaDriver(version=13000, devices=1))
    gpu_probe.preload_gpu_libraries.cache_clear()
    gpu_probe.probe_gpu_provider.cache_clear()
    try:
        status = gpu_probe.probe_gpu_provider("cuda")
        notes = gpu_probe.preload_gpu_libraries()
    finally:
        gpu_probe.preload_gpu_libraries.cache_clear()
        gpu_probe.probe_gpu_provider.cache_clear()
    assert order == ["preload", "library cuda"]
    assert not status.available and "undefined symbol: cublasLtCreate" in status.reason
    assert notes[0].startswith("Failed to load libcublasLt.so.13")
    assert capfd.readouterr().out == ""


# --------------------------------------------------------------------------- auto through failures
class FakeSubgraph:
    def __init__(self, ep_name, nodes):
        self.ep_name, self._nodes = ep_name, nodes

    def get_nodes(self):
        return self._nodes


class GpuLikeSession:
    """A real CPU session of the given graph that reports ``ep`` as the provider of its nodes (what a
    working GPU session looks like to the runtime); counts calls and records ``disable_fallback``."""

    def __init__(self, path, sess_options, ep):
        self._real = REAL_SESSION(path, sess_options, providers=["CPUExecutionProvider"])
        self._ep = ep
        self.fallback_disabled = False
        self.runs = 0
        self.fail_with = None

    def get_providers(self):
        return [self._ep, "CPUExecutionProvider"]

    def get_provider_graph_assignment_info(self):
        return [FakeSubgraph(self._ep, [node for sub in self._real.get_provider_graph_assignment_info()
                                        for node in sub.get_nodes()])]

    def disable_fallback(self):
        self.fallback_disabled = True

    def set_providers(self, *args, **kwargs):
        raise AssertionError("the runtime must never reroute a session")

    def get_inputs(self):
        return self._real.get_inputs()

    def get_outputs(self):
        return self._real.get_outputs()

    def run(self, names, feeds):
        self.runs += 1
        if self.fail_with is not None:
            raise self.fail_with
        return self._real.run(names, feeds)


def _factory(calls, behaviour):
    """An ``onnxruntime.InferenceSession`` stand-in: per provider, raise / fall back silently / work."""
    def make(path, sess_options=None, providers=None, **kwargs):
        name = providers[0][0]
        calls.append({"provider": name, "file": str(path).rsplit("/", 1)[-1], "chain": [p[0] for p in providers],
                      "kwargs": kwargs, "options": dict(providers[0][1]),
                      "record": sess_options.get_session_config_entry(RECORD_CONFIG)})
        action = behaviour.get(name, "real")
        if isinstance(action, BaseException):
            raise action
        if action == "silent-cpu":     # what onnxruntime does when the CUDA provider library fails to load
            return REAL_SESSION(path, sess_options, providers=["CPUExecutionProvider"])
        if action == "works":
            session = GpuLikeSession(path, sess_options, name)
            calls[-1]["session"] = session
            return session
        return REAL_SESSION(path, sess_options, providers=providers, **kwargs)
    return make


@pytest.fixture
def gpus_probe_fine(monkeypatch):
    """Every provider passes the probe (the failures come at session creation)."""
    monkeypatch.setattr(providers, "probe", lambda name: providers.ProviderStatus(name, True))


FAILURES = {
    "EPFail": EPFail("[ONNXRuntimeError] : 11 : EP_FAIL : TensorRT EP failed to create engine from network"),
    "CUDA failure": RuntimeError("CUDA failure 100: no CUDA-capable device is detected ; GPU=0 ; "
                                 "hostname=x ; file=cuda_call.cc ; line=123 ; expr=cudaSetDevice(info_.device_id);"),
    "missing library": RuntimeError("Failed to load library libonnxruntime_providers_cuda.so with error: "
                                    "libcublasLt.so.13: cannot open shared object file: No such file or directory"),
    "no shape profile": EPFail("Following input(s) has no associated shape profiles provided: "
                               "EmbedLayerNormalization_0_output"),
}


@pytest.mark.parametrize("trt_kind,cuda_kind", [("EPFail", "CUDA failure"), ("missing library", "missing library"),
                                                ("no shape profile", "EPFail")])
def test_auto_falls_through_every_failure_to_cpu_with_every_reason(gpu_bundle, gpus_probe_fine, monkeypatch,
                                                                   capfd, trt_kind, cuda_kind):
    calls = []
    monkeypatch.setattr(ort, "InferenceSession", _factory(calls, {"TensorrtExecutionProvider": FAILURES[trt_kind],
                                                                  "CUDAExecutionProvider": FAILURES[cuda_kind]}))
    session = EdgeSession(gpu_bundle, provider="auto", precision="fp32", threads=1)
    assert session.provider == "cpu" and session.model_file.name == "model.onnx"
    # one attempt per provider, each with the graph made for it, onnxruntime's own fallback off
    assert [(c["provider"], c["file"]) for c in calls] == [
        ("TensorrtExecutionProvider", "model.trt.onnx"), ("CUDAExecutionProvider", "model.cuda.onnx"),
        ("CPUExecutionProvider", "model.onnx")]
    assert [c["chain"] for c in calls[:2]] == [["TensorrtExecutionProvider", "CPUExecutionProvider"],
                                               ["CUDAExecutionProvider", "CPUExecutionProvider"]]
    assert all(c["kwargs"] == {"enable_fallback": 0} and c["record"] == "1" for c in calls)
    assert [(a.provider, a.kind) for a in session.attempts] == [("tensorrt", trt_kind), ("cuda", cuda_kind),
                                                                ("cpu", "")]
    notes = " | ".join(session.provider_notes)
    for kind in (trt_kind, cuda_kind):
        assert " ".join(str(FAILURES[kind]).split()) in notes
    assert session.provider_notes[-1].startswith("running on cpu") and session.placement.nodes["cpu"] > 0
    assert session.embed(TEXTS).shape == (4, 64)
    assert capfd.readouterr().out == ""                                     # nothing printed on stdout


def test_a_silent_fallback_is_a_failure_not_a_success(gpu_bundle, gpus_probe_fine, monkeypatch, capfd):
    calls = []
    monkeypatch.setattr(ort, "InferenceSession", _factory(calls, {"TensorrtExecutionProvider": "silent-cpu",
                                                                  "CUDAExecutionProvider": "silent-cpu"}))
    session = EdgeSession(gpu_bundle, provider="auto", precision="fp32", threads=1)
    assert session.provider == "cpu"
    assert [(a.provider, a.kind) for a in session.attempts] == [("tensorrt", "no node assigned"),
                                                                ("cuda", "no node assigned"), ("cpu", "")]
    notes = " | ".join(session.provider_notes)
    assert "assigned no node to tensorrt" in notes and "assigned no node to cuda" in notes
    # fp16: the CPU has no graph for it either, so auto raises, naming every provider's reason
    with pytest.raises(BundleError, match=r"no fp16 model for cpu .*\[auto tried: .*tensorrt \(fp32-trt\): "
                                          r"failed \[no node assigned\].*cuda \(fp16-cuda\): failed"):
        EdgeSession(gpu_bundle, provider="auto", precision="fp16", threads=1)
    assert capfd.readouterr().out == ""


def test_explicit_gpu_provider_failure_is_provider_unavailable(gpu_bundle, gpus_probe_fine, monkeypatch):
    calls = []
    monkeypatch.setattr(ort, "InferenceSession", _factory(calls, {"TensorrtExecutionProvider": FAILURES["EPFail"],
                                                                  "CUDAExecutionProvider": "silent-cpu"}))
    with pytest.raises(ProviderUnavailable, match=r"provider 'tensorrt' is unavailable: model.trt.onnx: \[EPFail\]"):
        EdgeSession(gpu_bundle, provider="tensorrt", precision="fp32")
    with pytest.raises(ProviderUnavailable, match="assigned no node to cuda"):
        EdgeSession(gpu_bundle, provider="cuda", precision="fp32")
    assert [c["provider"] for c in calls] == ["TensorrtExecutionProvider", "CUDAExecutionProvider"]  # no retries


def test_error_classification():
    assert classify(FAILURES["EPFail"])[0] == "EPFail"
    assert classify(FAILURES["CUDA failure"])[0] == "CUDA failure"
    assert classify(RuntimeError("CUDA failure 35: CUDA driver version is insufficient"))[0] == "CUDA failure"
    assert classify(FAILURES["missing library"])[0] == "missing library"
    assert classify(FAILURES["no shape profile"])[0] == "no shape profile"   # an EPFail that names its cause
    assert classify(RuntimeError("x has no associated shape profiles"))[0] == "no shape profile"
    assert classify(RuntimeError("[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Could not find an "
                                 "implementation for Attention"))[0] == "no kernel"
    assert classify(ValueError("something else"))[0] == "error"


# --------------------------------------------------------------------------- TensorRT at run time
def test_tensorrt_session_refuses_shapes_outside_its_profile_and_never_reroutes(gpu_bundle, gpus_probe_fine,
                                                                                 monkeypatch, tmp_path, capfd):
    calls = []
    monkeypatch.setattr(ort, "InferenceSession", _factory(calls, {"TensorrtExecutionProvider": "works"}))
    session = EdgeSession(gpu_bundle, provider="tensorrt", precision="int8", batch_size=4, max_length=32,
                          trt_profile="min=1x1,opt=2x16,max=4x32", trt_cache_dir=tmp_path)
    fake = calls[0]["session"]
    assert session.provider == "tensorrt" and session.model_file.name == "model.int8.trt.onnx"
    assert fake.fallback_disabled and calls[0]["kwargs"] == {"enable_fallback": 0}
    assert calls[0]["options"]["trt_int8_enable"] is True and calls[0]["options"]["trt_fp16_enable"] is False
    assert calls[0]["options"]["trt_profile_max_shapes"] == "input_ids:4x32,attention_mask:4x32,token_type_ids:4x32"
    assert calls[0]["options"]["trt_engine_cache_path"].startswith(str(tmp_path))
    assert session.embed(TEXTS).shape == (4, 64) and fake.runs == 1
    rows = session.tokenize(TEXTS + ["a good film"])
    with pytest.raises(ConfigError, match="batch 5 x sequence .* is outside the TensorRT profile"):
        session.run(pad_batch(rows, 0))
    long = {name: np.ones((1, 40), np.int64) for name in NAMES}
    with pytest.raises(ConfigError, match="batch 1 x sequence 40 is outside"):
        session.run(long)
    assert fake.runs == 1                                                 # refused before onnxruntime is called
    fake.fail_with = EPFail("[ONNXRuntimeError] : 11 : EP_FAIL : TensorRT EP execution context enqueue failed")
    with pytest.raises(ProviderUnavailable, match="failed at run time .*not rerouted"):
        session.embed(TEXTS[:2])
    assert session.provider == "tensorrt" and len(calls) == 1             # no session rebuilt on another provider
    wide = EdgeSession(gpu_bundle, provider="tensorrt", precision="fp32", batch_size=8,
                       trt_profile="min=1x1,opt=2x16,max=4x128", trt_cache_dir=tmp_path)
    assert wide.batch_size == 4 and any("batch_size 8 lowered to 4" in n for n in wide.provider_notes)
    with pytest.raises(ConfigError, match="does not hold batches of 1 to 8 texts of 1 to 128 tokens"):
        EdgeSession(gpu_bundle, provider="tensorrt", precision="fp32", batch_size=8,
                    trt_profile="min=1x1,opt=2x16,max=4x32", trt_cache_dir=tmp_path)
    assert capfd.readouterr().out == ""


def test_tensorrt_gets_only_standard_op_graphs(gpu_bundle, cpu_bundle, gpus_probe_fine, monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(ort, "InferenceSession", _factory(calls, {"TensorrtExecutionProvider": "works",
                                                                  "CUDAExecutionProvider": "works"}))
    for precision in ("fp32", "fp16", "int8"):
        session = EdgeSession(gpu_bundle, provider="auto", precision=precision, trt_cache_dir=tmp_path)
        assert session.provider == "tensorrt" and session.attempts[-1].ok
        assert calls[-1]["options"]["trt_fp16_enable"] is (precision == "fp16")
        assert calls[-1]["options"]["trt_int8_enable"] is (precision == "int8")
    assert [c["file"] for c in calls] == ["model.trt.onnx", "model.trt.onnx", "model.int8.trt.onnx"]
    # the plain bundle has no TensorRT graph: auto says why and takes CUDA, never handing TensorRT the fused graph
    calls.clear()
    session = EdgeSession(cpu_bundle, provider="auto", precision="int8", trt_cache_dir=tmp_path)
    assert session.provider == "cuda" and [c["file"] for c in calls] == ["model_quantized.onnx"]
    assert session.attempts[0].kind == "no graph" and "not TensorRT layers" in session.attempts[0].message
