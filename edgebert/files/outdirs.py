"""Where a command writes: the one rule for every output folder (``--out``, ``--report``).

The rule, for every command that writes a folder:

1. ``--out`` is a new folder, an empty one, or one *this same command* wrote before; reusing its own
   folder needs ``resume`` (training: continue the checkpoint) or ``overwrite`` (start again).
2. edgebert never deletes or overwrites a file it did not write. A folder it made carries
   ``.edgebert-out.json`` naming the command; ``overwrite`` deletes only the entries the command
   writes (its ``names``) and refuses, listing them, when the folder holds anything else.
3. Everything is checked before the first write; a run that fails before it has something worth
   keeping (``keep``) removes what it created, so a folder is never left half-written.
4. Temp files of writers that were killed (``.<name>.eb<pid>-*.tmp``, see ``atomic``) are removed when
   a command opens the folder again.
5. One run at a time: from its first write until it has published, a run holds the folder's lock
   (``locks``) and checks again that the folder is still what it checked; publishing never replaces
   a folder another run wrote meanwhile. The run that comes second fails with one line saying so.

``OutputDir(path, command, names=...)`` checks (writes nothing); ``with out.writing(): ...`` creates
the folder and cleans up on failure. OS errors on the path become one-line ``OutputError``\\ s naming it.
Folders written before markers existed are recognised when every entry is one of the command's names
and its ``signature`` file is there (e.g. a training run's ``training_state.pt``). Output *files*
(``attention --out``) follow the same rule: ``edgebert.files.outfiles``.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fnmatch
import os
from pathlib import Path
from typing import Callable, Iterator, Sequence

from edgebert.errors import CheckpointError, ConfigError, EdgebertError, OutputError
from edgebert.files.atomic import PublishRace, atomic_dir, is_stale_temp, remove_path, remove_stale_temps, write_json
from edgebert.files.failures import os_error, writing_place
from edgebert.files.jsonfile import loads
from edgebert.files.locks import is_lock_file, output_lock

MARKER = ".edgebert-out.json"
__all__ = ["MARKER", "OutputDir", "check_creatable", "os_error", "raced", "read_marker"]


def _first_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists() or candidate.is_symlink():
            return candidate
    return Path(path.anchor or ".")


def check_creatable(path: Path, what: str = "--out") -> None:
    """Raise ``OutputError`` if ``path`` cannot be made as a folder: an ancestor is a file (or a
    dangling symlink) or not writable. Writes nothing."""
    ancestor = _first_existing(path.parent if path.exists() else path)
    if ancestor != path and not ancestor.is_dir():
        raise OutputError(f"cannot create {what} {path}: {ancestor} is "
                          f"{'a broken symlink' if not ancestor.exists() else 'a file'}, not a folder",
                          "choose a path whose parents are folders")
    if ancestor != path and not os.access(ancestor, os.W_OK | os.X_OK):
        raise OutputError(f"cannot create {what} {path}: {ancestor} is not writable",
                          "choose a path you can write to")


def raced(path: Path, published: str | None = None) -> OutputError:
    """The loser of two runs given the same output: one line naming it, and what this run did publish
    (``published``, e.g. the bundle folder an export wrote before its archive lost), if anything."""
    done = f"this run published {published}, not {path}" if published else "this run published nothing"
    return OutputError(f"another run wrote {path} after this run checked it",
                       f"{done}; choose a new or empty output path")


@contextlib.contextmanager
def locked_parent(path: Path) -> Iterator[Path | None]:
    """Make the parents of ``path`` and hold its lock (``locks``) for the block; yields the topmost
    folder made (None if all were there). A failure removes the parents it made (if still empty)."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise os_error(path, exc, "create") from exc
    try:
        with output_lock(path):
            yield missing[-1] if missing else None
    except BaseException:
        for folder in missing[1:]:        # the parents only; the path itself is its owner's to remove
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise


def read_marker(folder: Path) -> dict | None:
    try:
        data = loads((folder / MARKER).read_bytes())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _some(names: Sequence[str]) -> str:
    """The first five names, and how many more (for messages)."""
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def _matches(name: str, names: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in names)


def _unnamed(entry: Path, names: Sequence[str], prefix: str = "") -> list[str]:
    """The paths under ``entry`` (relative to the output folder) that no name covers: a name matches an
    entry whole; a folder that names such as ``onnx/model.onnx`` reach into is looked into, file by file."""
    rel = prefix + entry.name
    if _matches(rel, names):
        return []
    if entry.is_dir() and not entry.is_symlink() and any(n.startswith(f"{rel}/") for n in names):
        return [path for child in sorted(entry.iterdir()) for path in _unnamed(child, names, f"{rel}/")]
    return [rel]


def _covered(name: str, names: Sequence[str]) -> bool:
    """Whether the top entry ``name`` is one of ``names``, or a folder they reach into."""
    return _matches(name, names) or any(n.startswith(f"{name}/") for n in names)


class OutputDir:
    """One command's output folder, checked against the rule (see the module docstring).

    ``names``: the entries this command writes (glob patterns; a path such as ``onnx/model.onnx`` names
    one file in a folder, and every other file in that folder is not the command's); ``signature``: a
    file that marks a folder this command wrote before markers existed. Construction writes nothing.
    """

    def __init__(self, path: str | os.PathLike, command: str, *, names: Sequence[str] = (),
                 resume: bool = False, overwrite: bool = False, signature: str | None = None,
                 flags: str = "--resume or --overwrite"):
        self.path = Path(path)
        self.command = command
        self.names = tuple(names) + (MARKER,)
        self.resume, self.overwrite = bool(resume), bool(overwrite)
        if self.resume and self.overwrite:
            raise ConfigError("--resume continues a run, --overwrite starts it again", "pass one of the two")
        self._signature, self._flags = signature, flags
        self.state = self._state_of(self.path)   # new | empty | resume | overwrite
        self._made: Path | None = None             # the topmost folder this run created

    # ------------------------------------------------------------------ the rule
    def _state_of(self, folder: Path) -> str:
        """The rule applied to ``folder`` (the output path, or the same folder moved aside to be
        replaced); messages name the output path."""
        path, who = self.path, f"`edgebert {self.command}`"
        if folder.is_symlink() and not folder.exists():
            raise OutputError(f"{path} is a broken symlink", "choose a new or empty folder")
        if folder.exists() and not folder.is_dir():
            raise OutputError(f"{path} is a file, not a folder", "choose a new or empty folder")
        if not folder.exists():
            if self.resume:
                raise CheckpointError(f"cannot resume: {path} does not exist", "run without --resume to start")
            check_creatable(path)
            return "new"
        try:
            entries = [p for p in folder.iterdir() if not (is_stale_temp(p) or is_lock_file(p))]
            foreign = sorted(rel for entry in entries for rel in _unnamed(entry, self.names))
        except OSError as exc:
            raise os_error(path, exc, "read") from exc
        if not entries:
            if self.resume:
                raise CheckpointError(f"cannot resume: {path} is empty", "run without --resume to start")
            return "empty"
        marker = read_marker(folder)
        names = [p.name for p in entries]
        signature = self._signature
        ours = (marker.get("command") == self.command if marker
                else bool(signature) and signature in names and not foreign)
        if not ours:
            if marker:
                raise OutputError(f"{path} holds the output of `edgebert {marker.get('command')}`, not of {who}",
                                  "choose a new or empty folder")
            raise OutputError(f"{path} is not empty and was not written by {who} (it holds {_some(sorted(names))})",
                              "choose a new or empty folder")
        if self.resume:
            return "resume"
        if not self.overwrite:
            raise OutputError(f"{path} already holds the output of {who}",
                              f"pass {self._flags} to reuse it, or choose another folder")
        if foreign:
            raise OutputError(f"{path} holds files {who} did not write ({_some(foreign)}); --overwrite never "
                              "deletes them",
                              "move them away or choose another folder")
        return "overwrite"

    def recheck(self, folder: Path | None = None) -> None:
        """Raise the one-line ``raced`` error unless ``folder`` (default: the output path) is still
        what construction checked (a new folder and an empty one count as the same)."""
        try:
            now = self._state_of(folder or self.path)
        except EdgebertError as exc:
            raise raced(self.path) from exc
        if now != self.state and not {now, self.state} <= {"new", "empty"}:
            raise raced(self.path)

    # ------------------------------------------------------------------ writing
    def create(self) -> Path:
        """Make the folder (and its marker); with ``overwrite``, delete this command's old entries.
        Done under the folder's lock, after checking it again."""
        with locked_parent(self.path) as made:
            return self._create(made)

    def _create(self, made: Path | None) -> Path:
        self.recheck()
        path = self.path
        try:
            if not path.exists():
                path.mkdir(exist_ok=True)
                self._made = made
            remove_stale_temps(path)
            if self.state == "overwrite":
                for entry in path.iterdir():
                    if _covered(entry.name, self.names):
                        remove_path(entry)
            if self.state != "resume" or not (path / MARKER).exists():
                self._marker(path)
        except OSError as exc:
            raise os_error(path, exc, "create") from exc
        return path

    def _marker(self, folder: Path) -> None:
        write_json(folder / MARKER, {"command": self.command, "format": 1,
                                     "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")})

    @contextlib.contextmanager
    def staged(self) -> Iterator[Path]:
        """For a command that writes its folder as a whole (export, import-hf): yield a temp folder
        beside it, which replaces it only when the block succeeds (``atomic.atomic_dir``); a failure
        leaves the folder as it was. The folder's lock is held for the block, and what is replaced
        is checked again once moved aside (a folder another run published meanwhile is never
        replaced: ``raced``). Killed writers' temp folders beside it are removed first."""
        if self.path.parent.is_dir():
            remove_stale_temps(self.path.parent)
        with locked_parent(self.path):
            self.recheck()
            try:
                with atomic_dir(self.path, accept_old=self.recheck, kind="out") as tmp:
                    self._marker(tmp)
                    yield tmp
            except PublishRace as exc:
                raise raced(self.path) from exc

    def discard(self) -> None:
        """Remove what this run created: the folder it made, or (a folder that was empty or is being
        overwritten) every entry in it. A resumed run's folder is left as it is."""
        if self.state == "resume":
            return
        with contextlib.suppress(OSError):
            if self._made is not None:
                remove_path(self._made)
            elif self.path.is_dir():
                for entry in self.path.iterdir():
                    remove_path(entry)

    @contextlib.contextmanager
    def writing(self, keep: Callable[[], bool] | None = None, enabled: bool = True) -> Iterator[Path]:
        """``create()``, run the block, and on any failure ``discard()`` unless ``keep()`` says the
        folder now holds something worth keeping (e.g. a committed checkpoint). The folder's lock is
        held for the whole block. ``enabled=False`` (other processes of a torchrun job) does neither."""
        if not enabled:
            yield self.path
            return
        with locked_parent(self.path) as made:
            self._create(made)
            try:
                with writing_place(self.path, "out"):   # a full disk is named before discard() frees it
                    yield self.path
            except BaseException:
                if not (keep and keep()):
                    self.discard()
                raise
