"""From a span model's start/end logits back to answer text, torch-free (numpy only): what fine-tuning,
distillation, ``edgebert evaluate`` and ``edgebert bench`` do after the forward pass (SQuAD scores).
``EdgeSession.answer`` decodes as transformers' question-answering pipeline does instead
(``edgebert.qa.pipeline_spans``).

``predict_spans(examples, windows, start_logits, end_logits)`` follows transformers' ``run_qa``
post-processing (``postprocess_qa_predictions``): in every window of an example, the ``n_best`` highest
start and end logits are paired; a pair is a candidate when both tokens are context tokens (never the
question, [CLS], [SEP] or padding), the end is not before the start and the span is at most
``max_answer_len`` tokens; its score is start logit + end logit. The best candidate over all the
example's windows is the answer, its text the context characters from the start token's first to the
end token's last. The null score ([CLS] start + [CLS] end, the lowest over the windows, as ``run_qa``)
is kept beside it: SQuAD 2.0 predicts "no answer" when ``null_score - score`` is above a threshold
(``edgebert.scores.squad`` chooses it on a file).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from edgebert.errors import DataError
from edgebert.qa.squad_file import SquadExample
from edgebert.qa.windows import NOT_CONTEXT, SquadWindows

N_BEST, MAX_ANSWER_LEN = 20, 30


@dataclass(frozen=True)
class SpanCandidate:
    text: str
    start: int                 # characters [start, end) of the context
    end: int
    score: float               # start logit + end logit
    probability: float         # softmax of the scores over the example's n-best list


@dataclass(frozen=True)
class SpanPrediction:
    """An example's best span and the figures SQuAD 2.0 scoring needs."""

    id: str
    text: str                  # the best span ("" when no window had a valid span)
    start: int
    end: int
    score: float
    null_score: float          # [CLS] start + end logit, lowest over the windows
    n_best: tuple[SpanCandidate, ...]

    @property
    def null_margin(self) -> float:
        """How much better "no answer" scores than the best span (SQuAD 2.0: null when above a threshold)."""
        return self.null_score - self.score

    def answer(self, null_threshold: float | None = None) -> str:
        """The text, or "" when ``null_threshold`` is given and the null margin is above it."""
        if null_threshold is not None and self.null_margin > null_threshold:
            return ""
        return self.text


def window_spans(start_logits: np.ndarray, end_logits: np.ndarray, offsets: np.ndarray, n_best: int = N_BEST,
                 max_answer_len: int = MAX_ANSWER_LEN) -> list[tuple[float, int, int]]:
    """(score, first token, last token) of the valid spans among one window's ``n_best`` x ``n_best``
    top start/end tokens, in ``run_qa``'s order (start rank, then end rank). Logits may be longer than
    the window (padding): only its ``len(offsets)`` tokens count."""
    length = len(offsets)
    start, end = np.asarray(start_logits, dtype=np.float64)[:length], np.asarray(end_logits, dtype=np.float64)[:length]
    context = offsets[:, 0] != NOT_CONTEXT
    # stable: one order on every CPU (the default SIMD quicksort breaks ties by kernel; under the AVX2 emulator,
    # numpy 2.4's returned unsorted orders for 128-1,536 floats, where kind="stable" was right)
    top_start = np.argsort(start, kind="stable")[-1:-n_best - 1:-1]
    top_end = np.argsort(end, kind="stable")[-1:-n_best - 1:-1]
    s, e = top_start[:, None], top_end[None, :]
    valid = context[s] & context[e] & (e >= s) & (e - s + 1 <= max_answer_len)
    rows, cols = np.nonzero(valid)
    firsts, lasts = top_start[rows], top_end[cols]
    scores = start[firsts] + end[lasts]
    return [(float(v), int(a), int(b)) for v, a, b in zip(scores, firsts, lasts)]


def _softmax(scores: np.ndarray) -> np.ndarray:
    exp = np.exp(scores - scores.max())
    return exp / exp.sum()


def predict_spans(examples: Sequence[SquadExample], windows: SquadWindows, start_logits: Sequence[np.ndarray],
                  end_logits: Sequence[np.ndarray], n_best: int = N_BEST,
                  max_answer_len: int = MAX_ANSWER_LEN) -> list[SpanPrediction]:
    """One ``SpanPrediction`` per example (in example order) from the logits of every window: a (T_i,)
    array per window, or an (N, T) array padded past the windows' lengths."""
    if len(start_logits) != len(windows) or len(end_logits) != len(windows):
        raise DataError(f"{len(start_logits)} start and {len(end_logits)} end logit rows for {len(windows)} windows")
    if n_best < 1 or max_answer_len < 1:
        raise DataError(f"n_best={n_best} and max_answer_len={max_answer_len} must be >= 1")
    found: list[list[tuple[float, int, int]]] = [[] for _ in examples]
    null = np.full(len(examples), np.inf)
    for w, example in enumerate(windows.example_index):
        offsets = windows.offsets[w]
        null[example] = min(null[example], float(start_logits[w][0]) + float(end_logits[w][0]))
        found[example].extend((score, int(offsets[a, 0]), int(offsets[b, 1])) for score, a, b in
                              window_spans(start_logits[w], end_logits[w], offsets, n_best, max_answer_len))
    out = []
    for i, example in enumerate(examples):
        best = sorted(found[i], key=lambda c: c[0], reverse=True)[:n_best]
        probabilities = _softmax(np.asarray([c[0] for c in best])) if best else ()
        candidates = tuple(SpanCandidate(example.context[a:b], a, b, score, float(p))
                           for (score, a, b), p in zip(best, probabilities))
        top = candidates[0] if candidates else SpanCandidate("", 0, 0, -np.inf, 0.0)
        out.append(SpanPrediction(example.id, top.text, top.start, top.end, top.score, float(null[i]), candidates))
    return out
