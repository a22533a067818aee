"""The outlier-channel split for CPU INT8: exact in fp32, finds planted outlier channels, keeps their
MatMuls float, cuts the INT8 error, and (calibrated scales) folds the float part onto the INT8 weight's
rows with no float weight copy. A tiny seeded model with one planted outlier channel."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from edgebert.bundle import model_path
from edgebert.errors import ConfigError
from edgebert.exporters import ExportConfig, export_bundle
from edgebert.graph.ops import weight_node_inputs
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
from edgebert.quantization.activations import ChannelStats
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
    fused_inits = {i.name: onnx.numpy_helper.to_array(i) for i in onnx.load(str(fused)).graph.initializer}
    assert np.array_equal(inits[main.input[1]], fused_inits[main.input[1]])   # the main weight is whole
    assert inits[f"{ffn_in}/outlier_keep"][plan[ffn_in]].tolist() == [0.0] * len(plan[ffn_in])  # its input masked
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
    per_call = dict(int8_targets=("x86-vnni",), activation_scales="per-call", max_accuracy_loss=0.5, smooth_alpha=0)
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
    # no --calib: the built-in text calibrates; the recipe's smoothing (alpha 0.75) moves the planted channel into
    # the weights first (exact: validated), so the split (recipe ratio 3) no longer needs it
    builtin = export_bundle(ExportConfig(model_dir=model_dir, out_dir=work / "int8-builtin", int8=True,
                                         max_accuracy_loss=0.5, validation_batch_sizes=(1,),
                                         validation_seq_lens=(7,))).manifest
    split = builtin["models"]["int8"]["quantization"]["outlier_split"]
    smoothing = split["smoothing"]
    assert smoothing["applied"] is True and smoothing["alpha"] == 0.75 and smoothing["layernorms"] >= 1
    wide = smoothing["channels_over_3x_median"]
    print("channels over 3x the median, before / after smoothing:", wide)
    assert wide["before"] >= 1 and wide["after"] < wide["before"]
    assert split["ratio"] == 3.0 and split["max_abs_diff"] < 1e-4
    assert OUTLIER not in split["float_channels"].get("/model/layer.0/intermediate/dense/MatMul", [])
    assert builtin["models"]["int8"]["recipe"]["smooth_alpha"] == 0.75
    assert builtin["models"]["int8"]["quantization"]["calibration"]["calibration"]["source"] == "built-in calibration text"


@pytest.mark.parametrize("ratio", [1.0, 0.5, -2, True])
def test_outlier_ratio_must_be_off_or_above_one(ratio):
    with pytest.raises(ConfigError, match="outlier ratio"):
        Int8Config(outlier_ratio=ratio)


def _split_with_stats(planted, calib, work, name: str, target: str):
    """(fused graph, its split at ratio 6 written to ``work/name``, the split's plan, the target's recipe and
    the calibration ranges the quantizer needs)."""
    fused = model_path(planted)
    batches = _batches(planted, calib)
    plan = split_outliers(fused, work / name, batches, 6.0)
    recipe = TARGETS[target]
    stats = ChannelStats.collect(fused, batches, weight_node_inputs(fused, (*recipe.op_types, "Gemm")))
    return fused, work / name, plan, recipe, stats


def test_calibrated_graph_folds_the_float_part_onto_the_int8_rows(planted, calib, work):
    """Calibrated scales: the outlier channels clip in the INT8 product and the float MatMul carries only
    the clipped-off rest, times rows taken from the INT8 weight: no float weight rows are stored, and the
    split still cuts the error of the same recipe without it."""
    fused, split, plan, recipe, stats = _split_with_stats(planted, calib, work, "split-fold.onnx", "x86-vnni")
    folded = DynamicInt8Quantizer(split, recipe, stats, plan)
    plain = DynamicInt8Quantizer(fused, recipe, stats)
    got = folded.quantize(work / "fold.int8.onnx", exclude=folded.tables)
    ref = plain.quantize(work / "nofold.int8.onnx", exclude=plain.tables)
    graph = onnx.load(str(got)).graph
    names = {n.name for n in graph.node}
    ffn_in = "/model/layer.0/intermediate/dense/MatMul"
    assert {f"{ffn_in}/outlier_Clip", f"{ffn_in}/outlier_Sub", f"{ffn_in}/outlier_rows_Gather"} <= names
    assert not any(i.name.endswith("/outlier_weight") for i in graph.initializer)    # no float weight rows
    clip = next(n for n in graph.node if n.name == f"{ffn_in}/outlier_Clip")
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in graph.initializer}
    low, high = float(inits[clip.input[1]]), float(inits[clip.input[2]])
    assert low <= 0 <= high and high - low > 0
    probe = AccuracyProbe("embed", fused, _batches(planted, calib))
    loss_fold, loss_plain = probe.measure(got).loss, probe.measure(ref).loss
    assert loss_fold < 0.5 * loss_plain, (loss_plain, loss_fold)
    assert not graph.value_info


def test_stored_graph_is_compact_and_computes_what_the_plain_one_does(planted, calib, work, monkeypatch):
    """``quantization.storage``: float16 weight scales read through a Cast, no all-zero zero points, no
    inferred shapes; the outputs move by no more than the scales' float16 rounding allows."""
    import edgebert.quantization.dynamic as dynamic

    fused, _, _, recipe, stats = _split_with_stats(planted, calib, work, "split-storage.onnx", "portable")
    batches = _batches(planted, calib)
    quantizer = DynamicInt8Quantizer(fused, recipe, stats)
    compact = quantizer.quantize(work / "compact.int8.onnx")
    figures = quantizer.last_storage
    monkeypatch.setattr(dynamic, "compact_storage", lambda path: {})
    plain = DynamicInt8Quantizer(fused, recipe, stats).quantize(work / "plain-storage.int8.onnx")
    graph = onnx.load(str(compact)).graph
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in graph.initializer}
    casts = {n.output[0]: n.input[0] for n in graph.node if n.op_type == "Cast" and n.input[0] in inits}
    weighted = [n for n in graph.node if n.op_type in ("MatMulIntegerToFloat", "QAttention")]
    assert weighted and figures["zero_points_dropped"] == len(weighted) and figures["scales_float16"] >= len(weighted) - 1
    for n in weighted:
        zero_point = {"MatMulIntegerToFloat": 5, "QAttention": 7}[n.op_type]
        assert len(n.input) <= zero_point or not n.input[zero_point]                    # no weight zero point
        scale = n.input[{"MatMulIntegerToFloat": 3, "QAttention": 4}[n.op_type]]
        assert scale in inits or inits[casts[scale]].dtype == np.float16
    assert not graph.value_info and figures["value_info"] > 0
    assert compact.stat().st_size < plain.stat().st_size
    feeds = next(iter(batches))
    a = cpu_session(compact).run(["last_hidden_state"], feeds)[0]
    b = cpu_session(plain).run(["last_hidden_state"], feeds)[0]
    assert np.abs(a - b).max() <= 2e-3 * np.abs(b).max(), np.abs(a - b).max()


def test_biases_move_into_the_int8_products(planted, calib, work, monkeypatch):
    """``quantization.bias_fold``: no bias Add after a MatMulIntegerToFloat and no BiasGelu in a calibrated
    graph, every INT8 MatMul but the pooler's carries its bias; the outputs equal the unfolded graph's up to
    float rounding."""
    import edgebert.quantization.scales as scales

    monkeypatch.setattr(scales, "tanh_gelus", lambda model: 0)       # the erf form: quantization.gelu_form
    fused, split, plan, recipe, stats = _split_with_stats(planted, calib, work, "split-bias.onnx", "portable")
    batches = _batches(planted, calib)
    folded = DynamicInt8Quantizer(split, recipe, stats, plan)
    got = folded.quantize(work / "bias.int8.onnx")
    monkeypatch.setattr(scales, "fold_biases", lambda model: 0)
    ref = DynamicInt8Quantizer(split, recipe, stats, plan).quantize(work / "nobias.int8.onnx")
    graph, before = onnx.load(str(got)).graph, onnx.load(str(ref)).graph
    mms = [n for n in graph.node if n.op_type == "MatMulIntegerToFloat"]
    with_bias = [n for n in mms if len(n.input) > 6 and n.input[6]]
    layers = 2
    assert len(with_bias) == 3 * layers + 1 == folded.last_scales["biases_folded"]   # out-proj, FFN in/out, pooler
    ops = lambda g: [n.op_type for n in g.node]
    assert ops(graph).count("BiasGelu") == 0 and ops(graph).count("Gelu") == ops(before).count("BiasGelu") == layers
    assert ops(before).count("Add") - ops(graph).count("Add") == 2 * layers + 1
    feeds = next(iter(batches))
    a, b = (cpu_session(p).run(["last_hidden_state"], feeds)[0] for p in (got, ref))
    assert np.abs(a - b).max() <= 1e-4 * max(1.0, np.abs(b).max())


def test_a_split_matmul_the_gate_keeps_float_keeps_its_exact_float_part(planted, calib, work):
    """The gate may keep a split MatMul float: no INT8 product clips its input then, so its float part must stay
    the exact ``x[o] @ W[o]`` (float rows, input masked) while the other splits fold; the graph stays as accurate
    as with every node INT8 (the float node only removes error)."""
    fused, split, plan, recipe, stats = _split_with_stats(planted, calib, work, "split-kept.onnx", "x86-vnni")
    ffn_in = "/model/layer.0/intermediate/dense/MatMul"
    assert ffn_in in plan
    quantizer = DynamicInt8Quantizer(split, recipe, stats, plan)
    kept = quantizer.quantize(work / "kept.int8.onnx", exclude=[ffn_in, *quantizer.tables])
    every = quantizer.quantize(work / "every.int8.onnx", exclude=quantizer.tables)
    graph = onnx.load(str(kept)).graph
    nodes = {n.name: n for n in graph.node}
    assert nodes[ffn_in].op_type == "MatMul" and nodes[ffn_in].input[0] == f"{ffn_in}/outlier_masked"
    assert nodes[f"{ffn_in}/outlier_float_MatMul"].input == [f"{ffn_in}/outlier_x", f"{ffn_in}/outlier_weight"]
    assert f"{ffn_in}/outlier_Clip" not in nodes
    folded = [p for p in plan if p != ffn_in and f"{p}/outlier_Clip" in nodes]
    assert folded == [p for p in plan if p != ffn_in]
    probe = AccuracyProbe("embed", fused, _batches(planted, calib))
    assert probe.measure(kept).loss <= probe.measure(every).loss * 1.05 + 1e-9


def test_the_gate_sends_gelu_back_to_erf_before_keeping_a_node_float(planted, calib, work):
    """``quantization.gelu_form`` is speed only: when the all-INT8 graph with tanh GELUs misses the budget, the
    gate first makes it again with the erf form (``DynamicInt8Quantizer.erf_gelus``) and ranks nodes only if
    that misses too. The probe here charges a loss for a FastGelu in the graph (the planted model's real
    losses are ~2e-6 either way), so the gate's path is known."""
    from edgebert.quantization import quantize_with_guard
    from edgebert.runtime.fidelity import Fidelity

    class GeluProbe:
        metric = "cosine"

        def measure(self, path, max_sentences=None):
            loss = 0.02 if op_type_counts(path).get("FastGelu") else 0.0
            return Fidelity("cosine", 1.0 - loss, 1.0 - loss, 8, loss, loss)

    fused, split, plan, recipe, stats = _split_with_stats(planted, calib, work, "split-gelu.onnx", "portable")
    quantizer = DynamicInt8Quantizer(split, recipe, stats, plan)
    steps = []
    out = work / "gated.int8.onnx"
    result = quantize_with_guard(quantizer, out, GeluProbe(), 0.01, on_step=steps.append, fallback=quantizer.erf_gelus)
    assert result.excluded == [] and result.accuracy.loss == 0.0 and result.before is None   # no node ranked
    assert quantizer.gelu_fallback == {"tanh_gelus": 1, "tanh_loss": 0.02}       # one coarse-step GELU of 2
    assert steps == ["INT8 cosine loss 0.02000 > budget 0.01: 1 GELU(s) back to the erf form, loss 0.00000"]
    counts = op_type_counts(out)
    assert "FastGelu" not in counts and counts["Gelu"] == 2 and quantizer.last_scales["gelus_tanh"] == 0
    assert quantizer.erf_gelus(result.accuracy) is None                            # once only
    # within the budget, the tanh form stays
    quantizer = DynamicInt8Quantizer(split, recipe, stats, plan)
    result = quantize_with_guard(quantizer, out, GeluProbe(), 0.05, fallback=quantizer.erf_gelus)
    assert quantizer.gelu_fallback is None and op_type_counts(out).get("FastGelu") == 1


def test_smoothing_is_exact_in_fp32_moves_the_planted_channel_and_copies_shared_tensors(planted, calib, work):
    from edgebert.quantization.smoothing import SMOOTH_SUFFIX, fold_smoothing, smooth_plan

    fused = model_path(planted)
    model = onnx.load(str(fused))
    plan = smooth_plan(model)
    ffn_ln = "/model/layer.0/attention/output/LayerNorm/LayerNormalization_output_0"
    assert ffn_ln in plan and "/model/layer.0/intermediate/dense/MatMul" in [u.name for u in plan[ffn_ln]["users"]]
    assert not {o.name for o in model.graph.output} & set(plan)           # a graph output is never scaled
    stats = ChannelStats.collect(fused, _batches(planted, calib), list(plan))
    smoothed = work / "smoothed.onnx"
    figures, derived = fold_smoothing(fused, smoothed, stats, 0.75)
    wide = [t for t in plan if (stats.absmax(t) > 3 * np.median(stats.absmax(t))).any()]
    assert ffn_ln in wide and figures["layernorms"] == len(wide) and figures["candidates"] == len(plan)
    assert figures["channels_over_3x_median"]["after"] == 0
    out = onnx.load(str(smoothed))
    muls = [n for n in out.graph.node if n.name.endswith(SMOOTH_SUFFIX)]
    assert sorted(n.input[0] for n in muls) == sorted(wide)          # a LayerNorm with no wide channel: untouched
    # the untrained LayerNorms share their ones / zeros in the exported graph: each smoothed one got its own copy
    readers: dict[str, int] = {}
    for n in out.graph.node:
        for i in n.input:
            readers[i] = readers.get(i, 0) + 1
    assert all(readers[n.input[k]] == 1 for n in out.graph.node if n.output[0] in wide for k in (1, 2))
    flat = ChannelStats(low={t: -np.ones_like(stats.low[t]) for t in plan},
                        high={t: np.ones_like(stats.high[t]) for t in plan})
    assert fold_smoothing(fused, work / "none.onnx", flat, 0.75)[0]["applied"] is False    # nothing wide: nothing done
    assert not (work / "none.onnx").exists()
    after = ChannelStats.collect(smoothed, _batches(planted, calib), list(plan))
    for t in plan:          # the ranges fold_smoothing derives (no second calibration pass) are the graph's own
        assert np.allclose(derived.low[t], after.low[t], rtol=1e-4, atol=1e-5)
        assert np.allclose(derived.high[t], after.high[t], rtol=1e-4, atol=1e-5)
    wide = after.absmax(ffn_ln)
    assert wide[OUTLIER] < 3 * np.median(wide) < stats.absmax(ffn_ln)[OUTLIER]     # 40x wide before
    feeds = next(iter(_batches(planted, calib)))                                    # padded rows included
    ref = cpu_session(fused).run(["last_hidden_state"], feeds)[0]
    got = cpu_session(smoothed).run(["last_hidden_state"], feeds)[0]
    assert np.abs(ref - got).max() < 1e-4 * max(1.0, np.abs(ref).max())
    with pytest.raises(ValueError, match="alpha"):
        fold_smoothing(fused, work / "bad.onnx", stats, 1.0)
    with pytest.raises(ConfigError, match="smoothing alpha"):
        Int8Config(smooth_alpha=1.5)
    with pytest.raises(ConfigError, match="smoothing alpha"):
        TARGETS["portable"].replace(smooth_alpha=-0.1)
