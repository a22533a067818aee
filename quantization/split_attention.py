"""Split each fused ``Attention`` node into three weight MatMuls feeding ``MultiHeadAttention``, so that the
query, key and value projections can become 4-bit ``MatMulNBits`` (onnxruntime has no 4-bit form of the
fused node's packed QKV weight [H, 3H]: on all-MiniLM-L6-v2 that is 2.65 M parameters kept 8-bit).

Same arithmetic, other node boundaries: ``Attention(x, W, b, mask)`` is
``MultiHeadAttention(x @ W[:, :Hq], x @ W[:, Hq:Hq+Hk], x @ W[:, Hq+Hk:], b, mask)`` with the same
``num_heads`` (and ``scale`` / ``mask_filter_value`` where set); the packed bias stays packed (the
``bias`` input of ``MultiHeadAttention`` is [Hq + Hk + Hv]) and the raw 2-D mask becomes its
``key_padding_mask`` (onnxruntime's CPU kernel takes [batch, sequence], any padding side). An
``Attention`` node with inputs past the mask (past state, attention bias) or ``unidirectional`` set is
left fused; the caller learns how many were split. Tested against the fused graph at padded shapes.
"""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import helper, numpy_helper

from edgebert.graph.ops import replace_nodes

COPIED_ATTRIBUTES = ("num_heads", "scale", "mask_filter_value")


def split_attention(src: str | Path | onnx.ModelProto, dst: str | Path) -> int:
    """Write ``src`` with its splittable ``Attention`` nodes split (see the module docstring) to ``dst``;
    return how many were split (0: ``dst`` is ``src`` re-saved)."""
    return replace_nodes(src, dst, _split)


def _split(node: onnx.NodeProto, inits: dict) -> tuple[list, list] | None:
    """(nodes, initializers) replacing ``node``, or None when it stays as it is."""
    if node.domain != "com.microsoft" or node.op_type != "Attention" or len(node.input) < 3:
        return None
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if attrs.get("unidirectional") or len([i for i in node.input[4:] if i]) or node.input[1] not in inits:
        return None
    weight = numpy_helper.to_array(inits[node.input[1]])           # [H, Hq + Hk + Hv]
    hidden = weight.shape[1] // 3
    sizes = list(attrs.get("qkv_hidden_sizes") or (hidden, hidden, hidden))
    if sum(sizes) != weight.shape[1]:
        return None
    ends = [sizes[0], sizes[0] + sizes[1], weight.shape[1]]
    starts = [0, *ends[:2]]
    nodes, new_inits, outputs = [], [], []
    for part, start, end in zip("qkv", starts, ends):
        w_name, out = f"{node.name}_{part}_weight", f"{node.name}_{part}_output"
        new_inits.append(numpy_helper.from_array(weight[:, start:end].copy(), w_name))
        nodes.append(helper.make_node("MatMul", [node.input[0], w_name], [out], name=f"{node.name}_{part}"))
        outputs.append(out)
    mask = node.input[3] if len(node.input) > 3 else ""
    inputs = [*outputs, node.input[2], *([mask] if mask else [])]
    kept = {k: v for k, v in attrs.items() if k in COPIED_ATTRIBUTES}
    nodes.append(helper.make_node("MultiHeadAttention", inputs, list(node.output[:1]), name=node.name,
                                  domain="com.microsoft", **kept))
    return nodes, new_inits
