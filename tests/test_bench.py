"""edgebert bench on a tiny bundle: report schema, unavailable providers, percentiles, FLOP counts."""

from __future__ import annotations

import json

import pytest

from edgebert.bench import BenchConfig, forward_flops, run_bench
from edgebert.bench.flops import ModelShape
from edgebert.bench.workloads import read_texts
from edgebert.cli import main
from edgebert.errors import ConfigError, DataError
from edgebert.runtime import probe
from runtime_fixtures import tiny_bundle

TSV = "sentence\tlabel\nthe film was good .\t1\na bad movie\t0\n" \
      "the story is great and the actors are good but the end is a mess\t1\nboring\t0\nit is a fun film !\t1\n"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return tiny_bundle(tmp_path_factory.getbasetemp(), "embed")


@pytest.fixture(scope="module")
def report(bundle, tmp_path_factory):
    model_dir, bundle_dir = bundle
    root = tmp_path_factory.mktemp("bench")
    (root / "dev.tsv").write_text(TSV)
    config = BenchConfig(bundle_dir, providers=("cpu", "cuda", "tensorrt"), precisions=("fp32", "int8", "fp16"),
                         batches=(1, 2), seqs=(8, 16), lengths_from=root / "dev.tsv", reference=model_dir,
                         threads=1, warmup=1, iters=5, calibration_size=128, eval_texts=5, report_dir=root / "report",
                         progress=False)
    return run_bench(config), root / "report"


def test_report_schema_and_files(report):
    data, out = report
    for key, kind in (("schema", str), ("environment", dict), ("calibration", dict), ("providers", list),
                      ("paths", list), ("results", list), ("length_mix", dict), ("unavailable", list),
                      ("reference", dict), ("methods", dict), ("bundle", dict), ("config", dict)):
        assert isinstance(data[key], kind), key
    env = data["environment"]
    assert {"cpu", "cpu_flags", "onnxruntime", "torch", "python"} <= set(env)
    assert 0.0 <= env["cpu_share_used_by_other_processes"] <= 1.0 and env["torch_threads"] == 1
    assert data["calibration"]["fp32_gflops"] > 0 and data["calibration"]["int8_gops"] > 0
    # 3 paths measured (torch, onnx fp32, onnx int8) x 2 batches x 2 seqs
    assert len(data["results"]) == 3 * 4
    for row in data["results"]:
        lat = row["latency_ms"]
        assert 0 < lat["min"] <= lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]
        assert row["iters"] >= 3
        assert row["sequences_per_s"] > 0 and row["tokens_per_s"] == pytest.approx(
            row["sequences_per_s"] * row["seq"], rel=1e-3)
        assert row["gflop"] > 0 and row["achieved_gflops"] > 0 and 0 < row["fraction_of_peak"]
        assert row["speedup_vs_reference"] > 0
        assert isinstance(row["peak_rss_mb"], float)
    torch_rows = [r for r in data["results"] if r["provider"] == "torch"]
    assert all(r["speedup_vs_reference"] == 1.0 for r in torch_rows)
    # every file written, and the JSON on disk is the returned report
    assert json.loads((out / "report.json").read_text()) == json.loads(json.dumps(data))
    assert (out / "latency.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (out / "report.md").read_text()
    assert "| onnx cpu int8 | 2 | 16 |" in md and "Accuracy against the PyTorch reference" in md
    lines = (out / "bench.jsonl").read_text().splitlines()
    assert len(lines) == len(data["results"]) + len(data["length_mix"]["results"])


def test_unavailable_providers_and_precisions_reported_with_reason(report):
    data, out = report
    md = (out / "report.md").read_text()
    by_name = {p["provider"]: p for p in data["providers"]}
    assert by_name["cpu"]["available"]
    for name in ("cuda", "tensorrt"):
        if probe(name).available:
            continue
        assert by_name[name] == {"provider": name, "available": False, "reason": probe(name).reason}
        assert not [r for r in data["results"] if r["provider"] == name]   # no fake numbers
        assert f"| {name} | NOT MEASURED (unavailable) | {probe(name).reason} |" in md
    fp16 = [p for p in data["paths"] if p["precision"] == "fp16"]
    assert fp16 and not fp16[0]["available"] and "no fp16 model" in fp16[0]["reason"]
    assert any(u["precision"] == "fp16" for u in data["unavailable"])


def test_accuracy_against_reference(report):
    data, _ = report
    assert data["reference"]["same_model"] and data["reference"]["comparable"]
    acc = {p["path"]: p["accuracy"] for p in data["paths"] if p["available"] and not p["reference"]}
    assert acc["onnx cpu fp32"]["max_abs_diff"] <= 1e-4
    assert acc["onnx cpu fp32"]["cosine_min"] > 0.99999
    assert 1e-6 < acc["onnx cpu int8"]["max_abs_diff"] < 0.5 and acc["onnx cpu int8"]["cosine_min"] > 0.99
    assert acc["onnx cpu int8"]["inputs"] == 5


def test_length_mix_dynamic_vs_padded(report):
    mix = report[0]["length_mix"]
    assert mix["texts"] == 5 and mix["pad_to"] == 16 and mix["tokens_max"] == 16
    rows = {(r["path"], r["batch"], r["mode"]): r for r in mix["results"]}
    assert len(rows) == 3 * 2 * 2
    for (path, batch, mode), r in rows.items():
        if mode == "padded":
            assert r["speedup_vs_padded"] == 1.0
            assert r["padding_fraction"] > rows[(path, batch, "dynamic")]["padding_fraction"]
        assert r["latency_ms"]["p50"] <= r["latency_ms"]["p90"] <= r["latency_ms"]["p99"]
        assert r["batches"] == -(-5 // batch)
    assert rows[("onnx cpu int8", 1, "dynamic")]["padding_fraction"] == 0.0     # batch 1: never padded


def test_cli_bench_json_continues_past_unavailable_provider(bundle, capsys):
    code = main(["bench", str(bundle[1]), "--providers", "cuda,cpu", "--precisions", "int8", "--batch", "1",
                 "--seq", "8", "--iters", "3", "--warmup", "0", "--threads", "1", "--json"])
    out = capsys.readouterr().out
    assert code == 0
    data = json.loads(out)
    assert [r["path"] for r in data["results"]] == ["onnx cpu int8"]
    if not probe("cuda").available:
        assert data["unavailable"][0]["provider"] == "cuda" and data["unavailable"][0]["reason"]


def test_cli_rejects_bad_options_in_one_line(bundle, capsys):
    assert main(["bench", str(bundle[1]), "--batch", "1,x"]) == 2
    err = capsys.readouterr().err
    assert "--batch '1,x' must be a comma list of integers" in err and len(err.strip().splitlines()) == 1
    assert main(["bench", str(bundle[1]), "--providers", "gpu"]) == 2
    assert "unknown provider 'gpu'" in capsys.readouterr().err
    assert main(["bench", str(bundle[1]), "--seq", "4096", "--providers", "cpu"]) == 2
    assert "longer than the bundle's max_sequence_length 128" in capsys.readouterr().err


def test_bench_config_validation(tmp_path):
    with pytest.raises(ConfigError, match="iters"):
        BenchConfig(tmp_path, iters=2)
    with pytest.raises(ConfigError, match="unknown precision"):
        BenchConfig(tmp_path, precisions=("int2",))
    assert BenchConfig(tmp_path, precisions=("int8", "int4")).precisions == ("int8", "int4")    # the small graph
    with pytest.raises(ConfigError, match="batch value 0"):
        BenchConfig(tmp_path, batches=(0,))
    quick = BenchConfig.preset("quick", tmp_path, iters=7)
    assert quick.iters == 7 and quick.batches == (1, 8)
    with pytest.raises(ConfigError, match="unknown bench preset"):
        BenchConfig.preset("huge", tmp_path)


def test_read_texts_formats(tmp_path):
    (tmp_path / "sst2.tsv").write_text("sentence\tlabel\nit 's good\t1\nbad \" quote\t0\n")
    assert read_texts(tmp_path / "sst2.tsv") == ["it 's good", 'bad " quote']
    (tmp_path / "mrpc.tsv").write_text("\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
                                       '1\t1\t2\tHe said "no".\t"No," he said.\n')
    assert read_texts(tmp_path / "mrpc.tsv") == [('He said "no".', '"No," he said.')]
    (tmp_path / "plain.txt").write_text("first line\n\nsecond line\n")
    assert read_texts(tmp_path / "plain.txt", limit=1) == ["first line"]
    with pytest.raises(DataError, match="not found"):
        read_texts(tmp_path / "missing.tsv")


@pytest.mark.parametrize("task,arch", [("embed", "BertModel"), ("cls", "BertForSequenceClassification"),
                                       ("mlm", "BertForMaskedLM")])
def test_matmul_flops_equal_torch_flop_counter(task, arch):
    """The analytic count equals what torch counts for the same forward pass (eager attention)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from edgebert.model import BertConfig, build_model, encoder_of

    cfg = BertConfig.preset("tiny", id2label={0: "a", 1: "b", 2: "c"} if task == "cls" else None)
    model = build_model(cfg, arch).eval()
    encoder_of(model).set_attention_impl("eager")
    ids = torch.randint(5, 100, (3, 17))
    counter = FlopCounterMode(display=False)
    with counter, torch.inference_mode():
        model(ids, torch.ones_like(ids), torch.zeros_like(ids))
    counted = forward_flops(ModelShape.from_hf_dict(cfg.to_hf_dict()), 3, 17, task)
    assert counted["matmul"] == counter.get_total_flops()
    assert counted["total"] > counted["matmul"]


def test_flops_scale_as_expected():
    shape = ModelShape(384, 6, 12, 1536, 30522)      # all-MiniLM-L6-v2
    one = forward_flops(shape, 1, 128, "embed")
    # per token per layer: 4*H*H + 2*H*I multiply-adds in the projections and FFN, 2 FLOPs each
    dense = 6 * 128 * 2 * (4 * 384 * 384 + 2 * 384 * 1536)
    assert one["qkv_projection"] + one["attention_output"] + one["ffn"] == dense
    assert forward_flops(shape, 8, 128, "embed")["matmul"] == 8 * one["matmul"]
    # attention scores grow with seq^2
    assert forward_flops(shape, 1, 256)["attention_scores"] == 4 * one["attention_scores"]


def test_deeper_reference_gets_its_own_flops_and_speedup(bundle, tmp_path):
    """A student bundle benchmarked against a deeper teacher: the torch row's FLOPs (roofline) are the
    teacher's, not the bundle's, and the accuracy delta is not claimed as export error."""
    from runtime_fixtures import make_tiny_model_dir

    _, bundle_dir = bundle
    teacher = make_tiny_model_dir(tmp_path / "teacher", num_hidden_layers=6)
    data = run_bench(BenchConfig(bundle_dir, providers=("cpu",), precisions=("int8",), batches=(1,), seqs=(8,),
                                 reference=teacher, threads=1, warmup=1, iters=3, calibration_size=64,
                                 eval_texts=3, progress=False))
    rows = {r["provider"]: r for r in data["results"]}
    teacher_cfg = json.loads((teacher / "config.json").read_text())
    student_cfg = json.loads((bundle_dir / "config.json").read_text())
    expected = {"torch": forward_flops(ModelShape.from_hf_dict(teacher_cfg), 1, 8, "embed")["total"],
                "cpu": forward_flops(ModelShape.from_hf_dict(student_cfg), 1, 8, "embed")["total"]}
    for provider, flops in expected.items():
        assert rows[provider]["gflop"] == pytest.approx(flops / 1e9, rel=1e-3)
    assert rows["torch"]["gflop"] > 2 * rows["cpu"]["gflop"]             # 6 layers vs 2
    assert data["reference"]["same_model"] is False
    assert rows["cpu"]["speedup_vs_reference"] == pytest.approx(
        rows["torch"]["latency_ms"]["p50"] / rows["cpu"]["latency_ms"]["p50"], rel=1e-2)


# --------------------------------------------------------------------------- GPU side, proven without a GPU
def test_gpu_figures_are_not_measured_with_their_reason_never_invented(report):
    data, out = report
    if probe("cuda").available:
        pytest.skip("this machine has a usable GPU")
    assert data["version"] == 2
    gpu = data["environment"]["gpu"]
    assert gpu["gpus"] == [] and gpu["device_count"] is None and gpu["reason"]
    gaps = {g["what"]: g["reason"] for g in data["not_measured"]}
    assert gaps["GPU name, driver and library versions"] == gpu["reason"]
    assert gaps["TensorRT engine build and cold start"] == probe("tensorrt").reason
    assert "sees no CUDA device" in gaps["PyTorch reference on CUDA (fp32, fp16)"]
    if gpu["nvml"] != "ok":
        assert gaps["GPU memory"] == gpu["nvml"]
    assert all(r["gpu_mem_mb"] is None for r in data["results"])          # CPU paths: no GPU figure
    assert not [r for r in data["results"] if r["provider"] in ("cuda", "tensorrt", "torch-cuda")]
    assert all(r.get("speedup_vs_torch_cuda") is None for r in data["results"])
    # start-up: one row per measured ONNX path, no engine cache off TensorRT, parts add up
    assert sorted(r["path"] for r in data["startup"]) == ["onnx cpu fp32", "onnx cpu int8"]
    for row in data["startup"]:
        assert row["engine_cache"] is None and row.get("engine_build_s") is None and row["provider"] == "cpu"
        assert row["session_s"] > 0 and row["first_run_s"] > 0
        assert row["cold_start_s"] == pytest.approx(row["session_s"] + row["first_run_s"], abs=2e-4)
    md = (out / "report.md").read_text()
    assert f"- GPU: none: {gpu['reason']}" in md and "## Start-up (apart from latency)" in md
    assert f"**Not measured: PyTorch reference on CUDA (fp32, fp16)** ({gaps['PyTorch reference on CUDA (fp32, fp16)']})" in md
    paths = {p["path"]: p for p in data["paths"]}
    assert paths["onnx cpu fp32"]["model"] == "fp32" and paths["onnx cpu fp32"]["placement"]["nodes"]["cpu"] > 0


def test_gpu_bench_preset_sweeps_batch_to_128_and_sequence_to_512(tmp_path):
    gpu = BenchConfig.preset("gpu", tmp_path)
    assert gpu.providers == ("cuda", "tensorrt") and gpu.precisions == ("fp32", "fp16", "int8")
    assert max(gpu.batches) == 128 and max(gpu.seqs) == 512 and gpu.torch_gpu and gpu.cold_start
    assert BenchConfig.preset("gpu", tmp_path, providers=("cpu", "cuda")).providers == ("cpu", "cuda")


def test_tensorrt_start_up_is_timed_with_an_empty_then_a_filled_engine_cache(monkeypatch, tmp_path, bundle):
    import edgebert.runtime as runtime
    from edgebert.bench import startup
    from edgebert.bundle import read_manifest
    from edgebert.runtime.trt_profile import TrtProfile

    opened = []

    class FakeSession:
        provider, precision, model_key = "tensorrt", "fp16", "fp32-trt"

        def __init__(self, bundle_dir, **kwargs):
            opened.append(kwargs)

        def run(self, feeds):
            assert feeds["input_ids"].shape == (1, 8)
            return {}

    monkeypatch.setattr(runtime, "EdgeSession", FakeSession)
    manifest = read_manifest(bundle[1])
    config = BenchConfig(tmp_path, providers=("tensorrt",), precisions=("fp16",), batches=(1, 64),
                         seqs=(8, 256), progress=False)
    session, rows = startup.open_path(config, manifest, "tensorrt", "fp16", tmp_path / "caches")
    assert isinstance(session, FakeSession) and len(opened) == 2
    for kwargs in opened:   # the profile covers every shape the bench will time, caches in the run's folder
        assert kwargs["trt_profile"] == TrtProfile((1, 1), (8, 128), (64, 256))
        assert kwargs["trt_cache_dir"] == tmp_path / "caches" and kwargs["batch_size"] == 64
    assert [r["engine_cache"] for r in rows] == ["empty", "warm"]
    assert rows[0]["engine_build_s"] == rows[1]["engine_build_s"] == round(
        rows[0]["cold_start_s"] - rows[1]["cold_start_s"], 4)
    assert all(r["path"] == "onnx tensorrt fp16" and r["model"] == "fp32-trt" for r in rows)
    opened.clear()
    _, rows = startup.open_path(config, manifest, "cuda", "fp16", tmp_path / "caches")
    assert len(opened) == 1 and "trt_profile" not in opened[0] and rows[0]["engine_cache"] is None


def test_gpu_summary_and_nvml_without_its_package(monkeypatch):
    import sys

    from edgebert.bench.gpu import Nvml, gpu_summary

    monkeypatch.setitem(sys.modules, "pynvml", None)           # nvidia-ml-py not installed
    nvml = Nvml()
    assert not nvml.ok and nvml.used_mb() is None and nvml.facts() == {}
    assert nvml.reason == "nvidia-ml-py is not installed (pip install 'edgebert[gpu]')"
    env = {"gpus": ["NVIDIA H100 80GB HBM3"], "driver_cuda": "13.0", "onnxruntime_cuda_build": "13.0",
           "cudnn": "9.10.2", "tensorrt": None, "nvml_driver": "580.65.06", "nvml": "ok"}
    assert gpu_summary(env) == ("NVIDIA H100 80GB HBM3; driver 580.65.06 (CUDA 13.0); onnxruntime built for CUDA "
                                "13.0; cuDNN 9.10.2; TensorRT not loaded")
    assert gpu_summary({"gpus": [], "reason": "no NVIDIA GPU driver (libcuda.so.1: cannot open)"}) == \
        "none: no NVIDIA GPU driver (libcuda.so.1: cannot open)"
    assert gpu_summary(None) == "not probed (no GPU provider requested)"
