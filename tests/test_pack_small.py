"""``edgebert pack --target int4``: a one-device bundle of the small graph (issue #50): the int4 graph alone,
loaded by default there and checked against the stored fp32 outputs; refused when its gate missed the budget."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from edgebert.errors import ConfigError
from export_fixtures import make_small_bundle


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return make_small_bundle(tmp_path_factory.mktemp("pack_small"))


def test_pack_int4_keeps_the_small_graph_alone_loads_it_by_default_and_checks(bundle: Path, tmp_path: Path):
    from edgebert.runtime import EdgeSession
    from edgebert.runtime.check import check_bundle
    from edgebert.runtime.pack import pack_bundle

    result = pack_bundle(bundle, "int4", tmp_path / "small")
    manifest = json.loads((tmp_path / "small" / "manifest.json").read_text())
    assert list(manifest["models"]) == ["int4"] and manifest["packed"]["target"] == "int4"
    assert "onnx/model_q4.onnx" in result.kept
    assert {e["file"] for e in result.left_out} == {"onnx/model.onnx", "onnx/model_quantized.onnx"}
    assert "small (int4) graph" in result.lines()[0]
    for precision in (None, "int4", "smallest"):
        session = EdgeSession(tmp_path / "small", provider="cpu", precision=precision)
        assert session.precision == "int4" and session.model_key == "int4"
        assert session.embed(["a charming and moving comedy"]).shape == (1, 64)
    report = check_bundle(tmp_path / "small", max_texts=16)
    assert report.passed and report.reason.startswith("PASS: small (int4) graph"), report.reason
    archive = pack_bundle(bundle, "int4", tmp_path / "small.tar.gz")
    assert 0 < archive.bytes < pack_bundle(bundle, "portable", tmp_path / "int8.tar.gz").bytes


def test_pack_names_int4_among_the_targets_and_refuses_it_over_budget(bundle: Path, tmp_path: Path):
    from edgebert.runtime.pack import pack_bundle

    with pytest.raises(ConfigError, match="int4"):
        pack_bundle(bundle, "nowhere", tmp_path / "x")
    over = tmp_path / "over"
    shutil.copytree(bundle, over)
    value = json.loads((over / "manifest.json").read_text())
    value["models"]["int4"]["accuracy"]["within_budget"] = False
    (over / "manifest.json").write_text(json.dumps(value))
    with pytest.raises(ConfigError, match="small \\(int4\\) graph .* missed its accuracy budget"):
        pack_bundle(over, "int4", tmp_path / "small")
