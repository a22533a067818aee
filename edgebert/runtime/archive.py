"""A bundle as one file: ``.tar.gz`` / ``.tgz`` / ``.zip`` archives, written by ``edgebert export --archive``
and opened by ``EdgeSession``, ``edgebert check`` / ``bench`` / ``info`` like a bundle folder.

``write_archive`` packs the manifest and the files it names under one top folder (regular files only,
modes 0644, no owner names) and stamps the archive (the tar's pax ``comment``, the zip's comment: the
format, the top folder, the manifest's sha256). ``foreign_archive`` says whether a file is exactly such
an archive, so ``export --archive --overwrite`` (and ``pack``) replaces only its own output: a user's archive
holding some other ``manifest.json`` is never taken for it, nor an archive changed since it was written
(a file edited: its size or sha256 is not the manifest's) or one with other bytes before or after it.

``bundle_folder(path)`` gives a folder back: a folder as it is, an archive extracted into the cache
(``$EDGEBERT_CACHE/bundles``; unset or empty: ``~/.cache/edgebert/bundles``) under a name made of its
sha256. The archive is hashed and read through one open file (``archive_read``), so the entry named
after A's digest can only ever hold A's files. An entry is used again only while it holds exactly the
archive's manifest, every file that manifest names at its size and sha256, and a record of the
archive's full digest; anything else (a file lost or changed, another bundle put there, an entry of an
older edgebert) is extracted again from the archive. Extraction writes into a temp folder beside the
entry, published by rename when complete (a process that loses the race uses the winner's entry).
Every problem is a one-line ``BundleError``. Stdlib only.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path, PurePosixPath

from edgebert.bundle import MANIFEST_NAME, Manifest, read_manifest, verify_files
from edgebert.errors import BundleError, ConfigError
from edgebert.files.atomic import current_umask, remove_path, remove_stale_temps, temp_prefix
from edgebert.files.jsonfile import loads
from edgebert.files.user_cache import cache_root as user_cache_root
from edgebert.runtime.archive_read import ARCHIVE_SUFFIXES, LABELS, MAX_BYTES, STAMP_FORMAT, ArchiveFile, archive_kind

__all__ = ["ARCHIVE_SUFFIXES", "MAX_BYTES", "RECORD_NAME", "archive_kind", "check_archive_name", "write_archive",
           "foreign_archive", "is_bundle_archive", "cache_root", "bundle_folder", "extract_archive"]

RECORD_NAME = ".edgebert-archive.json"     # in a cache entry: the full sha256 of the archive it came from


def _stem(path: Path) -> str:
    name = path.name
    for suffix in ARCHIVE_SUFFIXES:
        if name.lower().endswith(suffix):
            return name[:-len(suffix)] or "bundle"
    return name


def check_archive_name(path: str | os.PathLike) -> str:
    kind = archive_kind(path)
    if kind is None:
        raise ConfigError(f"--archive {path} must end in {', '.join(ARCHIVE_SUFFIXES)}",
                          "e.g. --archive bundles/minilm.tar.gz")
    return kind


# --------------------------------------------------------------------------- writing
def write_archive(bundle_dir: str | os.PathLike, target: str | os.PathLike, name: str | None = None) -> list[str]:
    """Pack ``bundle_dir``'s manifest and the files it names into ``target``, an archive of the kind its
    ``name`` (default: ``target``'s own) says, under one folder named after it (``minilm.tar.gz``:
    ``minilm/``), stamped. A manifest without ``sizes`` (an older export) gets them in the archive. The
    caller makes ``target`` safe to write (``files.outfiles``). Returns the packed names."""
    bundle_dir, target = Path(bundle_dir), Path(target)
    kind = check_archive_name(name or target.name)
    top = _stem(Path(name or target.name))
    manifest = read_manifest(bundle_dir)
    names = sorted(dict.fromkeys(manifest.file_names()))
    paths = {n: bundle_dir / n for n in names}
    missing = [n for n, p in paths.items() if not p.is_file()]
    if missing:
        raise BundleError(f"{bundle_dir / missing[0]} is missing", "the bundle is incomplete; re-export it")
    value = manifest.to_dict()
    if not manifest.file_sizes:
        value["sizes"] = {n: paths[n].stat().st_size for n in manifest.files}
    manifest_bytes = (json.dumps(value, indent=2) + "\n").encode() if value != manifest.to_dict() \
        else (bundle_dir / MANIFEST_NAME).read_bytes()
    stamp = json.dumps({"format": STAMP_FORMAT, "version": 1, "top": top,
                        "manifest_sha256": hashlib.sha256(manifest_bytes).hexdigest()})
    mtime = (bundle_dir / MANIFEST_NAME).stat().st_mtime
    if kind == "tar":
        with tarfile.open(target, "w:gz", format=tarfile.PAX_FORMAT, pax_headers={"comment": stamp}) as tar:
            tar.addfile(_tar_info(f"{top}/{MANIFEST_NAME}", len(manifest_bytes), mtime), io.BytesIO(manifest_bytes))
            for n, path in paths.items():
                with open(path, "rb") as fh:
                    tar.addfile(_tar_info(f"{top}/{n}", os.fstat(fh.fileno()).st_size, path.stat().st_mtime), fh)
    else:
        with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            info = zipfile.ZipInfo(f"{top}/{MANIFEST_NAME}", _zip_time(mtime))
            info.external_attr, info.compress_type = 0o100644 << 16, zipfile.ZIP_DEFLATED
            archive.writestr(info, manifest_bytes)
            for n, path in paths.items():
                archive.write(path, f"{top}/{n}")
            archive.comment = stamp.encode()
    return [MANIFEST_NAME, *names]


def _tar_info(name: str, size: int, mtime: float) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = size, int(mtime), 0o644
    info.uid, info.gid, info.uname, info.gname = 0, 0, "", ""
    return info


def _zip_time(mtime: float) -> tuple[int, ...]:
    return tuple(max(t, lo) for t, lo in zip(time.localtime(mtime)[:6], (1980, 1, 1, 0, 0, 0)))


def foreign_archive(path: str | os.PathLike, command: str | None = None) -> str | None:
    """None if ``path`` is exactly what ``write_archive`` writes (its stamp, one top folder holding only
    files, the manifest the stamp names, every file at the size and sha256 that manifest records, nothing
    before or after the archive in the file) and, given ``command`` (``export`` / ``pack``), wrote for that
    command; else what it is, as a phrase for a refusal. The stamp vouches for the manifest, the manifest
    for every file: together, for the whole file."""
    path = Path(path)
    label = LABELS.get(archive_kind(path) or "", "bundle")
    try:
        with ArchiveFile(path) as archive:
            stamp = archive.stamp()
            members = []
            for member in archive.members():
                members.append(member)
            if stamp is None:
                return f"a {label} archive without edgebert's stamp, holding {_some(members)}"
            top = PurePosixPath(str(stamp.get("top") or "?"))
            manifest = next((m for m in members if m.path == top / MANIFEST_NAME and not m.is_dir), None)
            changed = f"a {label} archive with edgebert's stamp, changed since it was written"
            if manifest is None or len(top.parts) != 1:
                return f"{changed} (it holds no {top}/{MANIFEST_NAME})"
            data = archive.read(manifest)
            if hashlib.sha256(data).hexdigest() != stamp.get("manifest_sha256"):
                return f"{changed} (another {MANIFEST_NAME})"
            bundle = archive.manifest(data)
            wanted = {manifest.path, *(top.joinpath(*PurePosixPath(n).parts) for n in bundle.file_names())}
            odd = [m for m in members if m.is_dir or m.path not in wanted]
            if odd:
                return f"{changed} (it holds {_some(odd)} beside the bundle)"
            if len(members) != len(wanted):
                return f"{changed} (it holds fewer files than its {MANIFEST_NAME} names)"
            unlike = _unlike_manifest(archive, [m for m in members if m is not manifest], top, bundle)
            if unlike:
                return f"{changed} ({unlike})"
            outside = archive.outside()
            if outside:
                return f"{changed} (other bytes lie {outside} the archive edgebert wrote)"
            made_by = "pack" if isinstance(bundle.get_extra("packed"), dict) else "export"
            if command is not None and made_by != command:
                return f"the output of `edgebert {made_by}{' --archive' if made_by == 'export' else ''}`"
    except BundleError as exc:
        text = exc.message.removeprefix(str(path)).strip(" :").removeprefix("is ")
        return text if text.startswith("not a") else f"not a bundle archive edgebert can read ({text})"
    return None


def _unlike_manifest(archive: ArchiveFile, members: list, top: PurePosixPath, bundle: Manifest) -> str | None:
    """How a member differs from what the manifest records for it (its size, else its sha256), or None.
    Sizes first (the headers), then the bytes, read in archive order."""
    sizes, hashes = bundle.file_sizes, bundle.files
    name = {m.path: m.path.relative_to(top).as_posix() for m in members}
    for member in members:
        expected = sizes.get(name[member.path])
        if expected is not None and member.size != expected:
            return f"{name[member.path]} is {member.size} bytes; its {MANIFEST_NAME} says {expected}"
    for member in members:
        expected_sha = hashes.get(name[member.path])
        if expected_sha is None:
            return f"its {MANIFEST_NAME} has no hash for {name[member.path]}"
        if archive.sha256(member) != expected_sha:
            return f"{name[member.path]} does not match its {MANIFEST_NAME} hash"
    return None


def is_bundle_archive(path: str | os.PathLike) -> bool:
    """Whether ``path`` is an archive ``edgebert export --archive`` wrote (``foreign_archive``)."""
    return foreign_archive(path) is None


def _some(members: list) -> str:
    """'3 entries, among them 'webapp/public/manifest.json'' (manifests named first: why it may look like a bundle)."""
    if not members:
        return "nothing"
    named = sorted(members, key=lambda m: (m.path.name != MANIFEST_NAME, m.name))[:2]
    count = f"{len(members)} entr{'y' if len(members) == 1 else 'ies'}"
    return f"{count}, among them {', '.join(repr(m.name) for m in named)}"


# --------------------------------------------------------------------------- reading
def cache_root() -> Path:
    """``$EDGEBERT_CACHE/bundles``; unset or empty: ``~/.cache/edgebert/bundles`` (never the current folder)."""
    return user_cache_root() / "bundles"


def bundle_folder(path: str | os.PathLike, cache: str | os.PathLike | None = None) -> Path:
    """``path`` if it is a folder (or names nothing: the bundle reader says so), else the archive
    extracted into the cache (``extract_archive``)."""
    path = Path(path)
    if path.is_dir() or not path.exists():
        return path
    if archive_kind(path) is None:
        raise BundleError(f"{path} is a file, neither a bundle folder nor a bundle archive "
                          f"({', '.join(ARCHIVE_SUFFIXES)})", "pass the folder or archive `edgebert export` wrote")
    return extract_archive(path, cache)


def extract_archive(archive: str | os.PathLike, cache: str | os.PathLike | None = None) -> Path:
    """The bundle folder of ``archive``: its cache entry, checked, or extracted (see the module docstring)."""
    archive = Path(archive)
    root = Path(cache) if cache is not None else cache_root()
    with ArchiveFile(archive) as packed:
        target = root / f"{_stem(archive)}-{packed.digest[:20]}"
        first = packed.first_manifest()
        if first is not None and _entry_holds(target, packed.digest, packed.read(first)):
            return target
        listing = packed.listing()
        manifest_bytes = packed.read(listing.manifest)
        try:
            root.mkdir(parents=True, exist_ok=True)
            remove_stale_temps(root)
            tmp = Path(tempfile.mkdtemp(prefix=temp_prefix(target), suffix=".tmp", dir=root))
        except OSError as exc:
            raise BundleError(f"cannot extract {archive} into {root} ({exc.strerror or exc})",
                              "set EDGEBERT_CACHE to a folder you can write to") from exc
        try:
            packed.extract(listing, manifest_bytes, tmp)
            if not packed.unchanged():
                raise BundleError(f"{archive} changed while it was being read", "open it again once it is complete")
            (tmp / RECORD_NAME).write_text(json.dumps({"archive_sha256": packed.digest, "archive": str(archive)}))
            os.chmod(tmp, 0o777 & ~current_umask())
            _publish(tmp, target, lambda: _entry_holds(target, packed.digest, manifest_bytes))
            return target
        except OSError as exc:
            raise BundleError(f"cannot extract {archive} into {root} ({exc.strerror or exc})",
                              "free space there, or set EDGEBERT_CACHE to another folder") from exc
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def _entry_holds(entry: Path, digest: str, manifest_bytes: bytes) -> bool:
    """Whether the cache entry holds exactly the archive's bundle: the record of its digest, its manifest,
    every file that manifest names at its size and sha256."""
    try:
        if entry.is_symlink() or not entry.is_dir():
            return False
        record = loads((entry / RECORD_NAME).read_bytes())
        manifest_path = entry / MANIFEST_NAME
        if not isinstance(record, dict) or record.get("archive_sha256") != digest or manifest_path.is_symlink() \
                or manifest_path.read_bytes() != manifest_bytes:
            return False
        manifest = Manifest.from_dict(loads(manifest_bytes))
        if any((entry / name).is_symlink() for name in manifest.file_names()):
            return False
        verify_files(entry, manifest)
        return all((entry / name).is_file() for name in manifest.file_names())
    except (OSError, ValueError, BundleError):
        return False


def _publish(folder: Path, target: Path, holds) -> None:
    """Rename ``folder`` to ``target``; a stale entry there is set aside and removed first. If another
    process published a good entry meanwhile, that one is kept."""
    if target.exists() or target.is_symlink():
        if holds():
            return
        aside = target.with_name(f"{temp_prefix(target)}stale.tmp")
        os.rename(target, aside)
        remove_path(aside)
    try:
        os.rename(folder, target)
    except OSError:
        if not holds():                          # not another process's finished extraction
            raise
