"""SQuAD JSON files, torch-free: ``read_squad(path)`` -> ``SquadExample``s.

``read_squad(path)`` reads SQuAD 1.1 and 2.0 JSON (``{"data": [{"title", "paragraphs": [{"context",
"qas": [{"id", "question", "answers": [{"text", "answer_start"}], "is_impossible",
"plausible_answers"}]}]}]}``) into ``SquadExample``s; malformed JSON, a missing or mistyped field, a
repeated question id, and an answer whose ``answer_start`` does not point at its text in the context
are ``DataError``s naming the file and the question id (or the place in the file where there is none);
so are JSON nested too deeply to read and a lone surrogate (``"\\ud800"``: no text a tokenizer reads),
named by its place (``edgebert.files.jsonfile.loads``).

``builtin_questions()``: 439 original questions (SQuAD 1.1 form, one gold answer each) about 176 of the
202 paragraphs of the built-in held-out text (``edgebert.files.textfiles.builtin_texts("held-out")``,
Apache-2.0): what the INT8 accuracy gate of a question-answering export measures F1 on when it is not
given a SQuAD file, and what ``edgebert check`` measures a qa bundle on by default.

``edgebert.qa.windows`` cuts the examples into the token windows a span model reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgebert.errors import DataError
from edgebert.files.jsonfile import JsonError, loads
from edgebert.files.textfiles import read_utf8

BUILTIN_QUESTIONS = Path(__file__).resolve().parents[1] / "assets" / "questions_en.json"


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
        raw = loads(text)
    except JsonError as exc:
        raise DataError(f"{path} {exc.reason}", exc.hint or "pass a SQuAD 1.1 or 2.0 JSON file") from None
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


def builtin_questions() -> list[SquadExample]:
    """The built-in held-out questions (see the module docstring), in rounds: each paragraph's first
    question (file order), then each one's second, and so on, so that a first n (``--gate-size`` n; the
    gate and the check measure on all of them by default) spreads over as many paragraphs as n allows (the
    first 176: one from every paragraph).

    Resolution: a flipped answer costs 1/n of the answer-overlap F1: 0.23 points on all 439, against 1.6 on
    the 62 there were before; a boundary moved by a word costs a fraction of that. The standard error of a
    measured loss L is about sqrt(L (1 - L) / n): at L = 0.5%, 0.34 points on 439 (0.9 on 62), so a model
    that loses 0.5 points measures 4.4 standard errors below the 2% budget (1.7 on 62); at L = 2%, 0.67.
    """
    by_paragraph: dict[str, list[SquadExample]] = {}
    for example in read_squad(BUILTIN_QUESTIONS):
        by_paragraph.setdefault(example.context, []).append(example)
    rounds = max(len(qs) for qs in by_paragraph.values())
    return [qs[r] for r in range(rounds) for qs in by_paragraph.values() if r < len(qs)]
