"""SQuAD EM / F1 of every bench path on a SQuAD file (``edgebert bench --data FILE.json``, qa bundles), and
the file's windows as the length mix.

Each path, the PyTorch reference included, reads the same windows of the file's questions
(``edgebert.qa.windows``: ``[CLS] question [SEP] context part [SEP]``, 384 tokens or the bundle's
maximum, the default stride), in length-sorted batches padded to their own longest window; its start /
end logits go through the same post-processing (``edgebert.qa.spans``, transformers' ``run_qa``) and are
scored against the gold answers of the answerable questions by torchmetrics (``edgebert.scores.squad``),
so an ONNX path's figure is the one ``edgebert evaluate --task squad`` reports for the bundle.

Unless ``--lengths-from`` names another file, the windows are also the length mix the latency replay
runs (``workloads.LengthMix``: in file order, at their own lengths, and padded to the window length),
so latency is measured over the file's own window lengths. ``SpanTracker`` compares a path's start /
end logits with the reference's on the evaluation batches (bench's accuracy column): the share of rows
whose start and end argmax over the real tokens both agree, and the largest difference there.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from edgebert.bench.workloads import LengthMix
from edgebert.bundle.task_registry import task_serving
from edgebert.errors import ConfigError, DataError
from edgebert.qa.spans import predict_spans
from edgebert.qa.squad_file import SquadExample, read_squad
from edgebert.qa.windows import MAX_SEQ_LEN, SquadWindows, WindowMaker, default_stride
from edgebert.runtime.answer import span_logits
from edgebert.runtime.fidelity import Fidelity
from edgebert.runtime.numeric import nonfinite_rows
from edgebert.runtime.text import Encoded
from edgebert.scores.squad import prediction_scores

BATCH = 32                  # windows per model call (length-sorted), as edgebert evaluate runs them
METRIC = "span_agreement"   # start and end argmax both equal the reference's


@dataclass(frozen=True)
class AnswerData:
    """The questions of a SQuAD file, their windows, and how each path is scored on them."""

    file: str
    examples: list[SquadExample]
    windows: SquadWindows
    max_length: int
    doc_stride: int
    pad_id: int

    @classmethod
    def load(cls, path: Path, task: str, tokenizer_file: Path, max_length: int, pad_id: int,
             limit: int | None = None) -> "AnswerData":
        """Check that ``--data`` can be scored (a qa bundle, a SQuAD file with answerable questions,
        torchmetrics installed) and window it; every problem is a ConfigError / DataError before
        anything is measured or written."""
        from tokenizers import Tokenizer

        if task != task_serving("answer").name:
            raise ConfigError(f"--data FILE.json scores SQuAD answers of a qa bundle; this bundle's task is {task!r}",
                              "drop --data, or pass a CoNLL file for a token-cls bundle")
        examples = read_squad(path)[:limit]
        if not any(e.has_answer for e in examples):
            raise DataError(f"{path} has no answerable question to score", "pass a SQuAD file with answers")
        length = min(MAX_SEQ_LEN, max_length)
        stride = default_stride(length)
        windows = WindowMaker(Tokenizer.from_file(str(tokenizer_file)), length, stride)(examples)
        return cls(str(path), examples, windows, length, stride, pad_id)

    def score(self, run: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]) -> dict[str, Any]:
        """EM / F1 of one path: ``run`` maps padded feeds to ``start_logits`` and ``end_logits``."""
        t0 = time.perf_counter()
        starts, ends = span_logits(run, self.pad_id, self.windows, BATCH)
        wall = time.perf_counter() - t0
        scores = prediction_scores(self.examples, predict_spans(self.examples, self.windows, starts, ends))
        return {"exact_match": round(scores["exact_match"], 4), "f1": round(scores["f1"], 4),
                "questions": int(scores["n"]), "wall_s": round(wall, 2)}

    def length_mix(self) -> LengthMix:
        rows = [Encoded(i.astype(np.int64), t.astype(np.int64))
                for i, t in zip(self.windows.input_ids, self.windows.token_type_ids)]
        return LengthMix(self.file, rows, self.max_length)

    def summary(self) -> dict[str, Any]:
        return {"file": self.file, "questions": len(self.examples),
                "answerable": sum(e.has_answer for e in self.examples), "windows": len(self.windows),
                "max_length": self.max_length, "doc_stride": self.doc_stride, "batch": BATCH,
                "scored_by": "torchmetrics SQuAD (official normalisation), answerable questions",
                "through": "each path reads the same windows (edgebert.qa.windows); its best span per question "
                           "as transformers' run_qa picks it (edgebert.qa.spans)",
                "results": {}}


class SpanTracker:
    """``FidelityTracker.add_runs`` for start / end logits (see the module docstring)."""

    def __init__(self) -> None:
        self.agree: list[np.ndarray] = []
        self.max_abs_diff = 0.0
        self.non_finite = 0

    def add_runs(self, ref: dict[str, np.ndarray], got: dict[str, np.ndarray], mask: np.ndarray) -> None:
        real = mask.astype(bool)
        same = np.ones(len(mask), dtype=bool)
        with np.errstate(invalid="ignore", over="ignore"):
            for name in ("start_logits", "end_logits"):
                a = np.where(real, got[name], -np.inf).argmax(1)
                b = np.where(real, ref[name], -np.inf).argmax(1)
                same &= a == b
                self.max_abs_diff = float(np.maximum(self.max_abs_diff, np.abs(got[name] - ref[name])[real].max()))
        self.agree.append(same)
        self.non_finite += max(nonfinite_rows(v) for v in got.values())

    def result(self) -> Fidelity:
        agree = np.concatenate(self.agree) if self.agree else np.zeros(0)
        mean = float(agree.mean()) if len(agree) else float("nan")
        return Fidelity(METRIC, mean, None, len(agree), 1.0 - mean, 1.0 - mean, max_abs_diff=self.max_abs_diff,
                        non_finite=self.non_finite)
