"""Token vectors -> one sentence vector (numpy), as sentence-transformers' ``Pooling`` computes it.

``mean`` averages the token vectors under the attention mask ([CLS] and [SEP] included), ``cls`` takes
the first token's vector, ``max`` the element-wise maximum over the unmasked tokens. ``skip`` leaves the
first tokens of every row out of ``mean`` / ``max`` (a prompt that the model's pooling excludes:
``include_prompt: false``). Which mode a session uses: ``choose_pooling`` (the caller's, else the
bundle's, else ``mean``). A caller may choose ``mean`` or ``cls`` (``CALLER_POOLINGS``); ``max`` is
reproduced for a model that states it, never put on one that does not. Torch-free.
"""

from __future__ import annotations

import numpy as np

from edgebert.bundle.pooling import POOLING_MODES, SentencePooling
from edgebert.errors import ConfigError

DEFAULT_POOLING = SentencePooling("mean", normalize=False, source="edgebert's default: the model states none")
CALLER_POOLINGS = ("mean", "cls")        # what embed(pooling=...) may ask for (a model may state max too)


def choose_pooling(requested: str | None, stated: SentencePooling | None) -> SentencePooling:
    """The caller's ``requested`` mode (``ConfigError`` unless one of ``CALLER_POOLINGS`` or the model's
    own) with the rest of what the model states; else the model's pooling; else ``DEFAULT_POOLING``."""
    base = stated or DEFAULT_POOLING
    if requested is None or requested == base.mode:
        return base
    if requested not in CALLER_POOLINGS:
        known = "a mode a model may state, not one to put on another model" if requested in POOLING_MODES \
            else "unknown"
        raise ConfigError(f"pooling={requested!r}: {known}", f"use one of {', '.join(CALLER_POOLINGS)}, or leave it "
                                                             f"unset for the model's own ({base.mode})")
    return SentencePooling(requested, base.normalize, base.include_prompt, base.max_seq_length, "the caller's choice")


def pool(hidden: np.ndarray, mask: np.ndarray, mode: str, skip: int = 0) -> np.ndarray:
    """(B, H) sentence vectors from (B, T, H) token vectors and the (B, T) attention mask."""
    if mode == "cls":
        return hidden[:, 0]
    weights = mask.astype(np.float32)
    if skip:
        weights = weights.copy()
        weights[:, :skip] = 0.0
    if mode == "max":
        masked = np.where(weights[:, :, None] > 0, hidden, -np.inf)
        out = masked.max(axis=1)
        return np.where(np.isfinite(out), out, 0.0).astype(np.float32)
    summed = (hidden * weights[:, :, None]).sum(axis=1)
    return summed / np.maximum(weights.sum(axis=1, keepdims=True), 1e-9)


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Each row scaled to unit L2 norm (a zero row stays zero), at least float32. Each row is first
    divided by its largest magnitude (in float64), so that its norm neither overflows (rows near 1e30,
    float16 rows past 256) nor underflows (rows near 1e-30) on the way."""
    rows = np.asarray(vectors)
    scaled = rows.astype(np.float64)
    if scaled.size:
        peak = np.abs(scaled).max(axis=1, keepdims=True)
        scaled /= np.where(peak > 0, peak, 1.0)
    norm = np.linalg.norm(scaled, axis=1, keepdims=True)
    return (scaled / np.where(norm > 0, norm, 1.0)).astype(np.promote_types(rows.dtype, np.float32))


def cosine_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(N, M) cosine similarities of the rows of ``a`` (N, H) and ``b`` (M, H); a zero row scores 0."""
    return (unit_rows(a) @ unit_rows(b).T).astype(np.float32)
