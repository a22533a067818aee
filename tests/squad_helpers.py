"""Toy SQuAD files for the question-answering tests (not a test module).

The toy task is learnable by a tiny model in a few hundred steps: every context is a few toy sentences
(``distill_helpers``' words) holding exactly one opinion word (good, awful, ...); the question asks what
the film was like and the answer is that word. ``write_toy_squad`` writes SQuAD 1.1 JSON (or 2.0, with
unanswerable questions whose context has no opinion word).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from distill_helpers import FILLERS, NEGATIVE, POSITIVE

QUESTIONS = ("what was the film like ?", "how was the movie ?", "what is the story like ?")


def toy_context(rng: random.Random, words: int, opinion: str | None) -> tuple[str, int | None]:
    """Filler words with ``opinion`` put in at random; (context, character offset of the opinion)."""
    tokens = [rng.choice(FILLERS) for _ in range(words)]
    at = None
    if opinion is not None:
        tokens.insert(rng.randint(0, len(tokens)), opinion)
    text = " ".join(tokens)
    if opinion is not None:
        at = next(i for i in range(len(text)) if text.startswith(opinion, i)
                  and (i == 0 or text[i - 1] == " ") and text[i + len(opinion):i + len(opinion) + 1] in ("", " "))
    return text, at


def toy_squad(n: int, seed: int = 0, words: tuple[int, int] = (6, 14), unanswerable: float = 0.0,
              golds: int = 1) -> dict:
    """The JSON object of a toy SQuAD file with ``n`` questions (one paragraph each, several per article)."""
    rng = random.Random(seed)
    articles, paragraphs = [], []
    for q in range(n):
        impossible = rng.random() < unanswerable
        opinion = None if impossible else rng.choice(POSITIVE + NEGATIVE)
        context, at = toy_context(rng, rng.randint(*words), opinion)
        qa = {"id": f"q{seed}-{q}", "question": rng.choice(QUESTIONS),
              "answers": [] if impossible else [{"text": opinion, "answer_start": at}] * golds}
        if unanswerable:
            qa["is_impossible"] = impossible
        paragraphs.append({"context": context, "qas": [qa]})
        if len(paragraphs) == 5:
            articles.append({"title": f"toy {len(articles)}", "paragraphs": paragraphs})
            paragraphs = []
    if paragraphs:
        articles.append({"title": f"toy {len(articles)}", "paragraphs": paragraphs})
    return {"version": "v2.0" if unanswerable else "1.1", "data": articles}


def write_toy_squad(path: Path, n: int, seed: int = 0, **kwargs) -> Path:
    path.write_text(json.dumps(toy_squad(n, seed, **kwargs)), encoding="utf-8")
    return path
