"""The arguments an ``EdgeSession`` takes and the arrays ``run()`` is fed, checked: each bad value is one
``ConfigError`` / ``DataError`` that names it and says what to pass."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from edgebert.errors import ConfigError, DataError

__all__ = ["ORT_LOG_ENV", "QUIET_ORT_LOG", "CPU_BATCH_TOKENS", "is_int", "check_batch_size", "check_batch_tokens",
           "check_feeds", "int64_ids", "check_ort_log_level"]

ORT_LOG_ENV = "EDGEBERT_ORT_LOG_LEVEL"
QUIET_ORT_LOG = 4            # onnxruntime's "fatal" only: its errors reach the caller as typed exceptions
# Padded tokens per CPU call (``batch_tokens``'s default): MiniLM INT8 on SST-2 dev + WikiText-2 paragraphs (lengths
# 4-417), 2-vCPU Xeon, 1 thread: 150 / 80 texts/s at batch 32 with / without it (calls of 600 rows), about the rate
# of batch 8; 512-2,048 measured within noise of each other (benchmarks/results/scaleout/README.md).
CPU_BATCH_TOKENS = 1024


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


def check_batch_tokens(batch_tokens: Any) -> None:
    """None (the provider's default), 0 (no cap) or a positive integer."""
    if batch_tokens is not None and (not is_int(batch_tokens) or batch_tokens < 0):
        raise ConfigError(f"batch_tokens={batch_tokens!r} must be a non-negative integer",
                          "0 for no cap, or leave it unset (None) for the provider's default")


def check_feeds(feeds: dict[str, np.ndarray], cfg: Any, bundle_dir: Any) -> None:
    """``DataError`` naming the input the graph cannot take: not 2-D, shapes that differ, token ids or token
    types outside the embedding tables (``cfg``: the manifest's model config), more tokens than positions."""
    shape = feeds["input_ids"].shape
    for name, array in feeds.items():
        if array.ndim != 2 or array.shape != shape:
            raise DataError(f"run(): {name} has shape {array.shape}; every input must be (batch, sequence) "
                            f"like input_ids {shape}", "pad the batch with edgebert.runtime.pad_batch")
    if shape[1] > cfg.max_position_embeddings:
        raise DataError(f"run(): inputs of {shape[1]} tokens; {bundle_dir} has "
                        f"{cfg.max_position_embeddings} positions", "shorten or truncate the texts")
    for name, size in (("input_ids", cfg.vocab_size), ("token_type_ids", cfg.type_vocab_size)):
        array = feeds.get(name)
        if size is None or array is None or not array.size:
            continue
        low, high = int(array.min()), int(array.max())
        if low < 0 or high >= size:
            raise DataError(f"run(): {name} holds {low if low < 0 else high}, outside 0..{size - 1} of "
                            f"{bundle_dir}", "make the ids with this bundle's tokenizer (session.tokenize)")
