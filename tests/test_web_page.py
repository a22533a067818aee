"""The example page (examples/web) in a real browser: Debian's chromium, headless, loads tiny edgebert bundles
from serve.py on 127.0.0.1 (cross-origin isolated, so 2 WASM threads run), embeds its sentences and answers
its question with transformers.js; the results are EdgeSession's (fp32 graph to 1e-5; the INT8 graph: the
same answer, vectors at cosine >= 0.999 to EdgeSession's INT8 and within the gate's budget of fp32); the small
graph (dtype "q4": onnx/model_q4.onnx of ``export --int8 --int4``) embeds at cosine >= 0.999 to EdgeSession's int4.
Skips, saying why, where node, the npm packages or chromium are absent."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from edgebert.runtime import EdgeSession
from hf_loader_bundles import int8_budget, loader_bundles, small_bundle
from web_tools import WEB, need_chromium, run_node

SMALL_BUILDS = ("asyncify", "jsep")      # onnxruntime-web WASM builds the page can load (ortbuild=...)


def _rerank_bundle(root: Path) -> Path:
    """A tiny seeded one-label classifier exported as a reranker (Sigmoid: sentence-transformers' default), fp32 +
    INT8."""
    bundle = Path(root) / "tiny_web_rerank_bundle"
    if not (bundle / "manifest.json").is_file():
        from edgebert.exporters import ExportConfig, export_bundle
        from runtime_fixtures import make_tiny_model_dir

        model = make_tiny_model_dir(Path(root) / "tiny_web_rerank_model", "BertForSequenceClassification", seed=7,
                                    id2label={0: "LABEL_0"})
        export_bundle(ExportConfig(model_dir=model, out_dir=bundle, task="rerank", int8=True,
                                   validation_batch_sizes=(1, 3), validation_seq_lens=(7, 32)))
    return bundle


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(base URL, bundles) of serve.py serving the tiny embed and QA bundles; stopped after the module."""
    need_chromium()
    bundles = loader_bundles(tmp_path_factory.getbasetemp())
    bundles["small"] = small_bundle(tmp_path_factory.getbasetemp())
    bundles["rerank"] = _rerank_bundle(tmp_path_factory.getbasetemp())
    proc = subprocess.Popen([sys.executable, str(WEB / "serve.py"), f"embed={bundles['embed']}",
                             f"qa={bundles['qa']}", f"small={bundles['small']}", f"rerank={bundles['rerank']}",
                             "--port", "0"],
                            stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("serving "), line
        yield line.split()[1], bundles
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def pages(served, tmp_path_factory):
    url, bundles = served
    work = tmp_path_factory.mktemp("web_page")
    spec = {"pages": [{"url": f"{url}?embed=embed&qa=qa&rerank=rerank&dtype={d}&threads={t}"}
                      for d, t in (("fp32", 1), ("q8", 2))]
            + [{"url": f"{url}?embed=small&dtype=q4&threads=1&ortbuild={b}"} for b in SMALL_BUILDS]}
    out = run_node("browser_run.mjs", spec, work)
    assert out["browser"]
    return {"fp32": out["pages"][0], "int8": out["pages"][1],
            **{f"int4-{b}": page for b, page in zip(SMALL_BUILDS, out["pages"][2:])}}, bundles


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_page_embeds_and_answers_as_edgesession(pages, precision):
    by_precision, bundles = pages
    page = by_precision[precision]
    assert page["errors"] == [] and "error" not in page["results"], page
    results = page["results"]
    assert results["isolated"] is True and results["threads"] == (1 if precision == "fp32" else 2)
    embed, qa = results["embed"], results["qa"]
    got = np.array(embed["vectors"], dtype=np.float32)
    session = EdgeSession(bundles["embed"], provider="cpu", precision=precision, threads=1)
    want = session.embed(embed["texts"])
    if precision == "fp32":
        assert float(np.abs(got - want).max()) <= 1e-5
    else:   # WASM's INT8 kernels round some activations otherwise: close, not bit-equal
        assert float((got * want).sum(1).min()) >= 0.999
        fp32 = EdgeSession(bundles["embed"], provider="cpu", precision="fp32", threads=1).embed(embed["texts"])
        assert float(1 - (got * fp32).sum(1).mean()) <= int8_budget(bundles["embed"])[1]
    answer = EdgeSession(bundles["qa"], provider="cpu", precision=precision, threads=1).answer(qa["question"],
                                                                                                qa["context"])
    assert qa["answer"] == answer["answer"]
    assert abs(qa["score"] - answer["score"]) <= (1e-5 if precision == "fp32" else 1e-2)
    ranked = results["rerank"]
    reranker = EdgeSession(bundles["rerank"], provider="cpu", precision=precision, threads=1)
    want = reranker.predict([(ranked["query"], p) for p in ranked["passages"]])
    assert len(want) == 4 and float(np.abs(np.asarray(ranked["scores"]) - want).max()) <= \
        (1e-5 if precision == "fp32" else 1e-3)
    if precision == "fp32":
        assert ranked["order"] == [r["corpus_id"] for r in reranker.rank(ranked["query"], ranked["passages"])]


@pytest.mark.parametrize("build", SMALL_BUILDS)
def test_page_embeds_with_the_small_graph(pages, build):
    """dtype "q4" (the manifest's loaders note names it): onnxruntime-web's WASM kernels for MatMulNBits,
    GatherBlockQuantized and MultiHeadAttention in the browser, close to EdgeSession's int4 graph and within its gate.
    The asyncify build (transformers.js' default) of onnxruntime-web 1.31.0-dev.20260914 lacks the
    GatherBlockQuantized kernel: skipped, saying so; the jsep build (ortbuild=jsep) runs it."""
    by_precision, bundles = pages
    page = by_precision[f"int4-{build}"]
    error = page["results"].get("error", "")
    if build == "asyncify" and "Failed to find kernel for com.microsoft.GatherBlockQuantized" in error:
        pytest.skip(f"onnxruntime-web's asyncify WASM build has no GatherBlockQuantized kernel: {error.splitlines()[0]}")
    assert page["errors"] == [] and not error, (page["errors"], error)
    results = page["results"]
    assert results["dtype"] == "q4" and results["threads"] == 1 and results["ortBuild"] == build
    got = np.array(results["embed"]["vectors"], dtype=np.float32)
    texts = results["embed"]["texts"]
    want = EdgeSession(bundles["small"], provider="cpu", precision="int4", threads=1).embed(texts)
    assert float((got * want).sum(1).min()) >= 0.999
    fp32 = EdgeSession(bundles["small"], provider="cpu", precision="fp32", threads=1).embed(texts)
    budget = json.loads((bundles["small"] / "manifest.json").read_text())["models"]["int4"]["accuracy"]
    assert float(1 - (got * fp32).sum(1).mean()) <= budget["max_accuracy_loss"]
