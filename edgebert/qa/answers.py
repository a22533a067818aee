"""Answers as transformers' ``question-answering`` pipeline gives them, torch-free (numpy only): what
``EdgeSession.answer`` does after the forward pass.

Per window of a question (``edgebert.qa.windows``), as the pipeline's ``select_starts_ends`` /
``decode_spans`` (transformers 4.57, ``pipelines/question_answering.py``):

* the logits of every token that is not a context token or [CLS] are set to -10000, then start and
  end are soft-maxed over the window (float32, as the pipeline computes them);
* the null score is [CLS] start probability x [CLS] end probability (the lowest over the windows);
  [CLS]'s probabilities are then zeroed;
* a span (s, e) scores ``p_start[s] * p_end[e]`` when both are context tokens, ``s <= e`` and it is at
  most ``max_answer_len`` tokens; the ``2 * top_k + 10`` best spans of the window are kept (the
  pipeline's pre-selection before aligning to words);
* each span is widened to whole words (``align_to_words``: from its first token's word start to its
  last token's word end, ``SquadWindows.word_spans``), its text cut from the context; spans whose text
  is the same (case-insensitively) as an earlier one, from this window or another, add their score to
  it instead of standing apart.

Then (``handle_impossible_answer``) ``{"score": null, "start": 0, "end": 0, "answer": ""}`` joins the
list, which is sorted by score, best first, and cut to ``top_k``. The one difference from the pipeline:
spans never start at [CLS] (the pipeline can list such zero-score spans when a context has fewer valid
spans than it pre-selects); here a span never leaves the context.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from edgebert.errors import ConfigError, DataError
from edgebert.qa.squad_file import SquadExample
from edgebert.qa.windows import NOT_CONTEXT, SquadWindows

MASKED = np.float32(-10000.0)       # the pipeline's logit for tokens that cannot be in an answer
Answer = dict                       # {"score": float, "start": int, "end": int, "answer": str}


def _softmax(x: np.ndarray) -> np.ndarray:
    exp = np.exp(x - x.max())
    return exp / exp.sum()


def window_candidates(start_logits: np.ndarray, end_logits: np.ndarray, allowed: np.ndarray, context: np.ndarray,
                      top: int, max_answer_len: int) -> tuple[list[tuple[int, int, float]], float]:
    """The ``top`` best (first token, last token, probability product) spans of one window, best first,
    and the window's null score (see the module docstring). ``allowed``: the tokens kept in the
    softmax (context and [CLS]); ``context``: the tokens a span may use."""
    start = np.where(allowed, np.asarray(start_logits, np.float32), MASKED)
    end = np.where(allowed, np.asarray(end_logits, np.float32), MASKED)
    start, end = _softmax(start), _softmax(end)
    null = float(start[0] * end[0])
    start[0] = end[0] = 0.0
    n, width = len(start), min(max_answer_len, len(start))
    last = np.arange(n)[:, None] + np.arange(width)[None, :]      # (n, width): span (s, s + d), row-major order
    inside = np.concatenate([context, np.zeros(width, bool)])        # a last token past the window is out
    keep = context[:, None] & inside[last]
    flat = np.where(keep, start[:, None] * np.concatenate([end, np.zeros(width, np.float32)])[last], 0.0).ravel()
    valid = np.flatnonzero(flat > 0)              # at most n x max_answer_len spans: a full stable sort is cheap
    order = valid[np.argsort(-flat[valid], kind="stable")[:top]]
    firsts, offsets = np.divmod(order, width)
    return [(int(s), int(s + d), float(flat[i])) for s, d, i in zip(firsts, offsets, order)], null


def check_answer_options(top_k: int, max_answer_len: int) -> None:
    for name, value in (("top_k", top_k), ("max_answer_len", max_answer_len)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"{name}={value!r} must be a positive integer")


def pipeline_answers(examples: Sequence[SquadExample], windows: SquadWindows, start_logits: Sequence[np.ndarray],
                     end_logits: Sequence[np.ndarray], top_k: int = 1, max_answer_len: int = 15,
                     handle_impossible_answer: bool = False, align_to_words: bool = True,
                     cls_id: int | None = None) -> list[list[Answer]]:
    """The ``top_k`` answers of every example (in example order, best first) from the (T_i,) start and
    end logits of its windows (rows may be longer: padding is cut off). ``cls_id``: [CLS]'s token id
    (every position holding it stays in the softmax, as the pipeline keeps it); None: position 0."""
    check_answer_options(top_k, max_answer_len)
    if len(start_logits) != len(windows) or len(end_logits) != len(windows):
        raise DataError(f"{len(start_logits)} start and {len(end_logits)} end logit rows for {len(windows)} windows")
    if align_to_words and windows.word_spans is None:
        raise DataError("these windows carry no word spans", "make them with edgebert.qa.windows.squad_windows")
    found: list[list[Answer]] = [[] for _ in examples]
    by_text: list[dict[str, Answer]] = [{} for _ in examples]     # lower-cased answer text -> its answer
    null = np.full(len(examples), 1e6)
    for w, example in enumerate(windows.example_index):
        offsets = windows.offsets[w]
        n = len(offsets)
        context = offsets[:, 0] != NOT_CONTEXT
        allowed = context.copy()
        if cls_id is None:
            allowed[0] = True
        else:
            allowed |= np.asarray(windows.input_ids[w]) == cls_id
        spans, window_null = window_candidates(np.asarray(start_logits[w])[:n], np.asarray(end_logits[w])[:n],
                                               allowed, context, 2 * top_k + 10, max_answer_len)
        null[example] = min(null[example], window_null)
        chars = windows.word_spans[w] if align_to_words else offsets
        text = examples[example].context
        for s, e, score in spans:
            a, b = int(chars[s, 0]), int(chars[e, 1])
            key = text[a:b].lower()
            same = by_text[example].get(key)
            if same is not None:
                same["score"] += score
            else:
                by_text[example][key] = answer = {"score": score, "start": a, "end": b, "answer": text[a:b]}
                found[example].append(answer)
    out = []
    for i, answers in enumerate(found):
        if handle_impossible_answer:
            answers.append({"score": float(null[i]), "start": 0, "end": 0, "answer": ""})
        out.append(sorted(answers, key=lambda x: x["score"], reverse=True)[:top_k])
    return out
