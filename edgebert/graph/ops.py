"""Small questions about an ONNX graph (op counts, weight-bearing nodes, unused initializers) and quiet
onnxruntime logs: generic helpers shared by the exporters and the quantizers."""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from pathlib import Path
from typing import Callable, Iterator

import onnx

QUANTIZED_OP_TYPES = ("MatMulInteger", "DynamicQuantizeMatMul", "QAttention", "QLinearMatMul",
                      "QGemm", "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear")


def load(model: str | Path | onnx.ModelProto) -> onnx.ModelProto:
    return model if isinstance(model, onnx.ModelProto) else onnx.load(str(model), load_external_data=False)


def op_type_counts(model: str | Path | onnx.ModelProto) -> dict[str, int]:
    """``{op_type: count}`` over the main graph, most frequent first."""
    return dict(Counter(n.op_type for n in load(model).graph.node).most_common())


def weight_nodes(model: str | Path | onnx.ModelProto, op_types: tuple[str, ...]) -> list[str]:
    """Names of nodes of ``op_types`` that take at least one initializer (a weight) as input."""
    graph = load(model).graph
    inits = {i.name for i in graph.initializer}
    return [n.name for n in graph.node if n.op_type in op_types and any(i in inits for i in n.input)]


def readers(graph: onnx.GraphProto) -> dict[str, list[onnx.NodeProto]]:
    """Each tensor name -> the nodes that read it, in graph order."""
    found: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            found.setdefault(name, []).append(node)
    return found


def drop_unused_initializers(graph: onnx.GraphProto) -> int:
    """Remove initializers no node (or graph output) reads; returns how many were removed."""
    used = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
    unused = [init for init in graph.initializer if init.name not in used]
    for init in unused:
        graph.initializer.remove(init)
    return len(unused)


Replacement = tuple[list[onnx.NodeProto], list[onnx.TensorProto]]     # the nodes and new initializers for one node


def replace_nodes(src: str | Path | onnx.ModelProto, dst: str | Path,
                  rewrite: Callable[[onnx.NodeProto, dict[str, onnx.TensorProto]], Replacement | None]) -> int:
    """Write ``src`` to ``dst`` with each node for which ``rewrite(node, initializers)`` gives (nodes, new
    initializers) replaced by those, in place in the node order (None keeps the node); initializers no node reads
    any more are dropped. Returns how many nodes were replaced (0: ``dst`` is ``src`` re-saved)."""
    model = load(src)
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    nodes, replaced = [], 0
    for node in graph.node:
        parts = rewrite(node, inits)
        if parts is None:
            nodes.append(node)
            continue
        nodes.extend(parts[0])
        graph.initializer.extend(parts[1])
        replaced += 1
    del graph.node[:]
    graph.node.extend(nodes)
    drop_unused_initializers(graph)
    onnx.save(model, str(dst))
    return replaced


def weight_node_inputs(model: str | Path | onnx.ModelProto, op_types: tuple[str, ...]) -> list[str]:
    """The activation inputs (input 0) of the weight-bearing nodes of ``op_types``, in graph order."""
    graph = load(model).graph
    inits = {i.name for i in graph.initializer}
    wanted = {n.name for n in graph.node if n.op_type in op_types and any(i in inits for i in n.input)}
    return list(dict.fromkeys(n.input[0] for n in graph.node if n.name in wanted))


def op_domains(model: str | Path | onnx.ModelProto) -> list[str]:
    """Operator domains the main graph uses (``ai.onnx`` for the default domain), sorted."""
    return sorted({n.domain or "ai.onnx" for n in load(model).graph.node})


def quantized_biases(model: str | Path | onnx.ModelProto) -> list[str]:
    """DequantizeLinear nodes that read an int32 initializer: biases quantized to int32 (TensorRT rejects
    them)."""
    graph = load(model).graph
    int32 = {i.name for i in graph.initializer if i.data_type == onnx.TensorProto.INT32}
    return [n.name for n in graph.node if n.op_type == "DequantizeLinear" and n.input and n.input[0] in int32]


def activation_matmuls(model: str | Path | onnx.ModelProto) -> list[str]:
    """MatMul nodes whose inputs are both activations (attention scores QK^T and context PV)."""
    graph = load(model).graph
    inits = {i.name for i in graph.initializer}
    return [n.name for n in graph.node if n.op_type == "MatMul" and not any(i in inits for i in n.input)]


@contextlib.contextmanager
def quiet_logging(level: int = logging.ERROR) -> Iterator[None]:
    """onnxruntime's quantizer and optimizer warn on the root logger ("consider pre-processing" ...)."""
    loggers = [logging.getLogger(), logging.getLogger("onnxruntime"), logging.getLogger("onnx")]
    old = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(level)
    try:
        yield
    finally:
        for lg, lvl in zip(loggers, old):
            lg.setLevel(lvl)
