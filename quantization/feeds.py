"""What each task's graph is calibrated and gated on, as ONNX feeds: ``task_feeds`` gives ``Int8Maker``
one of these.

One per kind of input a task takes (its ``task_registry`` entry's ``inputs``):

* ``TextFeeds`` (texts: embed, mlm, cls, token-cls): single texts, the built-in English text or ``--calib``
  (``calibration.calibration_split``), gated by ``AccuracyProbe`` with the task's agreement metric;
* ``ChoiceFeeds`` (choices: multiple-choice): the same texts, four at a time as the choices of one
  (batch, choices, sequence) input, gated by choice agreement (``label_agreement`` on the (batch,
  choices) logits);
* ``QuestionFeeds`` (questions: qa): ``[CLS] question [SEP] context [SEP]`` windows as the bundle answers with
  them (``edgebert.qa.windows``: 384 tokens or the model's maximum, the default stride), gated by the
  overlap of the answers with fp32's on held-out questions (``quantization.span_gate``: the metric and
  budget of ``edgebert check``). The gate measures on questions the model did not train on: all 439 built-in
  questions about the built-in held-out text (or the first ``gate_size``; at 439 one flipped answer costs
  0.23 points of the 2-point budget, at 62 it cost 1.6)
  (``edgebert.qa.squad_file.builtin_questions``, one per paragraph first; what ``check`` measures on by
  default), or ``--gate-data`` (a SQuAD file), less any question of the calibration file (said when there
  are some; a ``--gate-data`` that is the ``--calib`` file is refused). ``--calib`` a SQuAD JSON file: its
  first ``calib_size`` questions calibrate (the rest of a training file are questions the model trained
  on: they never gate); otherwise the calibration text
  (``--calib`` or the built-in text), as pairs of consecutive lines (the first as the question),
  calibrates.

* ``PairFeeds`` (pairs: rerank): ``[CLS] query [SEP] passage [SEP]`` pairs. The gate orders each held-out
  question's passages (``edgebert.qa.rank_groups``: the first ``gate_size`` built-in questions, 100 by default,
  20 passages each, or ``--gate-data``'s questions), one query per batch, scored by the NDCG@10 of the INT8
  graph's order against fp32's (``ranking``: what ``check`` measures); calibration: a SQuAD ``--calib`` file's
  question-sentence pairs, else pairs of consecutive lines of the calibration text.

Each gives ``calibration()`` (feeds for the channel ranges), ``padded_calibration(length)`` (static
QDQ), ``probe`` (the gate), ``invariance()`` (probe feeds, long batch mates) and ``describe()``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from edgebert.bundle.task_registry import bundle_task
from edgebert.errors import ConfigError, DataError
from edgebert.qa.squad_file import SquadExample, builtin_questions, read_squad
from edgebert.qa.windows import MAX_SEQ_LEN, SquadWindows, default_stride
from edgebert.quantization.accuracy import AccuracyProbe
from edgebert.quantization.calibration import (
    INVARIANCE_ROWS,
    Feeds,
    Say,
    TextBatches,
    TextSource,
    calibration_split,
    encode_batch,
    prepared_tokenizer,
)
from edgebert.quantization.config import Int8Config, check_gate_file

GATE_TEXTS = 200                 # held-out texts (or --gate-data questions) the gate measures when not told
from edgebert.quantization.span_gate import SpanProbe
from edgebert.runtime.answer import window_maker
from edgebert.runtime.text import Encoded, pad_batch

CHOICES = 4                  # texts per multiple-choice input


class TextFeeds:
    """Single texts (see the module docstring)."""

    def __init__(self, qcfg: Int8Config, task: str, fused: Path, tokenizer: Path, pad_id: int, say: Say):
        self.qcfg, self.pad_id = qcfg, pad_id
        self.tok = prepared_tokenizer(tokenizer, qcfg.calib_seq_len)
        self.gate_len = qcfg.gate_seq_len or qcfg.calib_seq_len
        self.gate_tok = prepared_tokenizer(tokenizer, self.gate_len) if self.gate_len != qcfg.calib_seq_len else self.tok
        if qcfg.gate_data is not None:
            raise ConfigError("--gate-data is for question-answering exports (a SQuAD file)",
                              "drop it: the gate of this task measures on --calib's texts after --calib-size")
        self.split = calibration_split(qcfg.calib, qcfg.calib_size, qcfg.gate_size or GATE_TEXTS)
        say(f"fp32 reference on held-out text ({self.split.held_out.describe()['source']})")
        self.probe = AccuracyProbe(task, fused, self._batches(self.split.held_out, gate=True))

    def _batches(self, source: TextSource, pad_to: int | None = None, gate: bool = False):
        """Feeds of ``source``: calibration texts cut at ``calib_seq_len``; the gate's (``gate``) where the runtime
        cuts them (``gate_seq_len``)."""
        tok, length = (self.gate_tok, self.gate_len) if gate else (self.tok, self.qcfg.calib_seq_len)
        return TextBatches(source, tok, None, self.qcfg.calib_batch_size, length, pad_to=pad_to, pad_id=self.pad_id)

    def calibration(self):
        return self._batches(self.split.calibration)

    def padded_calibration(self):
        return self._batches(self.split.calibration, pad_to=self.qcfg.calib_seq_len)

    def calibration_count(self) -> int:
        return self.split.calibration.describe()["texts"]

    def invariance(self) -> tuple[list[Feeds], Feeds]:
        texts = [t for _, t in zip(range(INVARIANCE_ROWS), self.split.held_out)]
        longest = sorted(self.split.calibration, key=len, reverse=True)[:INVARIANCE_ROWS]
        return ([encode_batch(self.tok, texts, self.qcfg.calib_seq_len, pad_id=self.pad_id)],
                encode_batch(self.tok, longest, self.qcfg.calib_seq_len, pad_id=self.pad_id))

    def describe(self) -> dict:
        split = self.split.describe()
        return {**split, "held_out": {**split["held_out"], "max_length": self.gate_len},
                "max_length": self.qcfg.calib_seq_len}


def as_choices(feeds: Feeds, choices: int = CHOICES) -> Feeds | None:
    """(B, T) feeds of single texts as (B // choices, choices, T); None when fewer than ``choices`` rows."""
    rows = feeds["input_ids"].shape[0] // choices * choices
    if not rows:
        return None
    return {k: v[:rows].reshape(rows // choices, choices, v.shape[-1]) for k, v in feeds.items()}


@dataclass(frozen=True)
class ChoiceBatches:
    """``TextBatches`` regrouped as multiple-choice inputs (``as_choices``)."""
    texts: TextBatches

    @property
    def batch_size(self) -> int:
        return max(1, self.texts.batch_size // CHOICES)

    def __iter__(self) -> Iterator[Feeds]:
        for feeds in self.texts:
            grouped = as_choices(feeds)
            if grouped is not None:
                yield grouped

    def count(self) -> int:
        return self.texts.count() // CHOICES

    def restricted(self, input_names: set[str]) -> Iterator[Feeds]:
        for feeds in self:
            yield {k: v for k, v in feeds.items() if k in input_names}


class ChoiceFeeds(TextFeeds):
    """Texts as the choices of multiple-choice inputs (see the module docstring)."""

    def _batches(self, source: TextSource, pad_to: int | None = None, gate: bool = False):
        return ChoiceBatches(super()._batches(source, pad_to, gate))

    def invariance(self) -> tuple[list[Feeds], Feeds]:
        probe, mates = super().invariance()
        return [as_choices(f) for f in probe], as_choices(mates)

    def describe(self) -> dict:
        return {**super().describe(), "choices": CHOICES}


# --------------------------------------------------------------------------- question windows
@dataclass(frozen=True)
class WindowBatches:
    """Re-iterable feeds over question windows, ``batch_size`` windows per batch, padded to the batch's
    longest (or to ``pad_to``)."""
    windows: SquadWindows
    batch_size: int
    pad_id: int = 0
    pad_to: int | None = None

    def __iter__(self) -> Iterator[Feeds]:
        rows = [Encoded(i.astype(np.int64), t.astype(np.int64))
                for i, t in zip(self.windows.input_ids, self.windows.token_type_ids)]
        for start in range(0, len(rows), self.batch_size):
            yield pad_batch(rows[start:start + self.batch_size], self.pad_id, self.pad_to)

    def count(self) -> int:
        return len(self.windows)

    def restricted(self, input_names: set[str]) -> Iterator[Feeds]:
        for feeds in self:
            yield {k: v for k, v in feeds.items() if k in input_names}


@dataclass(frozen=True)
class QuestionSplit:
    calibration: list[SquadExample]
    held_out: list[SquadExample]
    note: str
    sources: dict
    left_out: int = 0            # questions of the gate file that are in the calibration (training) file


def _line_pairs(source: TextSource, pairs: int) -> list[SquadExample]:
    lines = [t for _, t in zip(range(2 * pairs), source)]
    return [SquadExample(f"calib-{i // 2}", lines[i], lines[i + 1]) for i in range(0, len(lines) - 1, 2)]


def _key(e: SquadExample) -> tuple[str, str]:
    return e.question.strip(), e.context


def question_split(calib: Path | None, calib_size: int, gate_size: int | None,
                   gate_data: Path | None = None) -> QuestionSplit:
    """The calibration and held-out questions of a question-answering export (module docstring): the
    first ``gate_size`` answerable questions of ``gate_data`` (else the built-in ones) that are not in the
    calibration file gate; never a question that calibrates, nor one of a SQuAD ``calib`` file (a training
    file: the model learnt its answers). ``gate_data`` that is the ``calib`` file itself, or holds only its
    questions, is refused."""
    check_gate_file(calib, gate_data)
    if calib is not None and Path(calib).suffix.lower() == ".json":
        trained = read_squad(calib)
        calibration = trained[:calib_size]
        source = str(Path(calib).resolve())
        said = f"{Path(calib).name}: questions 1-{len(calibration)} calibrate"
    else:
        split = calibration_split(calib, 2 * calib_size, 1)
        calibration = trained = _line_pairs(split.calibration, calib_size)
        if not calibration:
            raise DataError(f"calibration text {calib} has fewer than two lines", "pass a SQuAD JSON file or more text")
        source = split.calibration.describe()["source"]
        said = "pairs of consecutive calibration lines (the first as the question) calibrate"
    seen = {_key(e) for e in trained}
    if gate_data is None:
        held = [e for e in builtin_questions() if _key(e) not in seen][:gate_size]     # None: every one
        return QuestionSplit(calibration, held, f"{said}; the built-in questions about the built-in held-out text "
                                                "gate (questions the model did not train on)",
                             {"calibration": source, "held_out": "built-in questions"})
    answerable = [e for e in read_squad(gate_data) if e.has_answer]
    held = [e for e in answerable if _key(e) not in seen]
    if not held:
        raise DataError(f"gate file {gate_data} has no answerable questions" + (
                        f" that are not in the calibration file {calib}" if answerable else ""),
                        "pass a SQuAD file with answers to questions the model did not train on")
    trained_too = len(answerable) - len(held)
    left_out = (f" ({trained_too} of its questions are in {Path(calib).name if calib else 'the calibration text'}"
                " and never gate)") if trained_too else ""
    held = held[:gate_size or GATE_TEXTS]
    return QuestionSplit(calibration, held, f"{said}; the first {len(held)} answerable questions of "
                                            f"{Path(gate_data).name} that are not in the calibration file gate"
                                            f"{left_out}",
                         {"calibration": source, "held_out": str(Path(gate_data).resolve())}, trained_too)


class QuestionFeeds:
    """Question windows (see the module docstring); ``window``: the tokens of a window."""

    def __init__(self, qcfg: Int8Config, fused: Path, tokenizer: Path, pad_id: int, window: int, say: Say):
        from tokenizers import Tokenizer

        self.qcfg, self.pad_id = qcfg, pad_id
        self.window = min(MAX_SEQ_LEN, window)
        # the windows EdgeSession.answer cuts (its question limit and spacing): the gate reads what check reads
        maker = window_maker(str(tokenizer), self.window, default_stride(self.window))
        self.split = question_split(qcfg.calib, qcfg.calib_size, qcfg.gate_size, qcfg.gate_data)
        self.calibration_windows = maker(self.split.calibration)
        held = maker(self.split.held_out)
        say(f"fp32 reference on {len(self.split.held_out)} held-out questions ({self.split.sources['held_out']})")
        if self.split.left_out:
            say(self.split.note)
        tok = Tokenizer.from_file(str(tokenizer))
        cls_id = next((i for i in map(tok.token_to_id, ("[CLS]", "<s>")) if i is not None), None)   # the manifest's
        self.probe = SpanProbe(fused, self.split.held_out, held, pad_id, qcfg.calib_batch_size, cls_id)
        self.held_windows = held

    def _batches(self, windows: SquadWindows, pad_to: int | None = None) -> WindowBatches:
        return WindowBatches(windows, self.qcfg.calib_batch_size, self.pad_id, pad_to)

    def calibration(self) -> WindowBatches:
        return self._batches(self.calibration_windows)

    def padded_calibration(self) -> WindowBatches:
        return self._batches(self.calibration_windows, pad_to=self.window)

    def calibration_count(self) -> int:
        return len(self.calibration_windows)

    def invariance(self) -> tuple[list[Feeds], Feeds]:
        first = next(iter(WindowBatches(self.held_windows, INVARIANCE_ROWS, self.pad_id)))
        lengths = self.calibration_windows.lengths
        longest = np.argsort(-lengths, kind="stable")[:INVARIANCE_ROWS]
        mates = pad_batch([Encoded(self.calibration_windows.input_ids[i].astype(np.int64),
                                   self.calibration_windows.token_type_ids[i].astype(np.int64)) for i in longest],
                          self.pad_id)
        return [first], mates

    def describe(self) -> dict:
        return {"calibration": {"source": self.split.sources["calibration"], "questions": len(self.split.calibration),
                                "windows": len(self.calibration_windows)},
                "held_out": {"source": self.split.sources["held_out"], "questions": len(self.split.held_out),
                             "windows": len(self.held_windows)},
                "note": self.split.note, "max_length": self.window, "doc_stride": default_stride(self.window)}


def task_feeds(qcfg: Int8Config, task: str, fused: Path, *, tokenizer: Path, pad_id: int, max_length: int | None,
               say: Say):
    """The feeds of ``task`` (see the module docstring); ``max_length``: the bundle's longest input."""
    inputs = bundle_task(task).inputs
    if inputs == "questions":
        return QuestionFeeds(qcfg, fused, tokenizer, pad_id, max_length or MAX_SEQ_LEN, say)
    if inputs == "choices":
        return ChoiceFeeds(qcfg, task, fused, tokenizer, pad_id, say)
    if inputs == "pairs":
        from edgebert.quantization.pair_feeds import PairFeeds

        return PairFeeds(qcfg, task, fused, tokenizer, pad_id, say)
    return TextFeeds(qcfg, task, fused, tokenizer, pad_id, say)
