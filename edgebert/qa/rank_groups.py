"""Reranking groups from SQuAD questions, torch-free: a question, the passages to order, which of them are
relevant.

A SQuAD paragraph is cut into sentences (``sentences``); the sentence holding a gold answer's start is the
relevant passage of its question, the paragraph's other sentences are not. ``rank_groups`` gives each
answerable question its paragraph's sentences, topped up to ``size`` with the sentences of the paragraphs that
follow (file order, wrapping around): what the rerank INT8 gate and ``edgebert check`` order
(``builtin_rank_groups``: the built-in held-out questions), and what ``finetune`` / ``distill --task rerank``
evaluate on (a SQuAD dev file). ``passage_pairs`` flattens groups into (query, passage, label) rows for training.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterator, Sequence

from edgebert.qa.squad_file import SquadExample, builtin_questions

__all__ = ["RankGroup", "sentences", "rank_groups", "builtin_rank_groups", "GROUP_SIZE", "GATE_QUERIES",
           "BUILTIN_GROUPS"]

GROUP_SIZE = 20          # passages per query: its paragraph's sentences, then the next paragraphs'
GATE_QUERIES = 100       # built-in questions the rerank gate and check order (one from each of 100 paragraphs)
BUILTIN_GROUPS = "built-in held-out"     # how the gate records them as its source (check measures the same)
# a sentence ends at . ! or ? (optionally closed by a quote or bracket) followed by space and a capital, digit
# or quote, unless the period closes an initial or a title ("U.S. Army", "Dr. Smith"); "3.5 percent" has no space
_END = re.compile(r"(?<=[.!?])[\"')\]]?\s+(?=[A-Z0-9\"'(\[])")
_NOT_AN_END = re.compile(r"(?:\b[A-Z]|\b(?:Mr|Mrs|Ms|Dr|St|Jr|Sr|Mt|Prof|Gen|Col|Lt|Sgt|Rev|Gov|Sen|Rep|No|vs|Inc|"
                         r"Co|Ltd|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec|e\.g|i\.e))\.$")


@dataclass(frozen=True)
class RankGroup:
    """One query, its candidate passages (in the order they were gathered) and the indices of the relevant ones."""

    query: str
    passages: tuple[str, ...]
    relevant: frozenset[int]
    id: str = ""

    def pairs(self) -> list[tuple[str, str]]:
        return [(self.query, p) for p in self.passages]


def sentences(context: str) -> list[tuple[int, int]]:
    """(start, end) character spans of the sentences of ``context``, spaces between them left out."""
    spans, start = [], 0
    for match in _END.finditer(context):
        if _NOT_AN_END.search(context[max(0, match.start() - 8):match.start()]):
            continue
        end = match.start() + len(match.group(0).rstrip())
        spans.append((start, end))
        start = match.end()
    if start < len(context.rstrip()):
        spans.append((start, len(context.rstrip())))
    return [(a, b) for a, b in spans if context[a:b].strip()]


def rank_groups(examples: Sequence[SquadExample], size: int = GROUP_SIZE) -> list[RankGroup]:
    """One ``RankGroup`` per answerable question of ``examples`` (see the module docstring). A question whose
    paragraph alone has more than ``size`` sentences keeps them all."""
    contexts = list(dict.fromkeys(e.context for e in examples))
    cut = {c: [c[a:b] for a, b in sentences(c)] for c in contexts}
    spans = {c: sentences(c) for c in contexts}
    groups = []
    for e in examples:
        if not e.has_answer:
            continue
        own = cut[e.context]
        relevant = {i for i, (a, b) in enumerate(spans[e.context]) for ans in e.answers if a <= ans.start < b}
        passages = list(own)
        at = contexts.index(e.context)
        for step in range(1, len(contexts)):
            if len(passages) >= size:
                break
            passages.extend(cut[contexts[(at + step) % len(contexts)]][:size - len(passages)])
        groups.append(RankGroup(e.question, tuple(passages), frozenset(relevant), e.id))
    return groups


def builtin_rank_groups(n: int | None = GATE_QUERIES) -> list[RankGroup]:
    """The first ``n`` built-in held-out questions (one per paragraph first: ``builtin_questions``) as groups of
    ``GROUP_SIZE`` passages of the built-in held-out text."""
    return rank_groups(builtin_questions()[:n] if n else builtin_questions())


def iter_pairs(groups: Sequence[RankGroup]) -> Iterator[tuple[str, str]]:
    for g in groups:
        yield from g.pairs()
