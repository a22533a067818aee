"""Real text for calibration and accuracy checks, streamed in token batches with bounded memory.

``iter_sentences`` streams texts with ``edgebert.textfiles.iter_texts`` (TSV with a text column,
WikiText raw, or plain text; nothing is loaded whole).

``TextBatches`` re-reads the file on every pass (a generator, capped at ``limit`` sentences) and
yields ONNX feeds; ``TextCalibrationReader`` adapts it to onnxruntime's ``CalibrationDataReader``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np
from onnxruntime.quantization import CalibrationDataReader

from edgebert.errors import DataError
from edgebert.textfiles import iter_texts

Feeds = dict[str, np.ndarray]


def iter_sentences(path: str | Path, limit: int | None = None) -> Iterator[str]:
    """Texts of ``path`` in file order, at most ``limit`` (the first text column of a pair TSV);
    see ``edgebert.textfiles``. DataError if missing, not UTF-8 or empty."""
    return iter_texts(path, limit, pairs=False)


def encode_batch(tokenizer, texts: list[str], max_length: int, pad_to: int | None = None,
                 pad_id: int = 0) -> Feeds:
    """Token ids, attention mask and token types, right-padded to the longest text (or ``pad_to``)."""
    encodings = tokenizer.encode_batch(texts)
    lengths = [min(len(e.ids), max_length) for e in encodings]
    width = pad_to or max(lengths)
    ids = np.full((len(texts), width), pad_id, dtype=np.int64)
    mask = np.zeros_like(ids)
    types = np.zeros_like(ids)
    for row, (enc, n) in enumerate(zip(encodings, lengths)):
        ids[row, :n] = enc.ids[:n]
        mask[row, :n] = 1
        types[row, :n] = enc.type_ids[:n]
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def prepared_tokenizer(tokenizer_file: str | Path, max_length: int):
    """A ``tokenizers.Tokenizer`` with truncation at ``max_length`` and no built-in padding (we pad)."""
    from tokenizers import Tokenizer

    try:
        tok = Tokenizer.from_file(str(tokenizer_file))
    except Exception as exc:  # tokenizers raises a bare Exception for malformed JSON
        raise DataError(f"{tokenizer_file} is not a readable tokenizer.json ({exc})") from exc
    tok.no_padding()
    tok.enable_truncation(max_length)
    return tok


class TextBatches:
    """Re-iterable stream of ONNX feeds over the first ``limit`` texts of ``path``."""

    def __init__(self, path: str | Path, tokenizer, limit: int, batch_size: int = 32,
                 max_length: int = 128, pad_to: int | None = None, pad_id: int = 0):
        self.path, self.tokenizer, self.limit = Path(path), tokenizer, limit
        self.batch_size, self.max_length, self.pad_to, self.pad_id = batch_size, max_length, pad_to, pad_id

    def __iter__(self) -> Iterator[Feeds]:
        batch: list[str] = []
        for text in iter_sentences(self.path, self.limit):
            batch.append(text)
            if len(batch) == self.batch_size:
                yield encode_batch(self.tokenizer, batch, self.max_length, self.pad_to, self.pad_id)
                batch = []
        if batch:
            yield encode_batch(self.tokenizer, batch, self.max_length, self.pad_to, self.pad_id)

    def count(self) -> int:
        """How many texts a pass yields (reads the file once)."""
        return sum(1 for _ in iter_sentences(self.path, self.limit))

    def restricted(self, input_names: set[str]) -> Iterator[Feeds]:
        for feeds in self:
            yield {k: v for k, v in feeds.items() if k in input_names}


class TextCalibrationReader(CalibrationDataReader):
    """onnxruntime calibration reader over ``TextBatches``; ``rewind`` starts a fresh pass."""

    def __init__(self, batches: TextBatches, input_names: set[str] | None = None):
        self.batches = batches
        self.input_names = input_names or {"input_ids", "attention_mask", "token_type_ids"}
        self._it: Iterator[Feeds] | None = None
        self.rewind()

    def get_next(self) -> Feeds | None:
        return next(self._it, None)

    def rewind(self) -> None:
        self._it = self.batches.restricted(self.input_names)
