"""A bundle as one file: ``.tar.gz`` / ``.tgz`` / ``.zip`` archives, written by ``edgebert export --archive``
and opened by ``EdgeSession``, ``edgebert check`` / ``bench`` / ``info`` like a bundle folder.

``write_archive`` packs a bundle folder's files under one top folder (regular files only, modes
0644, no owner names), written atomically. ``bundle_folder(path)`` gives a folder back: a folder as
it is, an archive extracted once into the cache (``$EDGEBERT_CACHE/bundles``, default
``~/.cache/edgebert/bundles``) under a name made of the archive's sha256, so one archive is extracted
once however often it is opened, and a changed archive gets a new folder.

Extraction is safe and atomic: every member must be a regular file or a folder (a symlink, hard link,
device or FIFO is refused, naming it), its name relative and inside the archive (no ``..``, no
absolute path, no NUL), no name twice, the total size below ``MAX_BYTES``; the members are written into
a temp folder beside the cache entry, which is renamed into place only when complete (a process that
loses the race uses the winner's folder). The bundle's own sha256 checks then run on the extracted
files as on any folder. Every problem is a one-line ``BundleError``. Stdlib only.
"""

from __future__ import annotations

import os
import shutil
import stat
import tarfile
import tempfile
import zipfile
from pathlib import Path, PurePosixPath
from typing import IO, Iterator

from ..bundle import MANIFEST_NAME
from ..errors import BundleError, ConfigError
from ..files.atomic import current_umask, remove_stale_temps, sha256_file, temp_prefix

__all__ = ["ARCHIVE_SUFFIXES", "MAX_BYTES", "archive_kind", "is_bundle_archive", "write_archive", "bundle_folder",
           "extract_archive"]

ARCHIVE_SUFFIXES = {".tar.gz": "tar", ".tgz": "tar", ".zip": "zip"}
MAX_BYTES = 64 << 30       # more than any BERT bundle; an archive that unpacks to more is refused (a zip bomb)
_CHUNK = 1 << 20


def archive_kind(path: str | os.PathLike) -> str | None:
    """``tar`` / ``zip`` by the file name's suffix, None for anything else."""
    name = Path(path).name.lower()
    return next((kind for suffix, kind in ARCHIVE_SUFFIXES.items() if name.endswith(suffix)), None)


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
    """Pack the regular files of ``bundle_dir`` (hidden files aside) into ``target``, an archive of the
    kind its ``name`` (default: ``target``'s own) says, its files under one folder named after it
    (``minilm.tar.gz``: ``minilm/``). The caller makes ``target`` safe to write (``files.outfiles``:
    a temp file published when complete). Returns the packed names."""
    bundle_dir, target = Path(bundle_dir), Path(target)
    kind = check_archive_name(name or target.name)
    top = _stem(Path(name or target.name))
    files = sorted(p for p in bundle_dir.iterdir() if p.is_file() and not p.is_symlink() and not p.name.startswith("."))
    if kind == "tar":
        with tarfile.open(target, "w:gz", format=tarfile.PAX_FORMAT) as tar:
            for path in files:
                info = tar.gettarinfo(str(path), f"{top}/{path.name}")
                info.mode, info.uid, info.gid, info.uname, info.gname = 0o644, 0, 0, "", ""
                with open(path, "rb") as fh:
                    tar.addfile(info, fh)
    else:
        with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for path in files:
                archive.write(path, f"{top}/{path.name}")
    return [p.name for p in files]


def is_bundle_archive(path: str | os.PathLike) -> bool:
    """Whether ``path`` is an archive holding a bundle manifest (what ``export --archive`` wrote)."""
    try:
        return any(PurePosixPath(name).name == MANIFEST_NAME for name, _, _ in _members(Path(path)))
    except BundleError:
        return False


# --------------------------------------------------------------------------- reading
def cache_root() -> Path:
    return Path(os.environ.get("EDGEBERT_CACHE", Path.home() / ".cache" / "edgebert")) / "bundles"


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
    """The bundle folder of ``archive``, extracted once into ``cache`` (see the module docstring)."""
    archive = Path(archive)
    root = Path(cache) if cache is not None else cache_root()
    digest = sha256_file(archive)[:20]
    target = root / f"{_stem(archive)}-{digest}"
    if (target / MANIFEST_NAME).is_file() and not target.is_symlink():
        return target
    try:
        root.mkdir(parents=True, exist_ok=True)
        remove_stale_temps(root)
        tmp = Path(tempfile.mkdtemp(prefix=temp_prefix(target), suffix=".tmp", dir=root))
    except OSError as exc:
        raise BundleError(f"cannot extract {archive} into {root} ({exc.strerror or exc})",
                          "set EDGEBERT_CACHE to a folder you can write to") from exc
    try:
        folder = _unpack(archive, tmp)
        os.chmod(folder, 0o777 & ~current_umask())
        if target.is_dir() and not (target / MANIFEST_NAME).is_file() and not target.is_symlink():
            shutil.rmtree(target)                        # a cache entry someone emptied: extract it again
        try:
            os.rename(folder, target)
        except OSError:
            if not (target / MANIFEST_NAME).is_file():   # not another process's finished extraction
                raise
        return target
    except OSError as exc:
        raise BundleError(f"cannot extract {archive} into {root} ({exc.strerror or exc})",
                          "free space there, or set EDGEBERT_CACHE to another folder") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _unpack(archive: Path, tmp: Path) -> Path:
    """Write every member into ``tmp``; returns the folder that holds the manifest."""
    seen: set[PurePosixPath] = set()
    total = 0
    umask = current_umask()
    for name, size, opener in _members(archive):
        path = _safe_name(archive, name)
        if path in seen:
            raise BundleError(f"{archive} holds {name!r} twice",
                              "re-create the archive with `edgebert export --archive`")
        seen.add(path)
        total += size
        if total > MAX_BYTES:
            raise BundleError(f"{archive} unpacks to more than {MAX_BYTES >> 30} GiB", "this is no bundle archive")
        out = tmp.joinpath(*path.parts)
        if opener is None:
            out.mkdir(parents=True, exist_ok=True)
            continue
        out.parent.mkdir(parents=True, exist_ok=True)
        with opener() as src, open(out, "xb") as dst:
            _copy(src, dst, size, archive, name)
        os.chmod(out, 0o666 & ~umask)
    manifests = [p for p in seen if p.name == MANIFEST_NAME and len(p.parts) <= 2]
    if len(manifests) != 1:
        raise BundleError(f"{archive} holds {len(manifests) or 'no'} {MANIFEST_NAME} at its top or in one top folder",
                          "pass an archive written by `edgebert export --archive`")
    return tmp.joinpath(*manifests[0].parent.parts) if manifests[0].parent.parts else tmp


def _copy(src: IO[bytes], dst: IO[bytes], size: int, archive: Path, name: str) -> None:
    written = 0
    for block in iter(lambda: src.read(_CHUNK), b""):
        written += len(block)
        if written > size:
            raise BundleError(f"{archive}: {name!r} holds more bytes than its header says", "the archive is corrupt")
        dst.write(block)


def _safe_name(archive: Path, name: str) -> PurePosixPath:
    path = PurePosixPath(name.replace("\\", "/"))
    if not name or "\x00" in name or path.is_absolute() or ".." in path.parts or not path.parts \
            or (len(name) > 1 and name[1] == ":"):
        raise BundleError(f"{archive} holds {name!r}, a path outside the archive's folder",
                          "refused: extract nothing from an archive that writes outside itself")
    return PurePosixPath(*[p for p in path.parts if p != "."])


def _members(archive: Path) -> Iterator[tuple[str, int, object]]:
    """(name, size, opener or None for a folder) of every member; ``BundleError`` for a member that is
    not a regular file or folder, or an archive that cannot be read."""
    kind = archive_kind(archive)
    try:
        if kind == "tar":
            with tarfile.open(archive, "r:*") as tar:
                for member in tar:
                    if member.isdir():
                        yield member.name, 0, None
                    elif member.isreg():
                        yield member.name, member.size, lambda m=member: tar.extractfile(m)
                    else:
                        raise BundleError(f"{archive} holds {member.name!r}, a {_tar_kind(member)}",
                                          "refused: a bundle archive holds regular files only")
        elif kind == "zip":
            with zipfile.ZipFile(archive) as zf:
                for info in zf.infolist():
                    mode = info.external_attr >> 16             # 0 or no file-type bits: a plain file
                    if stat.S_IFMT(mode) not in (0, stat.S_IFREG, stat.S_IFDIR):
                        raise BundleError(f"{archive} holds {info.filename!r}, a "
                                          f"{'symlink' if stat.S_ISLNK(mode) else 'special file'}",
                                          "refused: a bundle archive holds regular files only")
                    if info.is_dir():
                        yield info.filename, 0, None
                    else:
                        yield info.filename, info.file_size, lambda i=info: zf.open(i)
        else:
            raise BundleError(f"{archive} is not a bundle archive ({', '.join(ARCHIVE_SUFFIXES)})")
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, zipfile.LargeZipFile, ValueError) as exc:
        raise BundleError(f"{archive} is not a readable {kind} archive ({' '.join(str(exc).split())[:200]})",
                          "re-create it with `edgebert export --archive`") from exc
    except OSError as exc:
        raise BundleError(f"{archive} cannot be read ({exc.strerror or exc})") from exc


def _tar_kind(member: tarfile.TarInfo) -> str:
    if member.issym():
        return f"symlink to {member.linkname!r}"
    if member.islnk():
        return f"hard link to {member.linkname!r}"
    return "device or FIFO"

