"""The per-user cache folder: ``$EDGEBERT_CACHE``, or ``~/.cache/edgebert`` where it is unset or blank
(never the current folder). Extracted archives, TensorRT engines, verification stamps and the CPU probe's
verdict each live in a sub-folder of it."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    value = os.environ.get("EDGEBERT_CACHE", "").strip()
    return Path(value) if value else Path.home() / ".cache" / "edgebert"
