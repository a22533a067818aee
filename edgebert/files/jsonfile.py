"""Reading JSON (torch-free): the one parser behind every JSON file edgebert opens (configs, saved recipes,
model folders, SQuAD files, output markers, records), so every bad file gets the same one-line error.

``loads(text)`` is ``json.loads`` (a leading byte order mark dropped) whose every failure is a
``JsonError`` (a ``ValueError``) with a one-line ``reason``: malformed JSON (line and column), bytes that
are not UTF-8, nesting deeper than Python's parser goes (its ``RecursionError``), a number too long to
convert, and a string holding a lone surrogate (``"\\ud800"``: half a UTF-16 pair, which JSON's grammar
lets through but which is no text: the tokenizer refuses it with a raw ``TypeError`` and a UTF-8 write
with ``UnicodeEncodeError``; RFC 8259 8.2, I-JSON RFC 7493 forbids it), named by its place in the
document (``data[0].paragraphs[0].context``).

``read_json(path, what, hint, error)``: a file's JSON value; ``error`` (``DataError`` unless given) naming
the file when it is missing, unreadable or not usable JSON. ``read_json_object``: the same for a file that
must hold an object (``ConfigError`` unless given). ``read_json_or_none(path)``: None for any of these
(records and markers edgebert wrote itself: one it cannot read is not its own).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from edgebert.errors import ConfigError, DataError, EdgebertError

__all__ = ["JsonError", "loads", "read_json", "read_json_object", "read_json_or_none"]

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")      # where a lone surrogate can come from in JSON text


class JsonError(ValueError):
    """Text that is not usable JSON; ``reason`` completes a sentence that starts with the file's name,
    ``hint`` (where there is one) says what to change in it."""

    def __init__(self, reason: str, hint: str | None = None):
        super().__init__(reason)
        self.reason, self.hint = reason, hint


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _surrogate(value: Any) -> str | None:
    """Where the first string of ``value`` (a key or a value) holding a lone surrogate is, and which; None
    when there is none."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        place, item = stack.pop()
        if isinstance(item, str) and not _utf8(item):
            at = next(i for i, c in enumerate(item) if 0xD800 <= ord(c) <= 0xDFFF)
            return f"{place or 'the top-level string'} (character {at}: \\u{ord(item[at]):04x})"
        elif isinstance(item, dict):
            for key, sub in reversed(item.items()):
                stack.append((f"{place}.{key}" if place else str(key), sub))
                stack.append((f"a key of {place or 'the top-level object'}", key))
        elif isinstance(item, list):
            stack.extend((f"{place}[{i}]", sub) for i, sub in reversed(list(enumerate(item))))
    return None


def loads(text: str | bytes) -> Any:
    """``json.loads(text)``; ``JsonError`` for every way it can fail (see the module docstring)."""
    try:
        if isinstance(text, (bytes, bytearray)):
            text = bytes(text).decode("utf-8")
        text = text.removeprefix("\ufeff")          # a byte order mark, as textfiles.read_utf8 drops it
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise JsonError(f"is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    except UnicodeDecodeError as exc:
        data = exc.object
        line, column = data.count(b"\n", 0, exc.start) + 1, exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise JsonError(f"is not UTF-8 (byte 0x{data[exc.start]:02x} at line {line}, column {column})") from None
    except RecursionError:
        raise JsonError("is nested too deeply to read (arrays or objects inside each other over about "
                        "1000 levels)") from None
    except ValueError as exc:                     # an integer of more digits than Python converts
        raise JsonError(f"is not valid JSON ({str(exc).split(';')[0]})") from None
    if _SURROGATE_ESCAPE.search(text) or not _utf8(text):
        place = _surrogate(value)
        if place is not None:
            raise JsonError(f"has a lone surrogate at {place}: half a UTF-16 pair, not a character",
                            "write the character itself, or both halves of its \\ud83d\\ude00 pair")
    return value


def read_json(path: str | os.PathLike, what: str = "", hint: str | None = None,
              error: type[EdgebertError] = DataError) -> Any:
    """The JSON value in ``path``; ``error`` naming the file (and ``what`` it is: "a SQuAD file", ...) when
    it is missing, cannot be read or is not usable JSON, with ``hint`` saying what to do."""
    path = Path(path)
    label = f"{path} ({what})" if what else str(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError as exc:
        raise error(f"{label} not found", hint or "check the path") from exc
    except OSError as exc:
        raise error(f"{label} cannot be read ({exc.strerror or exc})", hint) from exc
    try:
        return loads(data)
    except JsonError as exc:
        raise error(f"{label} {exc.reason}", exc.hint or hint) from None


def read_json_object(path: str | os.PathLike, what: str = "", hint: str | None = None,
                     error: type[EdgebertError] = ConfigError) -> dict[str, Any]:
    """The JSON object in ``path`` (``read_json``); ``error`` naming the file also when it holds something
    other than an object."""
    value = read_json(path, what, hint, error)
    if not isinstance(value, dict):
        raise error(f"{f'{path} ({what})' if what else path} must hold a JSON object", hint)
    return value


def read_json_or_none(path: str | os.PathLike) -> Any:
    """The JSON value in ``path``, or None where it cannot be read or is not usable JSON."""
    try:
        return loads(Path(path).read_bytes())
    except (OSError, JsonError):
        return None
