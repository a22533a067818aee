"""The accuracy gate of a question-answering graph: F1 on held-out questions, not agreement on text.

``SpanProbe`` runs the fp32 graph once over the windows of held-out questions (``edgebert.qa.windows``)
and keeps their start/end logits and the SQuAD F1 / EM of the answers they give (the spans
``edgebert.qa.spans.predict_spans`` picks, scored against the gold answers by
``edgebert.scores.squad``: how ``edgebert evaluate`` and ``bench`` score). ``measure(path)`` does the
same for another graph; its ``loss`` is the F1 the graph loses against fp32 on those questions, in
F1 points / 100 (the gate's budget unit: ``0.005`` = half an F1 point); a graph that answers better
than fp32 has a negative loss. Over the first ``max_sentences`` questions (the sensitivity ranking's
subset) both sides are scored on that subset only.

F1 moves in steps of (a fraction of) one question, too coarse to rank single graph nodes, so every
measurement also gives a continuous ``distance``: the total-variation distance between the graph's and
fp32's start (and end) softmax over each window's tokens, averaged over windows and both ends.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from edgebert.qa.spans import predict_spans
from edgebert.qa.squad_file import SquadExample
from edgebert.qa.windows import SquadWindows
from edgebert.runtime.answer import SPAN_OUTPUTS, span_logits
from edgebert.scores.squad import question_scores, require_torchmetrics

METRIC = "squad_f1"
LOSS_UNIT = "F1 points lost against fp32 on the held-out questions / 100 (0.005 = half a point)"


@dataclass
class SpanFidelity:
    """One graph against fp32 on ``n`` held-out questions (the ``Fidelity`` of a span model)."""

    f1: float                  # percent, this graph
    exact_match: float
    reference_f1: float        # percent, the fp32 graph on the same questions
    reference_exact_match: float
    n: int
    distance: float
    within_budget: bool | None = None
    metric: str = METRIC

    @property
    def loss(self) -> float:
        return (self.reference_f1 - self.f1) / 100.0

    def as_dict(self) -> dict:
        loss = round(self.loss, 6)
        out = {"metric": self.metric, "mean": round(1.0 - loss, 6), "min": None, "n": self.n, "loss": loss,
               "distance": float(f"{self.distance:.4g}"), "f1": round(self.f1, 4),
               "exact_match": round(self.exact_match, 4), "fp32_f1": round(self.reference_f1, 4),
               "fp32_exact_match": round(self.reference_exact_match, 4), "loss_unit": LOSS_UNIT,
               "mean_is": "1 - loss"}
        if self.within_budget is not None:
            out["within_budget"] = self.within_budget
        return out


def _tv(a: np.ndarray, b: np.ndarray) -> float:
    """Total-variation distance between the softmaxes of two logit vectors."""
    pa, pb = (np.exp(x - x.max()) for x in (a.astype(np.float64), b.astype(np.float64)))
    return float(0.5 * np.abs(pa / pa.sum() - pb / pb.sum()).sum())


class SpanProbe:
    """fp32 answers and logits on held-out questions, computed once; ``measure(path)`` scores another
    graph (see the module docstring)."""

    metric = METRIC

    def __init__(self, fp32_path: str | Path, examples: Sequence[SquadExample], windows: SquadWindows,
                 pad_id: int = 0, batch_size: int = 16):
        require_torchmetrics()
        self.all_examples = list(examples)                # what the windows' example_index points at
        self.examples = [e for e in examples if e.has_answer]
        self.windows = windows
        self.pad_id, self.batch_size = pad_id, batch_size
        self._scores: dict[tuple[str, str], tuple[float, float]] = {}
        self.reference = self._logits(fp32_path)
        self.reference_scores = self._per_question(*self.reference)
        self.sentences = len(self.examples)

    def _logits(self, path: str | Path) -> tuple[list[np.ndarray], list[np.ndarray]]:
        from .accuracy import cpu_session

        sess = cpu_session(path)
        names = list(SPAN_OUTPUTS)

        def run(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            return dict(zip(names, sess.run(names, feeds)))

        return span_logits(run, self.pad_id, self.windows, self.batch_size)

    def _per_question(self, starts: list[np.ndarray], ends: list[np.ndarray]) -> np.ndarray:
        """(questions, 2): EM and F1 of every held-out answerable question, in order."""
        by_id = {p.id: p.text for p in predict_spans(self.all_examples, self.windows, starts, ends)}
        out = np.zeros((len(self.examples), 2))
        for i, e in enumerate(self.examples):
            key = (e.id, by_id[e.id])
            if key not in self._scores:
                self._scores[key] = question_scores(by_id[e.id], e.answer_texts)
            out[i] = self._scores[key]
        return out

    def measure(self, path: str | Path, max_sentences: int | None = None) -> SpanFidelity:
        starts, ends = self._logits(path)
        scores = self._per_question(starts, ends)
        n = len(self.examples) if max_sentences is None else min(max_sentences, len(self.examples))
        ref = self.reference_scores[:n]
        ids = {e.id for e in self.examples[:n]}
        ref_starts, ref_ends = self.reference
        distances = [(_tv(starts[w], ref_starts[w]) + _tv(ends[w], ref_ends[w])) / 2
                     for w, i in enumerate(self.windows.example_index) if self.all_examples[i].id in ids]
        return SpanFidelity(float(scores[:n, 1].mean()), float(scores[:n, 0].mean()), float(ref[:, 1].mean()),
                            float(ref[:, 0].mean()), n, float(np.mean(distances)) if distances else 0.0)
