"""What the CUDA check (``benchmarks/gpu_check.py``, ``edgebert.bench.cuda_timing``) decides without a GPU:
placement labels (a CUDA path is CUDA only when its compute nodes are), the reasons read from onnxruntime's
log, the timing modes on the CPU provider, the refusal of CUDA graphs on a length mix, the goal ratios and
the report's not-measured rows. Nothing here is skipped for want of a GPU."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from edgebert.bench.cuda_timing import (
    Timing,
    fixed_workload,
    mix_workload,
    ort_session,
    time_calls,
    time_ort,
    time_torch,
)
from edgebert.runtime.placement import (
    ELSEWHERE,
    HYBRID,
    ON,
    REASON_CPU_PREFERRED,
    REASON_UNLOGGED,
    SHAPES_ON_CPU,
    Placement,
    off_provider_table,
    placement_reasons,
    read_placement,
)
from runtime_fixtures import tiny_bundle

REPO = Path(__file__).resolve().parents[1]


def load_script():
    spec = importlib.util.spec_from_file_location("gpu_check_script", REPO / "benchmarks" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check_script"] = module
    spec.loader.exec_module(module)
    return module


def placement(named):
    nodes, ops = {}, {}
    for where, op, _ in named:
        nodes[where] = nodes.get(where, 0) + 1
        ops.setdefault(where, {})[op] = ops.setdefault(where, {}).get(op, 0) + 1
    return Placement(nodes, ops, named=tuple(named))


CUDA_ALL = [("cuda", "Attention", "a0"), ("cuda", "SkipLayerNormalization", "s0"), ("cuda", "MatMul", "m0")]
INT8_ON_CUDA = CUDA_ALL + [("cpu", "DynamicQuantizeLinear", "dq0"), ("cpu", "MatMulIntegerToFloat", "mi0"),
                           ("cpu", "MatMulIntegerToFloat", "mi1"), ("cpu", "Shape", "sh0")]


@pytest.mark.parametrize("named,label", [
    (CUDA_ALL, ON),
    (CUDA_ALL + [("cpu", "Shape", "sh0"), ("cpu", "Gather", "g0")], SHAPES_ON_CPU),
    (INT8_ON_CUDA, HYBRID),
    ([("cpu", "MatMul", "m0")], ELSEWHERE),
])
def test_a_cuda_path_is_cuda_only_when_its_compute_nodes_are(named, label):
    assert placement(named).label("cuda") == label


def test_the_cpu_int8_graph_on_cuda_is_hybrid_with_its_compute_nodes_listed():
    p = placement(INT8_ON_CUDA)
    assert p.compute_off("cuda") == {"DynamicQuantizeLinear": 1, "MatMulIntegerToFloat": 2}
    assert [n[2] for n in p.off("cuda")] == ["dq0", "mi0", "mi1", "sh0"]


def test_reasons_are_read_from_onnxruntime_verbose_log():
    log = ("2026-11-26 [V:onnxruntime:, fallback_cpu_capability.cc:149 GetCpuPreferredNodes] ORT optimization- "
           "Force fallback to CPU execution for node: sh0 because the CPU execution path is deemed faster\n"
           "2026-11-26 [I:onnxruntime:, cuda_execution_provider.cc:2640 GetCapability] CUDA kernel not found in "
           "registries for Op type: MatMulIntegerToFloat node name: mi0\n")
    reasons = placement_reasons(log)
    assert reasons["sh0"] == REASON_CPU_PREFERRED
    assert reasons["mi0"].startswith("the provider has no kernel") and "MatMulIntegerToFloat" in reasons["mi0"]
    table = off_provider_table(placement(INT8_ON_CUDA), "cuda", reasons)
    by_op = {row["op_type"]: row for row in table}
    mm = [r for r in table if r["op_type"] == "MatMulIntegerToFloat"]
    assert sum(r["count"] for r in mm) == 2 and all(r["compute"] for r in mm)
    # mi1 has no log line of its own: grouped apart, never given another node's reason
    assert sorted(r["reason"][:25] for r in mm) == sorted([REASON_UNLOGGED[:25], "the provider has no kernel"[:25]])
    assert by_op["Shape"]["compute"] is False and by_op["Shape"]["reason"] == REASON_CPU_PREFERRED


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_bundle(tmp_path_factory.getbasetemp(), "embed")


def test_the_recorded_placement_names_every_node(tiny):
    from edgebert.bundle import read_manifest

    _, bundle = tiny
    file = str(bundle / read_manifest(bundle).models["int8"].file)
    p = read_placement(ort_session(file, "cpu", threads=1))
    assert p.total > 10 and len(p.named) == p.total and p.label("cpu") == ON
    assert all(name for _, _, name in p.named if _ == "cpu") or p.total == len(p.named)


def test_host_and_iobinding_timings_give_the_same_calls_and_outputs_on_cpu(tiny):
    from edgebert.bundle import read_manifest

    _, bundle = tiny
    file = str(bundle / read_manifest(bundle).models["fp32"].file)
    session = ort_session(file, "cpu", threads=1)
    w = fixed_workload(2, 16, vocab=100)
    limits = dict(warmup=2, max_seconds=0.0, min_calls=5, max_calls=5)
    host = time_ort(session, w, "host", "cpu", **limits).summary()
    bound = time_ort(session, w, "iobinding", "cpu", **limits).summary()
    assert host["calls"] == bound["calls"] == 5 and host["throughput_seq_s"] > 0 and host["p90_ms"] >= host["p50_ms"]
    assert host["path"] == "onnxruntime cpu host" and bound["path"] == "onnxruntime cpu iobinding"


def test_cuda_graphs_refuse_a_length_mix_with_the_reason(tiny):
    from edgebert.bundle import read_manifest

    _, bundle = tiny
    file = str(bundle / read_manifest(bundle).models["fp32"].file)
    mix = mix_workload("mix", [[101, 5, 6, 102], [101, 7, 102]])
    assert not mix.fixed and mix.sequences == 2 and mix.tokens == 7
    t = time_ort(ort_session(file, "cpu", threads=1), mix, "cudagraph", "cpu")
    assert t.summary()["not_measured"].startswith("CUDA graphs replay one captured shape")


def test_torch_timing_modes_run_the_model_on_cpu(tiny):
    from edgebert.model import load_model

    model_dir, _ = tiny
    model = load_model(model_dir, "BertModel").eval()
    w = fixed_workload(1, 8, vocab=100)
    limits = dict(warmup=1, max_seconds=0.0, min_calls=3, max_calls=3)
    for mode in ("device", "host"):
        s = time_torch(model, w, mode, "cpu", label="torch eager fp32", **limits).summary()
        assert s["calls"] == 3 and s["path"] == f"torch eager fp32 {mode}"


def test_time_calls_counts_sequences_and_stops_at_max_calls():
    calls = []
    t = time_calls(calls.append, 2, [3, 5], warmup=2, max_seconds=10.0, min_calls=1, max_calls=4, path="p",
                   workload="w")
    assert calls == [0, 1, 0, 1, 0, 1] and t.sequences == 16 and len(t.latencies_ms) == 4
    assert Timing("p", "w", not_measured="why").summary() == {"path": "p", "workload": "w", "not_measured": "why"}


def test_goal_ratios_and_the_report_name_what_was_not_measured():
    script = load_script()
    timings = [{"model": "minilm", "path": p, "workload": "1x128", "p50_ms": v, "p90_ms": v, "throughput_seq_s": 1}
               for p, v in (("onnxruntime cuda cudagraph fp16", 0.5), ("onnxruntime cuda iobinding fp16", 0.9),
                            ("torch eager fp16 device", 2.0), ("torch compile fp16 device", 0.6),
                            ("onnxruntime cuda host fp16", 1.0), ("torch eager fp16 host", 2.5))]
    timings.append({"model": "minilm", "path": "torch compile fp16 device", "workload": "sst2-mix",
                    "not_measured": "compile budget (30 s) spent"})
    r = script.ratios({"timings": timings})["1x128"]
    assert r["ort_fp16_best_ms"] == 0.5 and r["vs_eager"] == 0.25 and r["vs_compile"] == 0.833
    assert r["host_vs_eager_host"] == 0.4
    md = script.to_markdown({"timings": timings, "paths": [], "trt": script.TRT_NOT_MEASURED, "ratios": {},
                             "not_measured": [{"section": "profile", "reason": "out of time in the one call"}],
                             "errors": []})
    assert "not measured: compile budget (30 s) spent" in md and "TensorRT not measured: " in md
    assert "- profile: out of time in the one call" in md


def test_a_section_that_fails_or_does_not_fit_is_recorded_and_the_run_goes_on(tmp_path):
    script = load_script()
    rec = script.Record(tmp_path, budget=100.0, dry_run=True)
    with rec.section("breaks", 1) as ok:
        assert ok
        raise RuntimeError("CUDA failure 700: an illegal memory access")
    with rec.section("too long", 1000) as ok:
        assert not ok
    data = json.loads((tmp_path / "gpu_check.json").read_text())
    assert data["errors"][0]["section"] == "breaks" and "illegal memory access" in data["errors"][0]["error"]
    assert data["not_measured"][0]["section"] == "too long" and "out of time" in data["not_measured"][0]["reason"]
    assert (tmp_path / "gpu_check.md").read_text().count("breaks") == 1


def test_cosines_of_identical_and_orthogonal_rows():
    script = load_script()
    a = np.eye(3, dtype=np.float32)
    assert script._cos(a, a) == {"mean": pytest.approx(1.0), "min": pytest.approx(1.0)}
    assert script._cos(a, np.roll(a, 1, axis=1)) == {"mean": pytest.approx(0.0), "min": pytest.approx(0.0)}
