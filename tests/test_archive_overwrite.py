"""``export --archive --overwrite`` replaces only an archive exactly as edgebert wrote it (issue 49): the stamp
vouches for the manifest and the manifest for every file, so an archive whose member was edited since (its
size or its bytes), or with another archive or other bytes before or after it, is the user's and is kept;
and an archive that loses its publish race says what the run did publish (the ``--out`` folder)."""

from __future__ import annotations

import copy
import io
import tarfile
import zipfile
from pathlib import Path

import pytest

from distill_helpers import assert_one_line_error, run_cli
from edgebert.runtime.archive import foreign_archive, write_archive
from runtime_fixtures import make_tiny_model_dir, tiny_bundle

CHANGED = "archive with edgebert's stamp, changed since it was written"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    return tiny_bundle(tmp_path_factory.getbasetemp(), "embed")[1]


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("EDGEBERT_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _edited_tar(archive: Path, to: Path, edit) -> Path:
    """``archive`` written again member by member, its stamp (the pax header) kept, each member's bytes
    passed through ``edit(name, data)``."""
    with tarfile.open(archive) as tar:
        stamp = dict(tar.pax_headers)
        members = [(copy.copy(m), tar.extractfile(m).read()) for m in tar.getmembers()]
    with tarfile.open(to, "w:gz", format=tarfile.PAX_FORMAT, pax_headers=stamp) as tar:
        for info, data in members:
            data = edit(info.name, data)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return to


def _edited_zip(archive: Path, to: Path, edit) -> Path:
    with zipfile.ZipFile(archive) as zf:
        stamp = zf.comment
        members = [(info, zf.read(info)) for info in zf.infolist()]
    with zipfile.ZipFile(to, "w") as zf:
        for info, data in members:
            zf.writestr(info, edit(info.filename, data))
        zf.comment = stamp
    return to


def _grown(name: str, data: bytes) -> bytes:
    return data + b" " if name.endswith("tokenizer.json") else data


def _flipped(name: str, data: bytes) -> bytes:         # the same size, one byte changed
    return data[:-1] + bytes([data[-1] ^ 1]) if name.endswith("tokenizer.json") else data


@pytest.mark.parametrize("suffix", ["tar.gz", "zip"])
def test_only_an_archive_exactly_as_written_is_edgeberts(bundle, tmp_path, suffix):
    ours, other = tmp_path / f"ours.{suffix}", tmp_path / f"other.{suffix}"
    write_archive(bundle, ours)
    write_archive(bundle, other)
    assert foreign_archive(ours) is None and foreign_archive(ours, "export") is None
    edit = _edited_tar if suffix == "tar.gz" else _edited_zip
    assert foreign_archive(edit(ours, tmp_path / f"same.{suffix}", lambda n, d: d)) is None   # the same files
    grown = foreign_archive(edit(ours, tmp_path / f"grown.{suffix}", _grown))
    assert CHANGED in grown and "tokenizer.json is" in grown and "its manifest.json says" in grown, grown
    flipped = foreign_archive(edit(ours, tmp_path / f"flipped.{suffix}", _flipped))
    assert CHANGED in flipped and "tokenizer.json does not match its manifest.json hash" in flipped, flipped
    appended = tmp_path / f"appended.{suffix}"                 # cat ours other > appended
    appended.write_bytes(ours.read_bytes() + other.read_bytes())
    where = "after" if suffix == "tar.gz" else "before"       # a zip is read from its end: `other`, after `ours`
    assert foreign_archive(appended) == f"a {suffix} {CHANGED} (other bytes lie {where} the archive edgebert wrote)"
    if suffix == "zip":
        trailing = tmp_path / "trailing.zip"
        trailing.write_bytes(ours.read_bytes() + b"the user's bytes")
        assert "(other bytes lie after the archive edgebert wrote)" in foreign_archive(trailing)


def test_export_archive_overwrite_keeps_an_archive_changed_since_export(tmp_path, capsys):
    model = make_tiny_model_dir(tmp_path / "model")
    out, archive = tmp_path / "b", tmp_path / "b.tar.gz"
    code, _, err = run_cli(capsys, "export", model, "--out", out, "--archive", archive)
    assert code == 0, err
    user = tmp_path / "user.tar.gz"
    with tarfile.open(user, "w:gz") as tar:
        info = tarfile.TarInfo("notes.txt")
        info.size = 5
        tar.addfile(info, io.BytesIO(b"mine\n"))
    archive.write_bytes(archive.read_bytes() + user.read_bytes())           # cat b.tar.gz user.tar.gz > b.tar.gz
    before = archive.read_bytes()
    code, _, err = run_cli(capsys, "export", model, "--out", out, "--overwrite", "--archive", archive)
    assert_one_line_error(code, err, f"--archive {archive} already exists and was not written by `edgebert export "
                                     f"--archive`: it is a tar.gz {CHANGED} (other bytes lie after the archive "
                                     "edgebert wrote)", "name a new file")
    assert archive.read_bytes() == before


def test_an_archive_that_loses_its_race_names_the_folder_this_run_published(tmp_path, capsys, monkeypatch):
    import edgebert.runtime.archive as archive_module

    model = make_tiny_model_dir(tmp_path / "model")
    out, archive = tmp_path / "b", tmp_path / "b.zip"
    real = archive_module.write_archive

    def write_then_another_run_publishes(folder, tmp, name=None):
        written = real(folder, tmp, name=name)
        archive.write_text("another run's archive")
        return written

    monkeypatch.setattr(archive_module, "write_archive", write_then_another_run_publishes)
    code, _, err = run_cli(capsys, "export", model, "--out", out, "--archive", archive)
    assert_one_line_error(code, err, f"another run wrote {archive} after this run checked it (this run published the "
                                     f"bundle folder {out}, not {archive}; choose a new or empty output path)")
    assert "published nothing" not in err
    assert (out / "manifest.json").is_file() and archive.read_text() == "another run's archive"
