"""Rewrite each ``Gemm`` with a constant 2-D weight as ``MatMul`` + ``Add``, so that the 4-bit stage can make its
weight a ``MatMulNBits`` candidate: onnxruntime's 4-bit quantizer takes MatMuls only, and the exporter's pooler
and classifier heads trace to ``Gemm`` (a 384 x 384 pooler kept 8-bit costs a 4-layer student 74 KB of a 10 MB
budget and leaves a U8S8 product in an otherwise 4-bit graph).

Same arithmetic: ``Gemm(A, B, C)`` with ``alpha = beta = 1`` and ``transA = 0`` is ``A @ B' + C`` where ``B'`` is
``B`` (or ``B.T`` when ``transB = 1``). A Gemm with other attributes, a weight that is not an initializer, or a
non-constant ``C`` is left as it is; the caller learns how many were rewritten.
"""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import helper, numpy_helper

from edgebert.graph.ops import replace_nodes


def gemms_to_matmuls(src: str | Path | onnx.ModelProto, dst: str | Path) -> int:
    """Write ``src`` with its constant-weight ``Gemm`` nodes as ``MatMul`` + ``Add`` to ``dst``; how many."""
    return replace_nodes(src, dst, _rewrite)


def _rewrite(node: onnx.NodeProto, inits: dict) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]] | None:
    if node.op_type != "Gemm" or node.domain not in ("", "ai.onnx") or len(node.input) < 2:
        return None
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if attrs.get("alpha", 1.0) != 1.0 or attrs.get("beta", 1.0) != 1.0 or attrs.get("transA", 0):
        return None
    weight = inits.get(node.input[1])
    bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
    if weight is None or len(weight.dims) != 2 or (bias is not None and bias not in inits):
        return None
    values = numpy_helper.to_array(weight)
    values = values.T.copy() if attrs.get("transB", 0) else values
    name = node.name or node.output[0]
    new_weight = numpy_helper.from_array(values, f"{weight.name}/matmul_kn")
    product = f"{node.output[0]}/matmul" if bias else node.output[0]
    nodes = [helper.make_node("MatMul", [node.input[0], new_weight.name], [product], name=f"{name}/MatMul")]
    if bias:
        nodes.append(helper.make_node("Add", [product, bias], [node.output[0]], name=f"{name}/Add"))
    return nodes, [new_weight]
