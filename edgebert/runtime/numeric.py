"""The runtime's numeric helpers (numpy only): ``softmax`` for every probability the runtime, the
fidelity metrics and the tagger report, and ``nonfinite_rows`` for the check that no NaN or infinity
leaves a session unannounced."""

from __future__ import annotations

import numpy as np

__all__ = ["softmax", "nonfinite_rows"]


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Softmax along ``axis``, shifted by the maximum (no overflow); a float array keeps its dtype
    (float32 logits give float32 probabilities), integers become float64."""
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.floating):
        x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def nonfinite_rows(array: np.ndarray) -> int:
    """How many rows (entries of the first axis) of ``array`` hold a NaN or an infinity. One sum
    answers for a finite array; only when it is not finite (or overflows) are the rows counted."""
    a = np.asarray(array)
    if a.size == 0:
        return 0
    with np.errstate(all="ignore"):
        if np.isfinite(a.sum()):
            return 0
    bad = ~np.isfinite(a.reshape(len(a), -1) if a.ndim > 1 else a[:, None])
    return int(bad.any(axis=1).sum())
