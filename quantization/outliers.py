"""Outlier-channel split for dynamic INT8: the few activation channels with huge ranges stay float.

Why: dynamic INT8 quantizes each MatMul's activation per tensor, per call (one uint8 scale for the
whole ``(batch, seq, hidden)`` tensor). BERT's LayerNorm and GELU outputs carry a handful of outlier
channels (on all-MiniLM-L6-v2: max |x| 25-30 where the median channel's is ~1.8), so one scale for
all channels wastes most of the 8 bits on them. That, not the weights, is the INT8 error: weights-only
INT8 gives cosine 0.9995, activations included 0.992 (measured, benchmarks/export_minilm.py).

What (LLM.int8()-style decomposition, done in the graph): for a weight MatMul ``y = x @ W`` whose
input channels ``o`` have calibration |max| > ``ratio`` x the median channel's::

    y = (x * keep) @ W   +   x[..., o] @ W[o, :]
        ^ INT8 (outliers zeroed,        ^ float, k = len(o) columns
          so they no longer set the scale)

The result is exactly ``x @ W`` in fp32 (validated like every other graph change); the float part is
a (tokens x k) @ (k x n) MatMul with k of 1-3, so it costs little. The float MatMuls carry
``OUTLIER_SUFFIX`` in their names so that quantizers leave them float.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

from .graph import load

OUTLIER_SUFFIX = "/outlier_float_MatMul"
Feeds = dict[str, np.ndarray]


def split_candidates(model: onnx.ModelProto) -> dict[str, str]:
    """``{MatMul node name: its activation input}`` for MatMuls with a 2-D weight initializer."""
    inits = {i.name: i for i in model.graph.initializer}
    return {n.name: n.input[0] for n in model.graph.node
            if n.op_type == "MatMul" and n.input[1] in inits and len(inits[n.input[1]].dims) == 2
            and not n.name.endswith(OUTLIER_SUFFIX)}


def activation_absmax(fp32_path: str | Path, batches: Iterable[Feeds], tensors: list[str]) -> dict[str, np.ndarray]:
    """Per-channel max |x| of each tensor over the real (unpadded) tokens of ``batches``."""
    model = load(fp32_path)
    del model.graph.output[:]
    for name in tensors:
        model.graph.output.append(helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL   # keep every tensor named
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    inputs = {i.name for i in sess.get_inputs()}
    absmax: dict[str, np.ndarray] = {}
    for feeds in batches:
        real = feeds["attention_mask"].astype(bool)
        for name, value in zip(tensors, sess.run(tensors, {k: v for k, v in feeds.items() if k in inputs})):
            m = np.abs(value[real]).max(0)
            absmax[name] = m if name not in absmax else np.maximum(absmax[name], m)
    return absmax


def outlier_channels(absmax: np.ndarray, ratio: float) -> np.ndarray:
    """Indices of channels whose |max| exceeds ``ratio`` x the median channel's."""
    return np.flatnonzero(absmax > ratio * float(np.median(absmax)))


def split_outliers(fp32_path: str | Path, out_path: str | Path, batches: Iterable[Feeds],
                   ratio: float) -> dict[str, list[int]]:
    """Write ``fp32_path`` with outlier channels split off every weight MatMul; ``{node: channels}``."""
    model = load(fp32_path)
    graph = model.graph
    candidates = split_candidates(model)
    absmax = activation_absmax(fp32_path, batches, sorted(set(candidates.values())))
    weights = {i.name: i for i in graph.initializer}
    plan: dict[str, list[int]] = {}
    nodes = list(graph.node)
    new_nodes: list[onnx.NodeProto] = []
    for node in nodes:
        channels = outlier_channels(absmax[node.input[0]], ratio) if node.name in candidates else np.array([])
        if len(channels) == 0:
            new_nodes.append(node)
            continue
        plan[node.name] = [int(c) for c in channels]
        w = numpy_helper.to_array(weights[node.input[1]])
        keep = np.ones(w.shape[0], dtype=np.float32)
        keep[channels] = 0.0
        p = node.name
        graph.initializer.extend([numpy_helper.from_array(keep, f"{p}/outlier_keep"),
                                  numpy_helper.from_array(channels.astype(np.int64), f"{p}/outlier_index"),
                                  numpy_helper.from_array(w[channels].astype(w.dtype), f"{p}/outlier_weight")])
        x, y = node.input[0], node.output[0]
        node.input[0], node.output[0] = f"{p}/outlier_masked", f"{p}/outlier_main"
        new_nodes += [
            helper.make_node("Mul", [x, f"{p}/outlier_keep"], [f"{p}/outlier_masked"], name=f"{p}/outlier_Mul"),
            node,
            helper.make_node("Gather", [x, f"{p}/outlier_index"], [f"{p}/outlier_x"], axis=-1,
                             name=f"{p}/outlier_Gather"),
            helper.make_node("MatMul", [f"{p}/outlier_x", f"{p}/outlier_weight"], [f"{p}/outlier_y"],
                             name=f"{p}{OUTLIER_SUFFIX}"),
            helper.make_node("Add", [f"{p}/outlier_main", f"{p}/outlier_y"], [y], name=f"{p}/outlier_Add"),
        ]
    del graph.node[:]
    graph.node.extend(new_nodes)
    onnx.checker.check_model(model)
    onnx.save(model, str(out_path))
    return plan


def float_only_nodes(model: str | Path | onnx.ModelProto) -> list[str]:
    """The outlier MatMuls of a split graph: quantizers must leave these float."""
    return [n.name for n in load(model).graph.node if n.name.endswith(OUTLIER_SUFFIX)]
