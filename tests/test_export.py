"""ONNX export: dynamic axes, fusion gate, manifest + hashes, typed validation errors, atomic bundles,
one-line CLI errors. Tiny seeded models (hidden 64, 2 layers); the bundles are built once per module."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from edgebert.bundle import model_path
from edgebert.errors import BundleError, CheckpointError, ConfigError, ValidationError
from edgebert.exporters import ExportConfig, export_bundle, read_manifest, verify_bundle
from edgebert.exporters.config import default_task
from edgebert.exporters.fusion import check_fusion, fusion_shortfalls
from edgebert.exporters.onnx_export import export_onnx, prepare
from edgebert.exporters.validate import make_cases, torch_reference, validate_graph
from edgebert.graph.ops import op_type_counts
from export_fixtures import make_calib_text, make_model_dir

LAYERS = 2


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("export")


@pytest.fixture(scope="module")
def embed_bundle(work) -> tuple[Path, Path, dict]:
    """fp32 + INT8 (portable target: per-channel 7-bit weights, QAttention, calibrated scales) + FP16 of a
    tiny BertModel; 40 calibration texts, the next 40 held out for the gate."""
    model_dir = make_model_dir(work / "embed_model", "BertModel")
    calib = make_calib_text(work / "calib.txt", n=80)
    result = export_bundle(ExportConfig(model_dir=model_dir, out_dir=work / "embed_bundle", int8=True,
                                        calib=calib, calib_size=40, gate_size=40, fp16=True))
    return model_dir, result.bundle_dir, result.manifest


def _ort(path: Path) -> ort.InferenceSession:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def _feeds(batch: int, seq: int, vocab: int, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, vocab, (batch, seq)).astype(np.int64)
    mask = np.ones_like(ids)
    for row in range(1, batch):            # right padding, uneven lengths
        mask[row, max(1, seq - 3 * row):] = 0
    ids[mask == 0] = 0
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}


# --------------------------------------------------------------------------- graph properties
def test_fused_graph_holds_attention_gelu_and_embedlayernorm_and_fast_cpu_layernorms(embed_bundle):
    _, bundle, manifest = embed_bundle
    counts = op_type_counts(model_path(bundle))
    assert counts["Attention"] == LAYERS
    assert counts.get("BiasGelu", 0) + counts.get("Gelu", 0) == LAYERS
    assert counts["EmbedLayerNormalization"] == 1
    assert "Softmax" not in counts
    # the optimizer fused every residual + LayerNorm (the gate), then the CPU pass unfused them again
    fp32 = manifest["models"]["fp32"]
    assert fp32["fused_ops"]["Attention"] == LAYERS and fp32["fused_ops"]["SkipLayerNormalization"] == 2 * LAYERS
    assert fp32["cpu_passes"] == {"unfuse_skip_layernorm": 2 * LAYERS}
    assert "SkipLayerNormalization" not in counts and counts["LayerNormalization"] == 2 * LAYERS
    # the fp16 graph (for the GPU) is converted from the optimizer's graph, before the CPU pass
    fp16 = op_type_counts(bundle / manifest["models"]["fp16"]["file"])
    assert fp16["SkipLayerNormalization"] == 2 * LAYERS and "LayerNormalization" not in fp16


def test_axes_are_dynamic_and_untraced_shapes_match_pytorch(embed_bundle):
    model_dir, bundle, manifest = embed_bundle
    graph = onnx.load(str(model_path(bundle))).graph
    for value in list(graph.input):
        assert [d.dim_param for d in value.type.tensor_type.shape.dim] == ["batch", "sequence"]
    out_dims = {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim] for v in graph.output}
    assert out_dims == {"last_hidden_state": ["batch", "sequence", 64], "pooler_output": ["batch", 64]}
    from edgebert.model import load_model

    model = prepare(load_model(model_dir, "BertModel"), "embed")
    sess = _ort(model_path(bundle))
    for batch, seq in ((5, 11), (2, 100), (1, 128)):   # traced at (2, 16)
        feeds = _feeds(batch, seq, manifest["config"]["vocab_size"])
        hidden, pooled = sess.run(None, feeds)
        with torch.no_grad():
            ref_h, ref_p = model(*(torch.from_numpy(feeds[k]) for k in ("input_ids", "attention_mask",
                                                                        "token_type_ids")))
        real = feeds["attention_mask"].astype(bool)
        assert hidden.shape == (batch, seq, 64) and pooled.shape == (batch, 64)
        assert np.abs(hidden - ref_h.numpy())[real].max() < 1e-4
        assert np.abs(pooled - ref_p.numpy()).max() < 1e-4
    # the fused Attention reads the raw 2-D mask: left padding is as correct as right padding
    feeds = _feeds(3, 20, manifest["config"]["vocab_size"])
    feeds = {k: v[:, ::-1].copy() for k, v in feeds.items()}
    hidden, pooled = sess.run(None, feeds)
    with torch.no_grad():
        ref_h, _ = model(*(torch.from_numpy(feeds[k]) for k in ("input_ids", "attention_mask", "token_type_ids")))
    assert np.abs(hidden - ref_h.numpy())[feeds["attention_mask"].astype(bool)].max() < 1e-4


def test_export_validation_figures_cover_required_shapes(embed_bundle):
    _, _, manifest = embed_bundle
    val = manifest["models"]["fp32"]["validation"]
    shapes = {(c["batch"], c["sequence"]) for c in val["cases"]}
    assert {(b, s) for b in (1, 3, 8) for s in (7, 64, 128)} <= shapes
    assert any(len(set(c["lengths"])) > 1 for c in val["cases"])          # uneven, padded
    assert val["tolerance"] == 1e-4 and val["max_abs_diff"] <= 1e-4
    assert set(val["per_output"]) == {"last_hidden_state", "pooler_output"}


def test_int8_dynamic_quantizes_every_matmul_and_attention(embed_bundle):
    _, bundle, manifest = embed_bundle
    counts = op_type_counts(model_path(bundle, "int8"))
    assert counts["QAttention"] == LAYERS
    # calibrated scales: every weight MatMul is one MatMulIntegerToFloat fed by a fixed-scale QuantizeLinear
    assert counts.get("MatMulIntegerToFloat", 0) == 3 * LAYERS + 1      # 3 per layer + pooler Gemm->MatMul
    assert counts["QuantizeLinear"] == 4 * LAYERS + 1                      # + the QAttention inputs
    assert not {"MatMulInteger", "DynamicQuantizeLinear", "Attention"} & set(counts)
    q = manifest["models"]["int8"]["quantization"]
    assert counts.get("MatMul", 0) == q["outlier_split"].get("nodes", 0)   # float: only the outlier columns
    assert q["op_counts"] == counts and q["mode"] == "dynamic" and q["per_channel"] is True
    assert q["target"] == "portable" and q["reduce_range"] is True and q["weight_type"] == "int8"
    assert q["quantized_nodes"] == q["candidate_nodes"] == 4 * LAYERS + 1 + 2      # + the pooler, 2 tables
    assert q["calibrated_scales"] == {"tensors": 4 * LAYERS + 1, "fused_matmuls": 3 * LAYERS + 1,
                                      "biases_folded": 3 * LAYERS + 1,     # every bias into its INT8 product
                                      "gelus_tanh": counts.get("FastGelu", 0)}   # quantization.gelu_form
    assert counts.get("Gelu", 0) + counts.get("FastGelu", 0) == LAYERS
    entry = manifest["models"]["int8"]
    assert entry["precision"] == "int8" and entry["target"] == "portable"
    assert entry["requires"]["u8s8_exact"] is False
    acc = entry["accuracy"]
    assert acc["metric"] == "cosine" and acc["n"] == 40 and 0.99 < acc["mean"] <= 1.0 + 1e-6
    assert acc["held_out"]["skip"] == 40 and acc["max_accuracy_loss"] == 0.005    # the default embed budget
    assert entry["batch_invariance"]["max_1_minus_cos"] < 1e-6 and entry["batch_invariance"]["texts"] == 8


def test_fp16_weights_are_half_and_io_stays_float(embed_bundle):
    _, bundle, manifest = embed_bundle
    entry = manifest["models"]["fp16"]
    assert entry["structure"]["ok"] and entry["structure"]["fp16_weight_matrices"] >= 4 * LAYERS
    assert entry["validation"]["mode"] == "cpu"
    assert entry["validation"]["max_abs_diff"] <= 2e-2
    out = _ort(model_path(bundle, "fp16")).run(None, _feeds(2, 9, manifest["config"]["vocab_size"]))
    assert out[0].dtype == np.float32


def test_manifest_schema_and_hashes(embed_bundle):
    model_dir, bundle, manifest = embed_bundle
    assert read_manifest(bundle) == manifest == verify_bundle(bundle)
    assert manifest["format"] == "edgebert-bundle" and manifest["version"] == 2
    assert {k: m["precision"] for k, m in manifest["models"].items()} == {"fp32": "fp32", "int8": "int8", "fp16": "fp16"}
    assert set(manifest["export_host"]) == {"arch", "kind", "flags", "u8s8", "cpu"}
    assert manifest["task"] == "embed" and manifest["source"]["architecture"] == "BertModel"
    assert manifest["config"]["num_hidden_layers"] == LAYERS and manifest["max_sequence_length"] == 128
    assert manifest["tokenizer"] == {"file": "tokenizer.json", "lowercase": True, "pad_id": 0, "cls_id": 2,
                                     "sep_id": 3, "mask_id": 4, "unk_id": 1,
                                     "vocab_size": manifest["config"]["vocab_size"],
                                     "max_id": manifest["config"]["vocab_size"] - 1,     # the tokenizer's highest id
                                     "max_id_of": manifest["files"]["tokenizer.json"]}
    assert [i["name"] for i in manifest["inputs"]] == ["input_ids", "attention_mask", "token_type_ids"]
    assert manifest["outputs"][0] == {"name": "last_hidden_state", "dtype": "float32",
                                      "shape": ["batch", "sequence", 64]}
    # a Hugging Face model folder: graphs under onnx/ with the names its loaders look for (exporters.hf_folder)
    assert set(manifest["files"]) == {"onnx/model.onnx", "onnx/model_quantized.onnx", "onnx/model_fp16.onnx",
                                      "tokenizer.json", "config.json", "tokenizer_config.json",
                                      "special_tokens_map.json", "modules.json", "1_Pooling/config.json",
                                      "sentence_bert_config.json", "fp32_reference.npz"}
    assert manifest["fp32_reference"]["n"] == 202 and manifest["fp32_reference"]["metric"] == "cosine"
    assert manifest["tensorrt_profile"] == {"min": [1, 1], "opt": [8, 128], "max": [32, 128]}
    assert manifest["labels"] is None and manifest["opset"] == 17
    saved, source = (json.loads((d / "tokenizer.json").read_text()) for d in (bundle, model_dir))
    assert saved["padding"] is None and saved["truncation"] is None and saved["model"] == source["model"]


def test_result_manifest_is_the_typed_manifest_written_to_disk(embed_bundle):
    from edgebert.bundle import Manifest
    from edgebert.system.environment import versions

    _, bundle, manifest = embed_bundle
    assert isinstance(manifest, Manifest) and manifest.task == "embed"
    assert (bundle / "manifest.json").read_text(encoding="utf-8") == manifest.to_json()
    assert manifest.get_extra("versions") == versions()
    assert list(versions()) == ["onnxruntime", "onnx", "torch", "edgebert", "tokenizers"]
    # the graph's I/O is the manifest's declared I/O (one definition: io_spec)
    graph = onnx.load(str(model_path(bundle))).graph
    assert [v.name for v in graph.input] == manifest.input_names
    assert [v.name for v in graph.output] == manifest.output_names
    assert [manifest.models["int8"].target, manifest.models["int8"].file] == ["portable", "onnx/model_quantized.onnx"]


def test_tampered_or_missing_file_fails_verification(embed_bundle, tmp_path):
    copy = tmp_path / "bundle"
    shutil.copytree(embed_bundle[1], copy)
    data = bytearray(model_path(copy).read_bytes())
    data[len(data) // 2] ^= 0x01
    model_path(copy).write_bytes(bytes(data))
    with pytest.raises(BundleError, match="model.onnx does not match its manifest hash"):
        verify_bundle(copy)
    shutil.copytree(embed_bundle[1], tmp_path / "b2")
    (tmp_path / "b2" / "tokenizer.json").unlink()
    with pytest.raises(BundleError, match="missing"):
        verify_bundle(tmp_path / "b2")


@pytest.mark.parametrize("task,arch,outputs", [
    ("mlm", "BertForMaskedLM", {"logits": ["batch", "sequence", None]}),
    ("cls", "BertForSequenceClassification", {"logits": ["batch", 2]}),
])
def test_task_heads_export_with_their_outputs(work, task, arch, outputs):
    model_dir = make_model_dir(work / f"{task}_model", arch, seed=3)
    manifest = export_bundle(ExportConfig(model_dir=model_dir, out_dir=work / f"{task}_bundle",
                                          validation_batch_sizes=(1, 3), validation_seq_lens=(7, None))).manifest
    assert manifest["task"] == task                       # default task from the architecture
    vocab = manifest["config"]["vocab_size"]
    want = {k: [vocab if d is None else d for d in v] for k, v in outputs.items()}
    assert {o["name"]: o["shape"] for o in manifest["outputs"]} == want
    assert manifest["labels"] == ({"0": "negative", "1": "positive"} if task == "cls" else None)
    assert manifest["models"]["fp32"]["fused_ops"]["Attention"] == LAYERS
    assert manifest["models"]["fp32"]["validation"]["max_abs_diff"] <= 1e-4


# --------------------------------------------------------------------------- errors
def test_sabotaged_graph_raises_validation_error_with_figures(work, tmp_path):
    from edgebert.model import load_model

    wrapped = prepare(load_model(make_model_dir(tmp_path / "m", "BertModel"), "BertModel"), "embed")
    path = export_onnx(wrapped, tmp_path / "raw.onnx", 17)
    model = onnx.load(str(path))
    init = next(i for i in model.graph.initializer if "LayerNorm.weight" in i.name)
    arr = onnx.numpy_helper.to_array(init).copy() * 1.01
    init.CopyFrom(onnx.numpy_helper.from_array(arr, init.name))
    onnx.save(model, str(path))
    cases = make_cases(wrapped.model.config.vocab_size, 128, (1, 3), (7, 64))
    refs = torch_reference(wrapped, cases, ("last_hidden_state", "pooler_output"))
    with pytest.raises(ValidationError) as err:
        validate_graph(path, cases, refs, ("last_hidden_state", "pooler_output"), 1e-4, "export")
    assert err.value.figures["max_abs_diff"] > 1e-3
    assert err.value.figures["tolerance"] == 1e-4


def test_failed_export_leaves_no_bundle_and_keeps_the_old_one(embed_bundle, work, monkeypatch):
    import edgebert.exporters.pipeline as pipeline

    model_dir = embed_bundle[0]
    real = pipeline.torch_reference

    def sabotaged(*args, **kwargs):
        refs = real(*args, **kwargs)
        refs[0]["last_hidden_state"] = refs[0]["last_hidden_state"] + 0.5
        return refs

    monkeypatch.setattr(pipeline, "torch_reference", sabotaged)
    fresh = work / "never_written"
    with pytest.raises(ValidationError) as err:
        export_bundle(ExportConfig(model_dir=model_dir, out_dir=fresh))
    assert err.value.figures["max_abs_diff"] >= 0.49
    assert not fresh.exists()
    assert not [p for p in work.iterdir() if p.name.startswith(".never_written")]
    # an existing bundle survives a failed re-export unchanged
    existing = work / "existing"
    monkeypatch.setattr(pipeline, "torch_reference", real)
    export_bundle(ExportConfig(model_dir=model_dir, out_dir=existing, validation_batch_sizes=(1,),
                               validation_seq_lens=(7,)))
    before = (existing / "manifest.json").read_bytes()
    monkeypatch.setattr(pipeline, "torch_reference", sabotaged)
    with pytest.raises(ValidationError):
        export_bundle(ExportConfig(model_dir=model_dir, out_dir=existing, overwrite=True))
    assert (existing / "manifest.json").read_bytes() == before
    verify_bundle(existing)


def test_fusion_gate_names_what_is_missing(tiny_config):
    good = {"EmbedLayerNormalization": 1, "Attention": 2, "SkipLayerNormalization": 4, "BiasGelu": 2}
    check_fusion(good, tiny_config)
    bad = {**good, "Attention": 0, "SkipLayerNormalization": 3}
    assert fusion_shortfalls(bad, tiny_config) == ["Attention=0 (want 2)", "SkipLayerNormalization=3 (want >= 4)"]
    with pytest.raises(ValidationError) as err:
        check_fusion(bad, tiny_config)
    assert err.value.figures["fused_ops"] == bad


def test_export_config_rejects_bad_combinations(tmp_path):
    calib = make_calib_text(tmp_path / "c.txt")
    ok = dict(model_dir=tmp_path / "m", out_dir=tmp_path / "b")
    with pytest.raises(ConfigError, match="unknown INT8 target 'avx9'"):
        ExportConfig(**ok, int8=True, int8_targets=("avx9",))
    with pytest.raises(ConfigError, match="need --int8"):
        ExportConfig(**ok, int8_targets=("x86-vnni",))
    with pytest.raises(ConfigError, match="unknown task"):
        ExportConfig(**ok, task="ner")
    with pytest.raises(ConfigError, match="opset 11 is outside"):
        ExportConfig(**ok, opset=11)
    with pytest.raises(ConfigError, match="need --int8"):
        ExportConfig(**ok, calib=calib)
    assert ExportConfig(**ok, int8=True, max_accuracy_loss=0.01).int8_config().budget("embed") == 0.01
    assert ExportConfig(**ok, int8=True).int8_config().budget("cls") == 0.01       # the gate is on by default
    assert ExportConfig(**ok, int8=True, int8_mode="static").int8_config().calib is None   # built-in text
    with pytest.raises(ConfigError, match="unknown INT8 mode"):
        ExportConfig(**ok, int8=True, int8_mode="qat")
    assert ExportConfig(**ok, int8=True, int8_mode="static", calib=calib).int8_config().mode == "static"
    assert ExportConfig.preset("cpu-int8", tmp_path / "m", tmp_path / "b").int8
    assert [default_task(a) for a in ("BertModel", "BertForPreTraining", "BertForMaskedLM",
                                      "BertForSequenceClassification", "BertForTokenClassification")
            ] == ["embed", "embed", "mlm", "cls", "token-cls"]
    assert [default_task(a) for a in ("BertForQuestionAnswering", "BertForMultipleChoice")] == ["qa", "multiple-choice"]
    with pytest.raises(ConfigError, match="no export task for architecture BertForNextSentencePrediction"):
        default_task("BertForNextSentencePrediction")


def test_missing_tokenizer_is_a_checkpoint_error(tmp_path):
    model_dir = make_model_dir(tmp_path / "m")
    (model_dir / "tokenizer.json").unlink()
    with pytest.raises(CheckpointError, match="has no tokenizer.json"):
        export_bundle(ExportConfig(model_dir=model_dir, out_dir=tmp_path / "b"))
    assert not (tmp_path / "b").exists()


# --------------------------------------------------------------------------- CLI
def _cli(argv, capsys) -> tuple[int, str, str]:
    from edgebert.cli import main

    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _assert_one_line_error(code: int, err: str, needle: str) -> None:
    assert code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error:") and needle in lines[0]
    assert "Traceback" not in err


def test_cli_missing_model_dir(tmp_path, capsys):
    code, _, err = _cli(["export", str(tmp_path / "nope"), "--out", str(tmp_path / "b")], capsys)
    _assert_one_line_error(code, err, "not found")


def test_cli_unknown_task(tmp_path, capsys):
    model_dir = make_model_dir(tmp_path / "m")
    code, _, err = _cli(["export", str(model_dir), "--out", str(tmp_path / "b"), "--task", "ner"], capsys)
    _assert_one_line_error(code, err, "unknown task 'ner'")


def test_cli_corrupt_checkpoint(tmp_path, capsys):
    model_dir = make_model_dir(tmp_path / "m")
    (model_dir / "model.safetensors").write_bytes(b"\x00garbage" * 10)
    code, _, err = _cli(["export", str(model_dir), "--out", str(tmp_path / "b")], capsys)
    _assert_one_line_error(code, err, "model.safetensors")
    assert not (tmp_path / "b").exists()


def test_cli_export_writes_a_verified_bundle(tmp_path, capsys):
    model_dir = make_model_dir(tmp_path / "m")
    code, out, err = _cli(["export", str(model_dir), "--out", str(tmp_path / "b"), "--opset", "14"], capsys)
    assert code == 0, err
    assert "Attention=2" in out and "max |onnx - torch|" in out
    manifest = verify_bundle(tmp_path / "b")
    assert manifest["opset"] == 14
    assert json.loads((tmp_path / "b" / "manifest.json").read_text())["files"] == manifest["files"]
