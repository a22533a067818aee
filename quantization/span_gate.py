"""The accuracy gate of a question-answering graph: its answers against fp32's on held-out questions.

``SpanProbe`` runs the fp32 graph once over the windows of held-out questions (``edgebert.qa.windows``)
and keeps its logits and answers, chosen as ``EdgeSession.answer`` chooses them
(``edgebert.qa.answers.pipeline_answers``). ``measure(path)`` does the same for another graph and
scores it with the task metric of ``edgebert check`` (``edgebert.runtime.fidelity``): the overlap F1 of
each answer's character span with fp32's, ``loss = 1 - mean``. Gate and check thus measure one metric
against one budget; on the same questions they give the same figure. Over the first
``max_sentences`` questions (the sensitivity ranking's subset) both sides are scored on that subset.

The SQuAD F1 / EM of both graphs against the gold answers are reported beside it (information only:
they need gold answers, which a device need not have).

F1 moves in steps of (a fraction of) one question, too coarse to rank single graph nodes, so every
measurement also gives a continuous ``distance``: the total-variation distance between the graph's and
fp32's start (and end) softmax over each window's tokens, averaged over windows and both ends.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from edgebert.bundle.task_registry import task_serving
from edgebert.qa.answers import pipeline_answers
from edgebert.qa.squad_file import SquadExample
from edgebert.qa.windows import SquadWindows
from edgebert.runtime.answer import MAX_ANSWER_LEN, SPAN_OUTPUTS, span_logits
from edgebert.runtime.fidelity import LOSS_ROUNDING, span_overlap_f1

METRIC = task_serving("answer").metric      # the metric of the task EdgeSession.answer serves
LOSS_UNIT = "1 - mean overlap F1 of the answers with fp32's answers on held-out questions"


@dataclass
class SpanFidelity:
    """One graph against fp32 on ``n`` held-out questions (the ``Fidelity`` of a span model)."""

    mean: float                # mean overlap F1 of this graph's answers with fp32's
    n: int
    distance: float
    f1: float | None = None    # percent, SQuAD F1 against the gold answers (information)
    exact_match: float | None = None
    reference_f1: float | None = None     # the fp32 graph's, same questions
    reference_exact_match: float | None = None
    within_budget: bool | None = None
    metric: str = METRIC

    @property
    def loss(self) -> float:
        return 1.0 - self.mean

    def within(self, budget: float) -> bool:
        """The loss is at most ``budget`` (up to float rounding, as ``Fidelity.within``)."""
        return self.loss <= budget + LOSS_ROUNDING

    def as_dict(self) -> dict:
        mean = round(self.mean, 6)
        out = {"metric": self.metric, "mean": mean, "min": None, "n": self.n, "loss": round(1.0 - mean, 6),
               "distance": float(f"{self.distance:.4g}"), "loss_unit": LOSS_UNIT}
        if self.f1 is not None:
            out.update(f1=round(self.f1, 4), exact_match=round(self.exact_match, 4),
                       fp32_f1=round(self.reference_f1, 4), fp32_exact_match=round(self.reference_exact_match, 4))
        if self.within_budget is not None:
            out["within_budget"] = self.within_budget
        return out


def _tv(a: np.ndarray, b: np.ndarray) -> float:
    """Total-variation distance between the softmaxes of two logit vectors."""
    pa, pb = (np.exp(x - x.max()) for x in (a.astype(np.float64), b.astype(np.float64)))
    return float(0.5 * np.abs(pa / pa.sum() - pb / pb.sum()).sum())


def _gold_scorer():
    """``question_scores`` (plain Python: always there)."""
    from edgebert.scores.squad import question_scores

    return question_scores


class SpanProbe:
    """fp32 answers and logits on held-out questions, computed once; ``measure(path)`` scores another
    graph (see the module docstring). ``cls_id``: [CLS]'s token id, as ``EdgeSession.answer`` passes it."""

    metric = METRIC

    def __init__(self, fp32_path: str | Path, examples: Sequence[SquadExample], windows: SquadWindows,
                 pad_id: int = 0, batch_size: int = 16, cls_id: int | None = None):
        self.examples = list(examples)                 # what the windows' example_index points at
        self.windows = windows
        self.pad_id, self.batch_size, self.cls_id = pad_id, batch_size, cls_id
        self._gold = _gold_scorer()
        self._scores: dict[tuple[str, str], tuple[float, float]] = {}
        self.reference = self._logits(fp32_path)
        self.reference_spans, self.reference_texts = self._answers(*self.reference)
        self.sentences = len(self.examples)

    def _logits(self, path: str | Path) -> tuple[list[np.ndarray], list[np.ndarray]]:
        from edgebert.quantization.accuracy import cpu_session

        sess = cpu_session(path)
        names = list(SPAN_OUTPUTS)
        inputs = {i.name for i in sess.get_inputs()}   # a DistilBERT graph takes no token_type_ids

        def run(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            return dict(zip(names, sess.run(names, {k: v for k, v in feeds.items() if k in inputs})))

        return span_logits(run, self.pad_id, self.windows, self.batch_size)

    def _answers(self, starts: list[np.ndarray], ends: list[np.ndarray]) -> tuple[np.ndarray, list[str]]:
        """(questions, 2) character spans and the texts of each question's answer, as ``answer`` gives them."""
        found = pipeline_answers(self.examples, self.windows, starts, ends, 1, MAX_ANSWER_LEN, False,
                                 cls_id=self.cls_id)
        best = [a[0] if a else {"start": 0, "end": 0, "answer": ""} for a in found]
        return np.asarray([[a["start"], a["end"]] for a in best], np.int64).reshape(-1, 2), [a["answer"] for a in best]

    def _gold_scores(self, texts: list[str], n: int) -> tuple[float, float] | None:
        """(EM, F1) percent of ``texts`` against the gold answers of the answerable ones of the first ``n``."""
        answerable = [i for i in range(n) if self.examples[i].has_answer]
        if self._gold is None or not answerable:
            return None
        out = np.zeros((len(answerable), 2))
        for row, i in enumerate(answerable):
            key = (self.examples[i].id, texts[i])
            if key not in self._scores:
                self._scores[key] = self._gold(texts[i], self.examples[i].answer_texts)
            out[row] = self._scores[key]
        return float(out[:, 0].mean()), float(out[:, 1].mean())

    def measure(self, path: str | Path, max_sentences: int | None = None) -> SpanFidelity:
        starts, ends = self._logits(path)
        spans, texts = self._answers(starts, ends)
        n = len(self.examples) if max_sentences is None else min(max_sentences, len(self.examples))
        overlap = span_overlap_f1(self.reference_spans[:n], spans[:n])
        ref_starts, ref_ends = self.reference
        distances = [(_tv(starts[w], ref_starts[w]) + _tv(ends[w], ref_ends[w])) / 2
                     for w, i in enumerate(self.windows.example_index) if i < n]
        ours, theirs = self._gold_scores(texts, n), self._gold_scores(self.reference_texts, n)
        gold = {} if ours is None else dict(exact_match=ours[0], f1=ours[1], reference_exact_match=theirs[0],
                                            reference_f1=theirs[1])
        return SpanFidelity(float(overlap.mean()) if n else float("nan"), n,
                            float(np.mean(distances)) if distances else 0.0, **gold)
