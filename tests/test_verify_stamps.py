"""A session hashes what it loads once: an unchanged file keeps its hash from a stamp (``files.stamps``), any
change to the file hashes it again, ``edgebert check`` never trusts a stamp; the CPU probe's verdict is kept
per onnxruntime build and CPU (``hostcpu.remembered_probe``); a blank ``EDGEBERT_CACHE`` is never the
current folder."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from edgebert.errors import BundleError, ConfigError
from edgebert.files import stamps
from edgebert.runtime import EdgeSession, hostcpu
from edgebert.runtime.check import check_bundle
from runtime_fixtures import tiny_bundle


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    return tiny_bundle(tmp_path_factory.getbasetemp(), "embed")[1]


@pytest.fixture
def hashed(tmp_path, monkeypatch) -> list[str]:
    """A fresh cache, stamps recorded at once (no settling wait), and the files really hashed."""
    monkeypatch.setenv("EDGEBERT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(stamps, "SETTLE_NS", -1)
    seen: list[str] = []
    real = stamps.sha256_file
    monkeypatch.setattr(stamps, "sha256_file", lambda path: seen.append(Path(path).name) or real(path))
    return seen


def test_a_second_session_does_not_hash_unchanged_files_again(bundle, hashed):
    first = EdgeSession(bundle, threads=1)
    # what it loads, nothing else (the manifest's hash names the remembered graph-I/O check)
    assert sorted(hashed) == sorted({"tokenizer.json", first.model_file.name, "manifest.json"})
    hashed.clear()
    second = EdgeSession(bundle, threads=1)
    assert hashed == [] and second.model_file == first.model_file
    assert float(abs(first.embed(["a film"]) - second.embed(["a film"])).max()) == 0.0


def test_a_changed_file_is_hashed_again_and_refused(tmp_path, hashed):
    bundle = tiny_bundle(tmp_path / "own", "embed")[1]
    session = EdgeSession(bundle, threads=1)
    graph = session.model_file
    hashed.clear()
    data = bytearray(graph.read_bytes())
    data[-1] ^= 1                                    # same size, one bit: a damaged copy
    graph.write_bytes(bytes(data))
    with pytest.raises(BundleError, match="does not match its manifest hash"):
        EdgeSession(bundle, threads=1)
    assert graph.name in hashed


def test_a_stamp_that_disagrees_with_the_manifest_is_hashed_again_not_believed(tmp_path, hashed):
    """Issue 49: a wrong stamp record for a good file made every session refuse the bundle ("re-export")."""
    bundle = tiny_bundle(tmp_path / "own", "embed")[1]
    good = {name: hashlib.sha256((bundle / name).read_bytes()).hexdigest() for name in ("tokenizer.json",
                                                                                          "onnx/model.onnx")}
    identities = {name: stamps._identity(os.stat(bundle / name)) for name in good}
    for identity in identities.values():
        stamps.keep(identity, sha256="0" * 64)
    session = EdgeSession(bundle, threads=1, precision="fp32")    # the files are hashed again: they are right
    assert session.model_file.name == "model.onnx" and {"tokenizer.json", "model.onnx"} <= set(hashed)
    assert {name: stamps.recall(i)["sha256"] for name, i in identities.items()} == good     # and stamped so
    hashed.clear()
    EdgeSession(bundle, threads=1, precision="fp32")
    assert hashed == []                                           # the rewritten stamps are believed again
    # a stamp that agrees with the manifest for a file whose bytes changed in place (inode, size, times kept)
    # is what stamps cannot see: `edgebert check` hashes every byte
    assert check_bundle(bundle, max_texts=8).passed
    os.environ["EDGEBERT_STAMPS"] = "0"
    try:
        EdgeSession(bundle, threads=1)                 # stamps off: hashed, and right
    finally:
        del os.environ["EDGEBERT_STAMPS"]


@pytest.mark.parametrize("value, on", [("0", False), ("false", False), ("OFF", False), (" no ", False),
                                       ("1", True), ("True", True), ("yes", True), ("on", True), ("", True)])
def test_stamps_are_turned_off_by_the_usual_spellings(value, on, tmp_path, hashed, monkeypatch):
    monkeypatch.setenv("EDGEBERT_STAMPS", value)
    assert stamps.stamps_enabled() is on
    graph = tmp_path / "graph.bin"
    graph.write_bytes(b"bytes")
    stamps.stamped_sha256(graph)
    assert (stamps.stamped(graph) is not None) is on and (tmp_path / "cache" / "stamps").is_dir() is on


@pytest.mark.parametrize("value", ["2", "maybe", "of"])
def test_another_stamps_value_is_one_line_naming_the_variable(value, bundle, monkeypatch, capsys):
    from distill_helpers import assert_one_line_error, run_cli

    monkeypatch.setenv("EDGEBERT_STAMPS", value)
    with pytest.raises(ConfigError, match=f"EDGEBERT_STAMPS='{value}' is neither on nor off"):
        stamps.stamps_enabled()
    code, _, err = run_cli(capsys, "check", bundle)
    assert_one_line_error(code, err, f"EDGEBERT_STAMPS='{value}' is neither on nor off",
                          "set it to 0, false, no, off to turn stamps off, or to 1, true, yes, on or nothing")


def test_a_file_younger_than_the_settling_time_is_not_stamped(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEBERT_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "graph.bin"
    path.write_bytes(b"weights" * 1000)
    assert stamps.stamped_sha256(path) == hashlib.sha256(path.read_bytes()).hexdigest()
    assert not (tmp_path / "cache" / "stamps").exists()       # written just now: same clock tick possible
    monkeypatch.setattr(stamps, "SETTLE_NS", -1)
    stamps.stamped_sha256(path)
    records = list((tmp_path / "cache" / "stamps").iterdir())
    assert len(records) == 1 and json.loads(records[0].read_text())["sha256"] == hashlib.sha256(
        path.read_bytes()).hexdigest()


def test_the_probe_verdict_is_kept_per_onnxruntime_and_cpu(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEBERT_CACHE", str(tmp_path / "cache"))
    calls: list[bool] = []
    monkeypatch.setattr(hostcpu, "probe_u8s8", lambda precise=False: calls.append(precise) or "saturating")
    isa = {"avx2": True, "avx512_vnni": False}
    assert hostcpu.remembered_probe("x86_64", isa, False) == "saturating" and calls == [False]
    assert hostcpu.remembered_probe("x86_64", isa, False) == "saturating" and calls == [False]   # kept
    assert hostcpu.remembered_probe("x86_64", {**isa, "avx512_vnni": True}, False) == "saturating"
    assert calls == [False, False]                       # other CPU flags: probed again
    assert hostcpu.remembered_probe("x86_64", isa, True) == "saturating" and calls == [False, False, True]
    monkeypatch.setattr(hostcpu, "probe_identity", lambda *a: json.dumps(["emulated cpuid", *a]))
    hostcpu.remembered_probe("x86_64", isa, False)
    assert calls == [False, False, True, False]          # what the CPU tells this process differs: probed again


@pytest.mark.parametrize("value", ["", "  "])
def test_a_blank_cache_variable_is_the_default_folder_for_every_cache(value, monkeypatch, tmp_path):
    from edgebert.files.user_cache import cache_root
    from edgebert.runtime.providers import trt_cache_dirs
    from edgebert.runtime.trt_profile import TrtProfile

    monkeypatch.setenv("EDGEBERT_CACHE", value)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model.onnx").write_bytes(b"graph")
    assert cache_root() == Path.home() / ".cache" / "edgebert"
    engines, timing = trt_cache_dirs(tmp_path / "model.onnx", "fp16", TrtProfile.parse("min=1x1,opt=1x8,max=2x16"))
    home_cache = Path.home() / ".cache" / "edgebert" / "tensorrt"
    assert engines.is_absolute() and engines.parent == home_cache and timing == home_cache / "timing"


def test_the_graph_io_check_is_kept_for_the_same_graph_and_manifest_bytes(tmp_path, hashed, monkeypatch):
    import edgebert.bundle.reader as reader

    bundle = tiny_bundle(tmp_path / "own", "embed")[1]
    checked = []
    real = reader.check_graph_io
    monkeypatch.setattr(reader, "check_graph_io", lambda *a: checked.append(a[2]) or real(*a))
    EdgeSession(bundle, threads=1)
    EdgeSession(bundle, threads=1)
    assert len(checked) == 1                                   # the same graph and manifest bytes: checked once
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["outputs"][0]["shape"][-1] += 1                   # a manifest that no longer describes the graph
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match="last_hidden_state"):
        EdgeSession(bundle, threads=1)
    assert len(checked) == 2


def test_a_first_open_hashes_the_graph_beside_its_load_and_a_bad_graph_still_fails_the_open(tmp_path, hashed,
                                                                                              monkeypatch):
    import threading

    bundle = tiny_bundle(tmp_path / "own", "embed")[1]
    where: dict[str, str] = {}
    real = stamps.sha256_file
    monkeypatch.setattr(stamps, "sha256_file",
                        lambda path: where.setdefault(Path(path).name, threading.current_thread().name) and real(path))
    session = EdgeSession(bundle, threads=1)
    assert where[session.model_file.name] == "edgebert-verify"        # hashed on the second thread
    assert where["tokenizer.json"] == "MainThread"
    where.clear()
    EdgeSession(bundle, threads=1)
    assert where == {}                                                # stamped: nothing hashed, no thread
    graph = session.model_file
    data = bytearray(graph.read_bytes())
    data[len(data) // 2] ^= 1
    graph.write_bytes(bytes(data))
    with pytest.raises(BundleError, match="does not match its manifest hash"):
        EdgeSession(bundle, threads=1)
    assert where[graph.name] == "edgebert-verify"


def test_check_on_the_device_leaves_stamps_so_the_apps_first_open_hashes_nothing(tmp_path, hashed, monkeypatch):
    import edgebert.bundle.reader as reader

    bundle = tiny_bundle(tmp_path / "own", "embed")[1]
    assert check_bundle(bundle, max_texts=8).passed
    assert {"tokenizer.json", "manifest.json"} <= set(hashed) and len(hashed) >= 4     # check hashed every byte
    hashed.clear()
    checked = []
    real = reader.check_graph_io
    monkeypatch.setattr(reader, "check_graph_io", lambda *a: checked.append(a[2]) or real(*a))
    session = EdgeSession(bundle, threads=1)
    assert hashed == [] and checked == []                 # the first open after check: nothing hashed or read
    assert session.embed(["a film"]).shape[0] == 1
    assert check_bundle(bundle, max_texts=8).passed and len(hashed) >= 3                # check itself: every byte again
