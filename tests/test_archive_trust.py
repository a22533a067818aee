"""Archives that are not edgebert's, and cache entries that are not the archive's: ``export --archive``
replaces only an archive it wrote (its one top folder, its manifest, its stamp); an archive is hashed and
extracted through one open file, and its cache entry is used only while it holds exactly the archive's
manifest and files (else it is extracted again); only the files the manifest names are extracted, at
the sizes it records, and an archive that expands out of proportion is refused before anything is
written; a damaged archive is one ``BundleError`` naming it."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import struct
import tarfile
import zipfile
from pathlib import Path

import pytest

from distill_helpers import run_cli
from edgebert.errors import BundleError
from edgebert.runtime import EdgeSession
from edgebert.runtime.archive import bundle_folder, foreign_archive, write_archive
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


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _manifest(bundle: Path) -> dict:
    return json.loads((bundle / "manifest.json").read_text())


def _files(folder: Path) -> dict[str, Path]:
    """``{posix name: path}`` of the files under ``folder``, hidden ones aside."""
    return {p.relative_to(folder).as_posix(): p for p in sorted(folder.rglob("*"))
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts)}


def _other_bundle(bundle: Path, where: Path) -> Path:
    """A second bundle: the same files, a manifest that says something else (so its archive differs)."""
    shutil.copytree(bundle, where)
    manifest = json.loads((where / "manifest.json").read_text())
    manifest["source"] = {**manifest["source"], "note": "bundle B"}
    (where / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return where


def _user_archive(path: Path, names: dict[str, bytes]) -> Path:
    if path.name.endswith(".zip"):
        with zipfile.ZipFile(path, "w") as zf:
            for name, data in names.items():
                zf.writestr(name, data)
    else:
        with tarfile.open(path, "w:gz") as tar:
            for name, data in names.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


# --------------------------------------------------------------------------- 1: the user's archives
@pytest.mark.parametrize("name", ["backup.tar.gz", "backup.zip"])
@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_export_never_replaces_an_archive_it_did_not_write(bundle, tmp_path, cache, capsys, name, overwrite):
    model = make_tiny_model_dir(tmp_path / "model")
    backup = _user_archive(tmp_path / name, {"webapp/public/manifest.json": b'{"name": "my app"}',
                                             "webapp/index.html": b"<html></html>"})
    before = backup.read_bytes()
    code, _, err = run_cli(capsys, "export", model, "--out", tmp_path / "b", "--archive", backup, *overwrite)
    assert code == 2 and backup.read_bytes() == before and not (tmp_path / "b").exists()
    assert f"--archive {backup} already exists and was not written by `edgebert export --archive`: it is a " \
           f"{'zip' if name.endswith('zip') else 'tar.gz'} archive without edgebert's stamp" in err
    assert "'webapp/public/manifest.json'" in err and "already holds the output" not in err
    assert "name a new file" in err and len(err.strip().splitlines()) == 1


def test_only_what_export_archive_writes_counts_as_edgeberts(bundle, tmp_path):
    ours = tmp_path / "ours.tar.gz"
    write_archive(bundle, ours)
    assert foreign_archive(ours) is None
    write_archive(bundle, tmp_path / "ours.zip")
    assert foreign_archive(tmp_path / "ours.zip") is None
    # the same bundle folder tarred by hand: a bundle, but not export's archive (no stamp)
    by_hand = tmp_path / "by-hand.tar.gz"
    with tarfile.open(by_hand, "w:gz") as tar:
        tar.add(bundle, arcname="tiny")
    assert "without edgebert's stamp" in foreign_archive(by_hand)
    # export's archive with one more file added: its stamp no longer describes it
    changed = tmp_path / "changed.zip"
    shutil.copy(tmp_path / "ours.zip", changed)
    with zipfile.ZipFile(changed, "a") as zf:
        zf.writestr("notes/todo.txt", "mine")
    assert "with edgebert's stamp, changed since it was written" in foreign_archive(changed)
    assert "'notes/todo.txt'" in foreign_archive(changed)
    (tmp_path / "text.tar.gz").write_text("not an archive")
    assert foreign_archive(tmp_path / "text.tar.gz").startswith("not a readable tar.gz archive")


# --------------------------------------------------------------------------- 2: one archive, one entry
@pytest.mark.parametrize("name", ["a.tar.gz", "a.zip"])
def test_a_file_replaced_between_hashing_and_extraction_never_fills_the_entry(bundle, tmp_path, cache, monkeypatch,
                                                                              name):
    a, b = tmp_path / name, tmp_path / f"b{name[1:]}"
    write_archive(bundle, a, name="tiny" + name[1:])
    write_archive(_other_bundle(bundle, tmp_path / "bundle-b"), b, name="tiny" + name[1:])
    genuine_a = a.read_bytes()
    manifest_a = (bundle / "manifest.json").read_bytes()
    # the download of B lands on A's path by rename just as the archive is opened for extraction
    real_tar, real_zip = tarfile.open, zipfile.ZipFile
    swapped = []

    def swap():
        if not swapped:
            swapped.append(True)
            os.replace(b, a)

    def tar_open(*args, **kwargs):
        swap()
        return real_tar(*args, **kwargs)

    class Zip(real_zip):
        def __init__(self, *args, **kwargs):
            swap()
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(tarfile, "open", tar_open)
    monkeypatch.setattr(zipfile, "ZipFile", Zip)
    folder = bundle_folder(a)
    monkeypatch.undo()
    assert swapped
    # whatever was extracted is the archive whose digest names the entry
    entries = {p.name: (p / "manifest.json").read_bytes() for p in cache.iterdir() if not p.name.startswith(".")}
    digest_a = hashlib.sha256(genuine_a).hexdigest()[:20]
    for entry, manifest in entries.items():
        assert (manifest == manifest_a) == entry.endswith(digest_a), entry
    assert (folder / "manifest.json").read_bytes() == manifest_a
    # the genuine A, back in place, runs A's bundle
    a.write_bytes(genuine_a)
    assert (bundle_folder(a) / "manifest.json").read_bytes() == manifest_a


def test_a_file_rewritten_in_place_while_it_is_read_is_refused(bundle, tmp_path, cache, monkeypatch):
    a = tmp_path / "a.tar.gz"
    write_archive(bundle, a, name="tiny.tar.gz")
    b = write_archive(_other_bundle(bundle, tmp_path / "bundle-b"), tmp_path / "b.tar.gz", name="tiny.tar.gz")
    assert b
    real_tar = tarfile.open

    def tar_open(*args, **kwargs):          # the same file (same inode) gets B's bytes as extraction starts
        with open(a, "r+b") as fh:
            fh.write((tmp_path / "b.tar.gz").read_bytes())
            fh.truncate()
        return real_tar(*args, **kwargs)

    monkeypatch.setattr(tarfile, "open", tar_open)
    with pytest.raises(BundleError, match="a.tar.gz"):
        bundle_folder(a)
    monkeypatch.undo()
    assert not cache.exists() or [p for p in cache.iterdir() if not p.name.startswith(".")] == []


def test_a_cache_entry_holding_another_bundle_is_extracted_again(bundle, tmp_path, cache):
    archive = tmp_path / "tiny.tar.gz"
    write_archive(bundle, archive)
    folder = bundle_folder(archive)
    other = _other_bundle(bundle, tmp_path / "bundle-b")
    # someone puts B's complete bundle into A's entry: every hash in it checks out against its own manifest
    shutil.copy(other / "manifest.json", folder / "manifest.json")
    assert bundle_folder(archive) == folder
    assert (folder / "manifest.json").read_bytes() == (bundle / "manifest.json").read_bytes()
    # a changed graph in the entry: extracted again, the session runs the archive's graph
    graph = _manifest(bundle)["models"]["fp32"]["file"]
    with open(folder / graph, "r+b") as fh:
        fh.seek(200)
        byte = fh.read(1)
        fh.seek(200)
        fh.write(bytes([byte[0] ^ 1]))
    session = EdgeSession(archive, provider="cpu", precision="fp32")
    assert session.bundle_dir == folder and _sha(folder / graph) == _sha(bundle / graph)
    assert [p.name for p in cache.iterdir()] == [folder.name]        # nothing set aside is left


# --------------------------------------------------------------------------- 5: only what the manifest names
def _repack(archive: Path, bundle: Path, top: str, extra: dict[str, bytes] | None = None,
            replace: dict[str, bytes] | None = None, zeros: tuple[str, int] | None = None) -> Path:
    """A .tar.gz of ``bundle``'s files under ``top/`` with ``extra`` files added, some ``replace``d, and
    ``zeros`` = (name, size): a member of that many zero bytes streamed in (never held in memory)."""
    with tarfile.open(archive, "w:gz") as tar:
        for name, path in _files(bundle).items():
            data = (replace or {}).get(name, path.read_bytes())
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, data in (extra or {}).items():
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        if zeros:
            info = tarfile.TarInfo(f"{top}/{zeros[0]}")
            info.size = zeros[1]
            tar.addfile(info, _Zeros(zeros[1]))
    return archive


class _Zeros(io.RawIOBase):
    def __init__(self, size: int):
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = min(len(buffer), self.left)
        buffer[:n] = bytes(n)
        self.left -= n
        return n


def test_the_export_records_each_files_size(bundle):
    manifest = _manifest(bundle)
    assert manifest["sizes"] == {name: (bundle / name).stat().st_size for name in manifest["files"]}
    assert set(manifest["sizes"]) == {n for n in _files(bundle) if n != "manifest.json" and not n.endswith(".jsonl")}


def test_only_the_files_the_manifest_names_are_extracted(bundle, tmp_path, cache):
    archive = _repack(tmp_path / "tiny.tar.gz", bundle, "tiny", extra={"notes.txt": b"x" * 50_000},
                      zeros=("padding.bin", 1 << 20))
    folder = bundle_folder(archive)
    assert not (folder / "notes.txt").exists() and not (folder / "padding.bin").exists()
    assert sorted(_files(folder)) == sorted(["manifest.json", *_manifest(bundle)["files"]])
    EdgeSession(archive, provider="cpu", precision="fp32").embed(TEXTS)


def test_an_archive_that_expands_out_of_proportion_is_refused_before_extraction(bundle, tmp_path, cache,
                                                                               monkeypatch):
    import edgebert.runtime.archive_read as archive_read

    # 64 MiB of zeros gzip to ~64 KB: beside a 0.5 MB bundle, against an allowance lowered to 16 MiB (40x the
    # archive: 20 MiB), a zip bomb in small
    archive = _repack(tmp_path / "bomb.tar.gz", bundle, "tiny", zeros=("zeros.bin", 64 << 20))
    assert archive.stat().st_size < 4 << 20
    monkeypatch.setattr(archive_read, "MIN_ALLOWANCE", 16 << 20)
    written = []
    real_open = open

    def watch(path, mode="r", *args, **kwargs):
        if "w" in mode or "x" in mode:
            written.append(path)
        return real_open(path, mode, *args, **kwargs)

    monkeypatch.setattr("builtins.open", watch)
    with pytest.raises(BundleError, match=r"bomb.tar.gz would expand to more than \d+ MiB \(0\.\d MB packed, "
                                          r"\d+ members so far\), out of proportion for a bundle") as info:
        bundle_folder(archive)
    monkeypatch.undo()
    assert "\n" not in info.value.one_line() and written == []
    assert not cache.exists() or list(cache.iterdir()) == []


def test_a_named_file_larger_than_its_manifest_says_is_refused(bundle, tmp_path, cache):
    name = _manifest(bundle)["tokenizer"]["file"]
    tokenizer = (bundle / name).read_bytes()
    archive = _repack(tmp_path / "tiny.tar.gz", bundle, "tiny", replace={name: tokenizer + b" " * 4096})
    with pytest.raises(BundleError, match=f"tiny.tar.gz holds {name} of {len(tokenizer) + 4096} bytes; its "
                                          f"manifest.json says {len(tokenizer)}"):
        bundle_folder(archive)
    assert not cache.exists() or list(cache.iterdir()) == []


def test_an_archive_of_a_bundle_without_sizes_still_opens(bundle, tmp_path, cache):
    old = tmp_path / "old"
    shutil.copytree(bundle, old)
    manifest = json.loads((old / "manifest.json").read_text())
    manifest.pop("sizes", None)
    (old / "manifest.json").write_text(json.dumps(manifest, indent=2))
    archive = _repack(tmp_path / "old.tar.gz", old, "old")
    session = EdgeSession(archive, provider="cpu", precision="fp32")
    assert "sizes" not in session.manifest.to_dict() and session.embed(TEXTS).shape == (2, 64)
    # archiving such a bundle records the sizes in the archive's manifest
    write_archive(old, tmp_path / "again.zip")
    with zipfile.ZipFile(tmp_path / "again.zip") as zf:
        packed = json.loads(zf.read("again/manifest.json"))
    graph = manifest["models"]["fp32"]["file"]
    assert packed["sizes"][graph] == (old / graph).stat().st_size


# --------------------------------------------------------------------------- 6: EDGEBERT_CACHE=""
def test_an_empty_edgebert_cache_is_the_default_cache_not_the_current_folder(bundle, tmp_path, monkeypatch):
    archive = tmp_path / "tiny.tar.gz"
    write_archive(bundle, archive)
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("HOME", str(home))
    for value in ("", "  "):
        monkeypatch.setenv("EDGEBERT_CACHE", value)
        folder = bundle_folder(archive)
        assert folder.parent == home / ".cache" / "edgebert" / "bundles" and list(work.iterdir()) == []


# --------------------------------------------------------------------------- 7: damaged archives
def _bad_crc_zip(bundle: Path, path: Path) -> Path:
    write_archive(bundle, path)
    data = bytearray(path.read_bytes())
    pos = data.find(b"PK\x01\x02")
    while pos >= 0:                                  # central directory: CRC-32 at 16, name length at 28
        length = struct.unpack_from("<H", data, pos + 28)[0]
        if bytes(data[pos + 46:pos + 46 + length]).endswith(_manifest(bundle)["tokenizer"]["file"].encode()):
            data[pos + 16] ^= 0xFF
        pos = data.find(b"PK\x01\x02", pos + 4)
    path.write_bytes(bytes(data))
    return path


def _truncated_tar(bundle: Path, path: Path) -> Path:
    write_archive(bundle, path)
    path.write_bytes(path.read_bytes()[:path.stat().st_size // 2])
    return path


@pytest.mark.parametrize("make, detail", [(_truncated_tar, "truncated"), (_bad_crc_zip, "CRC")])
def test_a_damaged_archive_is_one_bundle_error_naming_it(bundle, tmp_path, cache, capsys, make, detail):
    archive = make(bundle, tmp_path / ("tiny.tar.gz" if make is _truncated_tar else "tiny.zip"))
    with pytest.raises(BundleError, match=rf"{archive} is not a readable .* archive: .*{detail}") as info:
        EdgeSession(archive, provider="cpu", precision="fp32")
    assert "copy or download it again" in info.value.one_line()
    code, out, err = run_cli(capsys, "check", archive)
    lines = err.strip().splitlines()
    assert code != 0 and len(lines) == 1 and lines[0].startswith(f"error: {archive} is not a readable")
    assert "unexpected" not in err and "Traceback" not in err
    assert not cache.exists() or [p for p in cache.iterdir()] == []


# --------------------------------------------------------------------------- 8: an incomplete entry
def test_an_entry_that_lost_a_graph_is_extracted_again_and_check_passes(bundle, tmp_path, cache, capsys):
    archive = tmp_path / "tiny.zip"
    write_archive(bundle, archive)
    folder = bundle_folder(archive)
    graph = _manifest(bundle)["models"]["fp32"]["file"]
    (folder / graph).unlink()
    code, out, err = run_cli(capsys, "check", archive, "--max-texts", "8")
    assert code == 0 and out.strip().splitlines()[-1].startswith("PASS: "), out + err
    assert _sha(folder / graph) == _sha(bundle / graph)
