"""benchmarks/cpu_peers.py and benchmarks/int8_profile.py on fabricated figures: the result table, the
block rotation and summary, the profile's per-op breakdown. Needs none of the peer engines (those are
checked by the scripts' ``--smoke`` runs)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module        # dataclasses look their module up; int8_profile imports cpu_peers
    spec.loader.exec_module(module)
    return module


peers = _load("cpu_peers")
profile = _load("int8_profile")


def _measured(p50_b1: float, p50_b8: float, rate: float, cos=(0.99, 0.98), flagged=False) -> dict:
    return {"latency": {"1x128": {"p50_ms": p50_b1}, "8x128": {"p50_ms": p50_b8},
                        "length_mix": {"texts_per_s": rate}, "flagged": flagged},
            "accuracy": {"mean": cos[0], "min": cos[1]}}


def test_table_rows_ratio_to_edgebert_fp32_busy_mark_and_not_measured():
    report = {"paths": {"edgebert-fp32": _measured(10.0, 80.0, 50.0, (1.0, 1.0)),
                        "edgebert-int8": _measured(6.8, 50.0, 75.5, (0.99679, 0.98649)),
                        "openvino-int8": _measured(5.0, 40.0, 90.0, flagged=True),
                        "ctranslate2-int8": {"not_measured": "ctranslate2 is not installed (x)"}}}
    lines = peers.table(report)
    assert lines[0] == ("| path | p50 ms 1x128 | vs edgebert fp32 | p50 ms 8x128 | length mix texts/s | "
                        "cosine mean / min |")
    assert lines[2] == "| edgebert fused fp32 (ONNX Runtime) | 10.00 | 1.00x | 80.0 | 50.0 | 1.00000 / 1.00000 |"
    assert lines[3] == ("| edgebert export --int8 (portable, ONNX Runtime) | 6.80 | 0.68x | 50.0 | 75.5 | "
                        "0.99679 / 0.98649 |")
    assert lines[4].startswith("| OpenVINO INT8 (NNCF, transformer preset) (busy) | 5.00 | 0.50x |")
    assert lines[5] == "| CTranslate2 int8 | not measured: ctranslate2 is not installed (x) | | | | |"


def test_table_without_the_baseline_leaves_the_ratio_empty():
    lines = peers.table({"paths": {"openvino-fp32": _measured(12.0, 90.0, 40.0)}})
    assert lines[2] == "| OpenVINO fp32 | 12.00 |  | 90.0 | 40.0 | 0.99000 / 0.98000 |"


def test_blocks_rotate_one_path_per_repeat():
    names = ["a", "b", "c"]
    assert [peers.rotated(names, r) for r in range(4)] == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"],
                                                           ["a", "b", "c"]]


def test_summary_pools_samples_and_flags_a_busy_block():
    blocks = [{"1x128": [1.0, 2.0, 3.0], "8x128": [10.0, 12.0], "mix_texts_per_s": 40.0, "other_cpu": 0.01,
               "flagged": False},
              {"1x128": [4.0, 5.0, 6.0], "8x128": [14.0, 16.0], "mix_texts_per_s": 30.0, "other_cpu": 0.2,
               "flagged": True},
              {"1x128": [7.0, 8.0, 9.0], "8x128": [18.0, 20.0], "mix_texts_per_s": 35.0, "other_cpu": None,
               "flagged": False}]
    s = peers.summarize(blocks)
    assert s["1x128"]["p50_ms"] == 5.0 and s["1x128"]["n"] == 9
    assert s["1x128"]["per_repeat_p50_ms"] == [2.0, 5.0, 8.0]
    assert s["8x128"]["p50_ms"] == 15.0
    assert s["length_mix"]["texts_per_s"] == 35.0
    assert s["other_cpu_max"] == 0.2 and s["flagged"] is True
    assert peers.summarize(blocks[:1] + [{"error": "RuntimeError: boom"}]) == {"error": "RuntimeError: boom"}


def test_a_missing_engine_is_one_line_with_the_install_hint():
    assert peers.one_line(ModuleNotFoundError("No module named 'ctranslate2'", name="ctranslate2")) == (
        f"ctranslate2 is not installed ({peers.INSTALL_HINT})")
    assert peers.one_line(RuntimeError("bad\n  graph")) == "RuntimeError: bad graph"


def test_smoke_settings_and_unknown_path():
    args = peers.parse_args(["--smoke", "--paths", "edgebert-fp32, ctranslate2-int8"])
    assert (args.repeats, args.pause, args.sst2, args.wiki) == (1, 0.0, 12, 4)
    assert args.paths == ["edgebert-fp32", "ctranslate2-int8"]
    with pytest.raises(SystemExit):
        peers.parse_args(["--paths", "tensorflow"])


def _event(cat, name, ts, dur, op=None):
    return {"cat": cat, "name": name, "ts": ts, "dur": dur, **({"args": {"op_name": op}} if op else {})}


def test_profile_breakdown_drops_warmup_and_counts_the_outlier_split():
    events = [_event("Session", "model_run", 0, 100),                       # warm-up run: dropped
              _event("Node", "big_kernel_time", 10, 90, "MatMulIntegerToFloat")]
    for start in (1000, 2000):                                             # two timed runs
        events += [_event("Session", "model_run", start, 100),
                   _event("Node", "mm_kernel_time", start + 1, 60, "MatMulIntegerToFloat"),
                   _event("Node", "mm_fence_before", start + 1, 5, "MatMulIntegerToFloat"),
                   _event("Node", "/l0/MatMul/outlier_float_MatMul_kernel_time", start + 2, 10, "MatMul"),
                   _event("Node", "/l0/MatMul/outlier_Add_kernel_time", start + 3, 10, "Add"),
                   _event("Node", "/l0/MatMul/outlier_masked_QuantizeLinear_calibrated_kernel_time", start + 3, 5,
                          "QuantizeLinear"),   # the INT8 input's own quantization: not the split's
                   _event("Node", "ln_kernel_time", start + 4, 10, "SkipLayerNormalization")]
    b = profile.op_breakdown(events, warmup=1)
    assert b["runs"] == 2 and b["run_ms_mean"] == 0.1 and b["kernels_ms_per_run"] == 0.095
    assert b["outside_kernels_ms_per_run"] == 0.005
    assert b["outlier_split_share"] == round(20 / 95, 4)
    first = b["ops"][0]
    assert first == {"op_type": "MatMulIntegerToFloat", "share": round(60 / 95, 4), "calls_per_run": 1.0,
                     "us_per_call": 60.0, "us_per_run": 60.0, "outlier_split_us_per_run": 0.0}
    split = {o["op_type"]: o["outlier_split_us_per_run"] for o in b["ops"]}
    assert split["MatMul"] == 10.0 and split["QuantizeLinear"] == 0.0
    with pytest.raises(ValueError, match="none after the 3 warm-up runs"):
        profile.op_breakdown(events, warmup=3)


def test_synthetic_ids_have_cls_and_sep():
    ids = peers.synthetic_ids(8, 128)
    assert ids.shape == (8, 128) and ids.dtype == np.int64
    assert (ids[:, 0] == 101).all() and (ids[:, -1] == 102).all() and ids[:, 1:-1].min() >= 1000


def test_goal_lines_compare_with_the_fastest_peer_int8_and_openvino_fp32():
    report = {"paths": {"edgebert-fp32-spin": _measured(9.0, 80.0, 50.0, (1.0, 1.0)),
                        "edgebert-int8-spin": _measured(4.4, 50.0, 100.0, (0.9970, 0.985)),
                        "edgebert-int8-openvino": _measured(5.5, 40.0, 80.0, (0.9975, 0.979)),
                        "openvino-fp32": _measured(10.0, 90.0, 40.0, (1.0, 1.0)),
                        "openvino-int8": _measured(5.0, 40.0, 90.0, (0.9972, 0.967)),
                        "ctranslate2-int8": _measured(6.0, 45.0, 95.0, (0.9967, 0.986))}}
    lines = peers.goal_lines(report)
    assert "OpenVINO INT8 (NNCF, transformer preset)" in lines[1]          # the faster peer at 1x128
    rows = [ln for ln in lines if ln.startswith("| edgebert") and not ln.startswith("| edgebert path")]
    # 4.4 / 5.0 = 0.88x; time per text 90 / 100 = 0.90x; 0.9970 < 0.9972
    assert rows[0].endswith("| 0.88x yes | 0.90x yes | 0.99700 no | 0.98500 yes |")
    assert rows[1].endswith("| 1.10x no | 1.12x no | 0.99750 yes | 0.97900 no |")
    assert any("vs OpenVINO fp32 at 1x128: 0.90x (goal <= 0.95x: yes)" in ln for ln in lines)
    assert peers.goal_lines({"paths": {"edgebert-int8": _measured(1.0, 2.0, 3.0)}}) == []


def _run(p50s_b1: list[float], rates: list[float], cos=None) -> dict:
    entry = {"latency": {"1x128": {"per_repeat_p50_ms": p50s_b1}, "8x128": {"per_repeat_p50_ms": [40.0] * len(p50s_b1)},
                         "length_mix": {"per_repeat": rates}, "flagged": False}}
    if cos:
        entry["accuracy"] = {"mean": cos[0], "min": cos[1]}
    return entry


def test_pooled_runs_take_the_median_of_every_repeat_and_keep_the_scored_accuracy():
    host = {"kind": "x86-vnni", "summary": "x86_64 x86-vnni"}
    run1 = {"date": "d1", "host": host, "paths": {"openvino-int8": _run([5.0, 7.0], [190.0, 200.0], (0.997, 0.967)),
                                                  "edgebert-int8-vnni-spin": _run([8.0, 9.0], [260.0, 300.0], (0.998, 0.991)),
                                                  "ctranslate2-int8": {"not_measured": "absent"}}}
    run2 = {"date": "d2", "host": host, "paths": {"openvino-int8": _run([6.0], [250.0]),
                                                  "edgebert-int8-vnni-spin": _run([6.5], [280.0])}}
    report = peers.pooled([run1, run2])
    ov, eb = report["paths"]["openvino-int8"], report["paths"]["edgebert-int8-vnni-spin"]
    assert (ov["latency"]["1x128"]["p50_ms"], ov["latency"]["length_mix"]["texts_per_s"], ov["runs"]) == (6.0, 200.0, 2)
    assert eb["latency"]["1x128"]["p50_ms"] == 8.0 and eb["accuracy"] == {"mean": 0.998, "min": 0.991}
    assert "ctranslate2-int8" not in report["paths"] and report["pooled_runs"] == ["d1", "d2"]
    goal = next(ln for ln in peers.goal_lines(report) if ln.startswith("| edgebert --target x86-vnni"))
    assert "| 1.33x no | 0.71x yes | 0.99800 yes | 0.99100 yes |" in goal      # 8.0 / 6.0; 200 / 280
