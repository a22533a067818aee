"""Verification stamps: a file's sha256 remembered against its identity on disk, so that a session does
not hash an unchanged graph again each time it opens.

A stamp records ``(device, inode, size, mtime_ns, ctime_ns)`` beside the sha256 computed from the bytes.
Any write to the file, a ``touch``, a rename over it or a copy in its place changes at least one of them
(the kernel sets ``ctime`` on every change; a program cannot set it back), and then the file is hashed
again. As git does for its index, a stamp is recorded only once the file's times are more than
``SETTLE_NS`` old, so that a write in the same clock tick as the hash (coarse timestamps: FAT, some
network file systems) cannot go unseen.

``edgebert check`` hashes every byte and trusts no stamp, but leaves stamps of what it hashed (``hashed_sha256``) and
of the graph checks that passed: a session's first open after ``check`` on the device hashes nothing.

The same store (``recall`` / ``keep``) keeps checks that passed on exact bytes: a graph's declared inputs and
outputs against its manifest, named by both files' sha256, are not read again for the same pair; and the CPU
probe's verdict (``runtime.hostcpu``).

Stamps guard against damage and mix-ups (a half-copied or replaced graph), like the hashes they stand for;
whoever can write the user's cache can also write the bundle. A stamp is never believed over the manifest: a
file whose stamp disagrees with the hash the manifest records is hashed again (``stamped_sha256(expected=)``),
and a good file gets its stamp rewritten. What stamps cannot see: bytes changed while the inode, size and both
times stay as they were (a storage medium or a tool writing beneath the file system); ``edgebert check`` hashes
every byte. ``EDGEBERT_STAMPS=0`` (or ``false`` / ``no`` / ``off``, any case) turns them off; ``edgebert check``
never uses them. A cache that cannot be written costs only the hash.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import zlib
from pathlib import Path

from edgebert.errors import ConfigError
from edgebert.files.hashing import sha256_file
from edgebert.files.jsonfile import loads
from edgebert.files.user_cache import cache_root

SETTLE_NS = 2_000_000_000
ENV = "EDGEBERT_STAMPS"
_ON, _OFF = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def stamps_enabled() -> bool:
    """``EDGEBERT_STAMPS``: on unless set to 0 / false / no / off (1 / true / yes / on, or unset or empty:
    on; any case); another value is a ``ConfigError`` naming the variable."""
    value = os.environ.get(ENV, "").strip().lower()
    if value in ("", *_ON):
        return True
    if value in _OFF:
        return False
    raise ConfigError(f"{ENV}={os.environ[ENV]!r} is neither on nor off",
                      f"set it to {', '.join(_OFF)} to turn stamps off, or to {', '.join(_ON)} or nothing to keep "
                      "them on")


def _identity(st: os.stat_result) -> str:
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


def _record(identity: str) -> Path:
    """The record's file: named by two checksums of the identity (no OpenSSL load at a session's start);
    a record holds its whole identity and ``recall`` compares it, so a name shared by two identities is
    only a miss."""
    data = identity.encode()
    return cache_root() / "stamps" / f"{zlib.crc32(data):08x}{zlib.adler32(data):08x}{len(data):x}"


def stamped_sha256(path: str | os.PathLike, expected: str | None = None) -> str:
    """The sha256 of ``path``: from its stamp while the file is unchanged, else hashed (and stamped).
    ``expected``: the hash the file should have (its manifest's); a stamp that says otherwise is not
    believed: the file is hashed again, and the stamp rewritten with what it holds."""
    if not stamps_enabled():
        return sha256_file(path)
    before = os.stat(path)
    identity = _identity(before)
    stamp = recall(identity)
    if stamp is not None and isinstance(stamp.get("sha256"), str) and expected in (None, stamp["sha256"]):
        return stamp["sha256"]
    return hashed_sha256(path, before)


def hashed_sha256(path: str | os.PathLike, before: os.stat_result | None = None) -> str:
    """The sha256 of ``path`` hashed now, never taken from a stamp (``edgebert check``), and kept as the
    file's stamp when the file is settled and did not change while it was hashed (``before``: its stat
    from before the hash, when the caller has it): sessions on this machine then hash it no more."""
    before = before if before is not None else os.stat(path)
    digest = sha256_file(path)
    if stamps_enabled():
        settled = time.time_ns() - max(before.st_mtime_ns, before.st_ctime_ns) > SETTLE_NS
        if settled and _identity(os.stat(path)) == _identity(before):
            keep(_identity(before), sha256=digest)
    return digest


def stamped(path: str | os.PathLike) -> str | None:
    """The sha256 a stamp holds for ``path`` as it is on disk now; None when it would have to be hashed."""
    if not stamps_enabled():
        return None
    try:
        stamp = recall(_identity(os.stat(path)))
    except OSError:
        return None
    return stamp["sha256"] if stamp is not None and isinstance(stamp.get("sha256"), str) else None


def recall(identity: str) -> dict | None:
    """The record kept under ``identity`` (a string naming exactly what it stands for), or None."""
    if not stamps_enabled():
        return None
    try:
        record = loads(_record(identity).read_bytes())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("identity") == identity else None


def keep(identity: str, **values) -> None:
    """Record ``values`` under ``identity``, atomically; a read-only or full cache only means it is not kept."""
    if not stamps_enabled():
        return
    record = _record(identity)
    tmp = record.with_name(f".{record.name}.{os.getpid()}.tmp")
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps({"identity": identity, **values}), encoding="utf-8")
        os.replace(tmp, record)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
