"""benchmarks/footprint.py's small-graph rows (issue #50): with the bundle's ``int4`` graph the run measures
``edgebert-int4`` and the report has its size, one-device archive, peak RSS, first result and accuracy beside the
default graph's; without one it says so. The timed children are faked (no timing here): the bundle, the packing
and the accuracy figures are real (tiny seeded mean-pooling model, a few texts)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

from export_fixtures import make_calib_text
from test_encode import st_model_dir

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import footprint  # noqa: E402
import footprint_parts  # noqa: E402

ROWS = ("graph MB", "one-device archive MB", "peak RSS MB", "first result s", "cosine vs fp32")


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    from edgebert.exporters import ExportConfig, export_bundle

    root = tmp_path_factory.mktemp("footprint")
    model_dir = st_model_dir(root, "st_mean", {"pooling_mode_mean_tokens": True})
    calib = make_calib_text(root / "calib.txt", n=64)
    out = {}
    for name, int4 in (("small", True), ("int8", False)):
        out[name] = root / name
        export_bundle(ExportConfig(model_dir=model_dir, out_dir=out[name], int8=True, int4=int4, calib=calib,
                                   calib_size=32, gate_size=32, validation_batch_sizes=(1, 3),
                                   validation_seq_lens=(7, 32)))
    return out


def _run(bundle: Path, tmp_path: Path, monkeypatch) -> dict:
    measured = []

    def fake_measure(kind, bundle, graph, tokenizer, threads, python, precision=None, cache=None):
        measured.append((kind, precision))
        rss = {"edgebert-int4": 70.0}.get(kind, 75.0)
        return {"rss_peak_mb": rss, "first_result_s": 0.2, "import_s": 0.1, "open_s": 0.05, "first_run_s": 0.01}

    texts = tmp_path / "dev.tsv"
    texts.write_text("sentence\tlabel\n" + "".join(f"{t}\t1\n" for t in (
        "a charming and moving comedy", "too long", "the actors are wonderful but the script is terrible")))
    monkeypatch.setattr(footprint_parts, "SST2_DEV", texts)
    monkeypatch.setattr(footprint, "_measure", fake_measure)
    monkeypatch.setattr(footprint, "_checked_cache", lambda *a: str(tmp_path / "checked"))
    monkeypatch.setattr(footprint.time, "sleep", lambda s: None)
    args = argparse.Namespace(bundle=str(bundle), threads=1, precision=None, repeats=2, name="t", smoke=True,
                              checkpoint=None, no_accuracy=False, child_python=sys.executable)
    result = footprint.run(args)
    result["_measured_calls"] = measured
    return result


def test_the_small_graph_gets_its_rows(bundles, tmp_path, monkeypatch):
    r = _run(bundles["small"], tmp_path, monkeypatch)
    assert ("edgebert-int4", "int4") in r["_measured_calls"]       # its children open precision="int4"
    assert r["measured"]["edgebert-int4"]["rss_peak_mb"]["median"] == 70.0
    assert r["ratios"]["small_rss_vs_edgebert"] == round(70 / 75, 3)
    small = r["small_graph"]
    assert small["file"] == "onnx/model_q4.onnx"
    assert small["one_device"]["target"] == "int4" and small["one_device"]["files"].count("onnx/model_q4.onnx") == 1
    assert 0 < small["one_device"]["archive_mb"] < r["one_device_bundle"]["archive_mb"]
    cosine = r["accuracy"]["vs_fp32"]["edgebert-int4"]
    assert r["accuracy"]["texts"] == 3 and 0.99 < cosine["mean"] <= 1.0
    report = footprint_parts.markdown(r)
    table = report.split("Small graph (edgebert-int4")[1]
    for row in ROWS:
        line = next(x for x in table.splitlines() if x.startswith(f"| {row}"))
        assert "-" not in line.split("|")[3], line                # the small graph's cell is filled
    assert footprint_parts.NO_SMALL not in report


def test_without_a_small_graph_the_report_says_so(bundles, tmp_path, monkeypatch):
    r = _run(bundles["int8"], tmp_path, monkeypatch)
    assert "edgebert-int4" not in r["measured"] and r["small_graph"] is None
    assert all(kind != "edgebert-int4" for kind, _ in r["_measured_calls"])
    report = footprint_parts.markdown(r)
    assert "no small (int4) graph in the bundle" in report and "| edgebert-int4 |" not in report


def test_paired_ratios_take_each_round_over_its_own_plain_session():
    """Round by round, then the median: a slow round (0.4 s plain) counts as one round, not as a shift of medians."""
    rows = lambda *s: [{"first_result_s": x} for x in s]  # noqa: E731
    measured = {"plain-same": rows(0.1, 0.2, 0.4), "edgebert": rows(0.12, 0.22, 0.40),
                "edgebert-first": rows(0.2, 0.2, 0.4), "edgebert-checked": rows(0.15, 0.3, 0.44)}
    assert footprint.paired_ratios(measured) == {"first_result_vs_plain_same": 1.1,
                                                 "first_result_vs_plain_same_first_open": 1.0,
                                                 "first_result_vs_plain_same_first_open_after_check": 1.5}
