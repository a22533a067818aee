"""``edgebert triton-repo`` without a server: every config.pbtxt parsed with Triton's own schema (tritonclient's
``model_config_pb2``) and matching the manifest, the threads rule, the output folder's rule, the Python model's
dynamic-batch handling (a fake ``triton_python_backend_utils``), and the onnxruntime backend's tokenizer ->
graph -> pooling chain run in-process on the repository's own files. The schema tests skip, saying so, where
tritonclient is absent (the main venv: it would downgrade ml_dtypes / protobuf there); ``make test-scaleout``
runs them. A real server: tests/test_triton_server.py."""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO
from edgebert.errors import ConfigError, DataError, MissingExtra, OutputError
from edgebert.runtime import EdgeSession
from edgebert.scaleout import triton_model
from scaleout_fixtures import QUESTIONS, TASKS, TEXTS, inputs_of, scaleout_bundle

pytestmark = pytest.mark.scaleout
HAS_TRITONCLIENT = importlib.util.find_spec("tritonclient") is not None
needs_schema = pytest.mark.skipif(not HAS_TRITONCLIENT, reason="tritonclient is not installed here (Triton's "
                                  "model config schema): make test-scaleout runs these with '.[triton]'")


@pytest.fixture(scope="module")
def bundles(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.getbasetemp()
    return {task: scaleout_bundle(root, task) for task in TASKS}


def _parsed(path: Path):
    from edgebert.scaleout.triton_config import model_config_schema

    pb2, text_format = model_config_schema()
    return text_format.Parse(path.read_text(encoding="utf-8"), pb2.ModelConfig())


def _io(tensors) -> dict:
    from edgebert.scaleout.triton_config import model_config_schema

    pb2, _ = model_config_schema()
    return {t.name: (pb2.DataType.Name(t.data_type), list(t.dims)) for t in tensors}


# --------------------------------------------------------------------------- the default: one Python model
@needs_schema
@pytest.mark.parametrize("task", TASKS)
def test_the_python_repository_parses_with_triton_schema_and_matches_the_manifest(bundles, task, tmp_path):
    from edgebert.bundle import read_manifest
    from edgebert.scaleout.triton_repo import write_triton_repo

    repo = write_triton_repo(bundles[task], tmp_path / "repo", instances=2, threads=3, cores=8, max_batch=16)
    name = f"edgebert_{task.replace('-', '_')}"
    config = _parsed(tmp_path / "repo" / name / "config.pbtxt")
    manifest = read_manifest(bundles[task])
    assert (config.name, config.backend, config.max_batch_size) == (name, "python", 16)
    assert config.HasField("dynamic_batching") and [(g.kind, g.count) for g in config.instance_group] == [(2, 2)]
    assert config.parameters["threads"].string_value == "3" and (repo.instances, repo.threads) == (2, 3)
    want_in = {name: ("TYPE_STRING", [1]) for name in inputs_of(task)}
    want_out = {"embed": {"embedding": ("TYPE_FP32", [manifest.config.hidden_size])},
                "cls": {"label": ("TYPE_STRING", [1]), "score": ("TYPE_FP32", [1])},
                "token-cls": {"entities": ("TYPE_STRING", [1])},
                "qa": {"answer": ("TYPE_STRING", [1]), "start": ("TYPE_INT64", [1]), "end": ("TYPE_INT64", [1]),
                       "score": ("TYPE_FP32", [1])},
                "rerank": {"score": ("TYPE_FP32", [1])}}[task]
    assert (_io(config.input), _io(config.output)) == (want_in, want_out)
    version = tmp_path / "repo" / name / "1"
    assert (version / "model.py").read_text() == Path(triton_model.__file__).read_text()
    # the bundle in the version folder opens as the model opens it, and is the same model
    params = {k: v.string_value for k, v in config.parameters.items()}
    served = EdgeSession(version / "bundle", provider="cpu", precision=params["precision"] or None,
                         int8_target=params["int8_target"] or None)
    source = EdgeSession(bundles[task], provider="cpu", precision=served.precision, int8_target=served.int8_target)
    assert served.model_file.read_bytes() == source.model_file.read_bytes()
    packed = json.loads((version / "bundle" / "manifest.json").read_text()).get("packed")
    assert (packed is not None) == (params["int8_target"] != ""), repo.notes


@needs_schema
def test_instances_times_threads_never_exceed_the_cores(bundles, tmp_path):
    from edgebert.scaleout.triton_repo import write_triton_repo

    cases = {(None, None, 8): (2, 4), (3, None, 8): (3, 2), (None, 3, 8): (2, 3), (None, None, 1): (1, 1)}
    for i, ((instances, threads, cores), want) in enumerate(cases.items()):
        repo = write_triton_repo(bundles["cls"], tmp_path / f"r{i}", instances=instances, threads=threads, cores=cores)
        assert (repo.instances, repo.threads) == want
        assert repo.instances * repo.threads <= cores
    with pytest.raises(ConfigError, match=r"4 instances x 2 threads = 8 onnxruntime threads on 4 cores"):
        write_triton_repo(bundles["cls"], tmp_path / "too-many", instances=4, threads=2, cores=4)
    assert not (tmp_path / "too-many").exists()                 # refused before anything was written


@needs_schema
def test_the_output_folder_follows_the_projects_rule(bundles, tmp_path):
    from edgebert.scaleout.triton_repo import write_triton_repo

    out = tmp_path / "repo"
    write_triton_repo(bundles["embed"], out, cores=2)
    with pytest.raises(OutputError, match=r"already holds the output of `edgebert triton-repo`") as refused:
        write_triton_repo(bundles["embed"], out, cores=2)
    assert "pass --overwrite to reuse it" in refused.value.one_line()
    write_triton_repo(bundles["cls"], out, cores=2, overwrite=True)        # replaced as a whole
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == ["edgebert_cls"]
    (out / "notes.txt").write_text("mine")
    with pytest.raises(OutputError, match="notes.txt"):
        write_triton_repo(bundles["cls"], out, cores=2, overwrite=True)
    assert (out / "notes.txt").read_text() == "mine" and (out / "edgebert_cls" / "config.pbtxt").is_file()
    user = tmp_path / "user"
    user.mkdir()
    (user / "a.txt").write_text("x")
    with pytest.raises(OutputError, match="not empty and was not written by `edgebert triton-repo`"):
        write_triton_repo(bundles["cls"], user, cores=2, overwrite=True)


@needs_schema
def test_triton_schema_refuses_what_triton_would_and_the_manifest_check_names_the_tensor():
    from edgebert.scaleout.triton_config import Enum, check_io, config_text, parse_config

    with pytest.raises(ConfigError, match=r"x/config.pbtxt: Triton's model config schema refuses it.*max_batch"):
        parse_config('name: "m"\nmax_batch: 4\n', "x/config.pbtxt")        # the field is max_batch_size
    tensor = {"name": "input_ids", "data_type": Enum("TYPE_INT64"), "dims": [-1]}
    text = config_text({"name": "m", "max_batch_size": 4, "input": [tensor]})
    config = parse_config(text, "m/config.pbtxt")
    check_io(config, "m", {"input_ids": ("TYPE_INT64", [-1])}, {})
    with pytest.raises(ConfigError, match=r"input input_ids is TYPE_INT64 \[-1\], the bundle's is TYPE_INT64 \[-1, 8\]"):
        check_io(config, "m", {"input_ids": ("TYPE_INT64", [-1, 8])}, {})
    with pytest.raises(ConfigError, match=r"its inputs \['input_ids'\] are not the bundle's \['attention_mask'"):
        check_io(config, "m", {"attention_mask": ("TYPE_INT64", [-1]), "input_ids": ("TYPE_INT64", [-1])}, {})


def test_without_tritonclient_the_command_says_what_to_install(bundles, tmp_path, monkeypatch, capsys):
    from edgebert.cli import main
    from edgebert.scaleout.triton_repo import write_triton_repo

    for module in ("tritonclient", "tritonclient.grpc", "tritonclient.grpc.model_config_pb2"):
        monkeypatch.setitem(sys.modules, module, None)                  # as if not installed
    with pytest.raises(MissingExtra, match=r"Triton's own schema"):
        write_triton_repo(bundles["embed"], tmp_path / "repo")
    assert main(["triton-repo", str(bundles["embed"]), "--out", str(tmp_path / "repo")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'edgebert[triton]'" in err, err
    assert not (tmp_path / "repo").exists()


# --------------------------------------------------------------------------- the Python model, in this process
class _Tensor:
    def __init__(self, name, array):
        self.name, self.array = name, array

    def as_numpy(self):
        return self.array


def _fake_pb_utils(monkeypatch) -> None:
    """``triton_python_backend_utils`` as much as model.py uses of it."""
    pb = types.ModuleType("triton_python_backend_utils")
    pb.Tensor = _Tensor
    pb.TritonError = lambda message: ("error", message)
    pb.InferenceResponse = lambda output_tensors, error=None: {"outputs": {t.name: t.array for t in output_tensors},
                                                               "error": error}
    pb.get_input_tensor_by_name = lambda request, name: _Tensor(name, request[name])
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", pb)


def _model(bundle: Path, outputs: list[str], **params) -> triton_model.TritonPythonModel:
    config = {"output": [{"name": n} for n in outputs],
              "parameters": {k: {"string_value": str(v)} for k, v in {"bundle": bundle.name, **params}.items()}}
    model = triton_model.TritonPythonModel()
    model.initialize({"model_config": json.dumps(config), "model_repository": str(bundle.parent),
                      "model_version": "."})
    return model


def test_one_dynamic_batch_gives_each_request_edgesession_results(bundles, monkeypatch):
    _fake_pb_utils(monkeypatch)
    model = _model(bundles["embed"], ["embedding"], threads=1)
    sizes = [2, 1, 4, 3]
    requests, start = [], 0
    for n in sizes:
        requests.append({"text": triton_model.strings(TEXTS[start:start + n])})
        start += n
    responses = model.execute(requests)
    want = EdgeSession(bundles["embed"], provider="cpu").embed(TEXTS[:sum(sizes)])
    got = np.concatenate([r["outputs"]["embedding"] for r in responses])
    assert [len(r["outputs"]["embedding"]) for r in responses] == sizes and np.abs(got - want).max() <= 1e-6


def test_a_request_the_session_refuses_fails_alone(bundles, monkeypatch):
    _fake_pb_utils(monkeypatch)
    model = _model(bundles["qa"], ["answer", "start", "end", "score"])
    (q1, c1), (q2, c2) = QUESTIONS[:2]
    requests = [{"question": triton_model.strings([q1]), "context": triton_model.strings([c1])},
                {"question": triton_model.strings(["   "]), "context": triton_model.strings([c2])},
                {"question": triton_model.strings([q2]), "context": triton_model.strings([c2])}]
    responses = model.execute(requests)
    with pytest.raises(DataError) as refused:
        EdgeSession(bundles["qa"], provider="cpu").answer(["   "], [c2])
    assert responses[1]["error"] == ("error", refused.value.one_line())
    want = EdgeSession(bundles["qa"], provider="cpu").answer([q1, q2], [c1, c2])
    for response, answer in zip((responses[0], responses[2]), want):
        assert response["error"] is None
        assert response["outputs"]["answer"][0, 0].decode() == answer["answer"]
        assert int(response["outputs"]["start"][0, 0]) == answer["start"]


# --------------------------------------------------------------------------- --backend onnxruntime
@needs_schema
def test_the_onnxruntime_repository_is_tokenizer_graph_pool_and_gives_edgesession_vectors(bundles, tmp_path):
    import onnxruntime as ort

    from edgebert.bundle import read_manifest
    from edgebert.scaleout.triton_repo import write_triton_repo

    out = tmp_path / "repo"
    write_triton_repo(bundles["embed"], out, backend="onnxruntime", cores=2)
    manifest = read_manifest(bundles["embed"])
    hidden = manifest.config.hidden_size
    ensemble = _parsed(out / "edgebert_embed" / "config.pbtxt")
    assert ensemble.platform == "ensemble"
    assert [s.model_name for s in ensemble.ensemble_scheduling.step] == \
        ["edgebert_embed_tokenizer", "edgebert_embed_graph", "edgebert_embed_pool"]
    graph = _parsed(out / "edgebert_embed_graph" / "config.pbtxt")
    assert graph.backend == "onnxruntime" and graph.max_batch_size == 64
    assert _io(graph.input) == {i.name: ("TYPE_INT64", [-1]) for i in manifest.inputs}
    assert _io(graph.output)["last_hidden_state"] == ("TYPE_FP32", [-1, hidden])
    graph_file = out / "edgebert_embed_graph" / "1" / graph.default_model_filename
    int8 = EdgeSession(bundles["embed"], provider="cpu", precision="int8", int8_target="portable")
    assert graph_file.read_bytes() == int8.model_file.read_bytes()
    # the chain, in this process, on the repository's own files
    def params(model: str) -> dict[str, str]:
        return {k: v.string_value for k, v in _parsed(out / model / "config.pbtxt").parameters.items()}

    tokenizer = triton_model.make_role(out / "edgebert_embed_tokenizer" / "1", params("edgebert_embed_tokenizer"))
    pool = triton_model.make_role(out / "edgebert_embed_pool" / "1", params("edgebert_embed_pool"))
    session = ort.InferenceSession(str(graph_file), providers=["CPUExecutionProvider"])
    texts = TEXTS[:7]
    feeds = tokenizer.run({"text": texts})
    assert feeds["input_ids"].shape[1] == max(len(r) for r in int8.tokenize(texts))    # the request's longest
    token_vectors = session.run(["last_hidden_state"], feeds)[0]
    got = pool.run({"last_hidden_state": token_vectors, "attention_mask": feeds["attention_mask"]})["embedding"]
    assert np.abs(got - int8.embed(texts)).max() <= 1e-6


@needs_schema
def test_onnxruntime_cls_names_its_labels_and_gpu_needs_a_tensorrt_graph(bundles, tmp_path):
    from edgebert.bundle import read_manifest
    from edgebert.scaleout.triton_repo import write_triton_repo

    repo = write_triton_repo(bundles["cls"], tmp_path / "repo", backend="onnxruntime", cores=2)
    labels = (tmp_path / "repo" / "edgebert_cls_graph" / "labels.txt").read_text().split()
    assert labels == read_manifest(bundles["cls"]).label_names and "logits" in repo.outputs
    graph = _parsed(tmp_path / "repo" / "edgebert_cls_graph" / "config.pbtxt")
    assert graph.output[0].label_filename == "labels.txt" and not graph.HasField("optimization")
    with pytest.raises(ConfigError, match="--gpu serves the bundle's TensorRT graph, and this bundle has none"):
        write_triton_repo(bundles["cls"], tmp_path / "gpu", backend="onnxruntime", gpu=True)
    with pytest.raises(ConfigError, match="no CPU INT8 graph for target 'arm64'"):
        write_triton_repo(bundles["cls"], tmp_path / "arm", target="arm64")


@needs_schema
def test_accelerators_appear_only_where_the_bundle_has_their_graphs(bundles, tmp_path):
    """A manifest that lists a TensorRT (QDQ INT8) and an OpenVINO graph: --gpu serves the TensorRT one with Triton's
    TensorRT accelerator at its precision, the CPU graph gets the OpenVINO accelerator (the test above: neither
    without them). The graphs are the INT8 file under other entries: only the configs are compared."""
    import shutil

    from edgebert.scaleout.triton_repo import write_triton_repo

    bundle = tmp_path / "bundle"
    shutil.copytree(bundles["cls"], bundle)
    manifest = json.loads((bundle / "manifest.json").read_text())
    int8 = manifest["models"]["int8"]
    manifest["models"]["int8-trt"] = {**{k: v for k, v in int8.items() if k not in ("target", "requires")},
                                      "providers": ["tensorrt"], "graph": "standard-ops",
                                      "quantization": {"mode": "static", "format": "QDQ"}}
    manifest["models"]["int8-openvino"] = {**int8, "engine": "openvino", "providers": ["openvino"],
                                           "target": "openvino"}
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    write_triton_repo(bundle, tmp_path / "gpu", backend="onnxruntime", gpu=True, cores=2)
    gpu = _parsed(tmp_path / "gpu" / "edgebert_cls_graph" / "config.pbtxt")
    [accelerator] = gpu.optimization.execution_accelerators.gpu_execution_accelerator
    assert accelerator.name == "tensorrt" and accelerator.parameters["precision_mode"] == "INT8"
    assert [g.kind for g in gpu.instance_group] == [1]                                 # KIND_GPU
    write_triton_repo(bundle, tmp_path / "cpu", backend="onnxruntime", cores=2)
    cpu = _parsed(tmp_path / "cpu" / "edgebert_cls_graph" / "config.pbtxt")
    assert [a.name for a in cpu.optimization.execution_accelerators.cpu_execution_accelerator] == ["openvino"]
    assert not cpu.optimization.execution_accelerators.gpu_execution_accelerator
    assert cpu.parameters["intra_op_thread_count"].string_value == "1"


def test_where_no_triton_venv_exists_the_server_says_why(tmp_path, monkeypatch):
    """The server tests skip with this reason where pytriton's venv is absent."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    from triton_load import TritonServer, TritonUnavailable

    with pytest.raises(TritonUnavailable, match=r"no Triton venv at .*nowhere \(make triton-venv installs"):
        TritonServer([tmp_path], venv=tmp_path / "nowhere").__enter__()
