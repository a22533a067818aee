"""Task data: a task's files -> token ids -> padded batches, for fine-tuning, distillation and evaluation.

``load_task_data`` reads and tokenizes a task's train (and dev) file into a ``TaskData``. Examples
are tokenized once (``encode_examples`` / ``encode_tagged`` / ``encode_texts``) into unpadded id
arrays; batches are padded only to their own longest row (dynamic padding). Training draws them
from the engine's length-grouped stream (``edgebert.training.LengthGroupedBatches``), so the rows of
a batch have similar lengths: on SST-2 (mostly short phrases) that pads a batch of 32 to ~its real
length instead of 64, which is most of the CPU time saved. Task ``squad`` trains on the token windows
of ``edgebert.qa.windows`` (``SquadWindows``), batched the same way with start/end positions as labels.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import torch
from tokenizers import Tokenizer

from edgebert.data.tasks import (
    RANK_PRESETS,
    SPAN_PRESETS,
    TOKEN_PRESETS,
    LabelledExample,
    TaggedSentence,
    read_tagged,
    read_task_tsv,
    spec_for_model,
)
from edgebert.errors import ConfigError, DataError
from edgebert.model import IGNORE_INDEX
from edgebert.qa.squad_file import SquadExample, read_squad
from edgebert.qa.windows import SquadWindows, squad_windows


@dataclass
class EncodedDataset:
    """Tokenized examples. ``labels`` is (N,) for sequence tasks; for token tasks ``token_labels``
    holds one array per example aligned with ``input_ids`` (IGNORE_INDEX where no label applies) and
    ``word_labels`` the gold tag of every word, also of words truncation cut off (entity scores are
    counted over whole sentences)."""

    input_ids: list[np.ndarray]                  # each (T_i,) int32, with [CLS]/[SEP]
    token_type_ids: list[np.ndarray]             # each (T_i,) int8
    labels: np.ndarray                           # (N,) int64 (sequence labels; -1 for token tasks)
    token_labels: list[np.ndarray] | None = None
    truncated: int = 0                           # how many examples were cut to max_seq_len
    word_labels: list[np.ndarray] | None = None  # token tasks: (W_i,) int64 gold tag ids per word

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def lengths(self) -> np.ndarray:
        return np.fromiter((len(x) for x in self.input_ids), dtype=np.int64, count=len(self))

    @property
    def is_token_task(self) -> bool:
        return self.token_labels is not None

    is_span_task = False

    def subset(self, n: int) -> "EncodedDataset":
        """The first ``n`` examples."""
        return EncodedDataset(self.input_ids[:n], self.token_type_ids[:n], self.labels[:n],
                              None if self.token_labels is None else self.token_labels[:n],
                              self.truncated, None if self.word_labels is None else self.word_labels[:n])


def truncating_copy(tok: Tokenizer, max_seq_len: int) -> Tokenizer:
    """A copy of ``tok`` that truncates to ``max_seq_len`` tokens (specials included) and never pads.

    A copy, because truncation is mutable state on the tokenizer object that callers may share.
    """
    if max_seq_len < 8:
        raise ConfigError(f"max_seq_len={max_seq_len} is too short", "use at least 8")
    copy = Tokenizer.from_str(tok.to_str())
    copy.no_padding()
    copy.enable_truncation(max_seq_len, strategy="longest_first")
    return copy


def encode_examples(examples: Sequence[LabelledExample], tok: Tokenizer, max_seq_len: int) -> EncodedDataset:
    """Sentences or sentence pairs -> ``[CLS] A [SEP] (B [SEP])`` ids with segment ids 0/1."""
    if not examples:
        raise DataError("there are no examples to encode")
    t = truncating_copy(tok, max_seq_len)
    pairs = examples[0].text_b is not None
    inputs = [(e.text_a, e.text_b) for e in examples] if pairs else [e.text_a for e in examples]
    encodings = t.encode_batch(inputs, add_special_tokens=True)
    return EncodedDataset(
        input_ids=[np.asarray(e.ids, dtype=np.int32) for e in encodings],
        token_type_ids=[np.asarray(e.type_ids, dtype=np.int8) for e in encodings],
        labels=np.asarray([e.label for e in examples], dtype=np.int64),
        truncated=sum(1 for e in encodings if e.overflowing),
    )


def encode_texts(texts: Sequence[str], tok: Tokenizer, max_seq_len: int) -> EncodedDataset:
    """Unlabelled single texts -> ``[CLS] text [SEP]`` ids (labels -1), e.g. for embedding distillation."""
    if not texts:
        raise DataError("there are no texts to encode")
    encodings = truncating_copy(tok, max_seq_len).encode_batch(list(texts), add_special_tokens=True)
    return EncodedDataset(
        input_ids=[np.asarray(e.ids, dtype=np.int32) for e in encodings],
        token_type_ids=[np.asarray(e.type_ids, dtype=np.int8) for e in encodings],
        labels=np.full(len(encodings), -1, dtype=np.int64),
        truncated=sum(1 for e in encodings if e.overflowing),
    )


def encode_tagged(sentences: Sequence[TaggedSentence], tok: Tokenizer, max_seq_len: int) -> EncodedDataset:
    """Pre-split words with one tag id each -> word pieces; the first piece of a word carries its tag,
    the other pieces and the special tokens get IGNORE_INDEX (the usual BERT NER alignment)."""
    if not sentences:
        raise DataError("there are no sentences to encode")
    t = truncating_copy(tok, max_seq_len)
    encodings = t.encode_batch([list(s.words) for s in sentences], is_pretokenized=True,
                               add_special_tokens=True)
    token_labels = []
    for s, enc in zip(sentences, encodings):
        lab = np.full(len(enc.ids), IGNORE_INDEX, dtype=np.int64)
        previous = None
        for pos, word in enumerate(enc.word_ids):
            if word is not None and word != previous:
                lab[pos] = s.tags[word]
            previous = word
        token_labels.append(lab)
    return EncodedDataset(
        input_ids=[np.asarray(e.ids, dtype=np.int32) for e in encodings],
        token_type_ids=[np.asarray(e.type_ids, dtype=np.int8) for e in encodings],
        labels=np.full(len(sentences), -1, dtype=np.int64),
        token_labels=token_labels,
        truncated=sum(1 for e in encodings if e.overflowing),
        word_labels=[np.asarray(s.tags, dtype=np.int64) for s in sentences],
    )


def collate(data: EncodedDataset | SquadWindows, indices: Sequence[int], pad_id: int,
            with_labels: bool = True) -> dict[str, torch.Tensor]:
    """Pad the rows ``indices`` to the longest of them: input_ids, token_type_ids, attention_mask,
    labels ((B,) or (B, T) with IGNORE_INDEX on padding; SQuAD windows: start_positions and
    end_positions, (B,) each)."""
    n = len(indices)
    width = max(len(data.input_ids[i]) for i in indices)
    input_ids = np.full((n, width), pad_id, dtype=np.int64)
    token_type_ids = np.zeros((n, width), dtype=np.int64)
    attention_mask = np.zeros((n, width), dtype=np.int64)
    token_labels = np.full((n, width), IGNORE_INDEX, dtype=np.int64) if data.is_token_task else None
    for row, i in enumerate(indices):
        L = len(data.input_ids[i])
        input_ids[row, :L] = data.input_ids[i]
        token_type_ids[row, :L] = data.token_type_ids[i]
        attention_mask[row, :L] = 1
        if token_labels is not None:
            token_labels[row, :L] = data.token_labels[i]
    batch = {"input_ids": torch.from_numpy(input_ids), "token_type_ids": torch.from_numpy(token_type_ids),
             "attention_mask": torch.from_numpy(attention_mask)}
    if with_labels and data.is_span_task:
        batch["start_positions"] = torch.from_numpy(data.start_positions[list(indices)])
        batch["end_positions"] = torch.from_numpy(data.end_positions[list(indices)])
    elif with_labels:
        batch["labels"] = torch.from_numpy(token_labels if token_labels is not None
                                           else data.labels[list(indices)].copy())
    return batch


def eval_batches(data: EncodedDataset | SquadWindows, batch_size: int, pad_id: int
                 ) -> Iterator[tuple[np.ndarray, dict[str, torch.Tensor]]]:
    """(example indices, padded batch) over all examples, shortest first (least padding)."""
    order = np.argsort(data.lengths, kind="stable")
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        yield idx, collate(data, idx, pad_id)


# =========================================================================== a task's files
@dataclass
class TaskData:
    train: EncodedDataset | SquadWindows
    dev: EncodedDataset | SquadWindows | None
    labels: tuple[str, ...]            # label names in id order (-> id2label); () for squad
    is_pair: bool
    dev_examples: list[SquadExample] | None = None   # squad: the dev questions the windows come from
    dev_groups: dict | None = None     # rerank: dev setting -> query groups (edgebert.data.rerank_data)
    stats: dict | None = None          # rerank: what the pairs are made of


def _subset(items: list, n: int | None, seed: int) -> list:
    """A seeded random subset of ``n`` items, in file order (all of them when ``n`` is None)."""
    if n is None or n >= len(items):
        return items
    keep = np.sort(np.random.default_rng(seed).permutation(len(items))[:n])
    return [items[i] for i in keep]


def load_task_data(task: str, train_file: Path, dev_file: Path | None, tok: Tokenizer, max_seq_len: int,
                   max_train_examples: int | None = None, max_eval_examples: int | None = None,
                   seed: int = 0, labels: Sequence[str] | None = None,
                   tag_column: int | None = None, doc_stride: int | None = None,
                   retriever=None) -> TaskData:
    """Read and tokenize a task's train (and dev) file; the dev file uses the train file's labels.

    ``labels`` (e.g. a teacher classifier's id2label) fixes the label order for ``tsv``/``ner``;
    ``tag_column`` picks a CoNLL file's tag column (default: the last). ``squad``: windows of
    ``max_seq_len`` tokens overlapping by ``doc_stride``; the dev file's answerable questions only
    (``max_eval_examples``: the first N of those), as SQuAD 1.1 scoring counts them. ``rerank``: (question,
    sentence) pairs of SQuAD files with hard negatives by ``retriever`` (texts -> unit vectors:
    ``edgebert.stages.retriever.bi_encoder``; ``edgebert.data.rerank_data``;
    ``max_train_examples``: questions, ``max_eval_examples``: dev queries).
    """
    def first(items: list | None) -> list | None:
        return items[:max_eval_examples] if items and max_eval_examples else items

    if task in RANK_PRESETS:
        from edgebert.data.rerank_data import read_rerank_split

        if retriever is None:
            raise ConfigError("--task rerank needs a retriever (a sentence-embedding model) for its hard negatives",
                              "pass --retriever DIR, e.g. all-MiniLM-L6-v2")
        split = read_rerank_split(train_file, dev_file, retriever, seed=seed,
                                  max_train_questions=max_train_examples, eval_queries=max_eval_examples or 400)
        train = encode_examples([LabelledExample(q, p, int(y)) for (q, p), y in zip(split.pairs, split.labels)],
                                tok, max_seq_len)
        return TaskData(train, None, ("LABEL_0",), True, dev_groups=split.dev or None, stats=split.stats)
    if task in SPAN_PRESETS:
        train_questions = _subset(read_squad(train_file), max_train_examples, seed)
        dev_questions = first([e for e in read_squad(dev_file) if e.has_answer] if dev_file else None)
        if dev_file and not dev_questions:
            raise DataError(f"{dev_file} has no answerable questions to evaluate on")
        train = squad_windows(train_questions, tok, max_seq_len, doc_stride)
        dev = squad_windows(dev_questions, tok, max_seq_len, doc_stride) if dev_questions else None
        return TaskData(train, dev, (), True, dev_questions)

    if task in TOKEN_PRESETS:
        train_rows, tags = read_tagged(train_file, labels, tag_column)
        dev_rows = first(read_tagged(dev_file, tags, tag_column)[0] if dev_file else None)
        train = encode_tagged(_subset(train_rows, max_train_examples, seed), tok, max_seq_len)
        dev = encode_tagged(dev_rows, tok, max_seq_len) if dev_rows else None
        return TaskData(train, dev, tags, False)
    train_rows, spec = read_task_tsv(train_file, task, spec_for_model(task, train_file, labels))
    dev_rows = first(read_task_tsv(dev_file, task, spec)[0] if dev_file else None)
    train = encode_examples(_subset(train_rows, max_train_examples, seed), tok, max_seq_len)
    dev = encode_examples(dev_rows, tok, max_seq_len) if dev_rows else None
    return TaskData(train, dev, spec.label_names, spec.is_pair)
