"""Where a command writes: the one rule for every output folder (``--out``, ``--report``).

The rule, for every command that writes a folder:

1. ``--out`` is a new folder, an empty one, or one *this same command* wrote before; reusing its own
   folder needs ``resume`` (training: continue the checkpoint) or ``overwrite`` (start again).
2. edgebert never deletes or overwrites a file it did not write. A folder it made carries
   ``.edgebert-out.json`` naming the command; ``overwrite`` deletes only the entries the command
   writes (its ``names``) and refuses, listing them, when the folder holds anything else.
3. Everything is checked before the first write; a run that fails before it has something worth
   keeping (``keep``) removes what it created, so a folder is never left half-written.
4. Temp files of writers that were killed (``.<name>.eb<pid>-*.tmp``, see ``fileio``) are removed when
   a command opens the folder again.

``OutputDir(path, command, names=...)`` checks (writes nothing); ``with out.writing(): ...`` creates
the folder and cleans up on failure. OS errors on the path become one-line ``OutputError``\\ s naming it.
Folders written before markers existed are recognised when every entry is one of the command's names
and its ``signature`` file is there (e.g. a training run's ``training_state.pt``).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fnmatch
import json
import os
from pathlib import Path
from typing import Callable, Iterator, Sequence

from edgebert.errors import CheckpointError, ConfigError, OutputError
from edgebert.files.atomic import atomic_dir, is_stale_temp, remove_path, remove_stale_temps, write_json

MARKER = ".edgebert-out.json"


def os_error(path: Path, exc: OSError, doing: str = "write") -> OutputError:
    """An ``OSError`` on a user's path as one line that names the path."""
    reason = exc.strerror or type(exc).__name__
    where = exc.filename if exc.filename and Path(exc.filename) != path else None
    return OutputError(f"cannot {doing} {path}: {reason}" + (f" ({where})" if where else ""),
                       "choose a path you can write to")


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


def check_output_file(path: str | os.PathLike, what: str = "--out") -> Path:
    """An output *file* (e.g. a picture): not a folder, and its folder can be made. Writes nothing."""
    path = Path(path)
    if path.is_dir():
        raise OutputError(f"{what} {path} is a folder, not a file", f"name a file, e.g. {path / 'attn.png'}")
    check_creatable(path.parent, what)
    return path


def read_marker(folder: Path) -> dict | None:
    try:
        data = json.loads((folder / MARKER).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _matches(name: str, names: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in names)


class OutputDir:
    """One command's output folder, checked against the rule (see the module docstring).

    ``names``: the entries this command writes (glob patterns); ``signature``: a file that marks a
    folder this command wrote before markers existed. Construction writes nothing.
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
        self.state = self._check(signature, flags)   # new | empty | resume | overwrite
        self._made: Path | None = None                 # the topmost folder this run created

    # ------------------------------------------------------------------ the rule
    def _check(self, signature: str | None, flags: str) -> str:
        path, who = self.path, f"`edgebert {self.command}`"
        if path.is_symlink() and not path.exists():
            raise OutputError(f"{path} is a broken symlink", "choose a new or empty folder")
        if path.exists() and not path.is_dir():
            raise OutputError(f"{path} is a file, not a folder", "choose a new or empty folder")
        if not path.exists():
            if self.resume:
                raise CheckpointError(f"cannot resume: {path} does not exist", "run without --resume to start")
            check_creatable(path)
            return "new"
        try:
            entries = [p for p in path.iterdir() if not is_stale_temp(p)]
        except OSError as exc:
            raise os_error(path, exc, "read") from exc
        if not entries:
            if self.resume:
                raise CheckpointError(f"cannot resume: {path} is empty", "run without --resume to start")
            return "empty"
        marker = read_marker(path)
        names = [p.name for p in entries]
        ours = (marker.get("command") == self.command if marker
                else bool(signature) and signature in names and all(_matches(n, self.names) for n in names))
        if not ours:
            if marker:
                raise OutputError(f"{path} holds the output of `edgebert {marker.get('command')}`, not of {who}",
                                  "choose a new or empty folder")
            raise OutputError(f"{path} is not empty and was not written by {who}",
                              "choose a new or empty folder")
        if self.resume:
            return "resume"
        if not self.overwrite:
            raise OutputError(f"{path} already holds the output of {who}",
                              f"pass {flags} to reuse it, or choose another folder")
        foreign = sorted(n for n in names if not _matches(n, self.names))
        if foreign:
            shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
            raise OutputError(f"{path} holds files {who} did not write ({shown}); --overwrite never deletes them",
                              "move them away or choose another folder")
        return "overwrite"

    # ------------------------------------------------------------------ writing
    def create(self) -> Path:
        """Make the folder (and its marker); with ``overwrite``, delete this command's old entries."""
        path = self.path
        try:
            if self.state == "new":
                missing = [p for p in (path, *path.parents) if not p.exists()]
                path.mkdir(parents=True, exist_ok=True)
                self._made = missing[-1] if missing else None
            remove_stale_temps(path)
            if self.state == "overwrite":
                for entry in path.iterdir():
                    if _matches(entry.name, self.names):
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
        beside it, which replaces it only when the block succeeds (``fileio.atomic_dir``); a failure
        leaves the folder as it was. Killed writers' temp folders beside it are removed first."""
        if self.path.parent.is_dir():
            remove_stale_temps(self.path.parent)
        with atomic_dir(self.path) as tmp:
            self._marker(tmp)
            yield tmp

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
        folder now holds something worth keeping (e.g. a committed checkpoint). ``enabled=False``
        (other processes of a torchrun job) does neither."""
        if not enabled:
            yield self.path
            return
        self.create()
        try:
            yield self.path
        except BaseException:
            if not (keep and keep()):
                self.discard()
            raise
