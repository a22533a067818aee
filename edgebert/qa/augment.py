"""Context edits: more SQuAD training pairs for distillation, with the gold answers kept.

A distilled span student learns its teacher's start/end distributions from the windows it is shown; on
a small training file (3.8k questions) it fits them closely (training agreement 0.86 after 6 epochs) and
still trails the teacher on new questions. More inputs for the teacher to label narrow that gap (TinyBERT's
data augmentation, Jiao et al. 2020), and a QA pair can be varied without losing its label: change the
context around the answer.

``context_edits(examples, copies, seed)`` gives ``copies`` variants of every answerable question, each
with one edit of its context, chosen at random (seeded):

- **drop** a sentence that holds no gold answer (contexts of two or more sentences), or
- **insert** a sentence from another paragraph of the same article (same ``title``) at a sentence
  boundary that no gold answer crosses: a distractor on the topic, the kind SQuAD's hard cases have.

Every answer keeps its text, its offset moved with the edit (checked). Sentences are cut with a plain rule
(end punctuation, space, a capital letter, digit or quote next), which is close enough for an augmentation.
A variant's id is the question's with ``#edit<k>``. Torch-free.
"""

from __future__ import annotations

import random
import re
from collections import defaultdict
from dataclasses import replace
from typing import Sequence

from .squad_file import SquadAnswer, SquadExample

_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[A-Z0-9\"'(\[])")


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) character spans of the sentences of ``text``; the space after a sentence belongs to
    no span. Their concatenation with the gaps is the text."""
    spans, start = [], 0
    for match in _SENTENCE_END.finditer(text):
        end = match.start() + len(match.group(0).rstrip())
        spans.append((start, end))
        start = match.end()
    if start < len(text):
        spans.append((start, len(text)))
    return [(s, e) for s, e in spans if text[s:e].strip()]


def _shift(answers: Sequence[SquadAnswer], at: int, by: int) -> tuple[SquadAnswer, ...]:
    """The answers with those starting at or after ``at`` moved by ``by`` characters."""
    return tuple(SquadAnswer(a.text, a.start + by if a.start >= at else a.start) for a in answers)


def _free(span: tuple[int, int], answers: Sequence[SquadAnswer]) -> bool:
    """No answer overlaps the character span."""
    return all(a.end <= span[0] or a.start >= span[1] for a in answers)


def _drop(ex: SquadExample, rng: random.Random) -> SquadExample | None:
    spans = sentence_spans(ex.context)
    free = [i for i, span in enumerate(spans) if _free(span, ex.answers)]
    if len(spans) < 2 or not free:
        return None
    i = rng.choice(free)
    # drop the sentence and the gap after it (the gap before it for the last sentence)
    start, end = spans[i]
    if i + 1 < len(spans):
        end = spans[i + 1][0]
    else:
        start = spans[i - 1][1]
    context = ex.context[:start] + ex.context[end:]
    return replace(ex, context=context, answers=_shift(ex.answers, end, start - end), plausible_answers=())


def _insert(ex: SquadExample, others: Sequence[str], rng: random.Random) -> SquadExample | None:
    donors = [c for c in others if c != ex.context]
    if not donors:
        return None
    donor = rng.choice(donors)
    sentence = donor[slice(*rng.choice(sentence_spans(donor)))]
    spans = sentence_spans(ex.context)
    # boundaries: before each sentence and at the end; none inside an answer
    points = [s for s, _ in spans] + [len(ex.context)]
    points = [p for p in points if all(not (a.start < p < a.end) for a in ex.answers)]
    if not points or not sentence.strip():
        return None
    at = rng.choice(points)
    piece = sentence + " " if at < len(ex.context) else " " + sentence
    context = ex.context[:at] + piece + ex.context[at:]
    return replace(ex, context=context, answers=_shift(ex.answers, at, len(piece)), plausible_answers=())


def context_edits(examples: Sequence[SquadExample], copies: int, seed: int = 0) -> list[SquadExample]:
    """``copies`` edited variants of every answerable question (see the module docstring)."""
    if copies < 1:
        return []
    rng = random.Random(seed)
    by_title: dict[str, list[str]] = defaultdict(list)
    for ex in examples:
        if ex.context not in by_title[ex.title]:
            by_title[ex.title].append(ex.context)
    out: list[SquadExample] = []
    for ex in examples:
        if not ex.has_answer:
            continue
        for k in range(copies):
            edits = [lambda: _drop(ex, rng), lambda: _insert(ex, by_title[ex.title], rng)]
            rng.shuffle(edits)
            variant = edits[0]() or edits[1]()
            if variant is None:
                continue
            for answer in variant.answers:       # an edit never changes what an answer says
                assert variant.context[answer.start:answer.end] == answer.text, (ex.id, answer)
            out.append(replace(variant, id=f"{ex.id}#edit{k}"))
    return out
