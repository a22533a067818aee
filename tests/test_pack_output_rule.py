"""``edgebert pack``'s ``--out`` follows the one output rule (issue 49): ``--overwrite`` replaces only what an
earlier ``pack`` wrote there and refuses, naming them, the user's files (beside the bundle or inside its
folders); the bundle being packed is never its own ``--out``; an export's archive is not pack's to replace;
a graph pack does not take (the OpenVINO one) is named with the targets it does take."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from distill_helpers import assert_one_line_error, run_cli
from edgebert.runtime.archive import write_archive
from runtime_fixtures import tiny_bundle


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    return tiny_bundle(tmp_path_factory.getbasetemp(), "embed")[1]


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("EDGEBERT_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _pack(capsys, source: Path, out: Path, *extra: str) -> tuple[int, str, str]:
    return run_cli(capsys, "pack", source, "--target", "portable", "--out", out, *extra)


def test_pack_overwrite_replaces_its_own_files_and_never_the_users(bundle, tmp_path, capsys):
    out = tmp_path / "device"
    code, _, err = _pack(capsys, bundle, out)
    assert code == 0, err
    packed = _snapshot(out)
    assert "onnx/model_quantized.onnx" in packed and "manifest.json" in packed
    for mine in ("notes.txt", "onnx/mine.txt", "1_Pooling/mine.txt"):        # beside the bundle, inside its folders
        (out / mine).write_text("the user's notes")
        code, _, err = _pack(capsys, bundle, out, "--overwrite")
        assert_one_line_error(code, err, f"{out} holds files `edgebert pack` did not write ({mine}); "
                                         "--overwrite never deletes them", "move them away")
        assert (out / mine).read_text() == "the user's notes"
        assert {k: v for k, v in _snapshot(out).items() if k != mine} == packed
        (out / mine).unlink()
    code, stdout, err = _pack(capsys, bundle, out, "--overwrite")          # its own output alone: replaced
    assert code == 0 and f"packed: {out}" in stdout, err
    assert set(_snapshot(out)) == set(packed)
    assert json.loads((out / "manifest.json").read_text())["packed"]["target"] == "portable"


def test_a_folder_pack_did_not_mark_is_never_taken_for_its_own(bundle, tmp_path, capsys):
    # a web app's folder holding a manifest.json: no pack marker, so nothing there is pack's to delete
    site = tmp_path / "site"
    site.mkdir()
    (site / "manifest.json").write_text('{"name": "my app"}')
    (site / "index.html").write_text("<html></html>")
    before = _snapshot(site)
    code, _, err = _pack(capsys, bundle, site, "--overwrite")
    assert_one_line_error(code, err, f"{site} is not empty and was not written by `edgebert pack`")
    assert _snapshot(site) == before


def test_the_bundle_being_packed_is_never_its_own_out(bundle, tmp_path, capsys):
    archive = tmp_path / "fleet.tar.gz"
    write_archive(bundle, archive)
    before = archive.read_bytes()
    for out in (archive, tmp_path / "sub" / ".." / "fleet.tar.gz"):       # the same file, by another path
        (tmp_path / "sub").mkdir(exist_ok=True)
        code, _, err = _pack(capsys, archive, out, "--overwrite")
        assert_one_line_error(code, err, f"--out {out} is the bundle being packed", "write the packed bundle to a "
                                                                                   "new path")
        assert archive.read_bytes() == before
    # a one-device archive packed again onto itself
    device = tmp_path / "device.zip"
    assert _pack(capsys, archive, device)[0] == 0
    packed = device.read_bytes()
    code, _, err = _pack(capsys, device, device, "--overwrite")
    assert_one_line_error(code, err, f"--out {device} is the bundle being packed")
    assert device.read_bytes() == packed
    # a folder pack wrote, now holding the bundle to pack
    folder = tmp_path / "folder"
    assert _pack(capsys, bundle, folder)[0] == 0
    inside = folder / "fleet.tar.gz"
    shutil.copy(archive, inside)
    code, _, err = _pack(capsys, inside, folder, "--overwrite")
    assert_one_line_error(code, err, f"--out {folder} holds the bundle being packed ({inside})")
    assert inside.read_bytes() == before


def test_an_export_archive_is_not_packs_to_replace(bundle, tmp_path, capsys):
    archive = tmp_path / "full.tar.gz"
    write_archive(bundle, archive)
    before = archive.read_bytes()
    code, _, err = _pack(capsys, bundle, archive, "--overwrite")
    assert_one_line_error(code, err, f"--out {archive} already exists and was not written by `edgebert pack`")
    assert archive.read_bytes() == before


def test_packing_the_openvino_graph_says_what_pack_takes(bundle, tmp_path, capsys):
    source = shutil.copytree(bundle, tmp_path / "ov")
    manifest = json.loads((source / "manifest.json").read_text())
    entry = {**manifest["models"]["int8"], "engine": "openvino", "providers": ["openvino"], "target": "openvino",
             "file": "openvino/model.xml", "weights": "openvino/model.bin"}
    manifest["models"]["int8-openvino"] = entry
    (source / "manifest.json").write_text(json.dumps(manifest, indent=2))
    code, _, err = run_cli(capsys, "pack", source, "--target", "openvino", "--out", tmp_path / "o")
    assert_one_line_error(code, err, f"pack takes onnxruntime CPU INT8 graphs, and the 'openvino' graph of {source} "
                                     "is an OpenVINO graph (its targets pack takes: portable)",
                          "pass --target one of them")
    assert "has no INT8 graph" not in err and not (tmp_path / "o").exists()
