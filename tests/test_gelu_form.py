"""``quantization.gelu_form``: a GELU whose output only a coarse uint8 quantization reads takes its tanh form
(``FastGelu``); any other GELU keeps the erf form. Hand-built graphs run in onnxruntime."""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgebert.quantization.gelu_form import STEP_MULTIPLE, TANH_MAX_ERROR, tanh_gelus

MS = "com.microsoft"
WIDTH = 8


def _graph(op: str, step: float, readers: str = "quantize", bias: bool = False) -> onnx.ModelProto:
    """x -> op -> {QuantizeLinear(step) -> q} [+ an outlier Gather -> g | a float MatMul -> m | output]."""
    inits = [numpy_helper.from_array(np.array(step, np.float32), "s"),
             numpy_helper.from_array(np.array(3, np.uint8), "zp"),
             numpy_helper.from_array(np.array([1], np.int64), "idx"),
             numpy_helper.from_array(np.ones((WIDTH, 2), np.float32), "w"),
             numpy_helper.from_array(np.linspace(-0.5, 0.5, WIDTH).astype(np.float32), "b")]
    nodes = [helper.make_node(op, ["x", "b"] if bias else ["x"], ["y"], name="act", domain=MS),
             helper.make_node("QuantizeLinear", ["y", "s", "zp"], ["q"], name="y_QuantizeLinear")]
    outputs = [helper.make_tensor_value_info("q", TensorProto.UINT8, None)]
    if readers == "outlier":
        nodes.append(helper.make_node("Gather", ["y", "idx"], ["g"], axis=2, name="/ffn/MatMul/outlier_Gather"))
        outputs.append(helper.make_tensor_value_info("g", TensorProto.FLOAT, None))
    elif readers == "float":
        nodes.append(helper.make_node("MatMul", ["y", "w"], ["m"], name="float_MatMul"))
        outputs.append(helper.make_tensor_value_info("m", TensorProto.FLOAT, None))
    elif readers == "output":
        outputs.append(helper.make_tensor_value_info("y", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, WIDTH])],
                              outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])


def _run(model: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})


def _erf_gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def test_the_stated_largest_difference_is_onnxruntimes():
    """FastGelu against the erf form over [-8, 8]: the largest difference is TANH_MAX_ERROR (to 2 %)."""
    x = np.linspace(-8, 8, 64001, dtype=np.float32)
    fast = helper.make_model(helper.make_graph(
        [helper.make_node("FastGelu", ["x"], ["y"], domain=MS)], "f",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    y = _run(fast, x)[0]
    worst = float(np.abs(y - _erf_gelu(x.astype(np.float64))).max())
    assert TANH_MAX_ERROR * 0.98 <= worst <= TANH_MAX_ERROR * 1.02, worst


@pytest.mark.parametrize("op,bias", [("Gelu", False), ("BiasGelu", True)])
@pytest.mark.parametrize("readers", ["quantize", "outlier"])
def test_a_gelu_rounded_to_a_coarse_step_takes_the_tanh_form(op, bias, readers):
    step = 0.02
    before = _graph(op, step, readers, bias)
    after = _graph(op, step, readers, bias)
    assert tanh_gelus(after) == 1
    assert [n.op_type for n in after.graph.node][0] == "FastGelu" and list(after.graph.node[0].input) == \
        list(before.graph.node[0].input)
    x = np.random.default_rng(0).normal(0, 2, (2, 5, WIDTH)).astype(np.float32)
    a, b = _run(after, x), _run(before, x)
    # the quantized output moves by at most one step, and only where the erf value sits within
    # TANH_MAX_ERROR of a rounding boundary
    moved = a[0].astype(int) != b[0].astype(int)
    assert np.abs(a[0].astype(int) - b[0].astype(int)).max() <= 1
    assert moved.mean() <= 4 * TANH_MAX_ERROR / step + 0.05
    if readers == "outlier":
        assert np.abs(a[1] - b[1]).max() <= TANH_MAX_ERROR * 1.02


@pytest.mark.parametrize("readers,step", [("quantize", STEP_MULTIPLE * TANH_MAX_ERROR * 0.9),
                                          ("float", 0.02), ("output", 0.02)])
def test_any_other_gelu_keeps_the_erf_form(readers, step):
    """A fine step, a float reader, or a graph output: unchanged."""
    model = _graph("Gelu", step, readers)
    assert tanh_gelus(model) == 0 and model.graph.node[0].op_type == "Gelu"
