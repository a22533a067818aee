"""Labelled data: GLUE TSV (SST-2, MRPC, any TSV with named columns) and CoNLL named-entity tags (SQuAD
question answering, task ``squad``, is ``edgebert.qa``'s).

``read_task_tsv(path, task)`` returns ``LabelledExample``s and ``read_tagged(path)`` returns
``TaggedSentence``s (task ``ner``: a CoNLL file, one ``TOKEN TAG`` or ``TOKEN POS CHUNK TAG`` per
line, IOB tags, a blank line between sentences; see ``edgebert.files.textfiles.read_conll``); every
malformed row is a DataError that names the file and line. ``spec_for_model`` gives a task's spec in
the label order of a model that was fine-tuned on it.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from edgebert.errors import CheckpointError, DataError
from edgebert.files.textfiles import IOB_TAG, first_line, read_conll, read_utf8
from edgebert.qa.windows import default_stride

# Dataset presets (``--task`` of finetune / evaluate / distill): how to read a labelled dataset. Not the
# bundle tasks (embed, cls, token-cls, qa ...: ``edgebert.bundle.task_registry``).
DATASET_PRESETS = ("sst2", "mrpc", "tsv", "ner", "squad", "rerank")
SEQUENCE_PRESETS = ("sst2", "mrpc", "tsv")   # one label per example
TOKEN_PRESETS = ("ner",)                      # one label per word (IOB named-entity tags)
SPAN_PRESETS = ("squad",)                     # an answer span per question (SQuAD JSON)
RANK_PRESETS = ("rerank",)                    # (question, sentence) relevance from SQuAD JSON (edgebert.data.rerank_data)


@dataclass(frozen=True)
class TaskSpec:
    """Which columns hold the text(s) and the label, and the label names in id order."""

    name: str
    text_columns: tuple[str, ...]        # one column: single sentence; two: a pair
    label_column: str
    labels: tuple[str, ...]              # label values as written in the file, in id order
    label_names: tuple[str, ...]         # human names for id2label

    @property
    def is_pair(self) -> bool:
        return len(self.text_columns) == 2


TASK_SPECS: dict[str, TaskSpec] = {
    "sst2": TaskSpec("sst2", ("sentence",), "label", ("0", "1"), ("negative", "positive")),
    "mrpc": TaskSpec("mrpc", ("#1 String", "#2 String"), "Quality", ("0", "1"),
                     ("not_equivalent", "equivalent")),
}


@dataclass(frozen=True)
class LabelledExample:
    text_a: str
    text_b: str | None
    label: int


@dataclass(frozen=True)
class TaggedSentence:
    words: tuple[str, ...]
    tags: tuple[int, ...]                # tag ids, one per word


def tag_order(tags: set[str] | Sequence[str]) -> tuple[str, ...]:
    """IOB tags in id order: ``O`` first, then by entity type, ``B-`` before ``I-`` (O, B-LOC, I-LOC, ...)."""
    return tuple(sorted(set(tags), key=lambda t: (t != "O", t[2:], t[:1])))


def read_tagged(path: str | Path, labels: Sequence[str] | None = None, tag_column: int | None = None
                ) -> tuple[list[TaggedSentence], tuple[str, ...]]:
    """A CoNLL file (``edgebert.files.textfiles.read_conll``: tag = last column, or ``tag_column``) as tag
    ids. Tags must be IOB (``O``, ``B-TYPE``, ``I-TYPE``; IOB1 or IOB2), which entity-level scoring
    needs. The tag set is the file's (``tag_order``) unless ``labels`` is given (then a tag outside it
    is an error)."""
    path = Path(path)
    sentences = read_conll(path, tag_column)
    for s in sentences:
        for n, tag in zip(s.tag_lines, s.tags):
            if not IOB_TAG.match(tag):
                raise DataError(f"{path}:{n} has tag {tag!r}, which is not an IOB tag (O, B-TYPE, I-TYPE)",
                                "pick the tag column with --tag-column" if tag_column is None
                                else "check --tag-column")
    tagset = tuple(labels) if labels else tag_order({t for s in sentences for t in s.tags})
    tag_id = {t: i for i, t in enumerate(tagset)}
    out = []
    for s in sentences:
        for n, tag in zip(s.tag_lines, s.tags):
            if tag not in tag_id:
                raise DataError(f"{path}:{n} has tag {tag!r}, expected one of {list(tagset)}",
                                "the model's labels come from its training file")
        out.append(TaggedSentence(s.words, tuple(tag_id[t] for t in s.tags)))
    return out, tagset


def task_spec(task: str, header: Sequence[str] | None = None) -> TaskSpec:
    """The spec of a named task; ``tsv`` is inferred from a header (sentence | sentence1+sentence2, label)."""
    if task in TASK_SPECS:
        return TASK_SPECS[task]
    if task != "tsv":
        raise DataError(f"unknown task {task!r}", f"use one of {', '.join(DATASET_PRESETS)}")
    cols = set(header or ())
    if {"sentence1", "sentence2", "label"} <= cols:
        return TaskSpec("tsv", ("sentence1", "sentence2"), "label", (), ())
    if {"sentence", "label"} <= cols:
        return TaskSpec("tsv", ("sentence",), "label", (), ())
    raise DataError(f"a --task tsv file needs columns 'sentence' (or 'sentence1','sentence2') and "
                    f"'label'; found {sorted(cols)}")


def read_task_tsv(path: str | Path, task: str, spec: TaskSpec | None = None) -> tuple[list[LabelledExample], TaskSpec]:
    """Read a GLUE-style TSV. For ``tsv`` the label set is taken from the file (sorted) unless ``spec`` is given."""
    path = Path(path)
    if task in TOKEN_PRESETS:
        raise DataError(f"task {task!r} is a token task", "read it with read_tagged")
    text = read_utf8(path, hint="pass an existing file")
    rows = list(csv.reader(text.splitlines(), delimiter="\t", quoting=csv.QUOTE_NONE))
    if not rows or not any(rows[0]):
        raise DataError(f"{path} is empty", "pass a TSV with a header row and examples")
    header = [h.strip() for h in rows[0]]
    spec = spec or task_spec(task, header)
    missing = [c for c in (*spec.text_columns, spec.label_column) if c not in header]
    if missing:
        raise DataError(f"{path}:1 lacks column(s) {missing} for task {spec.name} (header: {header})",
                        "check --task matches the file")
    idx = [header.index(c) for c in spec.text_columns]
    lab = header.index(spec.label_column)
    raw: list[tuple[int, list[str]]] = [(n, r) for n, r in enumerate(rows[1:], start=2) if any(x.strip() for x in r)]
    if not raw:
        raise DataError(f"{path} has a header but no examples")
    labels = spec.labels or tuple(sorted({r[lab].strip() for _, r in raw if len(r) > lab}))
    if spec.name == "tsv" and not spec.labels:
        spec = TaskSpec("tsv", spec.text_columns, spec.label_column, labels, labels)
    label_id = {v: i for i, v in enumerate(labels)}
    out: list[LabelledExample] = []
    for n, r in raw:
        if len(r) < len(header):
            raise DataError(f"{path}:{n} has {len(r)} columns, the header has {len(header)}")
        value = r[lab].strip()
        if value not in label_id:
            raise DataError(f"{path}:{n} has label {value!r}, expected one of {list(labels)}")
        texts = [r[i].strip() for i in idx]
        if not texts[0]:
            raise DataError(f"{path}:{n} has an empty sentence")
        out.append(LabelledExample(texts[0], texts[1] if spec.is_pair else None, label_id[value]))
    return out, spec


def spec_for_model(task: str, path: str | Path, model_labels: Sequence[str] | None) -> TaskSpec | None:
    """The spec of ``task`` in the label order of a model whose id2label names are ``model_labels``
    (None or empty: the file's own order, i.e. None for ``tsv``). For ``tsv`` the model's names are
    the file's label values; a named task must have as many labels as the model."""
    labels = tuple(model_labels or ())
    if task in TOKEN_PRESETS:
        raise DataError(f"task {task!r} is a token task", "read it with read_tagged")
    if task != "tsv":
        spec = task_spec(task)
        if labels and len(labels) != len(spec.labels):
            raise CheckpointError(f"the model has {len(labels)} labels, task {task} has {len(spec.labels)}",
                                  "use the task the model was fine-tuned for")
        return spec
    if not labels:
        return None
    header = [h.strip() for h in first_line(path).split("\t")]
    base = task_spec("tsv", header)
    return TaskSpec("tsv", base.text_columns, base.label_column, labels, labels)


class TaskShape:
    """What a stage config's ``task`` means for its windows: mixed into the fine-tune and distill configs,
    which hold ``task``, ``max_seq_len`` and ``doc_stride``."""

    @property
    def is_token_task(self) -> bool:
        return self.task in TOKEN_PRESETS

    @property
    def is_span_task(self) -> bool:
        return self.task in SPAN_PRESETS

    @property
    def is_rank_task(self) -> bool:
        return self.task in RANK_PRESETS

    @property
    def stride(self) -> int:
        """squad: the windows' overlap in tokens (default: 128, less for windows under 384 tokens)."""
        return default_stride(self.max_seq_len) if self.doc_stride is None else self.doc_stride
