"""A reranker's feeds (``PairFeeds``, chosen by ``feeds.task_feeds`` for a task whose inputs are ``pairs``):
``[CLS] query [SEP] passage [SEP]`` pairs, the INT8 gate ordering each held-out query's passages (see
``quantization.feeds``' docstring)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from edgebert.errors import DataError
from edgebert.qa.squad_file import read_squad
from edgebert.quantization.accuracy import AccuracyProbe
from edgebert.quantization.calibration import INVARIANCE_ROWS, Feeds, Say, calibration_split, prepared_tokenizer
from edgebert.quantization.config import Int8Config, check_gate_file
from edgebert.runtime.text import Encoded, pad_batch


@dataclass(frozen=True)
class PairBatches:
    """Re-iterable feeds of (query, passage) pairs: ``groups`` (one batch per query: the gate) or ``pairs``
    (``batch_size`` per batch: calibration)."""
    tok: object
    pairs: tuple[tuple[str, str], ...] = ()
    groups: tuple = ()
    batch_size: int = 1               # groups: one query per batch (the probe's max_sentences counts queries)
    max_length: int = 128
    pad_to: int | None = None
    pad_id: int = 0

    def _encode(self, pairs) -> Feeds:
        encodings = self.tok.encode_batch(list(pairs))
        rows = [Encoded(np.asarray(e.ids, np.int64), np.asarray(e.type_ids, np.int64)) for e in encodings]
        return pad_batch(rows, self.pad_id, self.pad_to)

    def __iter__(self) -> Iterator[Feeds]:
        if self.groups:
            for group in self.groups:
                yield self._encode(group.pairs())
            return
        for start in range(0, len(self.pairs), self.batch_size):
            yield self._encode(self.pairs[start:start + self.batch_size])

    def count(self) -> int:
        return len(self.groups) or len(self.pairs)

    def restricted(self, input_names: set[str]) -> Iterator[Feeds]:
        for feeds in self:
            yield {k: v for k, v in feeds.items() if k in input_names}


def gate_groups(gate_data: Path | None, gate_size: int | None) -> tuple[list, str]:
    """The groups a rerank gate (and ``check``) orders, and where they came from."""
    from edgebert.qa.rank_groups import BUILTIN_GROUPS, GATE_QUERIES, builtin_rank_groups, rank_groups

    if gate_data is None:
        return builtin_rank_groups(gate_size or GATE_QUERIES), BUILTIN_GROUPS
    groups = rank_groups(read_squad(gate_data))[:gate_size or GATE_QUERIES]
    if not groups:
        raise DataError(f"gate file {gate_data} has no answerable questions", "pass a SQuAD file with answers")
    return groups, str(Path(gate_data).resolve())


class PairFeeds:
    """(query, passage) pairs (see the module docstring)."""

    def __init__(self, qcfg: Int8Config, task: str, fused: Path, tokenizer: Path, pad_id: int, say: Say):
        from edgebert.qa.rank_groups import iter_pairs, rank_groups

        self.qcfg, self.pad_id = qcfg, pad_id
        self.gate_len = qcfg.gate_seq_len or qcfg.calib_seq_len
        self.tok = prepared_tokenizer(tokenizer, qcfg.calib_seq_len)
        self.gate_tok = prepared_tokenizer(tokenizer, self.gate_len)
        check_gate_file(qcfg.calib, qcfg.gate_data)
        if qcfg.calib is not None and Path(qcfg.calib).suffix.lower() == ".json":
            pairs = list(iter_pairs(rank_groups(read_squad(qcfg.calib))))[:qcfg.calib_size]
            self.calib_source = f"{Path(qcfg.calib).resolve()}: question-sentence pairs"
        else:
            split = calibration_split(qcfg.calib, 2 * qcfg.calib_size, 1)
            lines = [t for _, t in zip(range(2 * qcfg.calib_size), split.calibration)]
            pairs = [(lines[i], lines[i + 1]) for i in range(0, len(lines) - 1, 2)]
            self.calib_source = f"{split.calibration.describe()['source']}: pairs of consecutive lines"
        if not pairs:
            raise DataError(f"calibration {qcfg.calib} gives no (query, passage) pairs",
                            "pass a SQuAD JSON file or a text of two lines or more")
        self.calib_pairs = tuple(pairs)
        groups, self.gate_source = gate_groups(qcfg.gate_data, qcfg.gate_size)
        self.groups = tuple(groups)
        say(f"fp32 reference on {len(groups)} held-out queries of {len(groups[0].passages)} passages ({self.gate_source})")
        self.probe = AccuracyProbe(task, fused, PairBatches(self.gate_tok, groups=self.groups, max_length=self.gate_len,
                                                           pad_id=pad_id))

    def _batches(self, pad_to: int | None = None) -> PairBatches:
        return PairBatches(self.tok, self.calib_pairs, batch_size=self.qcfg.calib_batch_size,
                           max_length=self.qcfg.calib_seq_len, pad_to=pad_to, pad_id=self.pad_id)

    def calibration(self) -> PairBatches:
        return self._batches()

    def padded_calibration(self) -> PairBatches:
        return self._batches(pad_to=self.qcfg.calib_seq_len)

    def calibration_count(self) -> int:
        return len(self.calib_pairs)

    def invariance(self) -> tuple[list[Feeds], Feeds]:
        probe = PairBatches(self.gate_tok, self.groups[0].pairs()[:INVARIANCE_ROWS], batch_size=INVARIANCE_ROWS,
                            pad_id=self.pad_id)
        longest = sorted(self.calib_pairs, key=lambda p: len(p[0]) + len(p[1]), reverse=True)[:INVARIANCE_ROWS]
        mates = PairBatches(self.tok, tuple(longest), batch_size=INVARIANCE_ROWS, pad_id=self.pad_id)
        return list(probe), next(iter(mates))

    def describe(self) -> dict:
        return {"calibration": {"source": self.calib_source, "pairs": len(self.calib_pairs)},
                "held_out": {"source": self.gate_source, "queries": len(self.groups),
                             "pairs": sum(len(g.passages) for g in self.groups), "max_length": self.gate_len},
                "max_length": self.qcfg.calib_seq_len}
