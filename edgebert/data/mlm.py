"""Masked-LM data, in one place: corpus -> documents -> sentence-pair examples (+ NSP) -> masked batches.

Examples are built as in the original BERT ``create_pretraining_data.py``: each document is split
into sentences, consecutive sentences are packed into a chunk up to a target length (the full
``max_seq_len - 3`` tokens, or with ``short_seq_prob`` a random shorter length), the chunk is cut
into segment A and B; half of the time B is replaced by a segment from another document
(``next_sentence_label`` 1 = random, 0 = true continuation, as Hugging Face). The pair is truncated
to fit ``[CLS] A [SEP] B [SEP]``. ``dupe_factor`` passes over the corpus give different cuts.

Masking is dynamic: ``MaskingCollator`` masks each example afresh every time it is batched, with a
random generator seeded by the example's key (position in the training stream), so a batch is the
same whichever process or resumed run builds it.

Every stage goes from text to examples the same way: ``mlm_documents`` (training and held-out
documents), ``mlm_examples`` (the one documents -> examples recipe) and, for evaluation,
``mlm_eval_batches``: examples and masks both drawn with ``EVAL_SEED``, so pretraining,
distillation and ``edgebert evaluate`` score every model on the same masked tokens.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from tokenizers import Tokenizer

from edgebert.data.corpus import read_corpora, split_documents
from edgebert.data.tokenizer import SpecialIds
from edgebert.errors import ConfigError, DataError
from edgebert.model import IGNORE_INDEX

_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]?\s+(?=[\"'(\[]?[A-Z0-9])")
EVAL_SEED = 20_231_121  # example and masking seed of every MLM evaluation set


def split_sentences(document: str) -> list[str]:
    """Paragraphs (newline-separated) -> sentences, split after . ! ? before a capital or digit."""
    sentences = []
    for paragraph in document.split("\n"):
        for sentence in _SENTENCE_END.split(paragraph.strip()):
            if sentence.strip():
                sentences.append(sentence.strip())
    return sentences


def regroup_documents(documents: Sequence[str], min_documents: int = 4,
                      sentences_per_document: int = 16) -> list[str]:
    """A corpus of very few documents is cut into pseudo-documents of consecutive sentences.

    NSP needs other documents to draw random segments from, and the held-out split needs documents
    to hold out; a text file with no blank lines is one document.
    """
    if len(documents) >= min_documents:
        return list(documents)
    sentences = [s for d in documents for s in split_sentences(d)]
    step = max(1, min(sentences_per_document, len(sentences) // min_documents))
    return [" ".join(sentences[i:i + step]) for i in range(0, len(sentences), step)]


def tokenize_documents(documents: Sequence[str], tok: Tokenizer,
                       max_segment_tokens: int) -> list[list[list[int]]]:
    """Documents -> sentences -> token ids (no special tokens); longer sentences are cut in pieces."""
    sentences_per_doc = [split_sentences(d) for d in documents]
    flat = [s for sents in sentences_per_doc for s in sents]
    encodings = tok.encode_batch(flat, add_special_tokens=False) if flat else []
    out, k = [], 0
    for sents in sentences_per_doc:
        doc = []
        for enc in encodings[k:k + len(sents)]:
            ids = enc.ids
            for start in range(0, len(ids), max_segment_tokens):
                doc.append(ids[start:start + max_segment_tokens])
        k += len(sents)
        doc = [s for s in doc if s]
        if doc:
            out.append(doc)
    return out


@dataclass
class PretrainingExamples:
    """Packed examples: ``input_ids[i]`` = [CLS] A [SEP] B [SEP]; ``b_start[i]`` = index of B's first token."""

    input_ids: list[np.ndarray]
    b_start: np.ndarray
    next_sentence_label: np.ndarray  # 0 = B follows A, 1 = B is random

    def __len__(self) -> int:
        return len(self.input_ids)

    def token_type_ids(self, i: int) -> np.ndarray:
        types = np.zeros(len(self.input_ids[i]), dtype=np.int64)
        types[self.b_start[i]:] = 1
        return types

    def num_tokens(self) -> int:
        return int(sum(len(x) for x in self.input_ids))

    def fingerprint(self) -> str:
        """A hash of the content; a resumed run checks it to be sure it trains on the same data."""
        h = hashlib.sha256()
        for ids in self.input_ids:
            h.update(ids.tobytes())
        h.update(self.b_start.tobytes())
        h.update(self.next_sentence_label.tobytes())
        return h.hexdigest()[:16]


def _truncate_pair(a: list[int], b: list[int], max_tokens: int, rng: random.Random) -> None:
    """Drop tokens from the longer segment, at its front or back at random (as BERT), until they fit."""
    while len(a) + len(b) > max_tokens:
        longer = a if len(a) > len(b) else b
        if rng.random() < 0.5:
            del longer[0]
        else:
            longer.pop()


def _examples_from_document(docs: list[list[list[int]]], doc_index: int, max_seq_len: int,
                            short_seq_prob: float, rng: random.Random, ids: SpecialIds,
                            out: list[tuple[list[int], int, int]]) -> None:
    document = docs[doc_index]
    max_tokens = max_seq_len - 3
    target = max_tokens if rng.random() >= short_seq_prob else rng.randint(2, max_tokens)
    chunk: list[list[int]] = []
    length, i = 0, 0
    while i < len(document):
        chunk.append(document[i])
        length += len(document[i])
        if i == len(document) - 1 or length >= target:
            a_end = 1 if len(chunk) < 2 else rng.randint(1, len(chunk) - 1)
            tokens_a = [t for seg in chunk[:a_end] for t in seg]
            random_next = rng.random() < 0.5 and len(docs) > 1
            if random_next:
                target_b = max(1, target - len(tokens_a))
                other = rng.randrange(len(docs) - 1)
                other += other >= doc_index  # any document but this one
                random_doc = docs[other]
                tokens_b: list[int] = []
                for seg in random_doc[rng.randrange(len(random_doc)):]:
                    tokens_b.extend(seg)
                    if len(tokens_b) >= target_b:
                        break
                i -= len(chunk) - a_end  # the unused sentences start the next chunk
            elif len(chunk) >= 2:
                tokens_b = [t for seg in chunk[a_end:] for t in seg]
            else:  # one sentence: A and B are its two halves, still a true continuation
                only = chunk[0]
                if len(only) < 2:
                    chunk, length = [], 0
                    i += 1
                    continue
                cut = rng.randint(1, len(only) - 1)
                tokens_a, tokens_b = only[:cut], only[cut:]
            _truncate_pair(tokens_a, tokens_b, max_tokens, rng)
            if tokens_a and tokens_b:
                seq = [ids.cls, *tokens_a, ids.sep, *tokens_b, ids.sep]
                out.append((seq, len(tokens_a) + 2, int(random_next)))
            chunk, length = [], 0
            target = max_tokens if rng.random() >= short_seq_prob else rng.randint(2, max_tokens)
        i += 1


def create_examples(docs: list[list[list[int]]], ids: SpecialIds, max_seq_len: int = 128,
                    seed: int = 0, dupe_factor: int = 1, short_seq_prob: float = 0.1,
                    max_examples: int | None = None) -> PretrainingExamples:
    """Tokenized documents -> shuffled sentence-pair examples. Deterministic given ``seed``."""
    if max_seq_len < 8:
        raise ConfigError(f"max_seq_len={max_seq_len} is too short", "use at least 8 (BERT uses 128-512)")
    if dupe_factor < 1:
        raise ConfigError(f"dupe_factor={dupe_factor} must be >= 1")
    rng = random.Random(seed)
    raw: list[tuple[list[int], int, int]] = []
    for _ in range(dupe_factor):
        for d in range(len(docs)):
            _examples_from_document(docs, d, max_seq_len, short_seq_prob, rng, ids, raw)
    if not raw:
        raise DataError("the corpus is too small to make a single pretraining example",
                        "give more text (at least a few sentences)")
    rng.shuffle(raw)
    if max_examples is not None:
        raw = raw[:max_examples]
    return PretrainingExamples(
        input_ids=[np.asarray(seq, dtype=np.int32) for seq, _, _ in raw],
        b_start=np.asarray([b for _, b, _ in raw], dtype=np.int64),
        next_sentence_label=np.asarray([n for _, _, n in raw], dtype=np.int64),
    )


def most_frequent_token(examples: PretrainingExamples, ids: SpecialIds) -> tuple[int, float]:
    """The most frequent non-special token and its share of non-special tokens (unigram baseline)."""
    counts = np.bincount(np.concatenate(examples.input_ids).astype(np.int64))
    counts[[i for i in ids.all if i < len(counts)]] = 0
    token = int(counts.argmax())
    return token, float(counts[token] / max(1, counts.sum()))


class MaskingCollator:
    """Dynamic MLM masking + padding to the longest example in the batch.

    Of the non-special tokens, ``mlm_probability`` are chosen (stochastic rounding per example, at
    least one); of the chosen 80% become [MASK], 10% a random non-special token, 10% stay. Labels
    are -100 everywhere else. Special tokens and padding are never chosen.
    """

    def __init__(self, ids: SpecialIds, vocab_size: int, seed: int = 0, mlm_probability: float = 0.15,
                 mask_ratio: float = 0.8, random_ratio: float = 0.1, segment_types: bool = True):
        if not 0.0 < mlm_probability < 1.0:
            raise ConfigError(f"mlm_probability={mlm_probability} must be in (0, 1)")
        if mask_ratio < 0 or random_ratio < 0 or mask_ratio + random_ratio > 1:
            raise ConfigError("mask_ratio + random_ratio must be within [0, 1]")
        self.ids, self.vocab_size, self.seed = ids, vocab_size, seed
        self.segment_types = segment_types   # False: a model with one token type (RoBERTa, XLM-R) sees B as type 0
        self.mlm_probability, self.mask_ratio, self.random_ratio = mlm_probability, mask_ratio, random_ratio
        special = np.zeros(vocab_size, dtype=bool)
        special[[i for i in ids.all if i < vocab_size]] = True
        self.is_special = special
        self.random_pool = np.flatnonzero(~special)

    def mask(self, input_ids: np.ndarray, key: int) -> tuple[np.ndarray, np.ndarray]:
        """(masked ids, labels) for one example; the same ``key`` always gives the same masking."""
        rng = np.random.default_rng([self.seed, key])
        ids = input_ids.astype(np.int64, copy=True)
        labels = np.full_like(ids, IGNORE_INDEX)
        candidates = np.flatnonzero(~self.is_special[ids])
        if len(candidates) == 0:
            return ids, labels
        expected = self.mlm_probability * len(candidates)
        k = int(expected) + int(rng.random() < expected - int(expected))
        chosen = rng.choice(candidates, size=max(1, k), replace=False)
        labels[chosen] = ids[chosen]
        u = rng.random(len(chosen))
        to_mask = chosen[u < self.mask_ratio]
        to_random = chosen[(u >= self.mask_ratio) & (u < self.mask_ratio + self.random_ratio)]
        ids[to_mask] = self.ids.mask
        ids[to_random] = rng.choice(self.random_pool, size=len(to_random))
        return ids, labels

    def __call__(self, examples: PretrainingExamples, indices: Sequence[int],
                 keys: Sequence[int]) -> dict[str, torch.Tensor]:
        width = max(len(examples.input_ids[i]) for i in indices)
        n = len(indices)
        input_ids = np.full((n, width), self.ids.pad, dtype=np.int64)
        token_type_ids = np.zeros((n, width), dtype=np.int64)
        attention_mask = np.zeros((n, width), dtype=np.int64)
        labels = np.full((n, width), IGNORE_INDEX, dtype=np.int64)
        for row, (i, key) in enumerate(zip(indices, keys)):
            ids, lab = self.mask(examples.input_ids[i], int(key))
            L = len(ids)
            input_ids[row, :L], labels[row, :L] = ids, lab
            if self.segment_types:
                token_type_ids[row, :L] = examples.token_type_ids(i)
            attention_mask[row, :L] = 1
        return {
            "input_ids": torch.from_numpy(input_ids),
            "token_type_ids": torch.from_numpy(token_type_ids),
            "attention_mask": torch.from_numpy(attention_mask),
            "labels": torch.from_numpy(labels),
            "next_sentence_label": torch.from_numpy(examples.next_sentence_label[list(indices)]),
        }


# =========================================================================== the recipe
def mlm_documents(corpus: Sequence, eval_corpus: Sequence, corpus_format: str, eval_fraction: float,
                  seed: int) -> tuple[list[str], list[str]]:
    """(training, held-out) documents: the corpus files (none: the built-in corpus), and the
    ``eval_corpus`` files or, without them, ``eval_fraction`` of the documents held out with ``seed``."""
    docs = regroup_documents(read_corpora(corpus, corpus_format))
    if eval_corpus:
        return docs, regroup_documents(read_corpora(eval_corpus, corpus_format))
    return split_documents(docs, eval_fraction, seed)


def mlm_examples(documents: Sequence[str], tok: Tokenizer, max_seq_len: int, *, seed: int,
                 dupe_factor: int = 1, short_seq_prob: float = 0.1,
                 max_examples: int | None = None) -> PretrainingExamples:
    """Documents -> sentence-pair examples: sentences tokenized (cut at half a sequence) and packed."""
    segment = max(1, (max_seq_len - 3) // 2)
    return create_examples(tokenize_documents(documents, tok, segment), SpecialIds.of(tok), max_seq_len,
                           seed=seed, dupe_factor=dupe_factor, short_seq_prob=short_seq_prob,
                           max_examples=max_examples)


def masked_batches(examples: PretrainingExamples, collator: MaskingCollator,
                   batch_size: int) -> list[dict[str, torch.Tensor]]:
    """All examples in order, in batches, each example masked with its index as the key."""
    n = len(examples)
    return [collator(examples, range(i, min(n, i + batch_size)), range(i, min(n, i + batch_size)))
            for i in range(0, n, batch_size)]


def mlm_eval_batches(documents: Sequence[str], tok: Tokenizer, max_seq_len: int = 128,
                     max_examples: int = 2000, batch_size: int = 64, mlm_probability: float = 0.15,
                     short_seq_prob: float = 0.1, segment_types: bool = True) -> list[dict[str, torch.Tensor]]:
    """The evaluation set of ``documents``: examples and masks both drawn with ``EVAL_SEED``
    (``segment_types``: see ``MaskingCollator``)."""
    examples = mlm_examples(regroup_documents(list(documents)), tok, max_seq_len, seed=EVAL_SEED,
                            short_seq_prob=short_seq_prob, max_examples=max_examples)
    collator = MaskingCollator(SpecialIds.of(tok), tok.get_vocab_size(), seed=EVAL_SEED,
                               mlm_probability=mlm_probability, segment_types=segment_types)
    return masked_batches(examples, collator, batch_size)
