"""The bundle that fits the device: one file per distinct graph, one-device bundles (``edgebert pack``)
checked without the fp32 graph, sessions that hash and load only what they use, and the ``.ort`` format."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from edgebert.exporters import ExportConfig, export_bundle
from edgebert.runtime import EdgeSession
from edgebert.runtime.check import check_bundle

from export_fixtures import make_model_dir

TARGETS = ("portable", "x86-vnni", "arm64")


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("one_device")


@pytest.fixture(scope="module")
def fleet(work) -> Path:
    """A tiny embed bundle exported for three targets (x86-vnni and arm64 quantize to the same bytes)."""
    model_dir = make_model_dir(work / "model", "BertModel", seed=21, initializer_range=0.3)
    return export_bundle(ExportConfig(model_dir=model_dir, out_dir=work / "fleet", int8=True, int8_targets=TARGETS,
                                      max_accuracy_loss=0.5, validation_batch_sizes=(1,),
                                      validation_seq_lens=(7,))).bundle_dir


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _copy(bundle: Path, to: Path) -> Path:
    shutil.copytree(bundle, to)
    return to


# --------------------------------------------------------------------------- one file per distinct graph
def test_equal_graphs_share_one_file_and_every_target_opens(fleet):
    manifest = json.loads((fleet / "manifest.json").read_text())
    graphs = sorted(fleet.rglob("*.onnx"))
    digests = [_sha(p) for p in graphs]
    assert len(set(digests)) == len(digests) == 3          # fp32, portable, and one for x86-vnni + arm64
    files = {k: m["file"] for k, m in manifest["models"].items()}
    assert files["int8-arm64"] == files["int8-x86-vnni"] and "x86-vnni" in files["int8-x86-vnni"]
    assert manifest["models"]["int8-arm64"]["same_graph_as"] == ["int8-x86-vnni"]
    assert not [p for p in graphs if "arm64" in p.name]
    for target in TARGETS:
        session = EdgeSession(fleet, "cpu", int8_target=target)
        assert session.int8_choice.target == target
        assert session.embed(["a charming film"]).shape == (1, 64)
    assert check_bundle(fleet, int8_target="arm64", max_texts=24).passed


def test_an_old_bundle_with_one_file_per_target_still_opens(fleet, tmp_path):
    old = _copy(fleet, tmp_path / "old")
    manifest = json.loads((old / "manifest.json").read_text())
    shutil.copyfile(old / manifest["models"]["int8-x86-vnni"]["file"], old / "model.int8-arm64.onnx")
    entry = manifest["models"]["int8-arm64"]
    entry["file"] = "model.int8-arm64.onnx"
    for key in ("int8-arm64", "int8-x86-vnni"):
        manifest["models"][key].pop("same_graph_as")
    manifest["files"]["model.int8-arm64.onnx"] = _sha(old / "model.int8-arm64.onnx")
    (old / "manifest.json").write_text(json.dumps(manifest))
    session = EdgeSession(old, "cpu", int8_target="arm64")
    assert session.model_file.name == "model.int8-arm64.onnx"
    assert check_bundle(old, int8_target="arm64", max_texts=24).passed
