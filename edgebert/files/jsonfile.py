"""Reading a JSON object from a file (torch-free): the one reader behind every config.json, saved
recipe and model directory edgebert opens, so every bad file gets the same one-line error."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from edgebert.errors import ConfigError


def read_json_object(path: str | os.PathLike, what: str = "") -> dict[str, Any]:
    """The JSON object in ``path``; ``ConfigError`` naming the file when it cannot be read, is not JSON,
    or holds something other than an object. ``what`` ("a model config", ...) goes into the message."""
    path = Path(path)
    label = f"{path} ({what})" if what else str(path)
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{label} is not valid JSON ({exc})") from exc
    except RecursionError as exc:
        raise ConfigError(f"{label} is nested too deeply to read") from exc
    except OSError as exc:
        raise ConfigError(f"{label} cannot be read ({exc.strerror or exc})") from exc
    if not isinstance(value, dict):
        raise ConfigError(f"{label} must hold a JSON object")
    return value
