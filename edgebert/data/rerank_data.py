"""Reranker data from SQuAD files: (question, sentence) training pairs with hard negatives, and the dev
groups a reranker is evaluated on (``finetune`` / ``distill`` / ``evaluate --task rerank``).

Every paragraph is cut into sentences (``edgebert.qa.rank_groups.sentences``); the sentence holding a question's
answer is relevant, every other sentence is not. For each answerable training question:

* one positive pair: (question, its answer's sentence);
* ``article_negatives`` sentences of its own article (other paragraphs too), drawn at random (seeded);
* ``hard_negatives`` sentences the *retriever* ranks highest for it among all training sentences, the relevant
  one excepted: a bi-encoder's mistakes, which a reranker exists to fix. The retriever is a sentence-embedding
  model (all-MiniLM-L6-v2 by default: the start model of ``finetune``), mean-pooled and cosine-compared.

Dev groups, two per question (``eval_queries`` answerable dev questions, the first in file order):

* ``paragraph``: its paragraph's sentences topped up to 20 with the following paragraphs' (``rank_groups``);
* ``retrieved``: the retriever's top ``retrieve_k`` over every dev sentence; a question whose relevant sentence
  the retriever missed scores 0 there (what a deployed retrieve-then-rerank pipeline gets).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from edgebert.errors import DataError
from edgebert.qa.rank_groups import RankGroup, rank_groups, sentences
from edgebert.qa.squad_file import SquadExample, read_squad

Embed = Callable[[list[str]], np.ndarray]        # texts -> (N, H) unit vectors

EVAL_SETTINGS = ("paragraph", "retrieved")


@dataclass(frozen=True)
class RerankSplit:
    """What the reranker trains on and is judged on."""

    pairs: list[tuple[str, str]]
    labels: np.ndarray                            # (N,) 1 relevant, 0 not
    dev: dict[str, list[RankGroup]]               # EVAL_SETTINGS -> groups
    stats: dict


def _answer_sentence(e: SquadExample) -> str | None:
    start = e.answers[0].start
    return next((e.context[a:b] for a, b in sentences(e.context) if a <= start < b), None)


def _article_sentences(examples: Sequence[SquadExample]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for context in dict.fromkeys(e.context for e in examples):
        title = next(e.title for e in examples if e.context == context)
        out.setdefault(title, []).extend(context[a:b] for a, b in sentences(context))
    return {t: list(dict.fromkeys(s)) for t, s in out.items()}


def training_pairs(examples: Sequence[SquadExample], embed: Embed, article_negatives: int = 4,
                   hard_negatives: int = 3, seed: int = 0) -> tuple[list[tuple[str, str]], np.ndarray, dict]:
    """(pairs, labels, stats) of the module docstring."""
    questions = [e for e in examples if e.has_answer]
    articles = _article_sentences(questions)
    everything = list(dict.fromkeys(s for ss in articles.values() for s in ss))
    positives = [_answer_sentence(e) for e in questions]
    kept = [(e, p) for e, p in zip(questions, positives) if p is not None]
    if not kept:
        raise DataError("no question of the training file has an answer inside a sentence of its paragraph")
    rng = np.random.default_rng(seed)
    hard = _top_k([e.question for e, _ in kept], everything, embed, hard_negatives + 1)
    pairs, labels = [], []
    for (e, positive), ranked in zip(kept, hard):
        pairs.append((e.question, positive))
        labels.append(1)
        others = [s for s in articles[e.title] if s != positive]
        for i in rng.permutation(len(others))[:article_negatives]:
            pairs.append((e.question, others[i]))
            labels.append(0)
        chosen = [everything[i] for i in ranked if everything[i] != positive][:hard_negatives]
        pairs.extend((e.question, s) for s in chosen)
        labels.extend([0] * len(chosen))
    stats = {"questions": len(kept), "pairs": len(pairs), "positives": int(sum(labels)),
             "sentences": len(everything), "article_negatives": article_negatives, "hard_negatives": hard_negatives}
    return pairs, np.asarray(labels, dtype=np.int64), stats


def _top_k(queries: list[str], passages: list[str], embed: Embed, k: int) -> np.ndarray:
    """(Q, k) indices of each query's ``k`` most similar passages (cosine of the retriever's vectors)."""
    q, p = embed(queries), embed(passages)
    sims = q @ p.T
    k = min(k, len(passages))
    top = np.argpartition(-sims, k - 1, axis=1)[:, :k]
    order = np.argsort(-np.take_along_axis(sims, top, 1), axis=1, kind="stable")
    return np.take_along_axis(top, order, 1)


def dev_groups(examples: Sequence[SquadExample], embed: Embed | None, eval_queries: int | None = 400,
               retrieve_k: int = 20) -> dict[str, list[RankGroup]]:
    """The dev groups of the module docstring (``retrieved`` only with a retriever)."""
    questions = [e for e in examples if e.has_answer]
    questions = questions[:eval_queries] if eval_queries else questions
    if not questions:
        raise DataError("the dev file has no answerable questions to rank passages for")
    ids = {e.id for e in questions}
    groups = {"paragraph": [g for g in rank_groups(examples) if g.id in ids]}
    if embed is not None:
        everything = list(dict.fromkeys(s for ss in _article_sentences(examples).values() for s in ss))
        top = _top_k([e.question for e in questions], everything, embed, retrieve_k)
        retrieved = []
        for e, ranked in zip(questions, top):
            passages = tuple(everything[i] for i in ranked)
            answer = _answer_sentence(e)
            relevant = frozenset(i for i, s in enumerate(passages) if s == answer)
            retrieved.append(RankGroup(e.question, passages, relevant, e.id))
        groups["retrieved"] = retrieved
    return groups


def read_rerank_split(train_file: Path, dev_file: Path | None, embed: Embed, *, article_negatives: int = 4,
                      hard_negatives: int = 3, eval_queries: int | None = 400, retrieve_k: int = 20,
                      max_train_questions: int | None = None, seed: int = 0) -> RerankSplit:
    """A SQuAD train (and dev) file as a ``RerankSplit``."""
    train = read_squad(train_file)
    if max_train_questions:
        keep = np.sort(np.random.default_rng(seed).permutation(len(train))[:max_train_questions])
        train = [train[i] for i in keep]
    pairs, labels, stats = training_pairs(train, embed, article_negatives, hard_negatives, seed)
    dev = dev_groups(read_squad(dev_file), embed, eval_queries, retrieve_k) if dev_file else {}
    stats["dev"] = {k: {"queries": len(v), "pairs": sum(len(g.passages) for g in v),
                        "with_relevant": sum(bool(g.relevant) for g in v)} for k, v in dev.items()}
    return RerankSplit(pairs, labels, dev, stats)

