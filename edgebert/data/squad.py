"""SQuAD question answering data, torch-free: the JSON files and the token windows a span model reads.

``read_squad(path)`` reads SQuAD 1.1 and 2.0 JSON (``{"data": [{"title", "paragraphs": [{"context",
"qas": [{"id", "question", "answers": [{"text", "answer_start"}], "is_impossible",
"plausible_answers"}]}]}]}``) into ``SquadExample``s; malformed JSON, a missing or mistyped field, a
repeated question id, and an answer whose ``answer_start`` does not point at its text in the context
are ``DataError``s naming the file and the question id (or the place in the file where there is none).

``squad_windows(examples, tokenizer)`` cuts every (question, context) pair into ``[CLS] question [SEP]
context part [SEP]`` windows as transformers' ``run_qa`` example and ``question-answering`` pipeline do:
``max_seq_len`` tokens (384), consecutive windows sharing ``doc_stride`` context tokens (128; shorter
windows: ``default_stride``), the question cut to ``max_query_len`` tokens first (64, at most half the
window: ``query_budget``). Tokenization and the character offsets of every
context token are the ``tokenizers`` library's (the same windows, ids and offsets as transformers' fast
tokenizer). A window is labelled with the token positions of the example's first answer, or with
[CLS] (position 0) when the answer is not wholly inside it or the question has none.

The runtime windows its (question, context) pairs with the same function;
``edgebert.data.squad_spans`` turns a model's start/end logits back into answer text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from tokenizers import Tokenizer

from ..errors import ConfigError, DataError
from edgebert.files.textfiles import read_utf8

MAX_SEQ_LEN, DOC_STRIDE, MAX_QUERY_LEN = 384, 128, 64   # transformers' run_qa / pipeline defaults
SPECIAL_TOKENS_IN_PAIR = 3                              # [CLS] question [SEP] context [SEP]
NOT_CONTEXT = -1                                         # offset of a token outside the context


# =========================================================================== examples
@dataclass(frozen=True)
class SquadAnswer:
    text: str
    start: int                           # character offset of ``text`` in the context

    @property
    def end(self) -> int:
        return self.start + len(self.text)


@dataclass(frozen=True)
class SquadExample:
    """One question about one context; ``answers`` are the gold answers (several in dev files), empty
    for a SQuAD 2.0 question that the context does not answer (``is_impossible``)."""

    id: str
    question: str
    context: str
    answers: tuple[SquadAnswer, ...] = ()
    is_impossible: bool = False
    plausible_answers: tuple[SquadAnswer, ...] = ()    # SQuAD 2.0: what an annotator might have said
    title: str = ""

    @property
    def has_answer(self) -> bool:
        return bool(self.answers)

    @property
    def answer_texts(self) -> list[str]:
        return [a.text for a in self.answers]


def _field(obj: Any, name: str, kind: type, path: Path, where: str) -> Any:
    if not isinstance(obj, dict):
        raise DataError(f"{path}: {where} is not a JSON object", "pass a SQuAD 1.1 or 2.0 JSON file")
    if name not in obj:
        raise DataError(f"{path}: {where} has no '{name}' field", "pass a SQuAD 1.1 or 2.0 JSON file")
    value = obj[name]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise DataError(f"{path}: {where} has '{name}' of type {type(value).__name__}, not {kind.__name__}",
                        "pass a SQuAD 1.1 or 2.0 JSON file")
    return value


def _answers(qa: dict, key: str, context: str, path: Path, where: str) -> tuple[SquadAnswer, ...]:
    """The answers under ``key`` (required for "answers", optional for "plausible_answers")."""
    if key not in qa and key != "answers":
        return ()
    out = []
    for i, answer in enumerate(_field(qa, key, list, path, where)):
        place = f"{where} ({key}[{i}])"
        text = _field(answer, "text", str, path, place)
        start = _field(answer, "answer_start", int, path, place)
        if not text.strip():
            raise DataError(f"{path}: {place} has an empty answer text")
        if not 0 <= start <= len(context) - len(text) or context[start:start + len(text)] != text:
            found = context[max(0, start):max(0, start) + len(text)]
            raise DataError(f"{path}: {place}: answer {text!r} is not at answer_start {start} of its context "
                            f"(the context has {found!r} there)",
                            "answer_start must be the character offset of the answer text in the context")
        out.append(SquadAnswer(text, start))
    return tuple(out)


def _question(qa: Any, context: str, title: str, path: Path, place: str) -> SquadExample:
    qid = _field(qa, "id", str, path, place)
    where = f"question {qid}"
    question = _field(qa, "question", str, path, where)
    if not question.strip():
        raise DataError(f"{path}: {where} has an empty question")
    impossible = _field(qa, "is_impossible", bool, path, where) if "is_impossible" in qa else False
    answers = _answers(qa, "answers", context, path, where)
    if impossible and answers:
        raise DataError(f"{path}: {where} is marked is_impossible but has answers")
    if not impossible and not answers:
        raise DataError(f"{path}: {where} has no answers and is not marked is_impossible",
                        "give at least one answer, or set is_impossible (SQuAD 2.0)")
    return SquadExample(qid, question, context, answers, impossible,
                        _answers(qa, "plausible_answers", context, path, where), title)


def read_squad(path: str | Path) -> list[SquadExample]:
    """Every question of a SQuAD 1.1 / 2.0 JSON file, in file order (see the module docstring)."""
    path = Path(path)
    text = read_utf8(path, "SQuAD file", "pass a SQuAD JSON file (e.g. train-v1.1.json)")
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})",
                        "pass a SQuAD 1.1 or 2.0 JSON file") from exc
    articles = _field(raw, "data", list, path, "the file")
    examples: list[SquadExample] = []
    seen: set[str] = set()
    for a, article in enumerate(articles):
        title = article.get("title", "") if isinstance(article, dict) else ""
        for p, paragraph in enumerate(_field(article, "paragraphs", list, path, f"data[{a}]")):
            where = f"data[{a}].paragraphs[{p}]"
            context = _field(paragraph, "context", str, path, where)
            if not context.strip():
                raise DataError(f"{path}: {where} has an empty context")
            for q, qa in enumerate(_field(paragraph, "qas", list, path, where)):
                example = _question(qa, context, str(title), path, f"{where}.qas[{q}]")
                if example.id in seen:
                    raise DataError(f"{path}: question {example.id} appears twice", "question ids must be unique")
                seen.add(example.id)
                examples.append(example)
    if not examples:
        raise DataError(f"{path} holds no questions", "pass a SQuAD JSON file with data")
    return examples


# =========================================================================== windows
@dataclass
class SquadWindows:
    """Token windows of SQuAD examples, unpadded; window i belongs to example ``example_index[i]``.

    ``offsets[i]`` is (T_i, 2): the [start, end) characters in the context of each context token, and
    ``NOT_CONTEXT`` (-1) for the question, [CLS], [SEP] (an answer is never taken from those).
    ``start_positions`` / ``end_positions`` are the answer's token positions in the window, 0 ([CLS])
    where the window does not hold the whole answer or the question has none.
    """

    input_ids: list[np.ndarray]          # each (T_i,) int32
    token_type_ids: list[np.ndarray]     # each (T_i,) int8: 0 question, 1 context
    offsets: list[np.ndarray]            # each (T_i, 2) int32
    example_index: np.ndarray            # (N,) int64
    start_positions: np.ndarray          # (N,) int64
    end_positions: np.ndarray            # (N,) int64
    truncated_questions: int = 0         # questions cut to max_query_len tokens

    is_token_task = False
    is_span_task = True

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def lengths(self) -> np.ndarray:
        return np.fromiter((len(x) for x in self.input_ids), dtype=np.int64, count=len(self))

    @property
    def labels(self) -> np.ndarray:
        """(N, 2): start and end position of every window."""
        return np.stack([self.start_positions, self.end_positions], axis=1)

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


def squad_windows(examples: Sequence[SquadExample], tok: Tokenizer, max_seq_len: int = MAX_SEQ_LEN,
                  doc_stride: int | None = None, max_query_len: int | None = None) -> SquadWindows:
    """The windows of ``examples`` (see the module docstring), in example order; ``doc_stride`` None:
    ``default_stride(max_seq_len)``."""
    if not examples:
        raise DataError("there are no questions to encode")
    doc_stride = default_stride(max_seq_len) if doc_stride is None else doc_stride
    check_window(max_seq_len, doc_stride, max_query_len)
    max_query_len = query_budget(max_seq_len, max_query_len)
    ids = [e.id for e in examples]
    for e in examples:
        if not e.context.strip():
            raise DataError(f"question {e.id} has an empty context", "pass the text the question is about")
    questions, cut = _cut_questions([e.question.lstrip() for e in examples], _plain_copy(tok), max_query_len, ids)
    pairs = _plain_copy(tok)
    pairs.enable_truncation(max_seq_len, stride=doc_stride, strategy="only_second")
    encodings = pairs.encode_batch(list(zip(questions, [e.context for e in examples])), add_special_tokens=True)
    input_ids, type_ids, offsets, index, labels = [], [], [], [], []
    for i, (example, encoding) in enumerate(zip(examples, encodings)):
        for window in (encoding, *encoding.overflowing):
            spans = np.asarray(window.offsets, dtype=np.int32).reshape(-1, 2)
            spans[np.asarray([s != 1 for s in window.sequence_ids])] = NOT_CONTEXT
            input_ids.append(np.asarray(window.ids, dtype=np.int32))
            type_ids.append(np.asarray(window.type_ids, dtype=np.int8))
            offsets.append(spans)
            index.append(i)
            labels.append(answer_tokens(spans, example.answers[0] if example.answers else None))
    positions = np.asarray(labels, dtype=np.int64).reshape(-1, 2)
    return SquadWindows(input_ids, type_ids, offsets, np.asarray(index, dtype=np.int64),
                        positions[:, 0].copy(), positions[:, 1].copy(), cut)
