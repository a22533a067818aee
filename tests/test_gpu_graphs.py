"""The bundle's GPU graphs, checked on the CPU: TensorRT graphs hold standard ONNX ops only and match
PyTorch, the QDQ TensorRT graph has no quantized bias, every TensorRT graph has a profile for every
input, the CUDA graph takes the 1-D mask index, and the CPU INT8 choice is what it was."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from edgebert.bundle import INPUT_NAMES, int8_graphs, model_path, read_manifest
from edgebert.errors import ConfigError
from edgebert.exporters import ExportConfig
from edgebert.graph.ops import quantized_biases
from edgebert.model import load_model
from edgebert.runtime import EdgeSession
from edgebert.runtime.trt_profile import TrtProfile
from runtime_fixtures import GPU_PROFILE, tiny_gpu_bundle

GPU_KEYS = {"fp32-trt": "onnx/model.trt.onnx", "int8-trt": "onnx/model.int8.trt.onnx",
            "fp32-cuda": "onnx/model.cuda.onnx", "fp16-cuda": "onnx/model.fp16.cuda.onnx"}     # beside the CPU graphs


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    model_dir, bundle_dir = tiny_gpu_bundle(tmp_path_factory.getbasetemp())
    return model_dir, bundle_dir, read_manifest(bundle_dir)


def _padded_feeds(batch: int, seq: int, vocab: int, seed: int = 5) -> dict[str, np.ndarray]:
    """Right padding, uneven lengths, two segments: a shape none of the export's validation cases used."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, vocab, (batch, seq)).astype(np.int64)
    mask = np.zeros_like(ids)
    types = np.zeros_like(ids)
    for row in range(batch):
        n = seq - 2 * row
        mask[row, :n] = 1
        types[row, n // 2:n] = 1
    ids[mask == 0] = 0
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def _torch_hidden(model_dir, feeds) -> np.ndarray:
    model = load_model(model_dir, "BertModel").eval()
    with torch.no_grad():
        out = model(*(torch.from_numpy(feeds[k]) for k in INPUT_NAMES))
    return out.last_hidden_state.numpy()


def _run(path, feeds) -> np.ndarray:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(["last_hidden_state"], feeds)[0]


def test_manifest_lists_every_gpu_graph_with_its_kind_and_providers(bundle):
    _, bundle_dir, manifest = bundle
    models = manifest["models"]
    assert {k: models[k]["file"] for k in GPU_KEYS} == GPU_KEYS
    assert [models[k]["graph"] for k in GPU_KEYS] == ["standard-ops", "standard-ops", "fused-gpu", "fused-gpu"]
    assert [models[k]["providers"] for k in GPU_KEYS] == [["tensorrt"], ["tensorrt"], ["cuda"], ["cuda"]]
    assert [models[k]["precision"] for k in GPU_KEYS] == ["fp32", "int8", "fp32", "fp16"]
    assert models["fp32"]["providers"] == ["cpu", "cuda"] and models["int8"]["providers"] == ["cpu"]
    assert set(manifest["files"]) >= set(GPU_KEYS.values())
    assert manifest["tensorrt_profile"] == {"min": [1, 1], "opt": [4, 32], "max": [16, 128]}


def test_tensorrt_graph_holds_only_standard_ops_and_matches_pytorch(bundle):
    model_dir, bundle_dir, manifest = bundle
    entry = manifest["models"]["fp32-trt"]
    graph = onnx.load(str(model_path(bundle_dir, key="fp32-trt"))).graph
    assert {n.domain for n in graph.node} <= {"", "ai.onnx"}               # no com.microsoft op
    assert not {"Attention", "SkipLayerNormalization", "EmbedLayerNormalization"} & {n.op_type for n in graph.node}
    assert entry["op_domains"] == ["ai.onnx"]
    assert entry["validation"]["tolerance"] == 1e-4 and entry["validation"]["max_abs_diff"] <= 1e-4
    feeds = _padded_feeds(5, 11, manifest["config"]["vocab_size"])
    diff = np.abs(_run(model_path(bundle_dir, key="fp32-trt"), feeds) - _torch_hidden(model_dir, feeds))
    assert diff[feeds["attention_mask"].astype(bool)].max() <= 1e-4


def test_tensorrt_int8_graph_is_qdq_s8s8_with_float_biases(bundle):
    _, bundle_dir, manifest = bundle
    path = model_path(bundle_dir, key="int8-trt")
    model = onnx.load(str(path))
    graph = model.graph
    assert {n.domain for n in graph.node} <= {"", "ai.onnx"}
    ops = [n.op_type for n in graph.node]
    assert ops.count("QuantizeLinear") >= 4 and ops.count("DequantizeLinear") >= 8
    assert quantized_biases(model) == []                                   # no int32 bias DequantizeLinear
    inits = {i.name: i for i in graph.initializer}
    assert not [i for i in graph.initializer if i.data_type == onnx.TensorProto.INT32]
    gemm = [n for n in graph.node if n.op_type == "Gemm"]                  # the pooler: its bias stays float
    assert gemm and all(inits[n.input[2]].data_type == onnx.TensorProto.FLOAT for n in gemm)
    zero_points = [inits[n.input[2]] for n in graph.node if n.op_type == "QuantizeLinear"]
    assert zero_points and all(z.data_type == onnx.TensorProto.INT8 for z in zero_points)
    entry = manifest["models"]["int8-trt"]
    quant = entry["quantization"]
    assert quant["format"] == "QDQ" and quant["bias"] == "float (not quantized)" and quant["quantized_biases"] == 0
    assert entry["target"] == "tensorrt" and entry["accuracy"]["mean"] > 0.99


def test_every_tensorrt_graph_has_a_profile_for_every_input(bundle):
    _, _, manifest = bundle
    want = TrtProfile.parse(GPU_PROFILE)
    for key in ("fp32-trt", "int8-trt"):
        profile = manifest["models"][key]["tensorrt_profile"]
        assert list(profile) == list(INPUT_NAMES)
        assert all(v == {"min": [1, 1], "opt": [4, 32], "max": [16, 128]} for v in profile.values())
        assert TrtProfile.from_manifest(profile) == want


def test_cuda_graph_takes_the_one_dimensional_mask_index(bundle):
    model_dir, bundle_dir, manifest = bundle

    def mask_inputs(path):
        graph = onnx.load(str(path)).graph
        eln = next(n for n in graph.node if n.op_type == "EmbedLayerNormalization")
        return eln, [n.input[3] for n in graph.node if n.op_type == "Attention"]

    eln, masks = mask_inputs(model_path(bundle_dir, key="fp32-cuda"))
    assert len(masks) == 2 and set(masks) == {eln.output[1]}             # EmbedLayerNorm's mask index (1-D)
    cpu_eln, cpu_masks = mask_inputs(model_path(bundle_dir))
    assert cpu_eln.output[1] not in cpu_masks                             # the CPU graph keeps the raw 2-D mask
    entry = manifest["models"]["fp32-cuda"]
    assert entry["validation"]["max_abs_diff"] <= 1e-4 and entry["fused_ops"]["Attention"] == 2
    assert "1-D mask index" in entry["attention_mask"]
    feeds = _padded_feeds(4, 13, manifest["config"]["vocab_size"])       # right padding: what the runtime sends
    diff = np.abs(_run(model_path(bundle_dir, key="fp32-cuda"), feeds) - _torch_hidden(model_dir, feeds))
    assert diff[feeds["attention_mask"].astype(bool)].max() <= 1e-4
    fp16 = manifest["models"]["fp16-cuda"]
    assert fp16["structure"]["ok"] and fp16["keep_io_types"] and fp16["graph"] == "fused-gpu"
    assert fp16["validation"]["mode"] == "cpu" and fp16["validation"]["max_abs_diff"] <= 2e-2


def test_cpu_int8_choice_is_unchanged_by_the_tensorrt_graph(bundle):
    _, bundle_dir, manifest = bundle
    assert list(int8_graphs(manifest)) == ["int8"]                       # int8-trt is not a CPU graph
    session = EdgeSession(bundle_dir, provider="cpu", precision="int8", threads=1)
    assert session.model_file.name == "model_quantized.onnx" and session.int8_choice.target == "portable"
    fp32 = EdgeSession(bundle_dir, provider="cpu", precision="fp32", threads=1)
    assert fp32.model_file.name == "model.onnx"
    texts = ["a charming and moving film", "the worst movie of the year"]
    cos = (session.embed(texts) * fp32.embed(texts)).sum(axis=1)
    assert cos.min() > 0.99


def test_export_config_rejects_bad_gpu_combinations(tmp_path):
    ok = dict(model_dir=tmp_path / "m", out_dir=tmp_path / "o")
    with pytest.raises(ConfigError, match="need --tensorrt"):
        ExportConfig(**ok, trt_profile="min=1x1,opt=8x128,max=32x128")
    with pytest.raises(ConfigError, match="BATCHxSEQUENCE"):
        ExportConfig(**ok, tensorrt=True, trt_profile="min=1x1,opt=8,max=32x128")
    with pytest.raises(ConfigError, match="lacks max"):
        ExportConfig(**ok, tensorrt=True, trt_profile="min=1x1,opt=8x128")
    with pytest.raises(ConfigError, match="min 8 <= opt 4"):
        ExportConfig(**ok, tensorrt=True, trt_profile="min=8x1,opt=4x16,max=32x128")
    with pytest.raises(ConfigError, match="exceeds the max sequence length 64"):
        ExportConfig(**ok, tensorrt=True, max_sequence_length=64, trt_profile="min=1x1,opt=8x64,max=32x128")
    static = ExportConfig(**ok, int8=True, int8_mode="static")
    assert static.tensorrt                                                  # static QDQ INT8 is TensorRT's graph
    assert ExportConfig(**ok, tensorrt=True).tensorrt_profile(128) == TrtProfile((1, 1), (8, 128), (32, 128))
    with pytest.raises(ConfigError, match="exceeds the model's max sequence length 64"):
        ExportConfig(**ok, tensorrt=True, trt_profile="min=1x1,opt=8x64,max=32x128").tensorrt_profile(64)
