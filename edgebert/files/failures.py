"""What a failed write says: the places this process is writing, and OS errors as one-line errors.

A write can fail where no file name is known (``[Errno 28] No space left on device`` raised inside
``torch.onnx.export``, a cryptic ``RuntimeError`` from ``torch.save`` on a full disk). Every writer of
``edgebert.files`` therefore runs inside ``writing_place(path, kind)``: while it runs, the place is on a
stack, and a failure leaving the innermost place, *before* anything is cleaned up, is turned into one
``OutputError`` that names the place whose disk filled up (``statvfs`` tells which one is full now):
``kind`` "out" (the user's ``--out``), "file" (one file being replaced) or "scratch" (a ``TMPDIR``
folder, whose message says to set ``TMPDIR``).
"""

from __future__ import annotations

import contextlib
import errno
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from edgebert.errors import EdgebertError, OutputError

DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
_KINDS = ("out", "file", "scratch")      # the order in which places are named when disks tie


@dataclass(frozen=True)
class Place:
    path: Path       # what the user knows: the --out folder, the file, the scratch folder
    kind: str        # "out" | "file" | "scratch"


_PLACES: list[Place] = []


def os_error(path: Path, exc: OSError, doing: str = "write") -> OutputError:
    """An ``OSError`` on a user's path as one line that names the path."""
    reason = exc.strerror or type(exc).__name__
    where = exc.filename if exc.filename and Path(exc.filename) != path else None
    return OutputError(f"cannot {doing} {path}: {reason}" + (f" ({where})" if where else ""),
                       "choose a path you can write to")


def _existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path(".")


def disk_of(path: Path) -> tuple[int, int, int] | None:
    """(device, bytes free to us, disk size) of the disk that holds ``path``; None where the OS cannot
    say. A disk out of inodes has 0 bytes free (it is as full as one out of blocks)."""
    try:
        where = _existing(path)
        st = os.statvfs(where)
        free = 0 if st.f_files and st.f_favail == 0 else st.f_bavail * st.f_frsize
        return os.stat(where).st_dev, free, st.f_blocks * st.f_frsize
    except OSError:
        return None


def is_full(path: Path) -> bool:
    """Whether the disk of ``path`` has (almost) no room left: under 1 MiB, and under 1% of its size
    (a small disk: under one 4 KiB block)."""
    disk = disk_of(path)
    return disk is not None and disk[1] < min(1 << 20, max(disk[2] // 100, 4096))


def looks_like_disk_full(exc: BaseException) -> bool:
    """An error a full disk raises: ENOSPC/EDQUOT, or a library's wrapping of it (safetensors says
    "No space left on device (os error 28)")."""
    if isinstance(exc, OSError) and exc.errno in DISK_FULL:
        return True
    text = str(exc)
    return "No space left on device" in text or "Disk quota exceeded" in text


def disk_full_error(places: list[Place]) -> OutputError:
    """The one line for a full disk: the place whose disk is full (outputs before scratch); where no
    disk looks full (a quota), the output, and the scratch folder too if it is on another disk."""
    full = [p for p in places if is_full(p.path)]
    if full:
        return _full(min(full, key=lambda p: _KINDS.index(p.kind)))
    place = min(places, key=lambda p: _KINDS.index(p.kind))
    scratch = next((p for p in places if p.kind == "scratch"), None)
    disks = {(disk_of(p.path) or (None,))[0] for p in (place, scratch) if p is not None}
    if scratch is None or place is scratch or len(disks) == 1:
        return _full(place)
    return OutputError(f"no space left on device while writing {place.path} or the scratch files in "
                       f"{scratch.path.parent}", "free space on those disks, choose another output path, "
                                                 "or set TMPDIR to a folder on a disk with room")


def _full(place: Place) -> OutputError:
    if place.kind == "scratch":
        return OutputError(f"no space left on device while writing scratch files in {place.path.parent}",
                           "free space there, or set TMPDIR to a folder on a disk with room")
    return OutputError(f"no space left on device while writing {place.path}",
                       "free space on that disk, or choose another output path")


def write_failure(exc: BaseException, places: list[Place]) -> OutputError | None:
    """The one-line error for ``exc`` leaving a writer, or None to let it through unchanged: disk
    full (named by ``disk_full_error``), a file over the size limit (EFBIG), or any error while a disk
    being written is full (e.g. ``torch.save``'s "unexpected pos" on a full disk)."""
    if isinstance(exc, EdgebertError) or not isinstance(exc, Exception) or not places:
        return None
    if looks_like_disk_full(exc) or (not isinstance(exc, OSError) or exc.filename is None) \
            and any(is_full(p.path) for p in places):
        return disk_full_error(places)
    if isinstance(exc, OSError) and exc.errno == errno.EFBIG:
        place = min(places, key=lambda p: _KINDS.index(p.kind))
        return OutputError(f"cannot write {place.path}: file too large for this disk or for the process's "
                           "file size limit (ulimit -f)", "raise the limit or write to another disk")
    return None


@contextlib.contextmanager
def writing_place(path: str | os.PathLike, kind: str = "file") -> Iterator[None]:
    """Run the block with ``path`` on the stack of places being written; a write failure leaving it
    becomes one ``OutputError`` (see the module docstring). Call it inside the block that cleans up,
    so the disk is measured before the temp files go."""
    assert kind in _KINDS, kind
    place = Place(Path(path), kind)
    _PLACES.append(place)
    try:
        yield
    except Exception as exc:
        error = write_failure(exc, list(_PLACES))
        if error is None:
            raise
        raise error from exc
    finally:
        del _PLACES[next(i for i, p in enumerate(_PLACES) if p is place)]
