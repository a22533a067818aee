"""Real text for calibration and accuracy checks, streamed in token batches with bounded memory.

``iter_sentences`` streams texts with ``edgebert.files.textfiles.iter_texts`` (TSV with a text column,
WikiText raw, or plain text; nothing is loaded whole).

``TextSource`` is a re-iterable slice of texts (a file, streamed, or the built-in English text);
``calibration_split`` cuts calibration text from the held-out text the accuracy gate measures on.
``TextBatches`` re-reads its source on every pass and yields ONNX feeds; ``TextCalibrationReader``
adapts it to onnxruntime's ``CalibrationDataReader``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
from onnxruntime.quantization import CalibrationDataReader

from edgebert.errors import DataError
from edgebert.files.textfiles import builtin_texts, iter_texts
from edgebert.runtime.held_out import BUILTIN_HELD_OUT

Feeds = dict[str, np.ndarray]
Say = Callable[..., None]        # a stage's progress callback (message, **figures)
INVARIANCE_ROWS = 8              # rows the batch-invariance probe runs alone and among long batch mates
MIN_GATE_TEXTS = 32      # fewer held-out texts than this cannot rank an accuracy loss of 0.005


def iter_sentences(path: str | Path, limit: int | None = None) -> Iterator[str]:
    """Texts of ``path`` in file order, at most ``limit`` (the first text column of a pair TSV);
    see ``edgebert.files.textfiles``. DataError if missing, not UTF-8 or empty."""
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


@dataclass(frozen=True)
class TextSource:
    """A re-iterable slice of texts: ``texts[skip:skip + limit]`` of a file (streamed) or of a list."""

    origin: Path | tuple[str, ...]
    limit: int | None = None
    skip: int = 0
    label: str = ""

    def __iter__(self) -> Iterator[str]:
        if isinstance(self.origin, Path):
            end = None if self.limit is None else self.skip + self.limit
            texts = iter_sentences(self.origin, end)
        else:
            texts = iter(self.origin)
        for i, text in enumerate(texts):
            if i < self.skip:
                continue
            if self.limit is not None and i >= self.skip + self.limit:
                return
            yield text

    def count(self) -> int:
        return sum(1 for _ in self)

    def describe(self) -> dict:
        source = str(self.origin.resolve()) if isinstance(self.origin, Path) else self.label or "list"
        return {"source": source, "skip": self.skip, "texts": self.count()}


@dataclass(frozen=True)
class CalibrationSplit:
    """Calibration text and the held-out text the accuracy gate measures on (never the same lines)."""

    calibration: TextSource
    held_out: TextSource
    note: str

    def describe(self) -> dict:
        return {"calibration": self.calibration.describe(), "held_out": self.held_out.describe(),
                "note": self.note}


def calibration_split(calib: Path | None, calib_size: int, gate_size: int) -> CalibrationSplit:
    """``calib`` None: the built-in English text (its calibration and held-out parts). A file: its first
    ``calib_size`` texts calibrate, the next ``gate_size`` are held out; a file with fewer than
    ``MIN_GATE_TEXTS`` texts after the calibration ones is gated on the built-in held-out text."""
    builtin_held = TextSource(tuple(builtin_texts("held-out")), gate_size, label=BUILTIN_HELD_OUT)   # check reads it
    if calib is None:
        return CalibrationSplit(TextSource(tuple(builtin_texts("calibration")), calib_size,
                                           label="built-in calibration text"), builtin_held,
                                "built-in English text: calibration and held-out lines are disjoint")
    calib = Path(calib)
    calibration = TextSource(calib, calib_size)
    held = TextSource(calib, gate_size, skip=calib_size)
    n_held = held.count()
    if n_held >= MIN_GATE_TEXTS:
        return CalibrationSplit(calibration, held, f"{calib.name}: texts 1-{calib_size} calibrate, the next "
                                                   f"{n_held} are held out for the accuracy gate")
    return CalibrationSplit(calibration, builtin_held,
                            f"{calib.name} has {n_held} texts after the first {calib_size} (fewer than "
                            f"{MIN_GATE_TEXTS}): the accuracy gate measures on the built-in held-out text")


class TextBatches:
    """Re-iterable stream of ONNX feeds over a ``TextSource`` (or the first ``limit`` texts of a file)."""

    def __init__(self, texts: str | Path | TextSource, tokenizer, limit: int | None = None, batch_size: int = 32,
                 max_length: int = 128, pad_to: int | None = None, pad_id: int = 0):
        self.texts = texts if isinstance(texts, TextSource) else TextSource(Path(texts), limit)
        self.tokenizer = tokenizer
        self.batch_size, self.max_length, self.pad_to, self.pad_id = batch_size, max_length, pad_to, pad_id

    def __iter__(self) -> Iterator[Feeds]:
        batch: list[str] = []
        for text in self.texts:
            batch.append(text)
            if len(batch) == self.batch_size:
                yield encode_batch(self.tokenizer, batch, self.max_length, self.pad_to, self.pad_id)
                batch = []
        if batch:
            yield encode_batch(self.tokenizer, batch, self.max_length, self.pad_to, self.pad_id)

    def count(self) -> int:
        """How many texts a pass yields."""
        return self.texts.count()

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
