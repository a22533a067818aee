"""Token classification behind ``EdgeSession.tag``: per-token scores -> words -> entities.

Grouping follows Hugging Face's ``TokenClassificationPipeline`` (transformers 4.57,
``pipelines/token_classification.py``), so a bundle tags text as the PyTorch model in that pipeline does:

* ``none``: one result per sub-token whose label is not ignored: ``entity`` (e.g. ``B-PER``), ``score``
  (its softmax probability), ``index`` (position in the input ids, [CLS] = 0), ``word`` (the token
  string), ``start`` / ``end``;
* ``simple``: every sub-token labelled by its own argmax, then adjacent tokens of one type merged into
  an entity unless a token says ``B-``: ``entity_group``, ``score`` (mean of the tokens' scores),
  ``word`` (the tokens decoded), ``start`` / ``end``;
* ``first``: sub-tokens are first joined into words (a token is a word's continuation when its
  string and its span of the text differ in length, e.g. ``##ing``; an [UNK] never is), each word takes
  the label of its first sub-token, then words are grouped as in ``simple``.

``start`` / ``end`` are character offsets into the original text (``text[start:end]`` is the entity as
written, accents, case and spacing kept), from the tokenizer's offsets. Labels listed in
``ignore_labels`` (default ``O``) are dropped after grouping.

Long texts are never truncated: a text longer than the model's input is cut into overlapping windows
(``stride`` sub-tokens shared by neighbours), each token keeps the scores of the window where it has
the most context on both sides, and grouping runs once over the whole text, so an entity that
crosses a window edge comes out whole. (Hugging Face's pipeline with ``stride`` groups each window
alone and then drops overlapping entities; within one window the two are the same.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from edgebert.errors import ConfigError
from edgebert.runtime.numeric import softmax
from edgebert.runtime.text import Encoded, Pieces, TextEncoder, length_sorted_batches, pad_batch

AGGREGATIONS = ("none", "simple", "first")
Entity = dict  # {"entity_group" | "entity", "score", "word", "start", "end"(, "index")}


# =========================================================================== windows
def window_spans(n: int, width: int, stride: int) -> list[tuple[int, int]]:
    """``[start, end)`` sub-token ranges of at most ``width`` covering ``0..n``, neighbours sharing
    ``stride`` tokens (the last window ends at ``n``)."""
    if width < 1 or not 0 <= stride < width:
        raise ConfigError(f"stride={stride} must be in 0..{width - 1} for windows of {width} tokens")
    if n <= width:
        return [(0, n)]
    step = width - stride
    starts = list(range(0, n - width, step)) + [n - width]
    return [(s, s + width) for s in starts]


def merge_windows(n: int, spans: Sequence[tuple[int, int]], scores: Sequence[np.ndarray]) -> np.ndarray:
    """(n, C) scores of a whole text from its windows' (end - start, C) scores: each token takes the
    window where ``min(tokens before it, tokens after it)`` inside the window is largest (the earlier
    window on a tie)."""
    out = np.zeros((n, scores[0].shape[-1]), dtype=scores[0].dtype)
    best = np.full(n, -1, dtype=np.int64)
    for (start, end), window in zip(spans, scores):
        pos = np.arange(start, end)
        context = np.minimum(pos - start, end - 1 - pos)
        better = context > best[start:end]
        out[pos[better]] = window[better]
        best[start:end] = np.where(better, context, best[start:end])
    return out


# =========================================================================== grouping (Hugging Face's)
def _tag(label: str) -> tuple[str, str]:
    """(B|I, type) of a label; a label without a B-/I- prefix continues (I) its own type."""
    if label.startswith("B-"):
        return "B", label[2:]
    if label.startswith("I-"):
        return "I", label[2:]
    return "I", label


@dataclass(frozen=True)
class Tagger:
    """Turns one text's token scores into entities; immutable, so one instance serves every thread."""

    encoder: TextEncoder
    labels: tuple[str, ...]

    def token_entities(self, text: str, pieces: Pieces, probs: np.ndarray, offset: int) -> list[dict]:
        """Hugging Face's ``gather_pre_entities``: one record per sub-token (``offset``: the position of
        the first sub-token in the model's input, after [CLS])."""
        out = []
        prefix, unk = self.encoder.subword_prefix, self.encoder.unk_id
        for i, (token, (start, end)) in enumerate(zip(pieces.tokens, pieces.offsets.tolist())):
            ref = text[start:end]
            if prefix:
                is_subword = len(token) != len(ref)
            else:   # no continuation marker: Hugging Face's fallback heuristic
                is_subword = start > 0 and " " not in text[start - 1:start + 1]
            if unk is not None and int(pieces.ids[i]) == unk:
                token, is_subword = ref, False
            out.append({"word": token, "scores": probs[i], "start": start, "end": end, "index": i + offset,
                        "is_subword": is_subword})
        return out

    def _labelled(self, record: dict) -> dict:
        best = int(record["scores"].argmax())
        return {"entity": self.labels[best], "score": float(record["scores"][best]), "index": record["index"],
                "word": record["word"], "start": record["start"], "end": record["end"]}

    def _word(self, records: list[dict]) -> dict:
        """``first``: a word's label and score are its first sub-token's."""
        best = int(records[0]["scores"].argmax())
        return {"entity": self.labels[best], "score": float(records[0]["scores"][best]),
                "word": self.encoder.decode_tokens([r["word"] for r in records]),
                "start": records[0]["start"], "end": records[-1]["end"]}

    def _words(self, records: list[dict]) -> list[dict]:
        return [self._word(g) for g in _runs(records, lambda prev, r: not r["is_subword"])]

    def _group(self, entities: list[dict]) -> dict:
        return {"entity_group": entities[0]["entity"].split("-", 1)[-1],
                "score": float(np.mean([e["score"] for e in entities])),
                "word": self.encoder.decode_tokens([e["word"] for e in entities]),
                "start": entities[0]["start"], "end": entities[-1]["end"]}

    def _group_entities(self, entities: list[dict]) -> list[dict]:
        """Adjacent entities of one type merge unless the next one says ``B-``."""
        def starts_group(prev: dict, entity: dict) -> bool:
            bi, tag = _tag(entity["entity"])
            return not (tag == _tag(prev["entity"])[1] and bi != "B")

        return [self._group(g) for g in _runs(entities, starts_group)]

    def entities(self, text: str, pieces: Pieces, probs: np.ndarray, aggregation: str,
                 ignore_labels: Sequence[str]) -> list[Entity]:
        """The entities of one text from its (tokens, C) softmax scores."""
        records = self.token_entities(text, pieces, probs, self.encoder.prefix_length)
        if aggregation == "first":
            grouped = self._group_entities(self._words(records))
        else:
            labelled = [self._labelled(r) for r in records]
            grouped = labelled if aggregation == "none" else self._group_entities(labelled)
        ignored = set(ignore_labels)
        return [e for e in grouped if e.get("entity") not in ignored and e.get("entity_group") not in ignored]


# =========================================================================== a batch of texts
def batched_logits(run_feeds: Callable[[dict[str, np.ndarray]], np.ndarray], pad_id: int, batch_size: int,
                   max_tokens: int = 0) -> Callable[[list[Encoded]], list[np.ndarray]]:
    """``tag_texts``'s ``run`` from any model call on padded feeds -> (B, T, C) logits (an onnxruntime
    session, the PyTorch reference of ``edgebert bench``): rows in length-sorted batches of
    ``batch_size`` (and at most ``max_tokens`` padded tokens, ``length_sorted_batches``), each row's logits cut
    to its own length, in the order of the rows."""
    def run(rows: list[Encoded]) -> list[np.ndarray]:
        out: list[np.ndarray] = [np.zeros(0)] * len(rows)
        for idx in length_sorted_batches(rows, batch_size, max_tokens):
            logits = run_feeds(pad_batch([rows[i] for i in idx], pad_id))
            for r, i in enumerate(idx):
                out[i] = logits[r, :len(rows[i])]
        return out
    return run


def tag_texts(tagger: Tagger, texts: Sequence[str], run: Callable[[list[Encoded]], list[np.ndarray]],
              aggregation: str = "simple", stride: int | None = None,
              ignore_labels: Sequence[str] = ("O",)) -> list[list[Entity]]:
    """Entities of every text. ``run`` maps framed inputs to their (T, C) logits (one call per
    batch of windows, in any order); ``stride``: sub-tokens shared by neighbouring windows of a long
    text (default: a quarter of a window)."""
    if aggregation not in AGGREGATIONS:
        raise ConfigError(f"unknown aggregation {aggregation!r}", f"use one of {', '.join(AGGREGATIONS)}")
    encoder = tagger.encoder
    width = encoder.content_length
    stride = width // 4 if stride is None else stride
    if not isinstance(stride, int) or isinstance(stride, bool):
        raise ConfigError(f"stride={stride!r} must be an integer")
    pieces = encoder.pieces(texts)
    plan = [(t, span) for t, p in enumerate(pieces) if len(p) for span in window_spans(len(p), width, stride)]
    logits = run([encoder.frame(pieces[t].ids[a:b]) for t, (a, b) in plan])
    head = encoder.prefix_length
    windows: dict[int, tuple[list, list]] = {}
    for (t, span), out in zip(plan, logits):
        spans, scores = windows.setdefault(t, ([], []))
        spans.append(span)
        scores.append(out[head:head + span[1] - span[0]])
    results = []
    for t, (text, p) in enumerate(zip(texts, pieces)):
        if not len(p):
            results.append([])
            continue
        spans, scores = windows[t]
        probs = softmax(merge_windows(len(p), spans, scores).astype(np.float64))
        results.append(tagger.entities(text, p, probs, aggregation, ignore_labels))
    return results


def word_tags(entities: Sequence[Entity], word_spans: Sequence[tuple[int, int]]) -> list[str]:
    """One IOB tag per word (``word_spans``: each word's ``(start, end)`` in the text) from ``tag``'s
    entities. ``none``: a word takes the label of the sub-token that starts it (its first sub-token,
    the one a token classifier is trained on); grouped entities: the words that start inside an entity
    get ``B-TYPE`` (the first) and ``I-TYPE``. Words no entity covers are ``O``."""
    tags = ["O"] * len(word_spans)
    starts = np.asarray([s for s, _ in word_spans], dtype=np.int64)
    first_word = {int(s): i for i, s in reversed(list(enumerate(starts)))}
    for entity in entities:
        if "entity" in entity:
            i = first_word.get(int(entity["start"]))
            if i is not None:
                tags[i] = entity["entity"]
            continue
        inside = np.flatnonzero((starts >= entity["start"]) & (starts < entity["end"]))
        for k, i in enumerate(inside):
            tags[i] = ("B-" if k == 0 else "I-") + entity["entity_group"]
    return tags


def tag_sentences(tag: Callable[[list[str]], list[list[Entity]]],
                  sentences: Sequence[Sequence[str]]) -> list[list[str]]:
    """One IOB tag per word of pre-split sentences (a CoNLL file's), as an app would get them: each
    sentence is tagged as text (its words joined by single spaces) by ``tag`` (texts -> one list of
    ``aggregation="none"`` entities per text, e.g. ``EdgeSession.tag``), so the tags include the
    tokenizer's offsets and the windows of long sentences; each word takes the label of the sub-token
    that starts it (``word_tags``). ``edgebert evaluate``, ``check`` and ``bench`` score bundles so."""
    if not sentences:
        return []
    texts, spans = zip(*(join_words(words) for words in sentences))
    return [word_tags(entities, sp) for entities, sp in zip(tag(list(texts)), spans)]


def join_words(words: Sequence[str]) -> tuple[str, list[tuple[int, int]]]:
    """Pre-split words as one text (single spaces between them) and each word's character span."""
    spans, pos = [], 0
    for w in words:
        spans.append((pos, pos + len(w)))
        pos += len(w) + 1
    return " ".join(words), spans


def _runs(items: list[dict], starts_new) -> list[list[dict]]:
    """``items`` cut into consecutive runs; ``starts_new(previous, item)`` says where a new run begins."""
    runs: list[list[dict]] = []
    for item in items:
        if runs and not starts_new(runs[-1][-1], item):
            runs[-1].append(item)
        else:
            runs.append([item])
    return runs
