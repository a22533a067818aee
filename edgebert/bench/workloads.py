"""Inputs the benchmark feeds: fixed (batch, seq) shapes, and a real length mix read from a file.

Fixed shapes are random token ids framed by [CLS] ... [SEP] with no padding, so every position is
real work. ``--lengths-from`` replays real texts in file order, batched as they come: once with
dynamic padding (each batch padded to its own longest row, what ``EdgeSession`` does) and once padded
to a fixed length (what a static-shape export has to do).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgebert.bundle import Manifest
from edgebert.files.textfiles import Text, iter_texts
from edgebert.runtime.text import Encoded, TextEncoder, pad_batch


def synthetic_feeds(batch: int, seq: int, manifest: Manifest, seed: int = 0) -> dict[str, np.ndarray]:
    """(batch, seq) int64 inputs: [CLS] random ids [SEP] (ids above every special token's), attention mask
    all ones."""
    tok = manifest.tokenizer
    vocab = manifest.config.vocab_size
    special = [i for i in (tok.pad_id, tok.cls_id, tok.sep_id, tok.mask_id) if i is not None]
    low = min(max(special) + 1, vocab - 1)
    rng = np.random.default_rng(seed + 1000 * batch + seq)
    ids = rng.integers(low, vocab, size=(batch, seq), dtype=np.int64)
    if tok.cls_id is not None:
        ids[:, 0] = tok.cls_id
    if tok.sep_id is not None:
        ids[:, -1] = tok.sep_id
    return {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}


def read_texts(path: str | Path, limit: int | None = None) -> list[Text]:
    """Texts (or pairs, for pair TSVs) of a file, in file order; see ``edgebert.files.textfiles``."""
    return list(iter_texts(path, limit, pairs=True, what="lengths file",
                           hint="pass a text or TSV file to --lengths-from"))


@dataclass(frozen=True)
class LengthMix:
    """Tokenized real texts, in file order, and the fixed length the padded mode pads to."""

    file: str
    rows: list[Encoded]
    pad_to: int

    @classmethod
    def load(cls, path: str | Path, encoder: TextEncoder, pad_to: int, limit: int | None = None) -> "LengthMix":
        texts = read_texts(path, limit)
        pairs = isinstance(texts[0], tuple)
        short = encoder.with_max_length(min(pad_to, encoder.max_length))
        return cls(str(path), short.encode(texts, pairs, truncate=True), short.max_length)

    def lengths(self) -> np.ndarray:
        return np.asarray([len(r) for r in self.rows])

    def batches(self, batch: int, padded: bool, pad_id: int = 0) -> list[dict[str, np.ndarray]]:
        """Feeds in file order: padded to each batch's longest row, or to ``pad_to``."""
        return [pad_batch(self.rows[i:i + batch], pad_id, self.pad_to if padded else None)
                for i in range(0, len(self.rows), batch)]

    def summary(self) -> dict[str, Any]:
        lengths = self.lengths()
        return {"file": self.file, "texts": int(len(lengths)), "pad_to": self.pad_to,
                "tokens_mean": round(float(lengths.mean()), 2), "tokens_p50": int(np.median(lengths)),
                "tokens_p90": int(np.percentile(lengths, 90)), "tokens_max": int(lengths.max()),
                "truncated": int(sum(r.truncated for r in self.rows))}
