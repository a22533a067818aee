"""The outlier-channel split for CPU INT8: exact in fp32, finds planted outlier channels, keeps their
MatMuls float, zeroes their weight rows, and cuts the INT8 error. A tiny seeded model with one planted
outlier channel."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from edgebert.bundle import model_path
from edgebert.errors import ConfigError
from edgebert.exporters import ExportConfig, export_bundle
from edgebert.model import load_model, save_model
from edgebert.quantization import (
    OUTLIER_SUFFIX,
    TARGETS,
    AccuracyProbe,
    DynamicInt8Quantizer,
    Int8Config,
    TextBatches,
    float_only_nodes,
    op_type_counts,
    outlier_channels,
    prepared_tokenizer,
    split_outliers,
)
from edgebert.quantization.accuracy import cpu_session
from export_fixtures import make_calib_text, make_model_dir

OUTLIER = 5          # the planted channel of layer 0's attention-output LayerNorm (feeds FFN-in)


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("outliers")


@pytest.fixture(scope="module")
def calib(work) -> Path:
    return make_calib_text(work / "calib.txt", n=48)


@pytest.fixture(scope="module")
def planted(work) -> Path:
    """A tiny BERT whose layer-0 FFN input has one channel 40x wider than the rest (as real BERTs do)."""
    model_dir = make_model_dir(work / "model", "BertModel", seed=3)
    model = load_model(model_dir, "BertModel")
    with torch.no_grad():
        ln = model.encoder.layer[0].attention.output.LayerNorm
        ln.weight[OUTLIER] *= 40.0
        ln.bias[OUTLIER] += 5.0
    save_model(model, model_dir)
    bundle = export_bundle(ExportConfig(model_dir=model_dir, out_dir=work / "fp32",
                                        validation_batch_sizes=(1, 3), validation_seq_lens=(7, 64)))
    return bundle.bundle_dir


def _batches(bundle: Path, calib: Path, n: int = 48) -> TextBatches:
    return TextBatches(calib, prepared_tokenizer(bundle / "tokenizer.json", 64), n, 16, 64)


def test_outlier_channels_are_those_far_above_the_median():
    absmax = np.array([1.0, 1.2, 0.9, 30.0, 1.1, 7.0])
    assert outlier_channels(absmax, 6.0).tolist() == [3, 5]
    assert outlier_channels(absmax, 10.0).tolist() == [3]
    assert outlier_channels(np.ones(8), 6.0).tolist() == []


def test_split_is_exact_in_fp32_and_finds_the_planted_channel(planted, calib, work):
    fused = model_path(planted)
    split = work / "split.onnx"
    plan = split_outliers(fused, split, _batches(planted, calib), 6.0)
    ffn_in = "/model/layer.0/intermediate/dense/MatMul"
    assert OUTLIER in plan[ffn_in]
    assert all(len(c) <= 3 for c in plan.values())                 # a handful, not a dense fraction
    floats = float_only_nodes(split)
    assert sorted(floats) == sorted(f"{n}{OUTLIER_SUFFIX}" for n in plan)
    before, after = op_type_counts(fused), op_type_counts(split)
    assert after["MatMul"] == before["MatMul"] + len(plan) and after["Gather"] == before.get("Gather", 0) + len(plan)
    model = onnx.load(str(split))
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    main = next(n for n in model.graph.node if n.name == ffn_in)
    assert not inits[main.input[1]][plan[ffn_in]].any()             # the INT8 weight's outlier rows are zero
    feeds = next(iter(_batches(planted, calib)))
    ref = cpu_session(fused).run(["last_hidden_state"], feeds)[0]
    got = cpu_session(split).run(["last_hidden_state"], feeds)[0]
    assert np.abs(ref - got).max() < 1e-4 * max(1.0, np.abs(ref).max())


def test_split_keeps_outlier_matmuls_float_and_cuts_int8_error(planted, calib, work):
    fused = model_path(planted)
    split = work / "split2.onnx"
    split_outliers(fused, split, _batches(planted, calib), 6.0)
    # 8-bit weights, per-call scales: the recipe whose error the outlier channels dominate (the gate's
    # sessions compute exact U8S8 products, so this holds on AVX2 and VNNI CPUs alike)
    recipe = TARGETS["x86-vnni"].replace(activation_scales="per-call")
    quantizer = DynamicInt8Quantizer(split, recipe)
    assert not set(quantizer.candidates()) & set(float_only_nodes(split))
    # embedding tables fp32 in both: their (equal) int8 error would hide the MatMuls' difference
    plain_quantizer = DynamicInt8Quantizer(fused, recipe)
    plain = plain_quantizer.quantize(work / "plain.int8.onnx", exclude=plain_quantizer.tables)
    with_split = quantizer.quantize(work / "split.int8.onnx", exclude=quantizer.tables)
    graph = onnx.load(str(with_split)).graph
    float_matmuls = {n.name for n in graph.node if n.op_type == "MatMul"}
    assert set(float_only_nodes(split)) <= float_matmuls                 # really float
    probe = AccuracyProbe("embed", fused, _batches(planted, calib))
    loss_plain, loss_split = probe.measure(plain).loss, probe.measure(with_split).loss
    assert loss_split < 0.5 * loss_plain, (loss_plain, loss_split)


def test_export_records_the_split_and_validates_it(planted, calib, work):
    model_dir = work / "model"
    per_call = dict(int8_targets=("x86-vnni",), activation_scales="per-call", max_accuracy_loss=0.5)
    manifest = export_bundle(ExportConfig(model_dir=model_dir, out_dir=work / "int8", int8=True, calib=calib,
                                          calib_size=48, outlier_ratio=6.0, **per_call,
                                          validation_batch_sizes=(1, 3), validation_seq_lens=(7, 64))).manifest
    split = manifest["models"]["int8"]["quantization"]["outlier_split"]
    assert split["applied"] is True and split["ratio"] == 6.0 and split["channels"] >= 1
    assert OUTLIER in split["float_channels"]["/model/layer.0/intermediate/dense/MatMul"]
    assert split["max_abs_diff"] < 1e-4
    off = export_bundle(ExportConfig(model_dir=model_dir, out_dir=work / "int8-off", int8=True, calib=calib,
                                     calib_size=48, outlier_ratio=0, **per_call,
                                     validation_batch_sizes=(1,), validation_seq_lens=(7,))).manifest
    assert off["models"]["int8"]["quantization"]["outlier_split"]["applied"] is False
    # distance (1 - mean cosine, 4 significant digits): the loss rounds to 0 at 6 decimals on this model
    assert manifest["models"]["int8"]["accuracy"]["distance"] < off["models"]["int8"]["accuracy"]["distance"]
    # no --calib: the built-in text calibrates, so the split (recipe ratio 3) happens by default
    builtin = export_bundle(ExportConfig(model_dir=model_dir, out_dir=work / "int8-builtin", int8=True,
                                         max_accuracy_loss=0.5, validation_batch_sizes=(1,),
                                         validation_seq_lens=(7,))).manifest
    split = builtin["models"]["int8"]["quantization"]["outlier_split"]
    assert split["applied"] is True and split["ratio"] == 3.0
    assert OUTLIER in split["float_channels"]["/model/layer.0/intermediate/dense/MatMul"]
    assert builtin["models"]["int8"]["quantization"]["calibration"]["calibration"]["source"] == "built-in calibration text"


@pytest.mark.parametrize("ratio", [1.0, 0.5, -2, True])
def test_outlier_ratio_must_be_off_or_above_one(ratio):
    with pytest.raises(ConfigError, match="outlier ratio"):
        Int8Config(outlier_ratio=ratio)


def test_k_extension_rewrite_keeps_the_split_accuracy_without_its_float_matmuls(planted, calib, work):
    """benchmarks/archive/outlier_split_cost.py's K extension (measured and dropped: no faster on onnxruntime): the
    up-projection's outlier channels enter the INT8 product as scaled copies. The rewrite must leave no float
    MatMul / Add on that MatMul and keep the split's accuracy, well clear of the graph without a split."""
    import importlib.util
    import sys

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "archive" / "outlier_split_cost.py"
    spec = importlib.util.spec_from_file_location("outlier_split_cost", path)
    bench = importlib.util.module_from_spec(spec)
    sys.modules["outlier_split_cost"] = bench
    spec.loader.exec_module(bench)
    # embedding tables fp32: their int8 error, equal in all three graphs, would hide the split's effect
    common = dict(model_dir=work / "model", int8=True, int8_targets=("x86-vnni",), calib=calib, calib_size=48,
                  max_accuracy_loss=0.5, validation_batch_sizes=(1,), validation_seq_lens=(7,),
                  int8_embedding_tables=False)
    split_dir, plain_dir = work / "kext-split", work / "kext-plain"
    export_bundle(ExportConfig(out_dir=split_dir, outlier_ratio=6.0, **common))
    export_bundle(ExportConfig(out_dir=plain_dir, outlier_ratio=0, **common))
    split = model_path(split_dir, "int8")
    inputs = bench.k_extension_inputs(split)
    assert inputs, "the planted channel must be split off layer 0's up-projection"
    stats = bench.calibration_ranges(split_dir, split, Int8Config(calib=calib, calib_size=48))
    made = bench.k_extended(split, model_path(split_dir), stats, "float-concat", work / "kext.onnx")
    ffn_in = "/model/layer.0/intermediate/dense/MatMul"
    reps = made["copies"][ffn_in.replace("/model/", "")]
    assert len(reps) >= 1 and max(reps) >= 4                         # the 40x channel needs several copies
    nodes = {n.name: n for n in onnx.load(made["file"]).graph.node}
    assert f"{ffn_in}/outlier_Add" not in nodes and f"{ffn_in}/outlier_float_MatMul" not in nodes
    assert f"{ffn_in}/kext_Concat" in nodes
    probe = AccuracyProbe("embed", model_path(planted), _batches(planted, calib))
    loss_split, loss_kext = probe.measure(split).loss, probe.measure(Path(made["file"])).loss
    loss_plain = probe.measure(model_path(plain_dir, "int8")).loss
    # measured: 1 - cosine 1.07e-7 (split), 1.21e-7 (K extension), 3.28e-7 (no split), 29 copies
    assert loss_kext <= 1.5 * loss_split, (loss_split, loss_kext)
    assert loss_kext < 0.5 * loss_plain, (loss_plain, loss_kext)
