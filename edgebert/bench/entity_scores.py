"""Entity F1 of every bench path on a CoNLL file (``edgebert bench --data``, token-cls bundles).

Each path, the PyTorch reference included, tags the file's sentences as an app would
(``edgebert.runtime.tagging``: each sentence as text, the bundle's tokenizer and offsets, overlapping
windows for a sentence longer than the bundle's input, each word labelled by the sub-token that starts
it) and is scored against the gold tags by seqeval (``edgebert.scores.entities``, conlleval's definition).
So every path sees the same sub-tokens, and an ONNX path's figure is the one ``edgebert evaluate``
reports for the bundle. The file is read and checked as ``edgebert evaluate`` reads it
(``edgebert.data.tasks.read_tagged``: IOB tags, each one of the bundle's labels), with the same one-line
error, before anything is measured.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from edgebert.bundle.task_registry import task_serving
from edgebert.data.tasks import read_tagged
from edgebert.errors import ConfigError, DataError
from edgebert.files.textfiles import is_conll
from edgebert.runtime.tagging import Tagger, batched_logits, tag_sentences, tag_texts
from edgebert.runtime.text import TextEncoder
from edgebert.scores.entities import entity_scores, require_seqeval

BATCH = 32      # sentences per model call (length-sorted), as edgebert evaluate and check run them


@dataclass(frozen=True)
class EntityData:
    """The sentences of a CoNLL file and their gold tags, and how each path tags them."""

    file: str
    words: list[tuple[str, ...]]
    gold: list[list[str]]
    encoder: TextEncoder
    labels: tuple[str, ...]
    pad_id: int

    @classmethod
    def load(cls, path: Path, task: str, encoder: TextEncoder, labels: tuple[str, ...], pad_id: int,
             limit: int | None = None) -> "EntityData":
        """Check that ``--data`` can be scored (a token-cls bundle, a CoNLL file whose every tag is one of
        the bundle's labels, seqeval installed) and read it as ``edgebert evaluate`` does
        (``edgebert.data.tasks.read_tagged``: the same one-line error for a bad line or an unknown tag);
        every problem is a ConfigError / DataError before anything is measured or written."""
        tagging = task_serving("tag").name
        if task != tagging:
            raise ConfigError(f"--data scores entity F1 of a {tagging} bundle; this bundle's task is {task!r}",
                              "drop --data (edgebert evaluate scores other tasks)")
        if not labels:
            raise ConfigError("the bundle's manifest has no label names, so tags cannot be scored",
                              "re-export the token classifier with edgebert export")
        try:     # the reader and the tag checks of edgebert evaluate, against the bundle's labels
            sentences, tagset = read_tagged(path, labels)
        except DataError as exc:
            if not Path(path).is_file() or is_conll(path):
                raise
            raise ConfigError(f"--data {path} is not a CoNLL file (one 'TOKEN TAG' per line, IOB tags): "
                              f"{exc.message}", "pass a CoNLL file such as conll2003/test.txt") from None
        require_seqeval()
        sentences = sentences[:limit]
        return cls(str(path), [s.words for s in sentences], [[tagset[t] for t in s.tags] for s in sentences],
                   encoder, labels, pad_id)

    def score(self, run_feeds: Callable[[dict[str, np.ndarray]], np.ndarray]) -> dict[str, Any]:
        """Entity scores of one path: ``run_feeds`` maps padded feeds to (B, T, C) logits."""
        run = batched_logits(run_feeds, self.pad_id, BATCH)
        tagger = Tagger(self.encoder, self.labels)
        t0 = time.perf_counter()
        predicted = tag_sentences(lambda texts: tag_texts(tagger, texts, run, "none"), self.words)
        wall = time.perf_counter() - t0
        scores = entity_scores(self.gold, predicted)
        return {"f1": round(scores["f1"], 5), "precision": round(scores["precision"], 5),
                "recall": round(scores["recall"], 5), "word_accuracy": round(scores["accuracy"], 5),
                "f1_per_type": {k[3:]: round(v, 5) for k, v in scores.items() if k.startswith("f1_")},
                "sentences": len(self.words), "wall_s": round(wall, 2)}

    def summary(self) -> dict[str, Any]:
        return {"file": self.file, "sentences": len(self.words), "words": sum(len(w) for w in self.words),
                "entities_scored_by": "seqeval (conlleval mode)", "batch": BATCH,
                "through": "each path tags the sentences as text (edgebert.runtime.tagging, aggregation "
                           "'none'; a word takes its first sub-token's label)",
                "results": {}}
