"""SmoothQuant-style scales folded into the LayerNorms: the activation outliers of a LayerNorm's output move into the
weights it feeds, before the outlier split and INT8.

Why: a BERT LayerNorm's output (the input of the FFN up-projection and of the next layer's query / key / value)
carries a few channels 7-15x wider than the median one (its gamma is large there). One per-tensor activation scale
must cover them, so the other channels round coarsely (``quantization.outliers`` keeps such channels in float, at a
few kernels per MatMul). Dividing channel ``j`` by ``s_j`` and multiplying the weights' row ``j`` by it is the same
product (SmoothQuant, Xiao et al. 2023); with ``alpha`` near 1 most of the range moves into the weights, which
are quantized per output column and barely notice a few wider rows.

What, for each ``LayerNormalization`` whose output feeds only weight ``MatMul`` / ``Attention`` nodes and
residual ``Add`` nodes and has a channel ``WIDE`` (3) times the median channel's range or more (the outlier split's
ratio; a LayerNorm without one is left alone: nothing to move, and no ``Mul`` to pay)::

    s_j = max|x_j|^alpha / max_W |W_j|^(1 - alpha)   (calibration ranges; then divided by their median)
    gamma_j /= s_j,  beta_j /= s_j;   W[j, :] *= s_j    (every weight the output feeds)

BERT is post-LayerNorm: the same output is also the residual stream, so its ``Add`` consumers read it through one
``Mul`` by ``s`` (``SMOOTH_SUFFIX``). The graph is the same arithmetic up to float rounding; the exporter validates
it against PyTorch like every other graph change.

Measured on all-MiniLM-L6-v2 (the ``x86-vnni`` recipe, AMD EPYC Zen 5, 2 threads: benchmarks/results/int8_profile/
smoothquant.md): alpha 0.75 leaves no LayerNorm channel over the split's 3x ratio, so the FFN up-projections lose
their split (12 split MatMuls -> 6), the gate's cosine rises from 0.99787 / min 0.9901 to 0.99892 / 0.99594, and the
graph runs 0.89-0.96x the time (1 x 32 to 8 x 128, spinning on and off).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from edgebert.graph.ops import load, readers
from edgebert.quantization.activations import ChannelStats
from edgebert.quantization.outliers import outlier_channels

WEIGHT_OPS = ("MatMul", "Attention")
WIDE = 3.0                          # a LayerNorm is smoothed only if a channel of its output is this x the median's
SMOOTH_SUFFIX = "/smooth_Mul"       # the Mul that gives the residual stream its scale back


def smooth_plan(model: onnx.ModelProto) -> dict[str, dict[str, Any]]:
    """``{LayerNorm output: {"ln": node, "users": [weight nodes], "weights": [their weights], "adds": [Add nodes]}}``
    for the LayerNorms whose outputs feed weight MatMuls / Attention and otherwise only residual Adds (never a
    graph output)."""
    inits = {i.name for i in model.graph.initializer}
    outputs = {o.name for o in model.graph.output}
    consumers = readers(model.graph)
    plan = {}
    for n in model.graph.node:
        if n.op_type != "LayerNormalization" or len(n.input) < 3 or n.output[0] in outputs:
            continue
        users = consumers.get(n.output[0], [])
        weighted = [u for u in users if u.op_type in WEIGHT_OPS and u.input[0] == n.output[0]
                    and u.input[1] in inits]
        adds = [u for u in users if u.op_type == "Add"]
        if weighted and len(weighted) + len(adds) == len(users) and n.input[1] in inits and n.input[2] in inits:
            plan[n.output[0]] = {"ln": n, "users": weighted, "weights": [u.input[1] for u in weighted],
                                 "adds": adds}
    return plan


def fold_smoothing(fused: str | Path, out: str | Path, stats: ChannelStats, alpha: float
                   ) -> tuple[dict[str, Any], ChannelStats]:
    """Write ``fused`` with smoothing scales folded into its LayerNorms at ``out``: the manifest's figures (``applied``
    False, and nothing written, where no LayerNorm output has a wide channel) and ``stats`` as the smoothed graph has
    them (each smoothed output's ranges divided by its scales; every other tensor is the same)."""
    if not 0 < alpha < 1:
        raise ValueError(f"smoothing alpha {alpha!r} must be in (0, 1)")
    model = load(fused)
    inits = {i.name: i for i in model.graph.initializer}
    plan = smooth_plan(model)
    uses = {name: len(nodes) for name, nodes in readers(model.graph).items()}
    smoothed = ChannelStats(dict(stats.low), dict(stats.high), stats.texts)
    done = wide_before = wide_after = 0
    for tensor, p in plan.items():
        ln = p["ln"]
        xmax = np.maximum(stats.absmax(tensor), 1e-6)
        wide = len(outlier_channels(xmax, WIDE))
        if not wide:
            continue
        wmax = np.max([np.abs(numpy_helper.to_array(inits[w])).max(1) for w in p["weights"]], axis=0)
        s = xmax ** alpha / np.maximum(wmax, 1e-6) ** (1 - alpha)
        s = (s / np.median(s)).astype(np.float32)
        for slot in (1, 2):                                          # gamma, beta
            _scale(model, inits, uses, ln, slot, 1 / s)
        for user in p["users"]:                                      # each weight (rows = input channels)
            _scale(model, inits, uses, user, 1, s[:, None])
        scale, restored = f"{tensor}/smooth_scale", f"{tensor}/smooth_restored"
        model.graph.initializer.append(numpy_helper.from_array(s, scale))
        mul = helper.make_node("Mul", [tensor, scale], [restored], name=f"{tensor}{SMOOTH_SUFFIX}")
        model.graph.node.insert(list(model.graph.node).index(ln) + 1, mul)
        for add in p["adds"]:
            add.input[list(add.input).index(tensor)] = restored
        smoothed.low[tensor], smoothed.high[tensor] = stats.low[tensor] / s, stats.high[tensor] / s
        done, wide_before = done + 1, wide_before + wide
        wide_after += len(outlier_channels(smoothed.absmax(tensor), WIDE))
    if not done:
        return {"applied": False, "reason": f"no LayerNorm output has a channel {WIDE:g}x its median's range"}, stats
    onnx.save(model, str(out))
    return ({"applied": True, "alpha": alpha, "layernorms": done, "candidates": len(plan),
             "channels_over_3x_median": {"before": wide_before, "after": wide_after}}, smoothed)


def _scale(model: onnx.ModelProto, inits: dict[str, onnx.TensorProto], uses: dict[str, int], node: onnx.NodeProto,
           slot: int, factor: np.ndarray) -> None:
    """Multiply ``node``'s initializer input ``slot`` by ``factor``; an initializer other nodes read too (an exporter
    shares equal tensors, e.g. untrained LayerNorms' ones and zeros) is copied for ``node`` first."""
    name = node.input[slot]
    arr = (numpy_helper.to_array(inits[name]).astype(np.float32) * factor).astype(np.float32)
    if uses.get(name, 0) > 1:
        uses[name] -= 1
        name = f"{name}/smoothed/{node.name or node.output[0]}"
        node.input[slot] = name
        inits[name] = model.graph.initializer.add()       # (append would store a copy)
        uses[name] = 1
    inits[name].CopyFrom(numpy_helper.from_array(arr, name))
