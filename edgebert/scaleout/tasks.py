"""A bundle's task as one function from input columns to result columns, through ``EdgeSession``'s own methods.

The task registry (``bundle.task_registry``) says which ``EdgeSession`` method serves a bundle; each served
method has one ``TaskColumns`` entry here: the input columns it reads and the result columns it gives, with their
Arrow types (``arrow_schema``) and Spark types (``spark.py`` reads ``fields``):

=========  ===================  ==================================================================
method     inputs               results
=========  ===================  ==================================================================
embed      text                 ``embedding`` list<float32> (the session's vector: pooling, unit norm)
classify   text                 ``label`` string, ``score`` float64 (the label's probability)
tag        text                 ``entities`` list<struct<entity, score, word, start, end>>
answer     question, context    ``answer`` string, ``start`` / ``end`` int64 (characters), ``score``
rank       query, passage       ``score`` float64 (``EdgeSession.predict`` of the pair: the reranker's activation)
=========  ===================  ==================================================================

``run_task(session, spec, columns, batch_size)`` calls the method once on the whole chunk: the results are the
session's own on those texts, whatever chunk they arrive in (the session length-sorts and pads per batch; its
INT8 graphs are batch-invariant). A null input gives null results (a text the session cannot take is its
``DataError``). Entities: ``entity`` is the label (``entity_group`` when grouped), as ``EdgeSession.tag`` gives
it with ``aggregation`` (``simple`` by default here: whole entities, not sub-tokens).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from edgebert.bundle.task_registry import BUNDLE_TASKS, bundle_task
from edgebert.errors import ConfigError, DataError

ENTITY_FIELDS = (("entity", "string"), ("score", "float64"), ("word", "string"), ("start", "int64"),
                 ("end", "int64"))


@dataclass(frozen=True)
class TaskColumns:
    """What one served method reads and gives, as columns (types: ``float32_list`` | ``string`` | ``float64``
    | ``int64`` | ``entities``)."""

    method: str
    inputs: tuple[str, ...]                         # roles: ("text",), ("question", "context"), ("query", "passage")
    fields: tuple[tuple[str, str], ...]             # (result column, type)

    @property
    def outputs(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.fields)


TASK_COLUMNS: dict[str, TaskColumns] = {
    "embed": TaskColumns("embed", ("text",), (("embedding", "float32_list"),)),
    "classify": TaskColumns("classify", ("text",), (("label", "string"), ("score", "float64"))),
    "tag": TaskColumns("tag", ("text",), (("entities", "entities"),)),
    "answer": TaskColumns("answer", ("question", "context"),
                          (("answer", "string"), ("start", "int64"), ("end", "int64"), ("score", "float64"))),
    "rank": TaskColumns("rank", ("query", "passage"), (("score", "float64"),)),
}
SERVED = tuple(t.name for t in BUNDLE_TASKS if t.method in TASK_COLUMNS)
AGGREGATIONS = ("none", "simple", "first")


def task_columns(task: str) -> TaskColumns:
    """The columns of a bundle task (its manifest's ``task``); ``ConfigError`` for a task no engine serves."""
    method = bundle_task(task).method
    if method not in TASK_COLUMNS:
        raise ConfigError(f"a '{task}' bundle has no batch form (its method is {method}())",
                          f"use a bundle of task {', '.join(SERVED)}")
    return TASK_COLUMNS[method]


def _present(columns: Sequence[Sequence[Any]], roles: Sequence[str], first_row: int = 0) -> list[int]:
    """Rows whose inputs are all present (not null); ``DataError`` for a value that is not a str."""
    keep = []
    for i, values in enumerate(zip(*columns)):
        if any(v is None for v in values):
            continue
        for role, v in zip(roles, values):
            if not isinstance(v, str):
                raise DataError(f"the {role} column holds a {type(v).__name__} in row {first_row + i}, not a string",
                                f"pass a column of strings as the {role}")
        keep.append(i)
    return keep


def _rows_renamed(exc: DataError, keep: list[int], first_row: int) -> DataError:
    """The session's error about ``what[i]`` of the rows it was given (nulls left out) as the input's row:
    ``question[2]`` of the present rows is ``question[3]`` when a null came before it."""
    def renumber(match: re.Match) -> str:
        i = int(match.group(2))
        return f"{match.group(1)}[{first_row + keep[i]}]" if i < len(keep) else match.group(0)

    message = re.sub(r"\b(texts|questions|contexts|question|context|text|input)\[(\d+)\]", renumber, exc.message)
    return exc if message == exc.message else DataError(message, exc.hint)


def run_task(session, spec: TaskColumns, columns: Sequence[Sequence[Any]], batch_size: int | None = None,
             aggregation: str = "simple", first_row: int = 0) -> dict[str, list]:
    """Result columns (Python lists, one value per input row; None for a null input) of ``spec.method`` on
    ``columns`` (one sequence per role in ``spec.inputs``); errors name rows from ``first_row``."""
    if len(columns) != len(spec.inputs):
        raise ConfigError(f"{spec.method} takes {len(spec.inputs)} input column(s) ({', '.join(spec.inputs)}), "
                          f"got {len(columns)}")
    n = len(columns[0])
    keep = _present(columns, spec.inputs, first_row)
    picked = [[col[i] for i in keep] for col in columns]
    out: dict[str, list] = {name: [None] * n for name in spec.outputs}
    if not keep:
        return out
    try:
        values = _call(session, spec.method, picked, batch_size, aggregation)
    except DataError as exc:
        raise _rows_renamed(exc, keep, first_row) from exc
    for name, column in values.items():
        target = out[name]
        for i, v in zip(keep, column):
            target[i] = v
    return out


def _call(session, method: str, columns: list[list[str]], batch_size: int | None, aggregation: str
          ) -> dict[str, list]:
    if method == "embed":
        vectors = session.embed(columns[0], batch_size=batch_size)
        return {"embedding": list(np.asarray(vectors, dtype=np.float32))}
    if method == "classify":
        result = session.classify(columns[0], batch_size=batch_size)
        return {"label": list(result.labels), "score": [float(s) for s in result.scores]}
    if method == "tag":
        if aggregation not in AGGREGATIONS:
            raise ConfigError(f"aggregation={aggregation!r} is not one of {', '.join(AGGREGATIONS)}")
        found = session.tag(columns[0], aggregation=aggregation, batch_size=batch_size)
        return {"entities": [[_entity(e) for e in text] for text in found]}
    if method == "rank":
        scores = session.predict(list(zip(columns[0], columns[1])), batch_size=batch_size or 32)
        return {"score": [float(s) for s in np.asarray(scores).reshape(-1)]}
    answers = session.answer(columns[0], columns[1], batch_size=batch_size)
    answers = answers if isinstance(answers, list) else [answers]
    return {"answer": [a["answer"] for a in answers], "start": [int(a["start"]) for a in answers],
            "end": [int(a["end"]) for a in answers],
            "score": [None if a["score"] is None else float(a["score"]) for a in answers]}


def _entity(found: dict) -> dict:
    return {"entity": found.get("entity_group", found.get("entity")), "score": float(found["score"]),
            "word": found["word"], "start": int(found["start"]), "end": int(found["end"])}


# --------------------------------------------------------------------------- Arrow
def _arrow_type(kind: str):
    import pyarrow as pa

    if kind == "float32_list":
        return pa.list_(pa.float32())
    if kind == "entities":
        return pa.list_(pa.struct([(name, _arrow_type(t)) for name, t in ENTITY_FIELDS]))
    return {"string": pa.string(), "float64": pa.float64(), "int64": pa.int64()}[kind]


def arrow_schema(spec: TaskColumns):
    """The result columns as a ``pyarrow.Schema``."""
    import pyarrow as pa

    return pa.schema([(name, _arrow_type(kind)) for name, kind in spec.fields])


def arrow_columns(spec: TaskColumns, results: dict[str, list]) -> dict[str, Any]:
    """``run_task``'s columns as ``pyarrow`` arrays of the task's types (an embedding as list<float32>)."""
    import pyarrow as pa

    arrays = {}
    for name, kind in spec.fields:
        values = results[name]
        if kind == "float32_list":
            values = [None if v is None else np.asarray(v, dtype=np.float32) for v in values]
        arrays[name] = pa.array(values, type=_arrow_type(kind))
    return arrays
