"""The example page (examples/web) in a real browser: Debian's chromium, headless, loads tiny edgebert bundles
from serve.py on 127.0.0.1 (cross-origin isolated, so 2 WASM threads run), embeds its sentences and answers
its question with transformers.js; the results are EdgeSession's (fp32 graph to 1e-5; the INT8 graph: the
same answer, vectors at cosine >= 0.999 to EdgeSession's INT8 and within the gate's budget of fp32).
Skips, saying why, where node, the npm packages or chromium are absent."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from edgebert.runtime import EdgeSession
from hf_loader_bundles import int8_budget, loader_bundles
from web_tools import WEB, need_chromium, run_node


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(base URL, bundles) of serve.py serving the tiny embed and QA bundles; stopped after the module."""
    need_chromium()
    bundles = loader_bundles(tmp_path_factory.getbasetemp())
    proc = subprocess.Popen([sys.executable, str(WEB / "serve.py"), f"embed={bundles['embed']}",
                             f"qa={bundles['qa']}", "--port", "0"], stdout=subprocess.PIPE, text=True)
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
    spec = {"pages": [{"url": f"{url}?embed=embed&qa=qa&dtype={d}&threads={t}"} for d, t in (("fp32", 1), ("q8", 2))]}
    out = run_node("browser_run.mjs", spec, work)
    assert out["browser"]
    return {"fp32": out["pages"][0], "int8": out["pages"][1]}, bundles


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
