"""Sentence vectors for ``EdgeSession``: the pooled batches behind ``embed``, and sentence-transformers'
own API (``encode``, ``similarity``, ``get_sentence_embedding_dimension``) so that replacing
``SentenceTransformer(path)`` by ``EdgeSession(bundle)`` is a one-line change.

``encode`` keeps sentence-transformers' names, defaults and shapes: a str gives a 1-D vector, a list a
2-D array (``convert_to_numpy=False``: a list of 1-D arrays; there is no torch here, so no tensors);
the model's own pooling and ``Normalize`` apply as in sentence-transformers (``normalize_embeddings``
adds a normalization, never removes the model's); texts are cut at the model's ``max_seq_length``
(``sentence_bert_config.json``) when it states one, and ``prompt`` is put before every text (left out
of the pooling when the model's pooling says ``include_prompt: false``). ``similarity`` is the cosine
matrix, as ``model.similarity`` with sentence-transformers' default cosine.

A text with no tokens (``""``, only spaces or characters the tokenizer drops) has no meaning to pool:
``embed`` and ``encode`` give it the zero vector (norm 0; its cosine with anything is 0), where
sentence-transformers would pool the [CLS] [SEP] frame. Torch-free.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from edgebert.bundle.pooling import SentencePooling
from edgebert.errors import DataError
from edgebert.runtime.text import TextEncoder, check_texts, length_sorted_batches, pad_batch
from edgebert.runtime.vector_pooling import choose_pooling, cosine_matrix, pool, unit_rows


class SentenceMethods:
    """Mixed into ``EdgeSession`` (which provides ``encoder``, ``manifest``, ``hidden_size``, ``run``,
    ``pad_id``, ``max_length``, ``_require`` and ``_batch_size``)."""

    encoder: TextEncoder
    hidden_size: int
    pad_id: int
    max_length: int

    @property
    def pooling(self) -> SentencePooling:
        """How this bundle's model pools (its manifest's ``pooling``), or edgebert's default (mean)."""
        return choose_pooling(None, self.manifest.pooling)

    def get_sentence_embedding_dimension(self) -> int:
        return int(self.hidden_size)

    def _vectors(self, items: list[str], pooling: SentencePooling, normalize: bool, batch_size: int | None,
                 truncate: bool, encoder: TextEncoder | None = None, prompt: str | None = None,
                 progress: bool = False) -> np.ndarray:
        """(N, hidden) float32 sentence vectors of ``items`` in input order (see the module docstring)."""
        encoder = encoder or self.encoder
        texts = [prompt + t for t in items] if prompt else items
        rows = encoder.encode(texts, False, truncate)
        skip = encoder.prefix_length + len(encoder.pieces([prompt])[0]) if prompt and not pooling.include_prompt else 0
        framed = len(encoder.frame(np.zeros(0, np.int64)))
        blank = np.asarray([len(r) <= framed for r in (encoder.encode(items, False, True) if prompt else rows)], bool)
        result = np.zeros((len(rows), self.hidden_size), dtype=np.float32)
        size = self._batch_size(batch_size)
        batches = list(length_sorted_batches(rows, size))
        for idx in _with_progress(batches, progress):
            feeds = pad_batch([rows[i] for i in idx], self.pad_id)
            hidden = self.run(feeds, ["last_hidden_state"])["last_hidden_state"]          # (B, T, H)
            result[idx] = pool(hidden, feeds["attention_mask"], pooling.mode, skip)
        if normalize and len(result):
            result = unit_rows(result)
        result[blank] = 0.0
        return result

    def encode(self, sentences: str | Sequence[str], batch_size: int = 32, show_progress_bar: bool = False,
               normalize_embeddings: bool = False, convert_to_numpy: bool = True,
               prompt: str | None = None) -> np.ndarray | list[np.ndarray]:
        """Sentence embeddings as ``SentenceTransformer.encode`` gives them (see the module docstring)."""
        self._require("embed", "encode")
        items, _ = check_texts(sentences, what="sentences")
        if prompt is not None and not isinstance(prompt, str):
            raise DataError(f"prompt is a {type(prompt).__name__}, expected a str")
        pooling = self.pooling
        limit = pooling.max_seq_length
        encoder = self.encoder.with_max_length(min(limit, self.max_length)) if limit else self.encoder
        vectors = self._vectors(items, pooling, pooling.normalize or bool(normalize_embeddings), batch_size,
                                True, encoder, prompt, bool(show_progress_bar))
        if isinstance(sentences, str):
            return vectors[0]
        return vectors if convert_to_numpy else list(vectors)

    def similarity(self, a: Any, b: Any) -> np.ndarray:
        """(N, M) float32 cosine similarities of the vectors in ``a`` and ``b`` (each one vector or a list
        / 2-D array of them), as sentence-transformers' ``model.similarity``; a zero vector scores 0."""
        left, right = _matrix(a, "a"), _matrix(b, "b")
        if left.shape[1] != right.shape[1]:
            raise DataError(f"similarity(): a has vectors of {left.shape[1]}, b of {right.shape[1]}",
                            "compare embeddings of the same model")
        return cosine_matrix(left, right)


def _matrix(value: Any, name: str) -> np.ndarray:
    try:       # float64: a float64 vector past float32's range keeps its direction
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise DataError(f"similarity(): {name} is not a vector or a list of vectors ({exc})") from None
    if array.ndim == 1:
        array = array[None, :]
    if array.ndim != 2 or not array.shape[1]:
        raise DataError(f"similarity(): {name} has shape {array.shape}; expected (hidden,) or (N, hidden)")
    if not np.isfinite(array).all():
        raise DataError(f"similarity(): {name} holds NaN or infinite values", "compare finite embeddings")
    return array


def _with_progress(batches: list, show: bool):
    """The batches, under a rich progress bar on stderr when ``show``."""
    if not show:
        return batches
    from rich.progress import track

    return track(batches, description="encode", console=_stderr(), transient=True)


def _stderr():
    from rich.console import Console

    return Console(stderr=True)

