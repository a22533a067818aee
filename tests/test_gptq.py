"""GPTQ for the small graph (``--int4-algorithm gptq``, ``quantization.gptq``): calibrated 4-bit rounding on the
grid onnxruntime's symmetric ``MatMulNBits`` stores (tiny seeded weights and model)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgebert.graph.ops import op_type_counts
from edgebert.quantization.gptq import calibration_hessian, gptq_weight, round_blocks, text_weights
from edgebert.quantization.int4 import Int4Config, small_graph
from export_fixtures import make_calib_text, make_small_bundle


def correlated_inputs(rows: int, k: int, seed: int = 0) -> np.ndarray:
    """Inputs with a few strong shared directions and outlier channels, as a transformer's are."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 4)) @ rng.normal(size=(4, k)) * 2 + rng.normal(size=(rows, k)) * 0.3
    x[:, :3] *= 8
    return x.astype(np.float32)


@pytest.fixture(scope="module")
def weight_and_inputs():
    rng = np.random.default_rng(1)
    return (rng.normal(size=(64, 24)) * 0.05).astype(np.float32), correlated_inputs(512, 64)


def test_with_uncorrelated_inputs_gptq_is_round_to_nearest(weight_and_inputs):
    w, _ = weight_and_inputs
    hessian = np.diag(np.linspace(1, 3, 64))         # H diagonal: no row's error can be cancelled by another's
    for act_order in (False, True):
        assert np.array_equal(gptq_weight(w, hessian, 32, act_order=act_order), round_blocks(w, 32))


def test_gptq_lies_on_the_grid_and_cuts_the_output_error(weight_and_inputs):
    w, x = weight_and_inputs
    hessian = x.astype(np.float64).T @ x
    for block, act_order in ((16, False), (32, False), (32, True)):
        q, rtn = gptq_weight(w, hessian, block, act_order=act_order), round_blocks(w, block)
        assert np.array_equal(round_blocks(q, block), q)       # the quantizer's re-rounding keeps GPTQ's values
        err_gptq = np.square(x @ (q - w)).sum()
        err_rtn = np.square(x @ (rtn - w)).sum()
        assert err_gptq < 0.5 * err_rtn, (block, act_order, err_gptq / err_rtn)
        levels = q.T.reshape(24, 64 // block, block) / np.abs(q.T.reshape(24, 64 // block, block)).max(-1, keepdims=True)
        assert np.allclose(levels * 8, np.round(levels * 8), atol=1e-5)     # k / 8 of the block's largest, k in -8..7


def test_matmulnbits_stores_gptq_s_values(weight_and_inputs, tmp_path: Path):
    """MatMulNBitsQuantizer (symmetric, the export's settings) of GPTQ's weights computes x @ GPTQ's weights."""
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

    w, x = weight_and_inputs
    q = gptq_weight(w, x.astype(np.float64).T @ x, 32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 24])],
                              [numpy_helper.from_array(q, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    quantizer = MatMulNBitsQuantizer(model, bits=4, block_size=32, is_symmetric=True, accuracy_level=1,
                                     algo_config=DefaultWeightOnlyQuantConfig(block_size=32, is_symmetric=True,
                                                                              accuracy_level=1, bits=4))
    quantizer.process()
    path = tmp_path / "nbits.onnx"
    quantizer.model.save_model_to_file(str(path), use_external_data_format=False)
    assert op_type_counts(path) == {"MatMulNBits": 1}
    got = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x[:16]})[0]
    assert np.abs(got - x[:16] @ q).max() < 1e-4 * np.abs(x[:16] @ q).max()
    assert np.abs(got - x[:16] @ round_blocks(w, 32)).max() > 1e-2 * np.abs(x[:16] @ q).max()   # not RTN's values


def test_each_calibration_text_weighs_the_same_in_h():
    """H = sum over texts of X_t^T X_t / n_t over real tokens: a 2-token text counts as much as a 6-token one."""
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, None, 5])],
                              [helper.make_tensor_value_info("t", TensorProto.FLOAT, [None, None, 5])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.abs(np.random.default_rng(0).normal(size=(2, 6, 5))).astype(np.float32)
    mask = np.array([[1] * 6, [1, 1, 0, 0, 0, 0]], dtype=np.int64)
    h, rows = calibration_hessian(model, "t", [{"x": x, "attention_mask": mask}])
    long, short = x[0].astype(np.float64), x[1, :2].astype(np.float64)
    assert rows == 8
    assert np.allclose(h, long.T @ long / 6 + short.T @ short / 2, rtol=1e-5)
    assert not np.allclose(h, long.T @ long + short.T @ short, rtol=0.1)     # not every token alike
    assert np.allclose(text_weights(mask.astype(bool), 8), [1 / 6] * 6 + [1 / 2] * 2)
    assert np.array_equal(text_weights(mask.astype(bool), 2), [1, 1])      # one row per text (the pooler's)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return make_small_bundle(tmp_path_factory.mktemp("gptq"))


def test_gptq_small_graph_loses_less_than_round_to_nearest(bundle: Path, tmp_path: Path):
    from tokenizers import Tokenizer

    from edgebert.quantization.accuracy import AccuracyProbe
    from edgebert.quantization.calibration import TextBatches

    tok = Tokenizer.from_file(str(bundle / "tokenizer.json"))
    held_out = make_calib_text(tmp_path / "held_out.txt", n=48)
    held_out.write_text("".join(held_out.read_text().splitlines(keepends=True)[24:]))  # not the calibration lines
    calib = make_calib_text(tmp_path / "calib.txt", n=24)
    probe = AccuracyProbe("embed", bundle / "onnx/model.onnx", TextBatches(held_out, tok, batch_size=8, max_length=32))
    calibration = lambda: TextBatches(calib, tok, batch_size=8, max_length=32)  # noqa: E731
    fused = bundle / "onnx/model.onnx"
    rtn, gptq = (small_graph(fused, tmp_path / f"{a}.onnx", Int4Config(algorithm=a, word_table=False), probe, 1.0,
                             lambda *_: None, sensitivity_size=8, calibration=calibration) for a in ("rtn", "gptq"))
    assert rtn.quantization["eight_bit"] == gptq.quantization["eight_bit"] == []      # a budget of 1: all 4-bit
    assert op_type_counts(gptq.path)["MatMulNBits"] == 13 and gptq.bytes == pytest.approx(rtn.bytes, abs=64)
    figures = gptq.quantization["gptq"]
    assert figures["groups"] == 9 and figures["calibration_tokens"] > 24 * 5    # 2 x (qkv, out, in, out) + pooler
    assert gptq.accuracy["loss"] < 0.7 * rtn.accuracy["loss"], (gptq.accuracy["loss"], rtn.accuracy["loss"])


def test_export_records_the_algorithm(tmp_path: Path):
    from edgebert.exporters import ExportConfig, export_bundle
    from export_fixtures import make_model_dir

    out = tmp_path / "bundle"
    export_bundle(ExportConfig(model_dir=make_model_dir(tmp_path / "model", seed=5), out_dir=out, int8=True, int4=True,
                               int4_algorithm="gptq", calib=make_calib_text(tmp_path / "calib.txt", n=48),
                               calib_size=24, gate_size=24, validation_batch_sizes=(1, 3), validation_seq_lens=(7, 32)))
    q = json.loads((out / "manifest.json").read_text())["models"]["int4"]["quantization"]
    assert q["algorithm"] == "gptq" and q["symmetric"] is True and q["gptq"]["sequential"] is True
    assert onnx.load(str(out / "onnx/model_q4.onnx")).graph.node      # written and loadable


def test_weights_already_on_the_grid_are_kept_without_calibrating(weight_and_inputs, tmp_path: Path):
    """A --int4-aware student's baked weights: GPTQ would change nothing, so it does not run."""
    from edgebert.quantization.gptq import gptq_weights

    w, _ = weight_and_inputs
    on_grid = round_blocks(w, 32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 24])],
                              [numpy_helper.from_array(on_grid, "w")])
    path = tmp_path / "g.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    said: list[str] = []
    rounded, figures = gptq_weights(path, ["mm"], 32, lambda: pytest.fail("calibrated"), said.append)
    assert np.array_equal(rounded["mm"], on_grid) and figures["groups"] == 0 and "skipped" in figures
    assert "already lies on the 4-bit grid" in said[0]


@pytest.mark.parametrize("k, block", [(64, 64), (384, 128), (192, 64), (224, 32), (256, 128), (128, 128)])
@pytest.mark.parametrize("act_order", [True, False])
def test_a_block_as_wide_as_the_input_and_the_real_widths_round_on_the_grid(k, block, act_order):
    """A block equal to K (one block per output column: a 64-wide model at --int4-block 64) once died in the
    act-order path ("too many indices"); MiniLM's 384 / 128 and the narrow students' 192 / 224 / 256 round too."""
    x = correlated_inputs(256, k, seed=k)
    w = np.random.default_rng(block).normal(size=(k, 24)).astype(np.float32) * 0.05
    q = gptq_weight(w, x.T.astype(np.float64) @ x, block, act_order=act_order)
    assert q.shape == w.shape and np.array_equal(round_blocks(q, block), q)      # on MatMulNBits' grid
    rtn = round_blocks(w, block)
    assert np.linalg.norm(x @ (q - w)) < np.linalg.norm(x @ (rtn - w))          # and better than nearest


def test_the_4bit_block_options_name_themselves():
    from edgebert.errors import ConfigError

    with pytest.raises(ConfigError, match="--int4-block 0 is not a power of two"):
        Int4Config(block_size=0)
    with pytest.raises(ConfigError, match="--int4-table-block 8 is not a power of two"):
        Int4Config(block_size=32, table_block=8)
    with pytest.raises(ConfigError, match="--int4-table-block 256 does not divide this model's hidden size 64") as e:
        Int4Config(block_size=32, table_block=256).check_width(64)
    assert "use --int4-table-block 16 or 32 or 64" in e.value.hint
    with pytest.raises(ConfigError, match="--int4-block 128 does not divide this model's hidden size 64"):
        Int4Config(block_size=128, table_block=128).check_width(64)


def test_int4_block_zero_is_refused_not_read_as_the_default(tmp_path: Path):
    from edgebert.errors import ConfigError
    from edgebert.exporters import ExportConfig

    with pytest.raises(ConfigError, match="--int4-block 0 is not a power of two"):          # at construction
        ExportConfig(model_dir=tmp_path, out_dir=tmp_path / "out", int8=True, int4=True, int4_block_size=0)
    with pytest.raises(ConfigError, match="--int4-table-block 0 is not a power of two"):
        ExportConfig(model_dir=tmp_path, out_dir=tmp_path / "out", int8=True, int4=True, int4_table_block=0)
