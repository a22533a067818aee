"""``BenchReport``: the typed bench report writes exactly the JSON report.json and bench.jsonl always held,
and reads every stored report.json back (versions 1 and 2) into the same JSON, key order included."""

from __future__ import annotations

import json

import pytest

from conftest import REPO
from edgebert.bench.rows import Accuracy, LatencyRow, MixRow, PathRow, Percentiles, StartupRow
from edgebert.bench.schema import BenchReport, Calibration, Environment

STORED = sorted((REPO / "benchmarks" / "results").rglob("report.json"))


@pytest.mark.parametrize("path", STORED, ids=lambda p: p.parent.name)
def test_stored_reports_round_trip_exactly(path):
    text = path.read_text(encoding="utf-8")
    data = json.loads(text)
    report = BenchReport.from_dict(data)
    assert json.dumps(report.to_dict(), indent=2) == json.dumps(data, indent=2)
    # typed fields, not dicts: what the renderers read
    assert isinstance(report.environment, Environment) and isinstance(report.calibration, Calibration)
    assert all(isinstance(r, LatencyRow) and isinstance(r.latency_ms, Percentiles) for r in report.results)
    assert all(isinstance(p, PathRow) for p in report.paths)
    assert report.results and report.results[0].latency_ms.p50 == data["results"][0]["latency_ms"]["p50"]


def test_rows_write_the_keys_of_their_kind():
    lat = Percentiles(1.0, 2.0, 3.0, 1.5, 0.5, 3.5)
    row = LatencyRow("onnx cpu int8", "cpu", "int8", 1, 16, 10, lat, 100.0, 1600.0, 12.0, None)
    line = ["path", "provider", "precision", "batch", "seq", "iters", "latency_ms", "sequences_per_s",
            "tokens_per_s", "peak_rss_mb", "gpu_mem_mb"]
    assert list(row.to_dict()) == line                   # a bench.jsonl line: measured figures only
    row.gflop, row.achieved_gflops, row.peak_gflops = 0.1, 5.0, 50.0
    derived = ["gflop", "achieved_gflops", "peak_gflops", "fraction_of_peak", "speedup_vs_reference"]
    assert list(row.to_dict()) == line + derived         # speedup_vs_torch_cuda: GPU providers only
    row.provider = "cuda"
    assert list(row.to_dict()) == line + derived + ["speedup_vs_torch_cuda"]
    mix = MixRow("torch fp32", "torch", "fp32", 8, "dynamic", 2, 12, lat, 0.5, 24.0, 300.0, 0.25, shapes=[(8, 16)])
    assert "shapes" not in mix.to_dict() and "gflop" not in mix.to_dict()   # kept in memory for the FLOPs only
    unavailable = PathRow("onnx cuda fp16", "cuda", "fp16", False, reason="no fp16 model")
    assert unavailable.to_dict() == {"path": "onnx cuda fp16", "provider": "cuda", "precision": "fp16",
                                     "available": False, "reason": "no fp16 model"}
    torch_row = PathRow("torch fp32", "torch", "fp32", True, model_bytes=10, providers=["torch (CPU)"],
                        reference=True)
    assert list(torch_row.to_dict()) == ["path", "provider", "precision", "available", "model_bytes", "load_rss_mb",
                                         "providers", "notes", "accuracy", "reference"]
    start = StartupRow("onnx cpu fp32", "cpu", "fp32", "fp32", None, 0.1, 0.01, 0.11)
    assert "engine_build_s" not in start.to_dict()
    assert Calibration().to_dict() == {}                  # calibration skipped (size 0)
    assert Accuracy.not_comparable("hidden sizes differ").to_dict() == {"comparable": False,
                                                                       "reason": "hidden sizes differ"}
    label = Accuracy("token_label_agreement", 88, 0.02, agreement=0.99, prob_max_abs_diff=0.003)
    assert label.to_dict() == {"metric": "token_label_agreement", "inputs": 88, "max_abs_diff": 0.02,
                               "token_label_agreement": 0.99, "prob_max_abs_diff": 0.003}
    assert Accuracy.from_dict(label.to_dict()) == label
