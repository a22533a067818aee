"""One writer per output: the lock file ``.<name>.edgebert-lock`` beside a folder or file a command writes.

A command holds it (``fcntl.flock``, released by the kernel if the process dies) from the moment it
re-checks its output until it has published it, so two runs given the same ``--out`` cannot both
publish: the second is refused at once with one line naming the folder and the other run's pid. The
holder deletes the file when done; a taker checks that the file it locked is still the one at the path
(a holder may have deleted it meanwhile), so deleting it is safe. Where the filesystem has no locks
(some network mounts) the run goes on without one; publishing still refuses to replace what it did not
check (``edgebert.files.atomic``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
from pathlib import Path
from typing import Iterator

from edgebert.errors import OutputError
from edgebert.files.failures import os_error

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None

_LOCK = re.compile(r"^\..+\.edgebert-lock$")
_NO_LOCKS = (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL)


def lock_path(target: Path) -> Path:
    return target.parent / f".{target.name}.edgebert-lock"


def is_lock_file(path: Path) -> bool:
    return bool(_LOCK.match(path.name))


def _holder(fd: int) -> str:
    try:
        pid = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return ""
    return f" (pid {pid})" if pid.isdigit() else ""


def _take(lock: Path, target: Path) -> int | None:
    """The locked fd of ``lock``; None where locks are not supported; OutputError if another run holds it."""
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise OutputError(f"another edgebert run{holder} is writing {target}",
                              "wait for it to finish, or choose another output path") from None
        except OSError as exc:
            os.close(fd)
            if exc.errno in _NO_LOCKS:
                with contextlib.suppress(OSError):
                    lock.unlink()
                return None
            raise
        try:
            same = os.stat(lock).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)                      # the holder deleted it after we opened it: take the new one


@contextlib.contextmanager
def output_lock(target: str | os.PathLike) -> Iterator[None]:
    """Hold the lock of ``target`` for the block (its folder must exist); see the module docstring."""
    target = Path(target)
    lock = lock_path(target)
    if fcntl is None:
        yield
        return
    try:
        fd = _take(lock, target)
    except OSError as exc:                 # e.g. the folder is read-only
        raise os_error(target, exc) from exc
    if fd is None:
        yield
        return
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            lock.unlink()                  # while still holding it: see the module docstring
        os.close(fd)


def remove_stale_lock(path: Path) -> bool:
    """Delete a lock file no process holds (left by a killed run); True if it was deleted."""
    if fcntl is None or not is_lock_file(path):
        return False
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.stat(path).st_ino != os.fstat(fd).st_ino:
            return False
        path.unlink()
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
