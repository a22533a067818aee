"""transformers.js in Node opens an exported bundle as it is (no renaming, no network) and its pipelines give
EdgeSession's results: feature-extraction with the bundle's pooling, text-classification,
token-classification and question-answering, on the fp32 graph (to 1e-5) and the default INT8 graph
(dtype "q8": the same graph's results, and within the export gate's budget of fp32). Skips, saying why,
where node or examples/web's npm packages are absent."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from edgebert.runtime import EdgeSession
from hf_loader_bundles import TEXTS, int8_budget, loader_bundles, qa_examples
from web_tools import need_node, run_node

FP32_TOL = 1e-5
SAME_GRAPH_TOL = 1e-4
DTYPES = {"fp32": "fp32", "int8": "q8"}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """``{(task, precision): (bundle, outputs)}`` from one node run over every bundle and both graphs."""
    need_node()
    root = tmp_path_factory.getbasetemp()
    bundles = loader_bundles(root)
    pooling = json.loads((bundles["embed"] / "1_Pooling" / "config.json").read_text())
    options = {"embed": {"pooling": "mean" if pooling["pooling_mode_mean_tokens"] else "cls",
                         "normalize": (bundles["embed"] / "modules.json").read_text().count("Normalize") > 0},
               "cls": {"top_k": None}, "token-cls": {"ignore_labels": []}, "qa": {}}
    tasks = {"embed": "feature-extraction", "cls": "text-classification", "token-cls": "token-classification",
             "qa": "question-answering"}
    inputs = {t: TEXTS for t in tasks}
    inputs["qa"] = [{"question": q, "context": c} for q, c in qa_examples(bundles["qa"])]
    jobs = [{"task": tasks[t], "model": bundles[t].relative_to(root).as_posix(), "dtype": DTYPES[p],
             "options": options[t], "inputs": inputs[t]} for t in tasks for p in DTYPES]
    work = tmp_path_factory.mktemp("transformers_js")
    out = run_node("node_pipeline.mjs", {"root": str(root), "jobs": jobs}, work)
    return {(t, p): (bundles[t], r["outputs"]) for (t, p), r in zip(((t, p) for t in tasks for p in DTYPES), out)}


def _session(bundle: Path, precision: str) -> EdgeSession:
    return EdgeSession(bundle, provider="cpu", precision=precision, threads=1)


@pytest.mark.parametrize("precision", list(DTYPES))
def test_feature_extraction_gives_edgesessions_vectors(results, precision):
    bundle, outputs = results[("embed", precision)]
    got = np.array([o[0] for o in outputs], dtype=np.float32)
    want = _session(bundle, precision).embed(TEXTS)
    diff = float(np.abs(got - want).max())
    assert diff <= (FP32_TOL if precision == "fp32" else SAME_GRAPH_TOL), diff
    if precision == "int8":
        fp32 = _session(bundle, "fp32").embed(TEXTS)
        loss = float(1 - (got * fp32).sum(1).mean())          # both unit length
        assert loss <= int8_budget(bundle)[1], loss


@pytest.mark.parametrize("precision", list(DTYPES))
def test_text_classification_gives_edgesessions_probabilities(results, precision):
    bundle, outputs = results[("cls", precision)]
    want = _session(bundle, precision).classify(TEXTS)
    for row, probs in zip(outputs, want.probabilities):
        got = {r["label"]: r["score"] for r in row}
        assert set(got) == set(want.label_names)
        diff = max(abs(got[name] - float(p)) for name, p in zip(want.label_names, probs))
        assert diff <= (FP32_TOL if precision == "fp32" else SAME_GRAPH_TOL), diff
    if precision == "int8":
        fp32 = _session(bundle, "fp32").classify(TEXTS).labels
        agree = np.mean([max(r, key=lambda x: x["score"])["label"] == f for r, f in zip(outputs, fp32)])
        assert 1 - agree <= int8_budget(bundle)[1]


@pytest.mark.parametrize("precision", list(DTYPES))
def test_token_classification_gives_edgesessions_token_labels(results, precision):
    bundle, outputs = results[("token-cls", precision)]
    session = _session(bundle, precision)
    for text, row in zip(TEXTS, outputs):
        want = session.tag(text, aggregation="none", ignore_labels=())
        assert [(r["entity"], r["index"], r["word"]) for r in row] == [(w["entity"], w["index"], w["word"]) for w in want]
        diff = max(abs(r["score"] - w["score"]) for r, w in zip(row, want))
        assert diff <= (FP32_TOL if precision == "fp32" else SAME_GRAPH_TOL), diff


@pytest.mark.parametrize("precision", list(DTYPES))
def test_question_answering_gives_edgesessions_answers(results, precision):
    bundle, outputs = results[("qa", precision)]
    session = _session(bundle, precision)
    for (question, context), got in zip(qa_examples(bundle), outputs):
        want = session.answer(question, context)
        assert got["answer"] == want["answer"]
        assert abs(got["score"] - want["score"]) <= (FP32_TOL if precision == "fp32" else SAME_GRAPH_TOL)


def test_another_int8_target_opens_by_the_file_name_the_manifest_gives(tmp_path_factory):
    """An INT8 target other than the default has its own file (onnx/model_qint8_<target>.onnx); transformers.js
    loads it by the manifest's ``model_file_name``. Compared where the 8-bit graph is exact (VNNI, ARM64)."""
    from edgebert.bundle import read_manifest
    from edgebert.runtime.hostcpu import detect_host

    if detect_host().u8s8 != "exact":
        pytest.skip("the x86-vnni graph is exact only on VNNI / ARM64 CPUs (EdgeSession corrects it elsewhere)")
    root = tmp_path_factory.getbasetemp()
    bundle = loader_bundles(root)["targets"]
    how = read_manifest(bundle).get_extra("loaders")["transformers.js"]["int8-x86-vnni"]
    assert how == {"dtype": "fp32", "model_file_name": "model_qint8_x86-vnni"}
    job = {"task": "feature-extraction", "model": bundle.relative_to(root).as_posix(), "dtype": how["dtype"],
           "load": {"model_file_name": how["model_file_name"]}, "options": {"pooling": "mean", "normalize": True},
           "inputs": TEXTS}
    out = run_node("node_pipeline.mjs", {"root": str(root), "jobs": [job]}, tmp_path_factory.mktemp("targets_js"))
    got = np.array([o[0] for o in out[0]["outputs"]], dtype=np.float32)
    want = EdgeSession(bundle, provider="cpu", int8_target="x86-vnni", threads=1).embed(TEXTS)
    assert float(np.abs(got - want).max()) <= SAME_GRAPH_TOL
