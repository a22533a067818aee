"""SQuAD token windows, torch-free: the (question, context) pairs a span model reads.

``squad_windows(examples, tokenizer)`` cuts every (question, context) pair into ``[CLS] question [SEP]
context part [SEP]`` windows as transformers' ``run_qa`` example and ``question-answering`` pipeline do:
``max_seq_len`` tokens (384), consecutive windows sharing ``doc_stride`` context tokens (128; shorter
windows: ``default_stride``), the question cut to ``max_query_len`` tokens first (64, at most half the
window: ``query_budget``; the pipeline does not cut questions, so the two differ only on questions
longer than that). Tokenization and the character offsets of every context token are the
``tokenizers`` library's (the same windows, ids and offsets as transformers' fast tokenizer). A window
is labelled with the token positions of the example's first answer, or with [CLS] (position 0) when
the answer is not wholly inside it or the question has none.

Fine-tuning, distillation, ``edgebert evaluate``, ``bench`` and the runtime (``EdgeSession.answer``)
all window with this function; ``edgebert.qa.spans`` turns a model's start/end logits back into text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
from tokenizers import Tokenizer

from edgebert.errors import ConfigError, DataError
from edgebert.qa.squad_file import SquadAnswer, SquadExample

MAX_SEQ_LEN, DOC_STRIDE, MAX_QUERY_LEN = 384, 128, 64   # transformers' run_qa / pipeline defaults
SPECIAL_TOKENS_IN_PAIR = 3                              # [CLS] question [SEP] context [SEP]
NOT_CONTEXT = -1                                         # offset of a token outside the context


@dataclass
class SquadWindows:
    """Token windows of SQuAD examples, unpadded; window i belongs to example ``example_index[i]``.

    ``offsets[i]`` is (T_i, 2): the [start, end) characters in the context of each context token, and
    ``NOT_CONTEXT`` (-1) for the question, [CLS], [SEP] (an answer is never taken from those).
    ``start_positions`` / ``end_positions`` are the answer's token positions in the window, 0 ([CLS])
    where the window does not hold the whole answer or the question has none. ``word_spans[i]`` is
    (T_i, 2) like ``offsets``: the characters of the whole word each context token belongs to (the
    tokenizer's pre-tokenized words, within the window), which the question-answering pipeline widens
    its answers to.
    """

    input_ids: list[np.ndarray]          # each (T_i,) int32
    token_type_ids: list[np.ndarray]     # each (T_i,) int8: 0 question, 1 context
    offsets: list[np.ndarray]            # each (T_i, 2) int32
    example_index: np.ndarray            # (N,) int64
    start_positions: np.ndarray          # (N,) int64
    end_positions: np.ndarray            # (N,) int64
    truncated_questions: int = 0         # questions cut to max_query_len tokens
    word_spans: list[np.ndarray] | None = None   # each (T_i, 2) int32, see above

    is_token_task = False
    is_span_task = True

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def lengths(self) -> np.ndarray:
        return np.fromiter((len(x) for x in self.input_ids), dtype=np.int64, count=len(self))

    def context_mask(self, i: int) -> np.ndarray:
        """(T_i,) True at the context tokens of window ``i``."""
        return self.offsets[i][:, 0] != NOT_CONTEXT


def query_budget(max_seq_len: int, max_query_len: int | None = None) -> int:
    """The most question tokens a window keeps: ``max_query_len``, by default 64 or half the window."""
    return min(MAX_QUERY_LEN, max_seq_len // 2) if max_query_len is None else max_query_len


def default_stride(max_seq_len: int) -> int:
    """128 context tokens shared by consecutive windows, or half the context room of a shorter window."""
    return max(0, min(DOC_STRIDE, (max_seq_len - query_budget(max_seq_len) - SPECIAL_TOKENS_IN_PAIR) // 2))


def check_window(max_seq_len: int, doc_stride: int, max_query_len: int | None = None) -> None:
    """``ConfigError`` unless a window holds the longest question (``query_budget``), the specials and
    more than ``doc_stride`` context tokens (consecutive windows must move forward)."""
    for name, value in (("max_seq_len", max_seq_len), ("doc_stride", doc_stride), ("max_query_len", max_query_len)):
        if value is None and name == "max_query_len":
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < (0 if name == "doc_stride" else 1):
            raise ConfigError(f"{name}={value!r} must be a positive integer")
    max_query_len = query_budget(max_seq_len, max_query_len)
    room = max_seq_len - max_query_len - SPECIAL_TOKENS_IN_PAIR
    if doc_stride >= room:
        raise ConfigError(f"doc_stride={doc_stride} leaves no new context per window: a {max_seq_len}-token "
                          f"window holds {room} context tokens after a {max_query_len}-token question",
                          "use a smaller --doc-stride (128 for 384-token windows) or longer windows")


def _plain_copy(tok: Tokenizer) -> Tokenizer:
    copy = Tokenizer.from_str(tok.to_str())
    copy.no_padding()
    copy.no_truncation()
    return copy


def _cut_questions(questions: list[str], tok: Tokenizer, max_query_len: int,
                   ids: Sequence[str]) -> tuple[list[str], int]:
    """Questions longer than ``max_query_len`` tokens cut after that token (at its last character)."""
    encodings = tok.encode_batch(questions, add_special_tokens=False)
    long = [i for i, e in enumerate(encodings) if len(e.ids) > max_query_len]
    for i in long:
        questions[i] = questions[i][:encodings[i].offsets[max_query_len - 1][1]]
    for i, e in zip(long, tok.encode_batch([questions[i] for i in long], add_special_tokens=False)):
        if len(e.ids) > max_query_len:   # not expected: a cut at a token's end re-tokenizes the same
            raise DataError(f"question {ids[i]} cannot be cut to {max_query_len} tokens")
    for i, e in enumerate(encodings):
        if not e.ids:
            raise DataError(f"question {ids[i]} has no tokens", "ask a question in words")
    return questions, len(long)


def answer_tokens(offsets: np.ndarray, answer: SquadAnswer | None) -> tuple[int, int]:
    """(start, end) token positions of ``answer`` in a window (``offsets`` as ``SquadWindows``): the
    last context token starting at or before its first character and the first ending at or after its
    last; (0, 0) ([CLS]) when there is no answer or the window's context does not hold all of it."""
    context = np.flatnonzero(offsets[:, 0] != NOT_CONTEXT)
    if answer is None or len(context) == 0:
        return 0, 0
    starts, ends = offsets[context, 0], offsets[context, 1]
    if not (starts[0] <= answer.start and ends[-1] >= answer.end):
        return 0, 0
    return int(context[np.flatnonzero(starts <= answer.start)[-1]]), int(context[np.flatnonzero(ends >= answer.end)[0]])


class WindowMaker:
    """``squad_windows`` with its tokenizer copies made once (copying a 30k-word tokenizer costs ~30 ms):
    the runtime keeps one per window shape. Its copies are never changed after ``__init__``, so one
    instance serves every thread."""

    def __init__(self, tok: Tokenizer, max_seq_len: int = MAX_SEQ_LEN, doc_stride: int | None = None,
                 max_query_len: int | None = None, strip_questions: bool = True):
        # SQuAD training strips the question's leading space (run_qa.py); the pipeline keeps it, which a
        # byte-level BPE (RoBERTa) tokenizes differently
        self.strip_questions = strip_questions
        self.doc_stride = default_stride(max_seq_len) if doc_stride is None else doc_stride
        check_window(max_seq_len, self.doc_stride, max_query_len)
        self.max_seq_len, self.max_query_len = max_seq_len, query_budget(max_seq_len, max_query_len)
        self._questions = _plain_copy(tok)
        self._pairs = _plain_copy(tok)
        # a template that gives both sequences type 0 (XLM-R's tokenizer.json) still gets type 1 on the context
        # of every overflowing window from the tokenizers library: follow the template, not the overflow
        self._typed_pairs = any(self._pairs.encode("a", "b").type_ids)
        self._pairs.enable_truncation(max_seq_len, stride=self.doc_stride, strategy="only_second")

    def __call__(self, examples: Sequence[SquadExample]) -> SquadWindows:
        if not examples:
            raise DataError("there are no questions to encode")
        ids = [e.id for e in examples]
        for e in examples:
            if not e.context.strip():
                raise DataError(f"question {e.id} has an empty context", "pass the text the question is about")
        questions, cut = _cut_questions([e.question.lstrip() if self.strip_questions else e.question
                                         for e in examples], self._questions,
                                        self.max_query_len, ids)
        encodings = self._pairs.encode_batch(list(zip(questions, [e.context for e in examples])),
                                             add_special_tokens=True)
        input_ids, type_ids, offsets, words, index, labels = [], [], [], [], [], []
        for i, (example, encoding) in enumerate(zip(examples, encodings)):
            for window in (encoding, *encoding.overflowing):
                spans = np.asarray(window.offsets, dtype=np.int32).reshape(-1, 2)
                spans[np.asarray([s != 1 for s in window.sequence_ids])] = NOT_CONTEXT
                input_ids.append(np.asarray(window.ids, dtype=np.int32))
                type_ids.append(np.asarray(window.type_ids, dtype=np.int8) if self._typed_pairs
                                else np.zeros(len(window.ids), dtype=np.int8))
                offsets.append(spans)
                words.append(word_spans(spans, window.word_ids))
                index.append(i)
                labels.append(answer_tokens(spans, example.answers[0] if example.answers else None))
        positions = np.asarray(labels, dtype=np.int64).reshape(-1, 2)
        return SquadWindows(input_ids, type_ids, offsets, np.asarray(index, dtype=np.int64),
                            positions[:, 0].copy(), positions[:, 1].copy(), cut, words)


def squad_windows(examples: Sequence[SquadExample], tok: Tokenizer, max_seq_len: int = MAX_SEQ_LEN,
                  doc_stride: int | None = None, max_query_len: int | None = None) -> SquadWindows:
    """The windows of ``examples`` (see the module docstring), in example order; ``doc_stride`` None:
    ``default_stride(max_seq_len)``."""
    if not examples:
        raise DataError("there are no questions to encode")
    return WindowMaker(tok, max_seq_len, doc_stride, max_query_len)(examples)


def word_spans(offsets: np.ndarray, word_ids: Sequence[int | None]) -> np.ndarray:
    """(T, 2) [start, end) characters of the word each context token belongs to (``NOT_CONTEXT`` outside
    the context): a word's tokens are consecutive, so each run of one word id spans from its first
    token's start to its last token's end."""
    out = np.full_like(offsets, NOT_CONTEXT)
    context = np.flatnonzero(offsets[:, 0] != NOT_CONTEXT)
    if not len(context):
        return out
    ids = np.asarray([-1 if word_ids[i] is None else word_ids[i] for i in context], dtype=np.int64)
    first = np.r_[True, (ids[1:] != ids[:-1]) | (np.diff(context) != 1)]
    run = np.cumsum(first) - 1
    starts = offsets[context[first], 0]
    last = np.r_[np.flatnonzero(first)[1:] - 1, len(context) - 1]
    ends = offsets[context[last], 1]
    out[context, 0], out[context, 1] = starts[run], ends[run]
    return out
