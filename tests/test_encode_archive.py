"""A bundle as one file: ``edgebert export --archive`` writes a .tar.gz / .zip; EdgeSession, check and info
open it like the folder (extracted once into the cache, atomically); an archive that would write outside
its folder (``..``, absolute names, symlinks, hard links) is refused and leaves nothing behind."""

from __future__ import annotations

import io
import json
import os
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest

from distill_helpers import run_cli
from edgebert.errors import BundleError
from edgebert.runtime import EdgeSession
from edgebert.runtime.archive import bundle_folder, write_archive
from runtime_fixtures import make_tiny_model_dir, tiny_bundle

TEXTS = ["the film is good", "a dull movie"]


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    return tiny_bundle(tmp_path_factory.getbasetemp(), "embed")[1]


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("EDGEBERT_CACHE", str(root))
    return root / "bundles"


@pytest.mark.parametrize("name", ["tiny.tar.gz", "tiny.zip"])
def test_a_session_opens_an_archive_as_it_opens_the_folder(bundle, tmp_path, cache, name):
    archive = tmp_path / name
    packed = write_archive(bundle, archive)
    int8 = json.loads((bundle / "manifest.json").read_text())["models"]["int8"]["file"]
    assert "manifest.json" in packed and int8 in packed and ".edgebert-out.json" not in packed
    folder = EdgeSession(bundle, provider="cpu", precision="fp32")
    packed_session = EdgeSession(archive, provider="cpu", precision="fp32")
    assert packed_session.source == archive and packed_session.bundle_dir.parent == cache
    assert packed_session.describe()["source"] == str(archive)
    np.testing.assert_array_equal(packed_session.embed(TEXTS), folder.embed(TEXTS))
    # extracted once: a second session uses the same folder, untouched
    stamp = (packed_session.bundle_dir / "manifest.json").stat().st_mtime_ns
    again = EdgeSession(archive, provider="cpu", precision="fp32")
    assert again.bundle_dir == packed_session.bundle_dir
    assert (again.bundle_dir / "manifest.json").stat().st_mtime_ns == stamp
    assert [p.name for p in cache.iterdir()] == [packed_session.bundle_dir.name]     # no temp folder left


def test_a_changed_file_in_the_cache_is_caught_by_the_hashes_and_extracted_again(bundle, tmp_path, cache):
    archive = tmp_path / "tiny.tar.gz"
    write_archive(bundle, archive)
    folder = bundle_folder(archive)
    graph = json.loads((bundle / "manifest.json").read_text())["models"]["fp32"]["file"]
    original = (folder / graph).read_bytes()
    with open(folder / graph, "r+b") as fh:
        fh.seek(200)
        byte = fh.read(1)
        fh.seek(200)
        fh.write(bytes([byte[0] ^ 1]))
    EdgeSession(archive, provider="cpu", precision="fp32")
    assert (folder / graph).read_bytes() == original


def _tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


@pytest.mark.parametrize("members, message", [
    ([(_member("b/manifest.json"), b"{}"), (_member("b/../../evil.txt"), b"x")], r"'b/\.\./\.\./evil.txt', a path "
                                                                                  "outside the archive's folder"),
    ([(_member("/tmp/evil.txt"), b"x")], r"'/tmp/evil.txt', a path outside"),
    ([(_member("b/manifest.json"), b"{}"), (_member("b/model.onnx", tarfile.SYMTYPE, "/etc/passwd"), None)],
     r"'b/model.onnx', a symlink to '/etc/passwd'"),
    ([(_member("b/manifest.json"), b"{}"), (_member("b/x", tarfile.LNKTYPE, "b/manifest.json"), None)],
     r"'b/x', a hard link to 'b/manifest.json'"),
    ([(_member("b/manifest.json"), b"{}"), (_member("b/manifest.json"), b"{}")], "holds 'b/manifest.json' twice"),
    ([(_member("b/model.onnx"), b"x")], "holds no manifest.json at its top or in one top folder"),
])
def test_unsafe_tar_archives_are_refused_and_leave_nothing(tmp_path, cache, members, message):
    archive = _tar(tmp_path / "bad.tar.gz", members)
    with pytest.raises(BundleError, match=message):
        EdgeSession(archive)
    assert not (tmp_path / "evil.txt").exists() and not Path("/tmp/evil.txt").exists()
    assert not cache.exists() or list(cache.iterdir()) == []


def test_unsafe_zip_archives_are_refused(tmp_path, cache):
    archive = tmp_path / "bad.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("b/manifest.json", "{}")
        link = zipfile.ZipInfo("b/model.onnx")
        link.external_attr = (0o120777 << 16)            # a symlink, as `zip --symlinks` stores one
        zf.writestr(link, "/etc/passwd")
    with pytest.raises(BundleError, match="'b/model.onnx', a symlink"):
        EdgeSession(archive)
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("../outside/manifest.json", "{}")
    with pytest.raises(BundleError, match="a path outside the archive's folder"):
        bundle_folder(archive)
    (tmp_path / "not-an-archive.txt").write_text("hello")
    with pytest.raises(BundleError, match="neither a bundle folder nor a bundle archive"):
        EdgeSession(tmp_path / "not-an-archive.txt")
    (tmp_path / "broken.tar.gz").write_bytes(b"not gzip at all")
    with pytest.raises(BundleError, match="is not a readable tar.gz archive: not a gzip file"):
        EdgeSession(tmp_path / "broken.tar.gz")
    assert not (tmp_path / "outside").exists()


def test_export_archive_then_check_and_info_open_it(tmp_path, cache, capsys):
    model = make_tiny_model_dir(tmp_path / "model")
    out, archive = tmp_path / "bundles" / "tiny", tmp_path / "bundles" / "tiny.tar.gz"
    code, stdout, err = run_cli(capsys, "export", model, "--out", out, "--int8", "--archive", archive)
    assert code == 0, err
    assert f"archive: {archive} (" in stdout and "pooling: not stated by the model" in stdout
    with tarfile.open(archive) as tar:
        names = sorted(tar.getnames())
    assert "tiny/manifest.json" in names and all(n.startswith("tiny/") for n in names)
    assert all(m.mode == 0o644 and m.isreg() for m in tarfile.open(archive).getmembers())
    # without a terminal, export says what it does, one line per step
    assert "export: tracing to ONNX" in stdout and "export: bundle written" in stdout
    code, stdout, err = run_cli(capsys, "check", archive)
    assert code == 0 and stdout.strip().splitlines()[-1].startswith("PASS: "), stdout + err
    code, stdout, err = run_cli(capsys, "info", archive)
    assert code == 0 and f"bundle: {archive} (archive, extracted to {cache}" in stdout
    assert "default precision here: int8 (default: the best graph here" in stdout
    # the archive follows the output rule: never replaced without --overwrite, never inside --out
    code, _, err = run_cli(capsys, "export", model, "--out", tmp_path / "other", "--archive", archive)
    assert code == 2 and f"--archive {archive} already holds the output of `edgebert export`" in err
    assert not (tmp_path / "other").exists()
    code, _, err = run_cli(capsys, "export", model, "--out", out, "--overwrite", "--archive", out / "x.zip")
    assert code == 2 and "is inside --out" in err
    code, _, err = run_cli(capsys, "export", model, "--out", tmp_path / "o3", "--archive", tmp_path / "b.rar")
    assert code == 2 and "must end in .tar.gz, .tgz, .zip" in err
    (tmp_path / "mine.zip").write_text("the user's file")
    code, _, err = run_cli(capsys, "export", model, "--out", tmp_path / "o4", "--archive", tmp_path / "mine.zip")
    assert code == 2 and "was not written by `edgebert export --archive`: it is not a readable zip archive" in err
    assert (tmp_path / "mine.zip").read_text() == "the user's file"
    assert json.loads((out / "manifest.json").read_text())["task"] == "embed" and os.path.isfile(archive)
