"""Where a command writes one file (``attention --out``): the output rule of ``outdirs``, for a file.

1. The file is new or empty (0 bytes); a file this same command wrote before is replaced only with
   ``overwrite``; any other file is the user's and is never replaced (nor a folder, nor a symlink).
   A command recognises its own files by a stamp it writes into them (``ours``: e.g. the PNG text
   chunk ``Software: edgebert attention``, read by ``png_software``).
2. Checked before anything is computed; written to a temp file beside it, then published while
   holding the file's lock (``locks``) and only if the file is still what was checked: a new file
   is published create-or-fail, so of two runs given the same ``--out`` exactly one writes it.
"""

from __future__ import annotations

import contextlib
import os
import struct
import zlib
from pathlib import Path
from typing import Callable, Iterator

from edgebert.errors import OutputError
from edgebert.files.atomic import PublishRace, atomic_path
from edgebert.files.outdirs import check_creatable, locked_parent, raced

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_software(path: str | os.PathLike, limit: int = 64) -> str | None:
    """The ``Software`` text of a PNG file (tEXt/zTXt/iTXt before the image data), None if it is not a
    PNG or has none. Reads only the chunk headers and text chunks."""
    try:
        with open(path, "rb") as fh:
            if fh.read(8) != PNG_SIGNATURE:
                return None
            for _ in range(limit):
                head = fh.read(8)
                if len(head) < 8:
                    return None
                size, kind = struct.unpack(">I4s", head)
                if kind in (b"IDAT", b"IEND") or size > 1 << 20:
                    return None
                if kind not in (b"tEXt", b"zTXt", b"iTXt"):
                    fh.seek(size + 4, os.SEEK_CUR)
                    continue
                key, _, value = fh.read(size).partition(b"\0")
                fh.read(4)
                if key == b"Software":
                    return _chunk_text(kind, value)
    except (OSError, struct.error, zlib.error, UnicodeDecodeError):
        return None
    return None


def _chunk_text(kind: bytes, value: bytes) -> str:
    if kind == b"zTXt":
        return zlib.decompress(value[1:]).decode("latin-1")
    if kind == b"iTXt":      # compression flag, method, language\0, translated keyword\0, text
        flag, rest = value[0], value[2:]
        text = rest.split(b"\0", 2)[-1]
        return (zlib.decompress(text) if flag else text).decode("utf-8")
    return value.decode("latin-1")


class OutputFile:
    """One command's output file, checked against the rule (see the module docstring).

    ``ours(path)``: whether an existing file was written by this command. Construction writes nothing.
    """

    def __init__(self, path: str | os.PathLike, command: str, *, ours: Callable[[Path], bool],
                 overwrite: bool = False, what: str = "--out"):
        self.path, self.command, self.what = Path(path), command, what
        self.ours, self.overwrite = ours, bool(overwrite)
        self.state = self._state()                     # new | empty | overwrite
        self._seen = self._identity()
        self._published: str | None = None

    def _state(self) -> str:
        path, who = self.path, f"`edgebert {self.command}`"
        if path.is_symlink():
            raise OutputError(f"{self.what} {path} is a symlink", "name a new file")
        if path.is_dir():
            raise OutputError(f"{self.what} {path} is a folder, not a file", f"name a file, e.g. {path / 'attn.png'}")
        if not path.exists():
            check_creatable(path.parent, self.what)
            return "new"
        if not path.is_file():
            raise OutputError(f"{self.what} {path} is not a regular file", "name a new file")
        if path.stat().st_size == 0:
            return "empty"
        if not self.ours(path):
            raise OutputError(f"{self.what} {path} already exists and was not written by {who}",
                              "name a new file; edgebert never replaces a file it did not write")
        if not self.overwrite:
            raise OutputError(f"{self.what} {path} already holds the output of {who}",
                              "pass --overwrite to replace it, or name another file")
        return "overwrite"

    def _identity(self) -> tuple | None:
        try:
            st = self.path.lstat()
        except FileNotFoundError:
            return None
        return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns

    def _still_as_checked(self) -> None:
        if self._identity() != self._seen:
            raise raced(self.path, self._published)

    @contextlib.contextmanager
    def writing(self, published: str | None = None) -> Iterator[Path]:
        """Yield a temp path to write the file to; on success it becomes the output, under the file's
        lock and only if the output is still what was checked (else ``raced``, nothing replaced).
        ``published``: what the run already published before this file (named when it loses)."""
        self._published = published
        with locked_parent(self.path):
            self._still_as_checked()
            try:
                with atomic_path(self.path, check=self._still_as_checked, exclusive=self.state == "new",
                                 kind="out") as tmp:
                    yield tmp
            except PublishRace as exc:
                raise raced(self.path, published) from exc
