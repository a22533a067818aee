"""Atomic file writes: write to a temp file in the same folder, fsync, then rename over the target.

Every temp file or folder this module makes is named ``.<target>.eb<pid>-<random>.tmp``: the writing
process's id is in the name, so a later run can tell the leftovers of a killed process (its pid no
longer runs) from a write in progress, and ``remove_stale_temps`` deletes only those.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

from edgebert.files.failures import writing_place
from edgebert.files.locks import remove_stale_lock


def current_umask() -> int:
    """The process umask (read by setting it and setting it back): what plain files and folders get."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


_TEMP = re.compile(r"^\..+\.eb(\d+)-[^/]*\.tmp$")


def temp_prefix(target: Path) -> str:
    """The name start of this process's temp files for ``target`` (see the module docstring)."""
    return f".{target.name}.eb{os.getpid()}-"


def pid_alive(pid: int) -> bool:
    """Whether a process with this id runs (ours or another user's)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it runs, under another user
        return True
    return True


def is_stale_temp(path: Path) -> bool:
    """A temp file/folder of this module whose writing process is gone (and that we own)."""
    match = _TEMP.match(path.name)
    if not match or pid_alive(int(match.group(1))):
        return False
    try:
        return path.lstat().st_uid == os.getuid()
    except OSError:
        return False


def remove_stale_temps(folder: str | os.PathLike) -> list[Path]:
    """Delete the temp files and folders (and lock files, ``locks``) that killed writers left in
    ``folder``; returns them."""
    folder = Path(folder)
    removed = []
    if not folder.is_dir():
        return removed
    for path in folder.iterdir():
        if is_stale_temp(path):
            remove_path(path)
            removed.append(path)
        elif remove_stale_lock(path):
            removed.append(path)
    return removed


def remove_path(path: Path) -> None:
    """Delete a file, a symlink or a folder tree."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def fsync_dir(folder: Path) -> None:
    """Make a rename inside ``folder`` durable (no-op where directories cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike, *, check: Callable[[], None] | None = None,
                exclusive: bool = False, kind: str = "file") -> Iterator[Path]:
    """Yield a temp path next to ``target``; on success it is renamed onto ``target``.

    On error the temp file is removed and ``target`` keeps its previous content. The file gets the
    permissions of a plain new file (0666 less the umask), whatever the writer created it with.
    ``check()`` runs just before publishing (it raises if ``target`` is no longer what the caller
    checked); ``exclusive``: publish only if ``target`` does not exist (create-or-fail, a hard link),
    else ``PublishRace``. A full disk is one ``OutputError`` naming the place (``failures``).
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=temp_prefix(target), suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        with writing_place(target, kind):
            yield tmp_path
            os.chmod(tmp_path, 0o666 & ~current_umask())  # mkstemp (and some writers) make 0600
            with open(tmp_path, "rb+") as fh:
                os.fsync(fh.fileno())
            if check is not None:
                check()
            if exclusive:
                _link_new(tmp_path, target)
            else:
                os.replace(tmp_path, target)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


class PublishRace(FileExistsError):
    """Another writer made the target while this one was publishing it; nothing was replaced."""

    def __init__(self, target: Path):
        super().__init__(errno.EEXIST, "written by another process while publishing", str(target))


def _link_new(tmp: Path, target: Path) -> None:
    """Publish ``tmp`` as ``target`` only if no ``target`` exists (``PublishRace`` otherwise)."""
    try:
        os.link(tmp, target)
    except FileExistsError:
        raise PublishRace(target) from None
    except OSError:                     # no hard links here (some FUSE / SMB mounts): check, then rename
        if target.exists() or target.is_symlink():
            raise PublishRace(target) from None
        os.replace(tmp, target)
    else:
        tmp.unlink()


def jsonable(obj: Any) -> Any:
    """A dataclass (or nested dicts/lists/tuples) as plain JSON types: Paths become strings, tuples lists."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        obj = dataclasses.asdict(obj)
    if isinstance(obj, dict):
        return {k: jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    return obj


def write_text(target: str | os.PathLike, text: str) -> None:
    with atomic_path(target) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(target: str | os.PathLike, obj: Any) -> None:
    write_text(target, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def copy_file(src: str | os.PathLike, target: str | os.PathLike) -> None:
    with atomic_path(target) as tmp:
        shutil.copyfile(src, tmp)


@contextlib.contextmanager
def atomic_dir(target: str | os.PathLike, *, accept_old: Callable[[Path], None] | None = None,
               kind: str = "file") -> Iterator[Path]:
    """Yield a temp folder next to ``target``; on success it replaces ``target`` as a whole.

    A failure leaves no half-written folder behind, and an existing ``target`` untouched.
    ``accept_old(folder)``: the caller's check of the ``target`` being replaced, run on it after it
    was moved aside (so nothing can change it in between); when it raises, ``target`` is put back
    and nothing is published. A ``target`` that another writer made while this one was publishing is
    never replaced: ``PublishRace`` (the rename fails on a folder that is not empty).
    """
    target = Path(target)
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        from edgebert.errors import OutputError

        raise OutputError(f"{target} is {'a symlink' if target.is_symlink() else 'a file'}, not a folder",
                          "choose a new or empty folder")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=temp_prefix(target), suffix=".tmp", dir=target.parent))
    os.chmod(tmp, 0o777 & ~current_umask())
    try:
        with writing_place(target, kind):
            yield tmp
            _publish_dir(tmp, target, accept_old)
        fsync_dir(target.parent)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def _publish_dir(tmp: Path, target: Path, accept_old: Callable[[Path], None] | None) -> None:
    if not target.exists():
        try:
            os.rename(tmp, target)       # fails on a folder that is not empty (another writer's)
        except OSError as exc:
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
                raise PublishRace(target) from exc
            raise
        return
    old = Path(tempfile.mkdtemp(prefix=temp_prefix(target), suffix=".tmp", dir=target.parent))
    os.replace(target, old)              # an empty folder is replaced by a rename
    if accept_old is not None:
        try:
            accept_old(old)
        except BaseException:
            os.rename(old, target)
            raise
    os.replace(tmp, target)
    shutil.rmtree(old)


_WORK = re.compile(r"^edgebert-[a-z0-9]+-(\d+)-")


@contextlib.contextmanager
def work_dir(kind: str) -> Iterator[str]:
    """A private scratch folder ``<tmp>/edgebert-<kind>-<pid>-<random>`` for the block (its path, a
    string), removed when the block ends; the pid in the name lets ``remove_stale_work_dirs`` clean up
    after a killed process. A full disk there is one error that says to set ``TMPDIR``."""
    with tempfile.TemporaryDirectory(prefix=f"edgebert-{kind}-{os.getpid()}-") as folder:
        with writing_place(folder, "scratch"):
            yield folder


def remove_stale_work_dirs(root: str | os.PathLike | None = None) -> list[Path]:
    """Delete the ``work_dir`` folders of processes that no longer run (ours only); returns them."""
    root = Path(root or tempfile.gettempdir())
    removed = []
    try:
        entries = list(root.iterdir())
    except OSError:
        return removed
    for path in entries:
        match = _WORK.match(path.name)
        if not match or pid_alive(int(match.group(1))):
            continue
        try:
            if path.lstat().st_uid != os.getuid():
                continue
            remove_path(path)
        except OSError:
            continue
        removed.append(path)
    return removed
