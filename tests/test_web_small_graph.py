"""The small graph (``onnx/model_q4.onnx``, ``export --int8 --int4``: 4-bit MatMulNBits, the word table through
the contrib op GatherBlockQuantized inside the fused EmbedLayerNormalization graph, QAttention,
DynamicQuantizeLinear + MatMulInteger) outside Python, on a tiny seeded bundle (issue #50):

* onnxruntime-web (WASM, in Node, 1 thread; its plain and jsep builds) loads and runs it, every contrib op
  included, and gives
  EdgeSession(precision="int4")'s hidden states to ``WASM_HIDDEN_TOL`` (WASM's MatMulNBits, with 8-bit
  activations at accuracy level 4, rounds otherwise than native onnxruntime's: ~1e-3 on values of size ~1)
  and its vectors to cosine ``WASM_COSINE``; the INT8 graph runs in the same process as the reference. The
  asyncify build (the one transformers.js' browser bundle loads) of onnxruntime-web 1.31.0-dev.20260914 has no
  kernel for com.microsoft.GatherBlockQuantized ("Failed to find kernel"): that case is skipped, saying so;
  any other failure fails;
* transformers.js (in Node: onnxruntime-node) opens the bundle with the dtype the manifest's loaders note
  names (``q4``) and its feature-extraction gives EdgeSession's int4 vectors to ``NODE_TOL`` (onnxruntime-node
  is another onnxruntime release than the Python one, and its MatMulNBits rounds otherwise: ~1e-4 here).

Skips, saying why, where node or examples/web's npm packages are absent."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from edgebert.graph.ops import op_type_counts
from edgebert.runtime import EdgeSession
from hf_loader_bundles import TEXTS, small_bundle
from web_tools import WEB, need_node, run_node

WASM_HIDDEN_TOL = 5e-3         # max |difference| of last_hidden_state, onnxruntime-web WASM vs EdgeSession
WASM_COSINE = 0.9999           # min cosine of the mean-pooled vectors, the same two
NODE_TOL = 1e-3                # transformers.js (onnxruntime-node, its own onnxruntime version) vs EdgeSession
CONTRIB_OPS = ("MatMulNBits", "GatherBlockQuantized", "EmbedLayerNormalization", "MultiHeadAttention")


def need_ort_web() -> None:
    need_node()
    if not (WEB / "node_modules" / "onnxruntime-web" / "package.json").is_file():
        pytest.skip(f"onnxruntime-web is not installed in {WEB}: make web-deps (npm ci --ignore-scripts)")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    need_node()
    return small_bundle(tmp_path_factory.getbasetemp())


def _rows(bundle: Path) -> list[list[int]]:
    return [list(map(int, e.ids)) for e in EdgeSession(bundle, provider="cpu", precision="int4").tokenize(TEXTS)]


def _feeds(row: list[int]) -> dict[str, np.ndarray]:
    n = len(row)
    return {"input_ids": np.array([row], np.int64), "attention_mask": np.ones((1, n), np.int64),
            "token_type_ids": np.zeros((1, n), np.int64)}


def _pooled(hidden: list) -> np.ndarray:
    vectors = np.array([np.asarray(h, np.float64).mean(0) for h in hidden])
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


MISSING_TABLE_KERNEL = "Failed to find kernel for com.microsoft.GatherBlockQuantized"


@pytest.fixture(scope="module", params=["plain", "asyncify", "jsep"])
def wasm(bundle, tmp_path_factory, request) -> dict:
    """onnxruntime-web's results for the small and the INT8 graph in one WASM build: ``{name: graph result}``
    + versions and build."""
    need_ort_web()
    manifest = json.loads((bundle / "manifest.json").read_text())
    rows = _rows(bundle)
    graphs = [{"name": key, "path": str(bundle / manifest["models"][key]["file"]), "rows": rows, "outputs": True}
              for key in ("int4", "int8")]
    out = run_node("ort_web_run.mjs", {"threads": 1, "build": request.param, "graphs": graphs},
                   tmp_path_factory.mktemp(f"ort_web_{request.param}"))
    assert out["threads"] == 1 and out["build"] == request.param and out["versions"]["onnxruntime-web"]
    return {"versions": out["versions"], "build": out["build"], **{g["name"]: g for g in out["graphs"]}}


def _skip_missing_table_kernel(wasm: dict) -> None:
    error = wasm["int4"].get("error")
    if error and error["stage"] == "load" and MISSING_TABLE_KERNEL in error["message"] and wasm["build"] == "asyncify":
        pytest.skip(f"onnxruntime-web {wasm['versions']['onnxruntime-web']}, {wasm['build']} build: no WASM kernel "
                    f"for com.microsoft.GatherBlockQuantized (the 4-bit word table): {error['message']}")


def test_small_graph_holds_the_contrib_ops_under_test(bundle):
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["models"]["int4"]["file"] == "onnx/model_q4.onnx"
    counts = op_type_counts(bundle / "onnx/model_q4.onnx")
    assert all(counts.get(op, 0) >= 1 for op in CONTRIB_OPS), counts
    assert counts["GatherBlockQuantized"] == 1 and counts["MatMulNBits"] == 13      # 2 layers x 6 + the pooler


def test_onnxruntime_web_runs_the_small_graph_as_edgesession(bundle, wasm):
    _skip_missing_table_kernel(wasm)
    small = wasm["int4"]
    assert "error" not in small, (f"onnxruntime-web {wasm['versions']['onnxruntime-web']} ({wasm['build']}) failed to "
                                  f"{small['error']['stage']} model_q4.onnx: {small['error']['message']}")
    session = EdgeSession(bundle, provider="cpu", precision="int4", threads=1)
    assert session.describe()["model_file"] == "model_q4.onnx"
    rows = _rows(bundle)
    diffs = []
    for row, got in zip(rows, small["outputs"]):
        want = session.run(_feeds(row), ["last_hidden_state"])["last_hidden_state"][0]
        got = np.asarray(got, np.float32)
        assert got.shape == want.shape == (len(row), 64)
        diffs.append(float(np.abs(got - want).max()))
    assert max(diffs) <= WASM_HIDDEN_TOL, diffs
    cos = (_pooled(small["outputs"]) * session.embed(TEXTS)).sum(1)
    assert float(cos.min()) >= WASM_COSINE, cos
    # and within the export gate's budget of the fp32 graph, as the manifest states it
    accuracy = json.loads((bundle / "manifest.json").read_text())["models"]["int4"]["accuracy"]
    fp32 = EdgeSession(bundle, provider="cpu", precision="fp32", threads=1).embed(TEXTS)
    assert float(1 - (_pooled(small["outputs"]) * fp32).sum(1).mean()) <= accuracy["max_accuracy_loss"]


def test_onnxruntime_web_runs_the_int8_graph_beside_it(bundle, wasm):
    int8 = wasm["int8"]
    assert "error" not in int8, int8["error"]
    want = EdgeSession(bundle, provider="cpu", precision="int8", threads=1).embed(TEXTS)
    assert float((_pooled(int8["outputs"]) * want).sum(1).min()) >= WASM_COSINE


def test_transformers_js_loads_the_small_graph_by_the_manifests_dtype(bundle, tmp_path_factory):
    from edgebert.bundle import read_manifest

    how = read_manifest(bundle).get_extra("loaders")["transformers.js"]["int4"]
    assert how == {"dtype": "q4"}                       # transformers.js' name for onnx/model_q4.onnx
    root = tmp_path_factory.getbasetemp()
    job = {"task": "feature-extraction", "model": bundle.relative_to(root).as_posix(), "dtype": how["dtype"],
           "options": {"pooling": "mean", "normalize": True}, "inputs": TEXTS}
    out = run_node("node_pipeline.mjs", {"root": str(root), "jobs": [job]}, tmp_path_factory.mktemp("q4_js"))
    got = np.array([o[0] for o in out[0]["outputs"]], dtype=np.float32)
    want = EdgeSession(bundle, provider="cpu", precision="int4", threads=1).embed(TEXTS)
    diff = float(np.abs(got - want).max())
    assert diff <= NODE_TOL, diff
    int8 = EdgeSession(bundle, provider="cpu", precision="int8", threads=1).embed(TEXTS)
    assert float(np.abs(got - int8).max()) > 2 * diff       # the small graph, not model_quantized.onnx
