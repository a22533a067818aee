"""sentence-transformers' embedding quantization (``quantize_embeddings``) in numpy, for ``encode(precision=...)``.

sentence-transformers' own function imports torch; this one computes the same arrays without it:

* ``int8`` / ``uint8``: each dimension cut into 256 buckets between its minimum and maximum (``ranges``,
  else those of ``calibration_embeddings``, else those of the embeddings themselves -- what ``encode``
  does: the batch calibrates itself, so results depend on the batch); ``uint8`` is the bucket, ``int8``
  the bucket - 128;
* ``binary`` / ``ubinary``: one bit per dimension (value > 0), packed 8 to a byte (``binary``: - 128 as
  int8), so a 384-d vector becomes 48 bytes.
"""

from __future__ import annotations

import numpy as np

from edgebert.errors import ConfigError, DataError

PRECISIONS = ("float32", "int8", "uint8", "binary", "ubinary")


def check_precision(precision: object) -> str:
    if precision not in PRECISIONS:
        raise ConfigError(f"precision={precision!r} is not an embedding precision", f"use one of {', '.join(PRECISIONS)}")
    return str(precision)


def quantize_embeddings(embeddings: np.ndarray, precision: str, ranges: np.ndarray | None = None,
                        calibration_embeddings: np.ndarray | None = None) -> np.ndarray:
    """``embeddings`` (N, D) float at ``precision`` (see the module docstring); sentence-transformers'
    arguments and results."""
    check_precision(precision)
    embeddings = np.asarray(embeddings)
    if embeddings.dtype in (np.int8, np.uint8):
        raise DataError("embeddings to quantize must be float, not int8 or uint8", "quantize the float32 vectors")
    if precision == "float32":
        return embeddings.astype(np.float32)
    if precision.endswith("int8"):
        if ranges is None:
            source = embeddings if calibration_embeddings is None else np.asarray(calibration_embeddings)
            ranges = np.vstack((np.min(source, axis=0), np.max(source, axis=0)))
        starts = ranges[0, :]
        steps = (ranges[1, :] - ranges[0, :]) / 255
        steps = np.where(steps == 0, 1, steps)
        buckets = np.clip(np.floor((embeddings - starts) / steps), 0, 255)
        return buckets.astype(np.uint8) if precision == "uint8" else (buckets - 128).astype(np.int8)
    packed = np.packbits(embeddings > 0, axis=-1).reshape(embeddings.shape[0], -1)
    return packed if precision == "ubinary" else (packed - 128).astype(np.int8)
