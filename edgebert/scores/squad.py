"""SQuAD scores: exact match (EM) and F1 of predicted answer texts, in percent, as SQuAD reports them.

Every question's EM and F1 follow the official SQuAD evaluation script (and torchmetrics' ``SQuAD``
metric, tested equal): the answer lower-cased, punctuation and articles removed, whitespace collapsed;
F1 over the tokens shared with a gold answer; an empty answer right only against an empty gold; the
best over the gold answers. Plain Python, so bundles are scored in the runtime install (no torch).

- ``squad_scores(examples, answers)``: EM / F1 over the answerable questions (SQuAD 1.1 scoring; a
  SQuAD 2.0 file's unanswerable questions are left out), ``n`` the questions scored.
- ``squad_v2_scores(examples, answers, null_margins)``: SQuAD 2.0 scoring. A question is answered
  "no answer" when its null margin (null score - best span score, ``edgebert.qa.spans``) is
  above a threshold, chosen on the file to maximise F1 (as the official evaluation script's
  ``best_f1_thresh``); EM / F1 at that threshold, over all questions and split into answerable
  (``has_answer_*``) and unanswerable (``no_answer_*``: the share answered "no answer").
"""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import Mapping, Protocol, Sequence

import numpy as np

from edgebert.errors import DataError

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = set(string.punctuation)


class SquadExample(Protocol):
    """What scoring reads of a question (``edgebert.qa.squad_file.SquadExample`` has it): scores stay below
    the data layer."""
    id: str

    @property
    def answer_texts(self) -> Sequence[str]: ...

    @property
    def has_answer(self) -> bool: ...


def normalize_answer(text: str) -> str:
    """The official SQuAD normalisation: lower case, no punctuation, no articles, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _f1(answer: list[str], gold: list[str]) -> float:
    if not answer or not gold:            # "no answer" on either side: right only if both are
        return float(answer == gold)
    same = sum((Counter(answer) & Counter(gold)).values())
    if not same:
        return 0.0
    precision, recall = same / len(answer), same / len(gold)
    return 2 * precision * recall / (precision + recall)


def question_scores(answer: str, gold: Sequence[str]) -> tuple[float, float]:
    """(EM, F1) in percent of one predicted answer against the gold answers (none: "no answer" is
    right, so "" scores 100 and any text 0)."""
    texts = list(gold) or [""]
    ours = normalize_answer(answer)
    exact = max(float(ours == normalize_answer(t)) for t in texts)
    tokens = ours.split() if answer else []
    f1 = max(_f1(tokens, normalize_answer(t).split() if t else []) for t in texts)
    return 100.0 * exact, 100.0 * f1


def _per_question(examples: Sequence[SquadExample], answers: Mapping[str, str]) -> tuple[np.ndarray, np.ndarray]:
    missing = [e.id for e in examples if e.id not in answers]
    if missing:
        raise DataError(f"no predicted answer for question {missing[0]} ({len(missing)} of {len(examples)} missing)")
    scores = np.asarray([question_scores(answers[e.id], e.answer_texts) for e in examples], dtype=np.float64)
    return scores[:, 0].reshape(-1), scores[:, 1].reshape(-1)


def squad_scores(examples: Sequence[SquadExample], answers: Mapping[str, str]) -> dict[str, float]:
    """``exact_match`` and ``f1`` (percent) over the answerable questions of ``examples``, and ``n``."""
    answerable = [e for e in examples if e.has_answer]
    if not answerable:
        raise DataError("none of the questions has an answer to score against",
                        "score a SQuAD 2.0 file with its unanswerable questions (--with-no-answer)")
    exact, f1 = _per_question(answerable, answers)
    return {"exact_match": float(exact.mean()), "f1": float(f1.mean()), "n": float(len(answerable))}


def best_threshold(margins: np.ndarray, answered: np.ndarray, unanswered: np.ndarray) -> tuple[float, float]:
    """(threshold, total) maximising the summed per-question score when questions whose margin is above
    the threshold get "no answer": ``answered`` / ``unanswered`` are each question's score either way.
    The threshold is one of the margins (ties are answered together), or below them all (every question
    answered "no answer")."""
    order = np.argsort(margins, kind="stable")
    m = margins[order]
    totals = unanswered.sum() + np.cumsum(answered[order] - unanswered[order])   # answer the first k+1
    last_of_tie = np.r_[m[1:] != m[:-1], True]
    candidates = np.flatnonzero(last_of_tie)
    k = candidates[np.argmax(totals[candidates])]
    if totals[k] > unanswered.sum():
        return float(m[k]), float(totals[k])
    return float(m[0] - 1.0), float(unanswered.sum())


def squad_v2_scores(examples: Sequence[SquadExample], answers: Mapping[str, str],
                    null_margins: Mapping[str, float]) -> dict[str, float]:
    """SQuAD 2.0 scores (see the module docstring): ``exact_match``, ``f1`` and ``null_threshold``; the
    same split into ``has_answer_*`` and ``no_answer_*`` with their ``*_n``; ``best_exact_match`` (with
    its own ``best_exact_match_threshold``), ``n``."""
    if not examples:
        raise DataError("there are no questions to score")
    exact, f1 = _per_question(examples, answers)
    margins = np.asarray([float(null_margins[e.id]) for e in examples], dtype=np.float64)
    has = np.asarray([e.has_answer for e in examples])
    null_right = np.where(has, 0.0, 100.0)               # the score of answering "no answer"
    threshold, _ = best_threshold(margins, f1, null_right)
    exact_threshold, best_exact = best_threshold(margins, exact, null_right)
    gives_null = margins > threshold
    exact_at = np.where(gives_null, null_right, exact)
    f1_at = np.where(gives_null, null_right, f1)
    out = {"exact_match": float(exact_at.mean()), "f1": float(f1_at.mean()), "null_threshold": threshold,
           "n": float(len(examples)), "has_answer_n": float(has.sum()), "no_answer_n": float((~has).sum()),
           "best_exact_match": best_exact / len(examples), "best_exact_match_threshold": exact_threshold}
    for name, part in (("has_answer", has), ("no_answer", ~has)):
        if part.any():
            out[f"{name}_exact_match"] = float(exact_at[part].mean())
            out[f"{name}_f1"] = float(f1_at[part].mean())
    return out


def prediction_scores(examples: Sequence[SquadExample], predictions: Sequence, with_no_answer: bool = False
                      ) -> dict[str, float]:
    """SQuAD scores of span predictions (objects with ``id``, ``text`` and ``null_margin``, as
    ``edgebert.qa.spans.predict_spans`` gives them): ``squad_scores`` over the answerable questions, or
    with ``with_no_answer`` ``squad_v2_scores`` over all of them."""
    answers = {p.id: p.text for p in predictions}
    if with_no_answer:
        return squad_v2_scores(examples, answers, {p.id: p.null_margin for p in predictions})
    return squad_scores(examples, answers)
