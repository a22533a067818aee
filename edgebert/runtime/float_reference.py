"""The fp32 graph's outputs on the held-out texts, stored in the bundle so ``edgebert check`` can verify an
INT8 graph on a device that carries no fp32 graph (a one-device bundle, ``runtime.pack``).

Written at export time (``write_reference``: the fp32 graph run through ``EdgeSession`` on exactly the
texts ``check`` measures by default: the built-in held-out text, or the built-in questions for ``qa``),
as a torch-free ``.npz`` read with ``allow_pickle=False``. It holds what the check's metric compares
(``fidelity.summarize``), per text, not the raw outputs: unit sentence vectors (embed), labels and
probabilities (cls, token-cls: per real token), the top token and its probability (mlm: never the
vocabulary-wide logits), answer spans (qa). ``measure_against_reference`` re-measures an INT8 session
against it with the same metric and batches as the check against a live fp32 graph.

The manifest's ``fp32_reference`` says the file, the texts (source, count and the sha256 of the texts
themselves, so a reference from other texts is never compared), the token limit and the metric. The
file's hash is in ``files`` like every other file: a changed reference fails ``check`` there. numpy only.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from edgebert.bundle import Manifest, bundle_file
from edgebert.bundle.task_registry import BUNDLE_TASKS, bundle_task
from edgebert.errors import BundleError
from edgebert.runtime.fidelity import METRICS, OUTPUT, FidelityTracker, answer_spans, inner_tokens, summarize
from edgebert.runtime.held_out import measured_texts  # the check's own choice of texts
from edgebert.runtime.text import length_sorted_batches, pad_batch

__all__ = ["REFERENCE_FILE", "REFERENCE_TASKS", "FIELD", "compute_reference", "write_reference", "read_reference",
           "measure_against_reference", "texts_digest"]

REFERENCE_FILE = "fp32_reference.npz"
FIELD = "fp32_reference"            # the manifest's key
BATCH = 32                          # the check's batches (so padding matches)
# what is kept per metric; the tasks whose check measures single texts or questions have a reference
_KEYS = {"cosine": ("emb",), "label_agreement": ("label", "probs"),
         "token_label_agreement": ("label", "probs", "offsets"), "top1_agreement": ("top1", "p_top1", "offsets"),
         "answer_overlap_f1": ("spans",), "ranking": ("scores", "offsets")}
REFERENCE_TASKS = tuple(t.name for t in BUNDLE_TASKS if t.metric in _KEYS and t.inputs != "choices")


def texts_digest(items: list) -> str:
    """sha256 of the texts (or questions) a reference was computed on, in order."""
    rows = [[q.question, q.context] if hasattr(q, "question") else [q.query, list(q.passages)]
            if hasattr(q, "passages") else q for q in items]
    return hashlib.sha256(json.dumps(rows, ensure_ascii=False).encode("utf-8")).hexdigest()


def _default_items(task: str, limit: int = 1 << 30) -> tuple[list, dict[str, Any]]:
    if bundle_task(task).inputs == "pairs":          # a reranker: the gate's query groups, no more
        from edgebert.qa.rank_groups import GATE_QUERIES

        limit = min(limit, GATE_QUERIES)
    return measured_texts(None, limit, task)


def compute_reference(session, task: str) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """(arrays, manifest field) of ``session`` (an fp32 ``EdgeSession``) on the check's default texts."""
    if task not in REFERENCE_TASKS:
        raise BundleError(f"no fp32 reference for task {task!r}: `edgebert check` has no metric for it")
    items, source = _default_items(task)
    if bundle_task(task).inputs == "questions":
        spans = [answer_spans(session.answer([e.question for e in items[i:i + BATCH]],
                                             [e.context for e in items[i:i + BATCH]]))["spans"]
                 for i in range(0, len(items), BATCH)]
        arrays = {"spans": np.concatenate(spans).astype(np.int64)}
    elif bundle_task(task).inputs == "pairs":
        scores = [_group_scores(session, g) for g in items]
        arrays = {"scores": np.concatenate(scores).astype(np.float32),
                  "offsets": np.concatenate([[0], np.cumsum([len(x) for x in scores])]).astype(np.int64)}
    else:
        arrays = _summaries(session, task, items)
    field = {"file": REFERENCE_FILE, "texts": source["source"], "n": len(items), "texts_sha256": texts_digest(items),
             "max_length": session.max_length, "metric": METRICS[task], "model": session.model_key,
             "why": "edgebert check compares an INT8 graph with these fp32 outputs where the bundle has no fp32 "
                    "graph (a one-device bundle)"}
    return arrays, field


def _group_scores(session, group) -> np.ndarray:
    """A reranker's logits for one query's passages, one batch (as the gate and ``check`` batch them)."""
    encoder = session.encoder.with_max_length(session.cross_encoder_max_length)
    feeds = pad_batch(encoder.encode(group.pairs(), True, truncate=True), session.pad_id)
    return session.run(feeds, ["logits"])["logits"][:, -1]


def _summaries(session, task: str, texts: list) -> dict[str, np.ndarray]:
    """The metric's summaries per text, in text order (token tasks: flattened, with ``offsets``)."""
    pairs = bool(texts) and isinstance(texts[0], tuple)
    rows = session.encoder.encode(texts, pairs, truncate=True)
    per_text: list[dict[str, np.ndarray]] = [{} for _ in rows]
    for idx in length_sorted_batches(rows, BATCH):
        feeds = pad_batch([rows[i] for i in idx], session.pad_id)
        mask = feeds["attention_mask"]
        out = session.run(feeds, [OUTPUT[task]])[OUTPUT[task]]
        summary = summarize(task, out, mask)
        if METRICS[task] == "top1_agreement":
            summary = {"top1": summary["top1"], "p_top1": summary["probs"][np.arange(len(summary["top1"])),
                                                                           summary["top1"]]}
        counts = _token_counts(task, mask)
        starts = np.concatenate([[0], np.cumsum(counts)]) if counts is not None else None
        for j, i in enumerate(idx):
            per_text[i] = {k: (v[starts[j]:starts[j + 1]] if starts is not None else v[j]) for k, v in summary.items()}
    keys = [k for k in _KEYS[METRICS[task]] if k != "offsets"]
    arrays = {k: np.concatenate([t[k] for t in per_text]) if bundle_task(task).token_level
              else np.stack([t[k] for t in per_text]) for k in keys}
    arrays = {k: v.astype(np.float32) if v.dtype.kind == "f" else v.astype(np.int64) for k, v in arrays.items()}
    if bundle_task(task).token_level:
        arrays["offsets"] = np.concatenate([[0], np.cumsum([len(t[keys[0]]) for t in per_text])]).astype(np.int64)
    return arrays


def _token_counts(task: str, mask: np.ndarray) -> np.ndarray | None:
    """Tokens per row that ``summarize`` keeps (None: one item per row)."""
    if METRICS[task] == "token_label_agreement":
        return inner_tokens(mask).sum(1)
    if METRICS[task] == "top1_agreement":
        return mask.astype(bool).sum(1)
    return None


def write_reference(bundle_dir: Path, manifest: Manifest, threads: int | None = None,
                    out_dir: Path | None = None, stage: str = "export") -> Manifest:
    """Run the bundle's fp32 graph on the check's texts, write ``REFERENCE_FILE`` atomically into ``out_dir``
    (default: the bundle), and return the manifest with its ``fp32_reference`` field (the caller re-hashes
    the files)."""
    from edgebert.files.atomic import atomic_path
    from edgebert.runtime.session import EdgeSession

    session = EdgeSession(bundle_dir, "cpu", "fp32", threads, verify=False, allow_spinning=False)
    arrays, field = compute_reference(session, manifest.task)
    with atomic_path(Path(out_dir or bundle_dir) / REFERENCE_FILE) as tmp:
        with open(tmp, "wb") as fh:
            np.savez_compressed(fh, **arrays)
    value = manifest.to_dict()
    value[FIELD] = {**field, "written_by": stage}        # export, or pack (a bundle exported before references)
    return Manifest.from_dict(value)


def read_reference(bundle_dir: Path, manifest: Manifest) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The stored arrays and the manifest's field; ``BundleError`` for a bundle without one, or a file that
    does not hold what the field says (its hash is checked by ``verify_files``)."""
    field = manifest.get_extra(FIELD)
    if not isinstance(field, dict) or not isinstance(field.get("file"), str):
        raise BundleError(f"{bundle_dir} has no fp32 graph and no fp32 reference outputs to check its INT8 graph "
                          "against", "check the full bundle, or re-pack it with this edgebert")
    path = bundle_file(bundle_dir, field["file"])
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: np.asarray(data[k]) for k in data.files}
    except (OSError, ValueError, KeyError) as exc:
        raise BundleError(f"{path} is not a readable fp32 reference ({' '.join(str(exc).split())[:200]})",
                          "re-pack the bundle") from exc
    task = manifest.task
    missing = [k for k in _KEYS.get(METRICS.get(task), ("?",)) if k not in arrays]
    n = int(field.get("n", -1))
    rows = len(arrays["offsets"]) - 1 if "offsets" in arrays else len(next(iter(arrays.values()), ()))
    if missing or rows != n:
        raise BundleError(f"{path} does not hold the {task} reference of {n} texts its manifest describes "
                          f"({'lacks ' + ', '.join(missing) if missing else f'{rows} rows'})", "re-pack the bundle")
    return arrays, field


def _rows(arrays: dict[str, np.ndarray], idx: np.ndarray) -> dict[str, np.ndarray]:
    """The reference's summaries of texts ``idx``, in that order (token tasks: their tokens concatenated)."""
    if "offsets" not in arrays:
        return {k: v[idx] for k, v in arrays.items()}
    off = arrays["offsets"]
    return {k: np.concatenate([v[off[i]:off[i + 1]] for i in idx]) for k, v in arrays.items() if k != "offsets"}


def measure_against_reference(int8, task: str, max_texts: int, arrays: dict[str, np.ndarray],
                              field: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """(fidelity, texts) of the INT8 session ``int8`` against the stored fp32 outputs, on the first
    ``max_texts`` of the check's default texts, batched as the check batches them."""
    items, source = _default_items(task)
    if texts_digest(items) != field.get("texts_sha256") or len(items) != field.get("n"):
        raise BundleError("the fp32 reference was computed on other held-out texts than this edgebert's",
                          "check with the edgebert version that exported the bundle, or re-pack it")
    if int8.max_length != field.get("max_length"):
        raise BundleError(f"the fp32 reference was computed at max_length {field.get('max_length')}, the session "
                          f"runs {int8.max_length}")
    items = items[:max_texts]
    tracker = FidelityTracker(task)
    if bundle_task(task).inputs == "questions":
        for i in range(0, len(items), BATCH):
            chunk = items[i:i + BATCH]
            got = answer_spans(int8.answer([e.question for e in chunk], [e.context for e in chunk]))
            tracker.add({"spans": arrays["spans"][i:i + len(chunk)]}, got, len(chunk))
    elif bundle_task(task).inputs == "pairs":
        for i, group in enumerate(items):
            ref = arrays["scores"][arrays["offsets"][i]:arrays["offsets"][i + 1]].astype(np.float64)
            tracker.add({"scores": ref}, {"scores": _group_scores(int8, group).astype(np.float64)}, len(ref))
    else:
        pairs = bool(items) and isinstance(items[0], tuple)
        rows = int8.encoder.encode(items, pairs, truncate=True)
        for idx in length_sorted_batches(rows, BATCH):
            feeds = pad_batch([rows[i] for i in idx], int8.pad_id)
            got = summarize(task, int8.run(feeds, [OUTPUT[task]])[OUTPUT[task]], feeds["attention_mask"])
            ref = _rows(arrays, idx)
            if METRICS[task] == "top1_agreement":     # the reference keeps only its top token's probability
                rows_ = np.arange(len(ref["top1"]))
                tracker.scores.append((ref["top1"] == got["top1"]).astype(np.float64))
                tracker.distances.append(np.abs(ref["p_top1"] - got["probs"][rows_, ref["top1"]]))
                tracker.texts += len(idx)
            else:
                tracker.add(ref, got, len(idx))
    return tracker.result(), {**source, "n": len(items),
                              "reference": f"the fp32 outputs stored at {field.get('written_by', 'export')}, "
                                           f"{field['file']}"}
