"""Calibrated activation scales: turn a per-call (dynamic) INT8 graph into one with fixed scales.

``quantize_dynamic`` quantizes every INT8 input with ``DynamicQuantizeLinear``: one uint8 scale per
tensor *per call*, from that call's min and max over the whole ``(batch, seq, hidden)`` tensor. So a
text's output depends on its batch-mates (a long paragraph in the batch widens the scale of every
row: measured in benchmarks/results/int8_targets/decisions.md). Here each ``DynamicQuantizeLinear``
becomes a ``QuantizeLinear`` with a scale and zero point fixed from calibration text (min/max over
the channels that stay INT8, real tokens only, the same formula as DynamicQuantizeLinear), and each
``MatMulInteger -> Cast -> Mul(scale_x * scale_w)`` chain becomes one ``MatMulIntegerToFloat``. Every
row is then quantized alone: batch-invariant by construction, and the per-call min/max pass is gone.
Each bias then moves into the ``MatMulIntegerToFloat`` before it (``quantization.bias_fold``), and a GELU
whose output is rounded to a coarse uint8 step takes its tanh form (``quantization.gelu_form``).

On a graph with the outlier split, the ``Mul`` that zeroes outlier channels before quantization is
bypassed: the range is calibrated without the outlier channels, they clip to it in the INT8 product,
and their float part is rewritten to carry what was clipped off (``quantization.outliers.fold_outlier_rows``).
Values outside the calibrated range clip to 0 / 255, which is why calibration text should cover
long and short inputs (the built-in text does).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from edgebert.graph.ops import drop_unused_initializers, load, readers
from edgebert.quantization.activations import ChannelStats
from edgebert.quantization.bias_fold import MS_DOMAIN, fold_biases
from edgebert.quantization.gelu_form import tanh_gelus
from edgebert.quantization.outliers import MASK_SUFFIX, fold_outlier_rows


def uint8_scale(low: float, high: float) -> tuple[float, int]:
    """(scale, zero point) mapping [low, high] (which contains 0) onto 0..255."""
    scale = (high - low) / 255.0 or 1.0
    return float(scale), int(np.clip(round(-low / scale), 0, 255))


def calibrated_tensors(int8_path: str | Path) -> list[str]:
    """The fp32 tensors a per-call INT8 graph quantizes (inputs of its DynamicQuantizeLinear nodes),
    with an outlier mask looked through to the unmasked tensor it reads."""
    graph = load(int8_path).graph
    producers = {o: n for n in graph.node for o in n.output}
    out = []
    for node in graph.node:
        if node.op_type == "DynamicQuantizeLinear":
            mask = producers.get(node.input[0])
            out.append(mask.input[0] if mask is not None and mask.name.endswith(MASK_SUFFIX) else node.input[0])
    return out


def freeze_activation_scales(int8_path: str | Path, out_path: str | Path, stats: ChannelStats,
                             plan: dict[str, list[int]] | None = None, tanh_gelu: bool = True) -> dict:
    """Write ``int8_path`` with calibrated scales to ``out_path``. ``stats`` must hold every tensor of
    ``calibrated_tensors``; ``plan`` is the outlier split's ``{node: channels}``; ``tanh_gelu``: GELUs that
    qualify take the tanh form (``quantization.gelu_form``). Returns
    ``{"tensors", "fused_matmuls", "biases_folded", "gelus_tanh", "ranges": {tensor: [low, high]}}``."""
    plan = plan or {}
    model = load(int8_path)
    graph = model.graph
    producers = {o: n for n in graph.node for o in n.output}
    consumers = readers(graph)
    inits = {i.name for i in graph.initializer}
    replaced: dict[str, onnx.NodeProto] = {}       # node name -> its replacement (None: drop)
    dropped: set[str] = set()
    ranges: dict[str, list[float]] = {}
    folds: dict[str, tuple[str, float, float]] = {}   # quantized input -> (split prefix, clip low, high)
    for node in graph.node:
        if node.op_type != "DynamicQuantizeLinear":
            continue
        x = node.input[0]
        skip: list[int] = []
        mask = producers.get(x)
        masked = mask is not None and mask.name.endswith(MASK_SUFFIX)
        if masked:
            skip = plan.get(mask.name[: -len(MASK_SUFFIX)], [])
            x = mask.input[0]
        low, high = stats.range(x, skip)
        scale, zero_point = uint8_scale(low, high)
        ranges[x] = [round(low, 6), round(high, 6)]
        q, s, zp = node.output
        if masked:
            step = float(np.float32(scale))        # the scale as QuantizeLinear reads it
            folds[q] = (mask.name[: -len(MASK_SUFFIX)], (0 - zero_point) * step, (255 - zero_point) * step)
        graph.initializer.extend([numpy_helper.from_array(np.array(scale, np.float32), s),
                                  numpy_helper.from_array(np.array(zero_point, np.uint8), zp)])
        inits.update((s, zp))
        replaced[node.name] = helper.make_node("QuantizeLinear", [x, s, zp], [q], name=f"{node.name}_calibrated")
    fused = 0
    for node in graph.node:
        if node.op_type != "MatMulInteger" or node.input[2] not in inits:
            continue
        cast = _only(consumers.get(node.output[0]), "Cast")
        mul = cast and _only(consumers.get(cast.output[0]), "Mul")
        scales = mul and producers.get(mul.input[1] if mul.input[0] == cast.output[0] else mul.input[0])
        if not (mul and scales is not None and scales.op_type == "Mul" and all(i in inits for i in scales.input)):
            continue
        a_scale, b_scale = scales.input
        a, b, a_zp = node.input[:3]
        b_zp = node.input[3] if len(node.input) > 3 else ""
        replaced[node.name] = helper.make_node("MatMulIntegerToFloat", [a, b, a_scale, b_scale, a_zp, b_zp],
                                               [mul.output[0]], name=f"{node.name}_to_float", domain=MS_DOMAIN)
        dropped.update((cast.name, mul.name))
        if all(c.name in dropped or c is mul for c in consumers.get(scales.output[0], [])):
            dropped.add(scales.name)
        fused += 1
    nodes = [replaced.get(n.name, n) for n in graph.node if n.name not in dropped]
    del graph.node[:]
    graph.node.extend(_live(nodes, {o.name for o in graph.output}))
    after = readers(graph)
    for q, (prefix, low, high) in folds.items():
        main = after.get(q, [])
        if len(main) != 1 or main[0].op_type != "MatMulIntegerToFloat":
            raise ValueError(f"outlier split {prefix}: its INT8 input feeds {[n.op_type for n in main]}, "
                             "not one MatMulIntegerToFloat")
        fold_outlier_rows(graph, prefix, main[0], low, high)
    biases = fold_biases(model)
    gelus = tanh_gelus(model) if tanh_gelu else 0
    drop_unused_initializers(graph)
    if not any(op.domain == MS_DOMAIN for op in model.opset_import):
        model.opset_import.append(helper.make_opsetid(MS_DOMAIN, 1))
    onnx.save(model, str(out_path))
    return {"tensors": len(ranges), "fused_matmuls": fused, "biases_folded": biases, "gelus_tanh": gelus,
            "ranges": ranges}


def _only(nodes: list[onnx.NodeProto] | None, op_type: str) -> onnx.NodeProto | None:
    return nodes[0] if nodes and len(nodes) == 1 and nodes[0].op_type == op_type else None


def _live(nodes: list[onnx.NodeProto], outputs: set[str]) -> list[onnx.NodeProto]:
    """Drop nodes whose outputs nobody reads (the bypassed outlier masks), in topological order."""
    needed = set(outputs)
    keep = []
    for node in reversed(nodes):
        if any(o in needed for o in node.output):
            keep.append(node)
            needed.update(i for i in node.input if i)
    return list(reversed(keep))
