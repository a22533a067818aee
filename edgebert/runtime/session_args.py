"""The arguments an ``EdgeSession`` takes and the arrays ``run()`` is fed, checked: each bad value is one
``ConfigError`` / ``DataError`` that names it and says what to pass."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from edgebert.errors import ConfigError, DataError

__all__ = ["ORT_LOG_ENV", "QUIET_ORT_LOG", "is_int", "check_batch_size", "int64_ids", "check_ort_log_level"]

ORT_LOG_ENV = "EDGEBERT_ORT_LOG_LEVEL"
QUIET_ORT_LOG = 4            # onnxruntime's "fatal" only: its errors reach the caller as typed exceptions


def is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def check_batch_size(batch_size: Any) -> int:
    """A positive integer (0 is an error, not "the default": leave it None for that)."""
    if not is_int(batch_size) or batch_size < 1:
        raise ConfigError(f"batch_size={batch_size!r} must be a positive integer",
                          "leave it unset (None) for the session's default")
    return int(batch_size)


def int64_ids(name: str, value: Any) -> np.ndarray:
    """``value`` as a contiguous int64 array; ``DataError`` naming the input if it is not integers."""
    array = np.asarray(value)
    if array.dtype.kind not in "iub":
        raise DataError(f"run(): {name} is {array.dtype} data, not integer ids",
                        "pass int64 arrays (edgebert.runtime.pad_batch makes them)")
    return np.ascontiguousarray(array, dtype=np.int64)


def check_ort_log_level(level: Any) -> int:
    """``level``, else ``$EDGEBERT_ORT_LOG_LEVEL``, else 4 (quiet); ``ConfigError`` unless 0..4."""
    source = "ort_log_level"
    if level is None:
        level, source = os.environ.get(ORT_LOG_ENV, "").strip() or QUIET_ORT_LOG, ORT_LOG_ENV
    text = str(level).strip()
    value = int(text) if isinstance(level, (int, str)) and not isinstance(level, bool) and text.isdigit() else -1
    if not 0 <= value <= 4:
        raise ConfigError(f"{source}={level!r} must be an onnxruntime log severity from 0 (verbose) to 4 "
                          "(fatal only)", f"leave it unset for {QUIET_ORT_LOG} (onnxruntime's errors arrive "
                                          "as exceptions)")
    return value
