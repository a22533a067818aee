"""Graph passes that make the fused CPU graph faster on onnxruntime's CPU provider, each kept only where it
was measured to pay (the figures: benchmarks/results/int8_targets/decisions.md, "The CPU graph pass").

``unfuse_skip_layernorm``: ``SkipLayerNormalization`` becomes ``Add`` (+ bias ``Add``) +
``LayerNormalization`` (opset 17), the same arithmetic: onnxruntime's CPU SkipLayerNormalization kernel is
slower than the three standard ops, and its level-2 optimizer does not fuse them back. It runs after the
fusion gate (which checks the optimizer's SkipLayerNormalization count) and keeps every tensor name the rest
of the graph reads. (Splitting ``Attention`` into MatMuls + ``MultiHeadAttention`` was tried and dropped:
more accurate INT8, but slower.)
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper


def _attr(node: onnx.NodeProto, name: str, default=None):
    return next((helper.get_attribute_value(a) for a in node.attribute if a.name == name), default)


def unfuse_skip_layernorm(model: onnx.ModelProto) -> int:
    """Rewrite every ``SkipLayerNormalization`` whose mean / inv-std outputs nobody reads; return how many."""
    g = model.graph
    read = {i for n in g.node for i in n.input} | {o.name for o in g.output}
    inits = {i.name: i for i in g.initializer}
    nodes, done = [], 0
    for n in g.node:
        outs = list(n.output) + [""] * (4 - len(n.output))
        if n.op_type != "SkipLayerNormalization" or any(o and o in read for o in outs[1:3]):
            nodes.append(n)
            continue
        x, skip, gamma, beta, bias = (list(n.input) + [""] * 5)[:5]
        total = outs[3] or f"{n.name}_sum"
        summed = f"{n.name}_skip_sum" if bias else total
        nodes.append(helper.make_node("Add", [x, skip], [summed], name=f"{n.name}_add"))
        if bias:
            nodes.append(helper.make_node("Add", [summed, bias], [total], name=f"{n.name}_add_bias"))
        if not beta:
            beta = f"{n.name}_beta"
            g.initializer.append(numpy_helper.from_array(
                np.zeros(inits[gamma].dims[0], dtype=np.float32), beta))
        nodes.append(helper.make_node("LayerNormalization", [total, gamma, beta], [outs[0]], name=n.name, axis=-1,
                                      epsilon=_attr(n, "epsilon", 1e-12)))
        done += 1
    if done:
        del g.node[:]
        g.node.extend(nodes)
    return done
