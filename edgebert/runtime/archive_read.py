"""One bundle archive (``.tar.gz`` / ``.tgz`` / ``.zip``) read through ONE open file handle: its sha256,
its stamp, its members, its manifest and the files the manifest names all come from the same bytes, so a
file replaced at the path meanwhile (a download landing by rename) can never mix two archives, and
``unchanged()`` re-hashes the handle to catch a file rewritten in place.

Every member is checked as it is listed: a regular file or a folder (a symlink, hard link, device or
FIFO is refused, naming it), its name relative and inside the archive (no ``..``, no absolute path, no
NUL), no name twice, at most ``MAX_MEMBERS``, and the sizes the headers declare may add up to no more
than ``allowance()`` (``MAX_RATIO`` x the archive's size, at least ``MIN_ALLOWANCE``): a bundle's
float weights and tokenizer compress a few times, a zip bomb hundreds of times, and it is refused on
its headers before anything is written. ``extract`` writes only the files the manifest names, each at
the size the manifest records (or, for bundles exported before sizes were recorded, its header's),
hashed while it is copied against the manifest's sha256. Every problem is a one-line ``BundleError``
naming the archive. Stdlib only.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import os
import stat
import tarfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Iterator

from edgebert.bundle import MANIFEST_NAME, Manifest
from edgebert.errors import BundleError
from edgebert.files.atomic import current_umask
from edgebert.files.jsonfile import loads

__all__ = ["ARCHIVE_SUFFIXES", "STAMP_FORMAT", "MAX_BYTES", "MAX_RATIO", "MIN_ALLOWANCE", "archive_kind",
           "ArchiveFile", "Member", "Listing"]

ARCHIVE_SUFFIXES = {".tar.gz": "tar", ".tgz": "tar", ".zip": "zip"}
LABELS = {"tar": "tar.gz", "zip": "zip"}
STAMP_FORMAT = "edgebert-bundle-archive"     # the stamp ``write_archive`` puts in the tar's pax header / zip comment
MAX_BYTES = 64 << 30          # more than any BERT bundle
MAX_RATIO = 40                # bundles compress 1-4x (float weights, a JSON tokenizer)
MIN_ALLOWANCE = 256 << 20     # a small archive may expand to this much whatever its ratio
MAX_MEMBERS = 10_000
MAX_MANIFEST = 16 << 20
_CHUNK = 1 << 20
_RETRY = ("the file is damaged or incomplete: copy or download it again, or re-create it with "
          "`edgebert export --archive`")
_RECREATE = "pass an archive written by `edgebert export --archive`"


def archive_kind(path: str | os.PathLike) -> str | None:
    """``tar`` / ``zip`` by the file name's suffix, None for anything else."""
    name = Path(path).name.lower()
    return next((kind for suffix, kind in ARCHIVE_SUFFIXES.items() if name.endswith(suffix)), None)


@dataclass(frozen=True)
class Member:
    name: str                  # as stored
    path: PurePosixPath        # normalized ('.' parts dropped)
    size: int
    is_dir: bool
    ref: object                # the TarInfo / ZipInfo


@dataclass(frozen=True)
class Listing:
    """Every member of an archive (checked), and its one manifest at the top or in one top folder."""
    members: dict[PurePosixPath, Member]
    manifest: Member

    @property
    def top(self) -> PurePosixPath:
        return self.manifest.path.parent


class ArchiveFile:
    """``path`` opened once (see the module docstring); a context manager that closes it."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.kind = archive_kind(self.path)
        if self.kind is None:
            raise BundleError(f"{self.path} is not a bundle archive ({', '.join(ARCHIVE_SUFFIXES)})")
        self.label = LABELS[self.kind]
        self._tar: tarfile.TarFile | None = None
        self._zip: zipfile.ZipFile | None = None
        try:
            self._fh: IO[bytes] = open(self.path, "rb")
        except OSError as exc:
            raise BundleError(f"{self.path} cannot be read ({exc.strerror or exc})") from exc
        try:
            self.size = os.fstat(self._fh.fileno()).st_size
            self.digest = self._hash()
        except BaseException:
            self._fh.close()
            raise

    def __enter__(self) -> "ArchiveFile":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for obj in (self._tar, self._zip, self._fh):
            with contextlib.suppress(Exception):
                if obj is not None:
                    obj.close()

    # ------------------------------------------------------------------ the bytes
    def _hash(self) -> str:
        with self.reading():
            self._fh.seek(0)
            h = hashlib.sha256()
            for block in iter(lambda: self._fh.read(_CHUNK), b""):
                h.update(block)
            return h.hexdigest()

    def unchanged(self) -> bool:
        """Whether the open file still holds the bytes hashed when it was opened."""
        return self._hash() == self.digest

    def allowance(self) -> int:
        """The most bytes the members may declare in all (see the module docstring)."""
        return min(MAX_BYTES, max(MIN_ALLOWANCE, MAX_RATIO * self.size))

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """Any error of the tar / zip / gzip / zlib readers (or the OS) as a one-line ``BundleError``."""
        try:
            yield
        except BundleError:
            raise
        except (tarfile.TarError, zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, zlib.error,
                gzip.BadGzipFile, ValueError, NotImplementedError) as exc:
            detail = " ".join(str(exc).split())[:200] or type(exc).__name__
            if isinstance(exc, EOFError) or "end of data" in detail:
                detail = f"truncated, it ends too early ({detail})"
            raise BundleError(f"{self.path} is not a readable {self.label} archive: {detail}", _RETRY) from exc
        except OSError as exc:
            raise BundleError(f"{self.path} cannot be read ({exc.strerror or exc})") from exc

    def _archive(self) -> tarfile.TarFile | zipfile.ZipFile:
        if self.kind == "tar":
            if self._tar is None:
                self._fh.seek(0)
                self._tar = tarfile.open(fileobj=self._fh, mode="r:gz")
            return self._tar
        if self._zip is None:
            self._fh.seek(0)
            self._zip = zipfile.ZipFile(self._fh)
        return self._zip

    # ------------------------------------------------------------------ what it holds
    def stamp(self) -> dict | None:
        """The stamp ``write_archive`` wrote (a dict with ``format`` == ``STAMP_FORMAT``), else None."""
        with self.reading():
            archive = self._archive()
            text = (archive.pax_headers.get("comment", "") if isinstance(archive, tarfile.TarFile)
                    else archive.comment.decode("utf-8", "replace"))
        try:
            value = loads(text) if text else None
        except ValueError:
            return None
        return value if isinstance(value, dict) and value.get("format") == STAMP_FORMAT else None

    def members(self) -> Iterator[Member]:
        """Every member, in archive order, each checked (see the module docstring); ``BundleError`` at
        the first one that is refused."""
        seen: set[PurePosixPath] = set()
        total, allowance = 0, self.allowance()
        with self.reading():
            archive = self._archive()
            entries = archive if isinstance(archive, tarfile.TarFile) else archive.infolist()
            for count, info in enumerate(entries, 1):
                member = self._member(info)
                if member.path in seen:
                    raise BundleError(f"{self.path} holds {member.name!r} twice", _RECREATE)
                seen.add(member.path)
                total += member.size
                if total > allowance:
                    raise BundleError(
                        f"{self.path} would expand to more than {allowance >> 20} MiB ({self.size / 1e6:.1f} MB "
                        f"packed, {count} members so far), out of proportion for a bundle",
                        "refused before extracting anything; " + _RECREATE)
                if count > MAX_MEMBERS:
                    raise BundleError(f"{self.path} holds more than {MAX_MEMBERS} members, far more than a bundle",
                                      "refused before extracting anything; " + _RECREATE)
                yield member
            if isinstance(archive, tarfile.TarFile):        # the end of the compressed stream is there too
                while archive.fileobj.read(_CHUNK):
                    pass

    def _member(self, info: tarfile.TarInfo | zipfile.ZipInfo) -> Member:
        if isinstance(info, tarfile.TarInfo):
            if not (info.isdir() or info.isreg()):
                raise BundleError(f"{self.path} holds {info.name!r}, a {_tar_kind(info)}",
                                  "refused: a bundle archive holds regular files only")
            return Member(info.name, self._safe_name(info.name), 0 if info.isdir() else info.size, info.isdir(), info)
        mode = info.external_attr >> 16             # 0 or no file-type bits: a plain file
        if stat.S_IFMT(mode) not in (0, stat.S_IFREG, stat.S_IFDIR):
            raise BundleError(f"{self.path} holds {info.filename!r}, a "
                              f"{'symlink' if stat.S_ISLNK(mode) else 'special file'}",
                              "refused: a bundle archive holds regular files only")
        return Member(info.filename, self._safe_name(info.filename), 0 if info.is_dir() else info.file_size,
                      info.is_dir(), info)

    def _safe_name(self, name: str) -> PurePosixPath:
        path = PurePosixPath(name.replace("\\", "/"))
        if not name or "\x00" in name or path.is_absolute() or ".." in path.parts or not path.parts \
                or (len(name) > 1 and name[1] == ":"):
            raise BundleError(f"{self.path} holds {name!r}, a path outside the archive's folder",
                              "refused: extract nothing from an archive that writes outside itself")
        return PurePosixPath(*[p for p in path.parts if p != "."])

    def listing(self) -> Listing:
        """Every member (checked) and the one manifest at the top or in one top folder."""
        members = {m.path: m for m in self.members()}
        manifests = [m for m in members.values() if m.path.name == MANIFEST_NAME and not m.is_dir
                     and len(m.path.parts) <= 2]
        if len(manifests) != 1:
            raise BundleError(f"{self.path} holds {len(manifests) or 'no'} {MANIFEST_NAME} at its top or in one "
                              "top folder", _RECREATE)
        return Listing(members, manifests[0])

    def first_manifest(self) -> Member | None:
        """The first member that may be the manifest, reading no further than it (the cheap look a
        cache entry is checked with: ``listing`` checked the whole archive when it was extracted)."""
        return next((m for m in self.members() if m.path.name == MANIFEST_NAME and not m.is_dir
                     and len(m.path.parts) <= 2), None)

    def sha256(self, member: Member) -> str:
        """The sha256 of ``member``'s bytes, streamed (exactly the size its header says)."""
        digest = hashlib.sha256()
        with self.reading(), self._open(member) as src:
            _copy(src, digest.update, member.size, self, member)
        return digest.hexdigest()

    def outside(self) -> str | None:
        """Where the file holds bytes that are not the archive ``write_archive`` writes: ``after`` it
        (another archive appended, ``cat a.tar.gz b.tar.gz``, or any other bytes), ``before`` it (a zip
        stored after something else); None when it holds the archive alone. A tar.gz is one gzip
        stream ending the file, with nothing but zero blocks after the tar's last member; a zip's first
        member is at its start and its end record (with the stamp) ends the file. Call it after
        ``members()`` was read to its end."""
        with self.reading():
            archive = self._archive()
            if isinstance(archive, tarfile.TarFile):
                return "after" if self._after_tar(archive) else None
            if min((info.header_offset for info in archive.infolist()), default=0) != 0:
                return "before"
            end = 22 + len(archive.comment)                 # the end record: 22 bytes, then the comment
            self._fh.seek(max(0, self.size - end))
            record = self._fh.read(end)
            ends = len(record) == end and record[:4] == b"PK\x05\x06" and record[22:] == archive.comment \
                and int.from_bytes(record[20:22], "little") == len(archive.comment)
            return None if ends else "after"

    def _after_tar(self, archive: tarfile.TarFile) -> bool:
        archive.getmembers()                    # read to the end-of-archive blocks: ``offset`` is where they start
        end, position = archive.offset, 0
        stream = zlib.decompressobj(16 + zlib.MAX_WBITS)       # the first gzip stream only
        self._fh.seek(0)
        while not stream.eof:
            data = stream.unconsumed_tail or self._fh.read(_CHUNK)
            if not data:
                return True                     # ends inside its gzip stream (the readers said so already)
            block = stream.decompress(data, _CHUNK)
            if position + len(block) > end and block[max(0, end - position):].strip(b"\0"):
                return True
            position += len(block)
        return bool(stream.unused_data or self._fh.read(1))

    def read(self, member: Member, limit: int = MAX_MANIFEST) -> bytes:
        if member.size > limit:
            raise BundleError(f"{self.path}: {member.name!r} is {member.size} bytes, too large for a {MANIFEST_NAME}",
                              _RECREATE)
        out = bytearray()
        with self.reading(), self._open(member) as src:
            _copy(src, out.extend, member.size, self, member)
        return bytes(out)

    def _open(self, member: Member) -> IO[bytes]:
        archive = self._archive()
        if isinstance(archive, tarfile.TarFile):
            return archive.extractfile(member.ref)
        return archive.open(member.ref)

    # ------------------------------------------------------------------ extraction
    def manifest(self, data: bytes) -> Manifest:
        try:
            value = loads(data)
        except ValueError as exc:
            raise BundleError(f"{self.path}: its {MANIFEST_NAME} {exc}", _RECREATE) from None
        return Manifest.from_dict(value, f"{self.path}: {MANIFEST_NAME}")

    def extract(self, listing: Listing, manifest_bytes: bytes, folder: Path) -> None:
        """Write the manifest and the files it names into ``folder`` (new, empty), each checked against
        the size and sha256 the manifest records; anything else in the archive is left in it."""
        manifest = self.manifest(manifest_bytes)
        sizes, hashes = manifest.file_sizes, dict(manifest.files)
        plan = []
        for name in dict.fromkeys(manifest.file_names()):
            member = listing.members.get(listing.top.joinpath(*self._safe_name(name).parts))
            if member is None or member.is_dir:
                raise BundleError(f"{self.path} lacks {name}, a file its {MANIFEST_NAME} names", _RETRY)
            if name not in hashes:
                raise BundleError(f"{self.path}: its {MANIFEST_NAME} has no hash for {name}", _RECREATE)
            expected = sizes.get(name, member.size)
            if member.size != expected:
                raise BundleError(f"{self.path} holds {name} of {member.size} bytes; its {MANIFEST_NAME} says "
                                  f"{expected}", "refused before extracting anything; " + _RECREATE)
            plan.append((name, member))
        umask = current_umask()
        (folder / MANIFEST_NAME).write_bytes(manifest_bytes)
        for name, member in plan:
            out = folder.joinpath(*PurePosixPath(name).parts)
            out.parent.mkdir(parents=True, exist_ok=True)
            digest = hashlib.sha256()
            with self.reading(), self._open(member) as src, open(out, "xb") as dst:
                def write(block: bytes) -> None:
                    digest.update(block)
                    dst.write(block)
                _copy(src, write, member.size, self, member)
            os.chmod(out, 0o666 & ~umask)
            if digest.hexdigest() != hashes[name]:
                raise BundleError(f"{self.path} holds {name} that does not match its {MANIFEST_NAME} hash "
                                  f"(sha256 {digest.hexdigest()[:12]}..., expected {hashes[name][:12]}...)", _RETRY)


def _copy(src: IO[bytes], write, size: int, archive: ArchiveFile, member: Member) -> None:
    """Exactly ``size`` bytes of ``src`` into ``write``; more or fewer is a damaged archive."""
    written = 0
    for block in iter(lambda: src.read(min(_CHUNK, size - written + 1)), b""):
        written += len(block)
        if written > size:
            raise BundleError(f"{archive.path}: {member.name!r} holds more bytes than its header says", _RETRY)
        write(block)
    if written != size:
        raise BundleError(f"{archive.path} is not a readable {archive.label} archive: truncated, it ends inside "
                          f"{member.name!r} ({written} of {size} bytes)", _RETRY)


def _tar_kind(member: tarfile.TarInfo) -> str:
    if member.issym():
        return f"symlink to {member.linkname!r}"
    if member.islnk():
        return f"hard link to {member.linkname!r}"
    return "device or FIFO"
