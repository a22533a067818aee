"""Extractive question answering behind ``EdgeSession.answer``, torch-free.

``answer_questions(session, question, context, ...)`` is named and shaped as transformers'
``question-answering`` pipeline: for one (question, context) pair a dict ``{"score", "start", "end",
"answer"}`` (``start`` / ``end``: character offsets into the context, ``context[start:end] == answer``);
for lists of pairs (or a list of questions about one context) a list, one entry per pair; with
``top_k > 1`` each entry is a list of up to ``top_k`` answers, best first.

Every pair is cut into windows of ``max_length`` tokens (at most the bundle's), ``[CLS] question [SEP]
context part [SEP]``, consecutive windows sharing ``doc_stride`` context tokens (``edgebert.qa.windows``,
as fine-tuning and the pipeline window); the windows of all pairs run through the graph together, in
length-sorted batches padded to their own longest row; each window's logits are cut back to its own
tokens, so padding never reaches an answer, and spans never cross the question or leave the context.
Answers are scored and chosen as the pipeline does (``edgebert.qa.answers``: softmax over the window,
start x end probability, spans widened to whole words, the same text from several windows summed), so
on the same model the answer text is the pipeline's. ``handle_impossible_answer`` adds the
no-answer candidate ``{"answer": "", "start": 0, "end": 0}`` scored [CLS] start x end.

Defaults are the pipeline's (``max_answer_len`` 15, ``max_question_len`` 64, ``align_to_words``); the
default ``doc_stride`` (None: 128) shrinks to half the context room of windows shorter than 384 tokens
(the bundle may take fewer); a stride that leaves no new context per window is a ``ConfigError``, and so is
a window the caller shapes (``max_length`` below the bundle's, or ``doc_stride``) that the pipeline refuses:
one whose question leaves no more context tokens than the stride (``check_context_room``). An empty (or
blank) question or context is a ``DataError`` naming it.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Callable

import numpy as np

from edgebert.bundle.task_registry import task_serving
from edgebert.errors import ConfigError, DataError
from edgebert.qa.answers import Answer, check_answer_options, pipeline_answers
from edgebert.qa.squad_file import SquadExample
from edgebert.qa.windows import (
    DOC_STRIDE,
    MAX_QUERY_LEN,
    MAX_SEQ_LEN,
    NOT_CONTEXT,
    SquadWindows,
    WindowMaker,
    default_stride,
)
from edgebert.runtime.tagging import batched_logits
from edgebert.runtime.text import Encoded, check_text

QA_TASK = task_serving("answer").name      # the task whose bundles answer questions
SPAN_OUTPUTS = ("start_logits", "end_logits")
MAX_ANSWER_LEN = 15             # the pipeline's default, in tokens


@lru_cache(maxsize=8)
def window_maker(tokenizer_file: str, max_length: int, doc_stride: int, max_question_len: int | None = None
                 ) -> WindowMaker:
    """One ``WindowMaker`` per bundle tokenizer and window shape (bundle files are immutable)."""
    from tokenizers import Tokenizer

    return WindowMaker(Tokenizer.from_file(tokenizer_file), max_length, doc_stride, max_question_len,
                       strip_questions=False)


def _texts(value: Any, what: str) -> tuple[list[str], bool]:
    """(texts, given as one str); ``DataError`` for anything but a str or a list of str, or a blank text."""
    single = isinstance(value, str)
    if not single and not isinstance(value, (list, tuple)):
        raise DataError(f"{what} is a {type(value).__name__}, expected a str or a list of str")
    texts = [value] if single else list(value)
    for i, text in enumerate(texts):
        where = what if single else f"{what}[{i}]"
        check_text(text, where)
        if not text.strip():
            raise DataError(f"{where} is empty", f"pass a non-empty {what}")
    return texts, single


def qa_examples(question: Any, context: Any) -> tuple[list[SquadExample], bool]:
    """(one ``SquadExample`` per pair, whether one pair was given). A list of questions may share one
    context (the pipeline's form); otherwise the two lists pair up and must be as long."""
    questions, one_question = _texts(question, "question")
    contexts, one_context = _texts(context, "context")
    if one_context and not one_question:
        contexts = contexts * len(questions)
    elif len(questions) != len(contexts):
        raise DataError(f"{len(questions)} questions and {len(contexts)} contexts",
                        "pass one context per question, or one context for all of them")
    return [SquadExample(str(i), q, c) for i, (q, c) in enumerate(zip(questions, contexts))], one_question and one_context


def window_shape(max_length: Any, doc_stride: Any, limit: int) -> tuple[int, int]:
    """(window tokens, stride) for a bundle taking at most ``limit`` tokens (see the module docstring)."""
    for name, value in (("max_length", max_length), ("doc_stride", doc_stride)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 0:
            raise ConfigError(f"{name}={value!r} must be a non-negative integer")
    length = min(int(max_length), limit)
    if int(doc_stride) == DOC_STRIDE and length < MAX_SEQ_LEN:
        doc_stride = default_stride(length)
    return length, int(doc_stride)


def check_context_room(windows: SquadWindows, length: int, doc_stride: int | None) -> None:
    """transformers' pipeline refuses a window whose question leaves no more context tokens than its stride (its
    tokenizer: "stride must be strictly less than max_len"; default stride ``min(max_seq_len // 2, 128)``):
    such windows hold a few tokens of context each and give word pieces. ``ConfigError`` in one line, the same,
    for a window shape the caller chose (``max_length`` below the bundle's, or ``doc_stride``); the bundle's own
    window keeps the module docstring's defaults (the question cut to half of it, the stride to half the rest)."""
    stride = min(length // 2, DOC_STRIDE) if doc_stride is None else int(doc_stride)
    examples, firsts = np.unique(windows.example_index, return_index=True)     # each question's first window
    several = len(examples) > 1
    for example, first in zip(examples.tolist(), firsts.tolist()):
        framing = int((windows.offsets[first][:, 0] == NOT_CONTEXT).sum())    # the question and the special tokens
        if length - framing <= stride:
            raise ConfigError(f"max_length={length} leaves {length - framing} context tokens per window after "
                              f"{f'question {example}' if several else 'the question'} and the special tokens "
                              f"({framing}), not more than the doc_stride "
                              f"({stride}{'' if doc_stride is not None else ', the pipeline default for it'}); "
                              "transformers' question-answering pipeline refuses such windows too",
                              "use a larger max_length (at most the bundle's), a smaller doc_stride or a shorter question")


def span_logits(run: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]], pad_id: int, windows: SquadWindows,
                batch_size: int, max_tokens: int = 0) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(start, end) logits of every window, (T_i,) float32 each, in window order. ``run`` maps padded
    feeds to the graph's ``start_logits`` / ``end_logits`` (an ``EdgeSession``'s ``run``, a bench
    path); windows go in length-sorted batches of ``batch_size``, each row cut back to its own length."""
    def stacked(feeds: dict[str, np.ndarray]) -> np.ndarray:
        out = run(feeds)
        return np.stack([out["start_logits"], out["end_logits"]], axis=-1)          # (B, T, 2)

    rows = [Encoded(ids.astype(np.int64), types.astype(np.int64))
            for ids, types in zip(windows.input_ids, windows.token_type_ids)]
    logits = batched_logits(stacked, pad_id, batch_size, max_tokens)(rows)
    return [x[:, 0] for x in logits], [x[:, 1] for x in logits]


def answer_questions(session, question: Any, context: Any, top_k: int = 1, max_answer_len: int = MAX_ANSWER_LEN,
                     doc_stride: int | None = None, max_length: int = MAX_SEQ_LEN,
                     handle_impossible_answer: bool = False, batch_size: int | None = None,
                     max_question_len: int = MAX_QUERY_LEN, align_to_words: bool = True
                     ) -> Answer | list[Answer] | list[list[Answer]]:
    """``EdgeSession.answer`` (see the module docstring); ``session``: an open ``qa`` bundle."""
    if session.task != QA_TASK:
        raise ConfigError(f"answer() needs a '{QA_TASK}' bundle; {session.bundle_dir} is a '{session.task}' "
                          "bundle", "export a question-answering checkpoint (task qa)")
    check_answer_options(top_k, max_answer_len)
    examples, single = qa_examples(question, context)
    if not examples:
        return []
    length, stride = window_shape(max_length, DOC_STRIDE if doc_stride is None else doc_stride, session.max_length)
    if not isinstance(max_question_len, (int, np.integer)) or isinstance(max_question_len, bool) \
            or max_question_len < 1:
        raise ConfigError(f"max_question_len={max_question_len!r} must be a positive integer")
    windows = window_maker(str(session.encoder.file), length, stride, min(int(max_question_len), length // 2))(examples)
    if doc_stride is not None or int(max_length) < session.max_length:     # a window shape the caller chose
        check_context_room(windows, length, doc_stride)
    size = session.batch_size if batch_size is None else batch_size
    if not isinstance(size, (int, np.integer)) or isinstance(size, bool) or size < 1:
        raise ConfigError(f"batch_size={batch_size!r} must be a positive integer")
    starts, ends = span_logits(lambda feeds: session.run(feeds, list(SPAN_OUTPUTS)), session.pad_id, windows,
                               int(size), session.batch_tokens)
    found = pipeline_answers(examples, windows, starts, ends, top_k, max_answer_len, bool(handle_impossible_answer),
                             bool(align_to_words), cls_id=session.manifest.tokenizer.cls_id)
    results = [answers if top_k > 1 else (answers[0] if answers else _no_span()) for answers in found]
    return results[0] if single else results


def _no_span() -> Answer:
    """What a question gets when no span of its context has a non-zero probability (float underflow)."""
    return {"score": 0.0, "start": 0, "end": 0, "answer": ""}

