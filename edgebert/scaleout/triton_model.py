"""The Python-backend model of a repository ``edgebert triton-repo`` writes: copied as each Python model's
``model.py``, its job chosen by the config's ``edgebert_role`` parameter.

* ``session`` (the default backend): an ``EdgeSession`` on the bundle in the version folder, text in and the
  task's result out: ``embedding`` (embed), ``label`` + ``score`` (cls), ``entities`` as JSON (token-cls: whole
  entities, ``aggregation="simple"``, as the other engines give them), ``answer`` + ``start`` + ``end`` +
  ``score`` (qa, from ``question`` + ``context``). The texts of every request
  of a dynamic batch go through one session call; a request the session refuses (``DataError``) gets its own
  error, the others their results.
* ``tokenizer`` (``--backend onnxruntime``): text -> ``input_ids`` / ``attention_mask`` (/ ``token_type_ids``),
  each request padded to its own longest text, with the bundle's tokenizer and ``EdgeSession``'s rules.
* ``pool`` (``--backend onnxruntime``, embed): ``last_hidden_state`` + ``attention_mask`` -> the sentence
  vector, pooled and normalised as ``EdgeSession.embed`` does.

Triton's Python runs it, so ``edgebert[cpu]`` must be installed there (onnxruntime, tokenizers, numpy).
``triton_python_backend_utils`` exists only inside Triton: it is imported by ``TritonPythonModel`` alone, so the
roles' code is importable (and tested) without a server.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from edgebert.bundle.task_registry import bundle_task

ROLES = ("session", "tokenizer", "pool")


def texts_of(array: Any, name: str = "text") -> list[str]:
    """A Triton string tensor ([n, 1] bytes) as n str; ``ValueError`` naming the input and row for bytes that are
    not UTF-8 (the request's own error: ``execute`` decodes each request in its own guard)."""
    out = []
    for i, x in enumerate(np.asarray(array, dtype=object).reshape(-1)):
        try:
            out.append(x.decode("utf-8") if isinstance(x, bytes) else str(x))
        except UnicodeDecodeError as exc:
            raise ValueError(f"{name}[{i}] is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    return out


def strings(values: Sequence[str]) -> np.ndarray:
    """n str as a Triton string tensor [n, 1]."""
    return np.array([[v.encode("utf-8")] for v in values], dtype=object).reshape(len(values), 1)


def entity(found: dict) -> dict:
    """One entity as every engine of ``edgebert.scaleout`` gives it: entity (its label), score, word, start, end."""
    return {"entity": found.get("entity_group", found.get("entity")), "score": float(found["score"]),
            "word": found["word"], "start": int(found["start"]), "end": int(found["end"])}


class SessionRole:
    """The bundle's task behind Triton tensors (see the module docstring)."""

    def __init__(self, folder: Path, params: dict[str, str]):
        from edgebert.runtime import EdgeSession

        self.session = EdgeSession(folder / params.get("bundle", "bundle"), provider="cpu",
                                   precision=params.get("precision") or None,
                                   int8_target=params.get("int8_target") or None,
                                   threads=int(params["threads"]) if params.get("threads") else None)
        self.task = bundle_task(self.session.task)        # the registry: which EdgeSession method serves it
        self.input_names = (["question", "context"] if self.task.inputs == "questions" else
                            ["query", "passage"] if self.task.inputs == "pairs" else ["text"])

    def run(self, inputs: dict[str, list[str]]) -> dict[str, np.ndarray]:
        """{input: n texts} -> {output: array with n rows}."""
        s, method = self.session, self.task.method
        if method == "embed":
            return {"embedding": s.embed(inputs["text"]).astype(np.float32)}
        if method == "classify":
            result = s.classify(inputs["text"])
            return {"label": strings(result.labels), "score": result.scores.astype(np.float32).reshape(-1, 1)}
        if method == "tag":
            found = s.tag(inputs["text"], aggregation="simple")
            return {"entities": strings([json.dumps([entity(e) for e in text]) for text in found])}
        if method == "answer":
            found = s.answer(inputs["question"], inputs["context"])
            return {"answer": strings([a["answer"] for a in found]),
                    "start": np.array([[a["start"]] for a in found], np.int64).reshape(-1, 1),
                    "end": np.array([[a["end"]] for a in found], np.int64).reshape(-1, 1),
                    "score": np.array([[a["score"]] for a in found], np.float32).reshape(-1, 1)}
        if method == "rank":          # each row a (query, passage) pair: a query's documents are rows of one request
            scores = s.predict(list(zip(inputs["query"], inputs["passage"])))
            return {"score": np.asarray(scores, np.float32).reshape(-1, 1)}
        raise ValueError(f"triton-repo serves no {self.task.name!r} bundle (EdgeSession.{method})")


class TokenizerRole:
    """Texts (or question + context pairs) -> the graph's inputs, padded to the request's longest."""

    def __init__(self, folder: Path, params: dict[str, str]):
        from edgebert.runtime.text import TextEncoder

        self.encoder = TextEncoder(folder / params["tokenizer"], int(params["max_length"]), int(params["pad_id"]))
        self.pad_id = int(params["pad_id"])
        self.graph_inputs = params["graph_inputs"].split(",")
        self.input_names = ["question", "context"] if params.get("pairs") == "true" else ["text"]

    def run(self, inputs: dict[str, list[str]]) -> dict[str, np.ndarray]:
        from edgebert.runtime.text import pad_batch

        pairs = len(self.input_names) == 2
        items = list(zip(inputs["question"], inputs["context"])) if pairs else inputs["text"]
        feeds = pad_batch(self.encoder.encode(items, pairs, True), self.pad_id)
        return {name: feeds[name] for name in self.graph_inputs}


class PoolRole:
    """Token vectors -> sentence vectors, as ``EdgeSession.embed`` makes them (its pooling, unit rows, the
    zero vector for a text with no tokens)."""

    input_names = ["last_hidden_state", "attention_mask"]

    def __init__(self, folder: Path, params: dict[str, str]):
        self.mode = params["pooling"]
        self.framed = int(params["frame_tokens"])

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        from edgebert.runtime.vector_pooling import pool, unit_rows

        hidden, mask = np.asarray(inputs["last_hidden_state"]), np.asarray(inputs["attention_mask"])
        vectors = pool(hidden, mask, self.mode).astype(np.float32)
        vectors = unit_rows(vectors) if len(vectors) else vectors
        vectors[mask.sum(axis=1) <= self.framed] = 0.0
        return {"embedding": vectors.astype(np.float32)}


def make_role(folder: Path, params: dict[str, str]):
    role = params.get("edgebert_role", "session")
    return {"session": SessionRole, "tokenizer": TokenizerRole, "pool": PoolRole}[role](Path(folder), params)


class TritonPythonModel:
    """What Triton's Python backend loads (``initialize`` / ``execute``)."""

    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        params = {k: v.get("string_value", "") for k, v in (config.get("parameters") or {}).items()}
        folder = Path(args["model_repository"]) / args["model_version"]
        self.role = make_role(folder, params)
        self.outputs = [o["name"] for o in config["output"]]
        self.text_inputs = not isinstance(self.role, PoolRole)

    def _inputs(self, request) -> dict[str, Any]:
        import triton_python_backend_utils as pb_utils

        arrays = {n: pb_utils.get_input_tensor_by_name(request, n).as_numpy() for n in self.role.input_names}
        return {n: texts_of(a, n) for n, a in arrays.items()} if self.text_inputs else arrays

    def execute(self, requests: list) -> list:
        return [self._response(r) for r in run_requests(self.role, requests, self._inputs, self.text_inputs)]

    def _response(self, result):
        import triton_python_backend_utils as pb_utils

        if isinstance(result, Exception):
            line = result.one_line() if hasattr(result, "one_line") else f"{type(result).__name__}: {result}"
            return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(line))
        return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(n, result[n]) for n in self.outputs])


def run_requests(role, requests: list, read, merge: bool) -> list:
    """Each request's outputs, or its own exception: ``read(request)`` (decoding, in each request's own guard: one
    request's bad bytes never fail the others), then one ``role.run`` for the whole dynamic batch where ``merge``
    (texts), each request alone otherwise or where that one call failed (to find the request at fault)."""
    results: list = []
    for request in requests:
        try:
            results.append(read(request))
        except Exception as exc:                 # noqa: BLE001  (the request's own error)
            results.append(exc)
    good = [j for j, r in enumerate(results) if not isinstance(r, Exception)]
    if merge and good:
        per_request = [results[j] for j in good]
        counts = [len(next(iter(i.values()))) for i in per_request]
        try:
            outputs = role.run({n: [t for i in per_request for t in i[n]] for n in role.input_names})
        except Exception:                        # noqa: BLE001  (find the request(s) at fault: each alone)
            outputs = None
        if outputs is not None:
            bounds = np.cumsum([0, *counts])
            for k, j in enumerate(good):
                results[j] = {name: v[bounds[k]:bounds[k + 1]] for name, v in outputs.items()}
            return results
    for j in good:
        try:
            results[j] = role.run(results[j])
        except Exception as exc:                 # noqa: BLE001
            results[j] = exc
    return results
