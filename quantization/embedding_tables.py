"""INT8 embedding tables: the fused graph's ``EmbedLayerNormalization`` tables stored as int8 with one
float16 scale per row (symmetric: ``scale = max|row| / 127`` rounded up to a float16, the rows quantized
with that scale, so the stored pair is exact), looked up and dequantized per token.

Why: left fp32, the word-embedding table is most of an INT8 graph's bytes, and a lookup table has no
arithmetic to speed up, only bytes to store (figures: benchmarks/results/int8_embedding_tables/).

How (standard ops only, so it runs on onnxruntime CPU everywhere, WASM included), keeping the fused
``EmbedLayerNormalization`` (ELN) node::

    rows  = Reshape(Cast(Gather(table_int8, ids)) * Cast(Gather(row_scale, ids)), [-1, H])   # [B*S, H]
    ELN(input_ids = Reshape(Range(0, B*S), shape(ids)), word_embedding = rows, ...)

so only the B*S rows a call reads are dequantized, never the table; the position table likewise through
ELN's position ids when the graph passes them, else over its first S rows (``Slice``): the rows
positions 0..S-1 read. ELN's other inputs (segment
ids, mask) and outputs (mask index) are untouched. A table too small to matter (the two token-type
rows) or read by another node as well (a tied output projection: its fp32 copy would stay) stays fp32;
``table_plan`` says which and why. Each table is one candidate of the accuracy gate (``CANDIDATE``
names), so the sensitivity search can keep it fp32 like any node.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from edgebert.graph.ops import drop_unused_initializers, load
from edgebert.quantization.storage import FP16_NORMAL

ELN = "EmbedLayerNormalization"
SLOTS = {2: "word_embeddings", 3: "position_embeddings", 4: "token_type_embeddings"}   # ELN input index
IDS = {"word_embeddings": 0, "position_embeddings": 8}      # ELN input of the ids that index each table
MIN_ROWS = 64            # fewer rows: int8 saves under 3 x 64 x hidden bytes, not worth a lookup chain
CANDIDATE = "{node}/{slot}"       # the gate's candidate name of one table (not a graph node)
SCALES = "per-row symmetric int8 [-127, 127], float16 scale = max|row| / 127 (rounded up)"
GATE_KEPT = "kept fp32 by the accuracy gate: the loss was over budget with it int8 (see accuracy.sensitivity)"
RECIPE_OFF = "int8 embedding tables are off in this recipe (embedding_tables=False)"


@dataclass(frozen=True)
class EmbeddingTable:
    """One table of an ELN node that may be stored int8."""
    candidate: str
    node: str
    slot: str
    index: int               # ELN input index
    initializer: str
    rows: int
    hidden: int


def table_plan(model: str | Path | onnx.ModelProto) -> tuple[list[EmbeddingTable], dict[str, str]]:
    """``(tables that may be int8, {slot: why it stays fp32})`` of the graph's ELN nodes."""
    graph = load(model).graph
    inits = {i.name: i for i in graph.initializer}
    readers: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    tables, kept = [], {}
    for node in graph.node:
        if node.op_type != ELN:
            continue
        for index, slot in SLOTS.items():
            name = node.input[index] if len(node.input) > index else ""
            init = inits.get(name)
            if init is None or init.data_type != TensorProto.FLOAT or len(init.dims) != 2:
                continue
            rows, hidden = int(init.dims[0]), int(init.dims[1])
            if rows < MIN_ROWS:
                kept[slot] = f"{rows} rows ({rows * hidden * 4} bytes fp32): too small to pay for a lookup"
            elif readers.get(name, 0) > 1:
                kept[slot] = "read by another node too (tied weights): an int8 copy would add bytes"
            else:
                tables.append(EmbeddingTable(CANDIDATE.format(node=node.name, slot=slot), node.name, slot, index,
                                             name, rows, hidden))
    return tables, kept


def quantize_rows(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(int8 table, scales [rows, 1])``, symmetric per row; an all-zero row gets scale 1. The scales are
    float16 (each rounded up, so no row clips), or float32 for a table whose rows exceed float16's range."""
    absmax = np.abs(table).max(axis=1, keepdims=True).astype(np.float32)
    scale = np.where(absmax > 0, absmax / 127.0, 1.0).astype(np.float32)
    if scale.max() * 1.001 < FP16_NORMAL[1]:
        half = scale.astype(np.float16)
        low = half.astype(np.float32) < scale
        half[low] = np.nextafter(half[low], np.float16(np.inf))    # a tiny row: float16's smallest step
        scale = half
    return np.clip(np.rint(table / scale.astype(np.float32)), -127, 127).astype(np.int8), scale


def quantize_tables(in_path: str | Path, out_path: str | Path, candidates: set[str] | list[str],
                    why_fp32: str = GATE_KEPT) -> dict:
    """Write ``in_path`` with the tables named in ``candidates`` (``EmbeddingTable.candidate``) int8 and
    looked up per token; returns ``{slot: figures}`` for every table, int8 or kept fp32 (and why: the
    others that could be int8 say ``why_fp32``)."""
    model = load(in_path)
    graph = model.graph
    tables, kept = table_plan(model)
    wanted = [t for t in tables if t.candidate in set(candidates)]
    inits = {i.name: i for i in graph.initializer}
    nodes = {n.name: n for n in graph.node}
    ids = {n.name: list(n.input) for n in graph.node if n.op_type == ELN}  # before a lookup renames them
    before: dict[str, list[onnx.NodeProto]] = {}
    figures: dict[str, dict] = {slot: {"dtype": "float32", "why": why} for slot, why in kept.items()}
    for t in tables:
        if t not in wanted:
            figures[t.slot] = {"dtype": "float32", "rows": t.rows, "hidden": t.hidden, "bytes": t.rows * t.hidden * 4,
                               "why": why_fp32}
    for t in wanted:
        table = numpy_helper.to_array(inits[t.initializer]).astype(np.float32)
        q, scale = quantize_rows(table)
        qname, sname = f"{t.initializer}_int8", f"{t.initializer}_row_scale"
        graph.initializer.extend([numpy_helper.from_array(q, qname), numpy_helper.from_array(scale, sname)])
        node, inputs = nodes[t.node], ids[t.node]
        k = IDS[t.slot]
        if len(inputs) > k and inputs[k]:
            chain = _lookup(node, inputs[k], k, t, qname, sname, graph)
        else:             # positions without ids: ELN reads rows 0..S-1
            chain = _first_rows(node, inputs[0], t, qname, sname, graph)
        before.setdefault(t.node, []).extend(chain)
        figures[t.slot] = {"dtype": "int8", "rows": t.rows, "hidden": t.hidden, "bytes": q.nbytes + scale.nbytes,
                           "fp32_bytes": t.rows * t.hidden * 4, "scales": SCALES,
                           "max_abs_error": float(f"{float(np.abs(q * scale.astype(np.float32) - table).max()):.3g}")}
    if before:
        ordered = []
        for node in graph.node:
            ordered += before.get(node.name, []) if node.op_type == ELN else []
            ordered.append(node)
        del graph.node[:]
        graph.node.extend(ordered)
        drop_unused_initializers(graph)
        onnx.checker.check_model(model)
    onnx.save(model, str(out_path))
    return figures


def _const(graph: onnx.GraphProto, name: str, value: np.ndarray) -> str:
    if name not in {i.name for i in graph.initializer}:
        graph.initializer.append(numpy_helper.from_array(value, name))
    return name


def _dequantized(p: str, table: str, scale: str, index: str, op: str,
                 extra: tuple[str, ...] = ()) -> tuple[list[onnx.NodeProto], str]:
    """Rows of ``table`` picked by ``op`` (Gather by ids, or Slice) times their scales: fp32."""
    mk = helper.make_node
    nodes = [mk(op, [table, index, *extra], [f"{p}/rows_int8"], name=f"{p}/{op}_rows"),
             mk(op, [scale, index, *extra], [f"{p}/rows_scale_stored"], name=f"{p}/{op}_scales"),
             mk("Cast", [f"{p}/rows_int8"], [f"{p}/rows_cast"], name=f"{p}/Cast", to=TensorProto.FLOAT),
             mk("Cast", [f"{p}/rows_scale_stored"], [f"{p}/rows_scale"], name=f"{p}/Cast_scales", to=TensorProto.FLOAT),
             mk("Mul", [f"{p}/rows_cast", f"{p}/rows_scale"], [f"{p}/rows"], name=f"{p}/Mul")]
    return nodes, f"{p}/rows"


def _lookup(node: onnx.NodeProto, ids: str, slot: int, t: EmbeddingTable, qname: str, sname: str,
            graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """The rows ``ids`` (ELN input ``slot``) name, as ELN's table, read back in order through ids 0..n-1."""
    mk, p = helper.make_node, t.candidate
    nodes, rows = _dequantized(p, qname, sname, ids, "Gather")
    flat = _const(graph, f"{p}/flat_shape", np.array([-1, t.hidden], np.int64))
    zero = _const(graph, f"{p}/zero", np.array(0, np.int32))
    one = _const(graph, f"{p}/one", np.array(1, np.int32))
    nodes += [mk("Reshape", [rows, flat], [f"{p}/table"], name=f"{p}/Reshape_rows"),
              mk("Size", [ids], [f"{p}/count64"], name=f"{p}/Size"),
              mk("Cast", [f"{p}/count64"], [f"{p}/count"], name=f"{p}/Cast_count", to=TensorProto.INT32),
              mk("Range", [zero, f"{p}/count", one], [f"{p}/order"], name=f"{p}/Range"),
              mk("Shape", [ids], [f"{p}/ids_shape"], name=f"{p}/Shape"),
              mk("Reshape", [f"{p}/order", f"{p}/ids_shape"], [f"{p}/ids"], name=f"{p}/Reshape_ids")]
    node.input[slot], node.input[t.index] = f"{p}/ids", f"{p}/table"
    return nodes


def _first_rows(node: onnx.NodeProto, ids: str, t: EmbeddingTable, qname: str, sname: str,
                     graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """The first S rows (the positions 0..S-1 ELN reads without position ids) as its position table."""
    mk, p = helper.make_node, t.candidate
    start = _const(graph, f"{p}/start", np.array([0], np.int64))        # also the Slice axis: rows
    seq_dim = _const(graph, f"{p}/seq_dim", np.array([1], np.int64))
    nodes = [mk("Shape", [ids], [f"{p}/ids_shape"], name=f"{p}/Shape"),
             mk("Gather", [f"{p}/ids_shape", seq_dim], [f"{p}/length"], name=f"{p}/Gather_length", axis=0)]
    chain, rows = _dequantized(p, qname, sname, start, "Slice", (f"{p}/length", start))
    # ELN's shape inference needs the hidden size known: Slice with a runtime end leaves it unknown
    flat = _const(graph, f"{p}/flat_shape", np.array([-1, t.hidden], np.int64))
    chain.append(mk("Reshape", [rows, flat], [f"{p}/table"], name=f"{p}/Reshape_rows"))
    node.input[t.index] = f"{p}/table"
    return nodes + chain
