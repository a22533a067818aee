"""Outlier-channel split for dynamic INT8: the few activation channels with huge ranges stay float.

Why: dynamic INT8 quantizes each MatMul's activation per tensor, per call (one uint8 scale for the
whole ``(batch, seq, hidden)`` tensor). BERT's LayerNorm and GELU outputs carry a handful of outlier
channels (tens of times the median channel's range), so one scale for all channels wastes most of the
8 bits on them. That, not the weights, is the INT8 error (measured: benchmarks/results/int8_targets/decisions.md).

What (LLM.int8()-style decomposition, done in the graph): for a weight MatMul ``y = x @ W`` whose
input channels ``o`` have calibration |max| > ``ratio`` x the median channel's::

    y = (x * keep) @ W   +   x[..., o] @ W[o, :]
        ^ INT8 (outliers zeroed in           ^ float, k = len(o) columns
          the input: they set no scale)

The result is exactly ``x @ W`` in fp32 (validated like every other graph change); the float part is
a (tokens x k) @ (k x n) MatMul with k of 1-17, so it costs little. The float MatMuls carry
``OUTLIER_SUFFIX`` in their names so that quantizers leave them float. With calibrated activation
scales (``quantization.scales``) the mask goes: the outlier channels clip at the calibrated range in
the INT8 product and the float part carries only what was clipped off, ``x[o] - clip(x[o])``, times
the INT8 weight's own rows ``o`` (dequantized when the session loads): the graph stores no float copy
of any weight row (``fold_outlier_rows``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import numpy as np
import onnx
from onnx import helper, numpy_helper

from edgebert.graph.ops import drop_unused_initializers, load
from edgebert.quantization.activations import ChannelStats

OUTLIER_SUFFIX = "/outlier_float_MatMul"
MASK_SUFFIX = "/outlier_Mul"      # the Mul that zeroes the outlier channels of the INT8 input
Feeds = dict[str, np.ndarray]


def split_candidates(model: onnx.ModelProto) -> dict[str, str]:
    """``{MatMul node name: its activation input}`` for MatMuls with a 2-D weight initializer."""
    inits = {i.name: i for i in model.graph.initializer}
    return {n.name: n.input[0] for n in model.graph.node
            if n.op_type == "MatMul" and n.input[1] in inits and len(inits[n.input[1]].dims) == 2
            and not n.name.endswith(OUTLIER_SUFFIX)}


def outlier_channels(absmax: np.ndarray, ratio: float) -> np.ndarray:
    """Indices of channels whose |max| exceeds ``ratio`` x the median channel's."""
    return np.flatnonzero(absmax > ratio * float(np.median(absmax)))


def split_outliers(fp32_path: str | Path, out_path: str | Path, batches: Iterable[Feeds] | None,
                   ratio: float, stats: ChannelStats | None = None) -> dict[str, list[int]]:
    """Write ``fp32_path`` with outlier channels split off every weight MatMul; ``{node: channels}``.

    Channel ranges come from ``stats`` (``ChannelStats`` of the MatMul inputs) or are collected on
    ``batches``. The main MatMul keeps its whole weight and reads its input with the outlier channels
    zeroed (a Mul): exact in fp32, and per-call scales stay free of outliers. Calibrated INT8 graphs
    replace the Mul by clipping (``fold_outlier_rows``).
    """
    model = load(fp32_path)
    graph = model.graph
    candidates = split_candidates(model)
    if stats is None:
        stats = ChannelStats.collect(fp32_path, batches or (), sorted(set(candidates.values())))
    weights = {i.name: i for i in graph.initializer}
    plan: dict[str, list[int]] = {}
    new_nodes: list[onnx.NodeProto] = []
    for node in graph.node:
        channels = (outlier_channels(stats.absmax(node.input[0]), ratio) if node.name in candidates
                    else np.array([], dtype=np.int64))
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
            helper.make_node("Mul", [x, f"{p}/outlier_keep"], [f"{p}/outlier_masked"], name=f"{p}{MASK_SUFFIX}"),
            node,
            helper.make_node("Gather", [x, f"{p}/outlier_index"], [f"{p}/outlier_x"], axis=-1,
                             name=f"{p}/outlier_Gather"),
            helper.make_node("MatMul", [f"{p}/outlier_x", f"{p}/outlier_weight"], [f"{p}/outlier_y"],
                             name=f"{p}{OUTLIER_SUFFIX}"),
            helper.make_node("Add", [f"{p}/outlier_main", f"{p}/outlier_y"], [y], name=f"{p}/outlier_Add"),
        ]
    del graph.node[:]
    graph.node.extend(new_nodes)
    drop_unused_initializers(graph)
    onnx.checker.check_model(model)
    onnx.save(model, str(out_path))
    return plan


def float_only_nodes(model: str | Path | onnx.ModelProto) -> list[str]:
    """The outlier MatMuls of a split graph: quantizers must leave these float."""
    return [n.name for n in load(model).graph.node if n.name.endswith(OUTLIER_SUFFIX)]


def fold_outlier_rows(graph: onnx.GraphProto, prefix: str, main: onnx.NodeProto, low: float, high: float) -> None:
    """Rewrite the float part of split ``prefix`` for an INT8 main product ``main`` (a MatMulIntegerToFloat
    whose input is quantized with a fixed range ``[low, high]``, outlier channels unmasked): they clip to
    that range there, so the float part multiplies only the clipped-off rest, ``x[o] - clip(x[o])``, and
    takes its weight rows from the INT8 weight (``(Cast(Wq[o]) - zero point) * scale``: constants, folded
    when the session loads) instead of a float copy. The sum is the INT8 product of ``x @ W`` with the
    outlier channels' full values. Exact up to the INT8 weight's rounding of rows ``o``."""
    inits = {i.name: i for i in graph.initializer}
    float_mm = next(n for n in graph.node if n.name == f"{prefix}{OUTLIER_SUFFIX}")
    x_o, b, b_scale = float_mm.input[0], main.input[1], main.input[3]
    b_zp = main.input[5] if len(main.input) > 5 else ""
    p = prefix
    graph.initializer.extend([numpy_helper.from_array(np.array(low, np.float32), f"{p}/outlier_clip_low"),
                              numpy_helper.from_array(np.array(high, np.float32), f"{p}/outlier_clip_high")])
    rows = [helper.make_node("Gather", [b, f"{p}/outlier_index"], [f"{p}/outlier_rows_q"], axis=0,
                             name=f"{p}/outlier_rows_Gather"),
            helper.make_node("Cast", [f"{p}/outlier_rows_q"], [f"{p}/outlier_rows_int"], to=onnx.TensorProto.FLOAT,
                             name=f"{p}/outlier_rows_Cast")]
    centred = f"{p}/outlier_rows_int"
    if b_zp and numpy_helper.to_array(inits[b_zp]).any():
        rows += [helper.make_node("Cast", [b_zp], [f"{p}/outlier_rows_zp"], to=onnx.TensorProto.FLOAT,
                                  name=f"{p}/outlier_rows_zp_Cast"),
                 helper.make_node("Sub", [centred, f"{p}/outlier_rows_zp"], [f"{p}/outlier_rows_centred"],
                                  name=f"{p}/outlier_rows_Sub")]
        centred = f"{p}/outlier_rows_centred"
    rows += [helper.make_node("Mul", [centred, b_scale], [f"{p}/outlier_rows"], name=f"{p}/outlier_rows_Mul"),
             helper.make_node("Clip", [x_o, f"{p}/outlier_clip_low", f"{p}/outlier_clip_high"],
                              [f"{p}/outlier_clipped"], name=f"{p}/outlier_Clip"),
             helper.make_node("Sub", [x_o, f"{p}/outlier_clipped"], [f"{p}/outlier_rest"], name=f"{p}/outlier_Sub")]
    float_mm.input[0], float_mm.input[1] = f"{p}/outlier_rest", f"{p}/outlier_rows"
    at = list(graph.node).index(float_mm)
    for offset, node in enumerate(rows):
        graph.node.insert(at + offset, node)
