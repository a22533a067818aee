"""The repositories ``edgebert triton-repo`` writes, served by a real Triton server: the ``tritonserver`` binary and
Python backend of the ``nvidia-pytriton`` wheel (its own venv, numpy < 2: ``make triton-venv``), on 127.0.0.1,
asked with ``tritonclient.http`` in batches of a few texts and by concurrent clients; every result equals
``EdgeSession``'s on the same texts and graph (embeddings within 1e-6, the same labels, entities and answers).

``make test-scaleout`` runs it (it sets ``EDGEBERT_TRITON_VENV``); elsewhere, or where the server cannot start
(no venv, the binary fails), it skips, saying why. pytriton ships no onnxruntime backend, so the
``--backend onnxruntime`` repository is served with its graph model's config as written but on a Python stand-in
that runs the same graph file with onnxruntime: the tokenizer, the ensemble and the pooling step are Triton's and
ours, the onnxruntime backend itself is not exercised here."""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO
from edgebert.runtime import EdgeSession
from scaleout_fixtures import TASKS, TEXTS, assert_same, inputs_of, reference, scaleout_bundle

pytestmark = pytest.mark.scaleout
VENV = os.environ.get("EDGEBERT_TRITON_VENV")
if not VENV:
    pytest.skip("EDGEBERT_TRITON_VENV is not set: `make test-scaleout` serves the repositories on a real Triton "
                "server (nvidia-pytriton in .venv-triton)", allow_module_level=True)
http = pytest.importorskip("tritonclient.http", reason="tritonclient[http] is not installed (pip install "
                           "'edgebert[triton]')")
pytest.importorskip("google.protobuf", reason="protobuf is not installed (pip install 'edgebert[triton]')")
sys.path.insert(0, str(REPO / "benchmarks"))
from triton_load import TritonServer, TritonUnavailable, infer  # noqa: E402

MODELS = {task: f"edgebert_{task.replace('-', '_')}" for task in TASKS}
OUTPUTS = {"embed": ["embedding"], "cls": ["label", "score"], "token-cls": ["entities"],
           "qa": ["answer", "start", "end", "score"], "rerank": ["score"]}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(server, {task: bundle}, {task: the graph the repository serves}) for the Python repositories of every task
    and the onnxruntime repository of embed, on one server."""
    from edgebert.scaleout.triton_repo import write_triton_repo

    root, work = tmp_path_factory.getbasetemp(), tmp_path_factory.mktemp("triton")
    bundles = {task: scaleout_bundle(root, task) for task in TASKS}
    repos, graphs = [], {}
    for task, bundle in bundles.items():
        repo = write_triton_repo(bundle, work / task, instances=2 if task == "embed" else 1, threads=1, cores=2,
                                 max_batch=16)
        repos.append(repo.out)
        params = _params(repo.out / MODELS[task] / "config.pbtxt")
        graphs[task] = {"precision": params.get("precision") or None, "int8_target": params.get("int8_target") or None}
    ort_repo = write_triton_repo(bundles["embed"], work / "ort", backend="onnxruntime", instances=1, threads=1,
                                 cores=2, name="ort_embed")
    _graph_on_python(ort_repo.out / "ort_embed_graph")
    repos.append(ort_repo.out)
    try:
        server = TritonServer(repos, Path(VENV))
        server.__enter__()
    except TritonUnavailable as exc:
        pytest.skip(f"the Triton server cannot start here: {' '.join(str(exc).split())[:600]}")
    yield server, bundles, graphs
    server.__exit__(None, None, None)


GRAPH_STAND_IN = '''
import json
from pathlib import Path

import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.inputs = [i["name"] for i in config["input"]]
        self.outputs = [o["name"] for o in config["output"]]
        graph = next((Path(args["model_repository"]) / args["model_version"]).glob("*.onnx"))
        self.session = ort.InferenceSession(str(graph), providers=["CPUExecutionProvider"])

    def execute(self, requests):
        responses = []
        for request in requests:
            feeds = {n: pb_utils.get_input_tensor_by_name(request, n).as_numpy() for n in self.inputs}
            values = self.session.run(self.outputs, feeds)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor(n, v) for n, v in zip(self.outputs, values)]))
        return responses
'''


def _graph_on_python(model: Path) -> None:
    """pytriton ships no onnxruntime backend: the graph model, its config as written (inputs, outputs, batching)
    but on a Python stand-in that runs the same graph file with onnxruntime, so the ensemble loads and serves."""
    config = model / "config.pbtxt"
    lines = config.read_text().replace('backend: "onnxruntime"', 'backend: "python"').splitlines()
    config.write_text("\n".join(line for line in lines if not line.startswith("default_model_filename")) + "\n")
    (model / "1" / "model.py").write_text(GRAPH_STAND_IN)


def _params(config: Path) -> dict[str, str]:
    """The ``parameters`` of a config.pbtxt, read with Triton's schema."""
    from edgebert.scaleout.triton_config import parse_config

    return {k: v.string_value for k, v in parse_config(config.read_text(), str(config)).parameters.items()}


def _columns(task: str, out: dict[str, np.ndarray]) -> dict[str, list]:
    """A response's tensors as the result columns ``assert_same`` compares."""
    cols: dict[str, list] = {}
    for name, array in out.items():
        if array.dtype == object:
            values = [v.decode("utf-8") for v in array.reshape(-1)]
            cols[name] = [json.loads(v) for v in values] if name == "entities" else values
        elif name == "embedding":
            cols[name] = list(array)
        else:
            cols[name] = [v.item() for v in array.reshape(-1)]
    return cols


@pytest.mark.parametrize("task", TASKS)
def test_triton_gives_edgesession_results_in_requests_of_several_texts(served, task):
    server, bundles, graphs = served
    client = http.InferenceServerClient(server.url)
    cols = inputs_of(task)
    n = len(next(iter(cols.values())))
    got: dict[str, list] = {}
    for start in range(0, n, 3):              # requests of 3 rows (the last shorter)
        part = infer(client, MODELS[task], {k: v[start:start + 3] for k, v in cols.items()}, OUTPUTS[task])
        for k, v in _columns(task, part).items():
            got.setdefault(k, []).extend(v)
    assert_same(task, got, reference(bundles[task], task, cols, **graphs[task]))


def test_concurrent_clients_each_get_their_own_results(served):
    server, bundles, graphs = served
    texts = TEXTS * 2
    results: dict[int, np.ndarray] = {}
    errors: list[BaseException] = []

    def client_loop(k: int) -> None:
        client = http.InferenceServerClient(server.url)
        try:
            for i in range(k, len(texts), 8):
                results[i] = infer(client, MODELS["embed"], {"text": [texts[i]]}, ["embedding"])["embedding"][0]
        except Exception as exc:             # reported below
            errors.append(exc)

    workers = [threading.Thread(target=client_loop, args=(k,)) for k in range(8)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors, errors
    want = reference(bundles["embed"], "embed", {"text": texts}, **graphs["embed"])["embedding"]
    assert np.abs(np.stack([results[i] for i in range(len(texts))]) - np.stack(want)).max() <= 1e-6
    stats = http.InferenceServerClient(server.url).get_inference_statistics(MODELS["embed"])["model_stats"][0]
    assert stats["inference_count"] >= len(texts)             # every request ran on the server


def test_the_onnxruntime_repository_ensemble_serves_edgesession_vectors(served):
    """text -> tokenizer (each request padded to its longest) -> graph -> pooling, wired by the ensemble."""
    server, bundles, _ = served
    client = http.InferenceServerClient(server.url)
    int8 = EdgeSession(bundles["embed"], provider="cpu", precision="int8", int8_target="portable")
    got = [infer(client, "ort_embed", {"text": TEXTS[i:i + 4]}, ["embedding"])["embedding"]
           for i in range(0, len(TEXTS), 4)]
    assert np.abs(np.concatenate(got) - int8.embed(TEXTS)).max() <= 1e-6
    stats = client.get_inference_statistics("ort_embed_graph")["model_stats"][0]
    assert stats["inference_count"] >= len(TEXTS)               # the graph step ran


def test_the_load_helper_reports_requests_and_latency_percentiles(served):
    """benchmarks/triton_load.measure, as the scale-out benchmark calls it (no timing is judged here)."""
    from triton_load import measure

    server, _, _ = served
    result = measure(server.url, MODELS["embed"], TEXTS[:5], 2, seconds=1.0, warmup=1)
    assert result["concurrency"] == 2 and result["requests"] > 0 and result["client_cpus"] == os.cpu_count()
    assert 0 < result["p50_ms"] <= result["p99_ms"] and result["requests_per_s"] > 0
