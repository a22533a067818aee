"""A 4-bit word-embedding table: the fused graph's ``EmbedLayerNormalization`` word table stored as
packed 4-bit values (two per byte) with one float16 scale and one 4-bit zero point per block of
``block`` values along a row (asymmetric: ``scale = (max - min) / 15`` per block), looked up with
onnxruntime's ``GatherBlockQuantized`` contrib op, which dequantizes only the rows a call reads.

Why: in an INT8 graph whose MatMuls are 4-bit the word table is most of the bytes left (60% of a 4-layer
student's bytes as int8 per row); 4 bits halve it again. The lookup is onnxruntime's own op, not a
hand-written unpacking chain.

How, keeping the fused ELN node (as ``quantization.embedding_tables`` does for int8)::

    rows = Reshape(Cast(GatherBlockQuantized(packed, ids, scales_fp16, zero_points)), [-1, H])
    ELN(input_ids = Reshape(Range(0, B*S), shape(ids)), word_embedding = rows, ...)

Only the word table is made 4-bit: the position table is small and read by every text (its error is in
every token); ``table_plan``'s rules (too small, tied weights) still apply.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from edgebert.errors import ConfigError
from edgebert.graph.ops import drop_unused_initializers, load
from edgebert.quantization.embedding_tables import EmbeddingTable, table_plan

WORD = "word_embeddings"
SCALES = "per-block asymmetric uint4 [0, 15] (two per byte), float16 scale and 4-bit zero point per block"


def word_table(model: str | Path | onnx.ModelProto) -> EmbeddingTable | None:
    """The ELN word table that may be stored 4-bit, or None (no fused ELN, tied weights, too small)."""
    return next((t for t in table_plan(model)[0] if t.slot == WORD), None)


def quantize_blocks(table: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(packed uint8 [rows, H/2], float16 scales [rows, H/block], packed zero points [rows, ceil(H/block/2)])``
    of ``table`` [rows, H]; each block's dequantized values are ``(q - zp) * scale`` with q, zp in [0, 15]."""
    rows, hidden = table.shape
    if hidden % block or block < 16 or block & (block - 1):
        raise ConfigError(f"4-bit table block {block} does not divide hidden size {hidden} or is not a power of "
                          "two >= 16", "use a block of 16, 32, 64 or 128 that divides the hidden size")
    blocks = table.reshape(rows, hidden // block, block).astype(np.float32)
    low, high = np.minimum(blocks.min(-1), 0.0), np.maximum(blocks.max(-1), 0.0)   # 0 stays exact
    scale = np.where(high > low, (high - low) / 15.0, 1.0).astype(np.float16).astype(np.float32)
    zero = np.clip(np.rint(-low / scale), 0, 15).astype(np.uint8)
    q = np.clip(np.rint(blocks / scale[..., None]) + zero[..., None], 0, 15).astype(np.uint8).reshape(rows, hidden)
    packed = (q[:, 0::2] | (q[:, 1::2] << 4)).astype(np.uint8)
    if zero.shape[1] % 2:
        zero = np.concatenate([zero, np.zeros((rows, 1), np.uint8)], axis=1)
    zp = (zero[:, 0::2] | (zero[:, 1::2] << 4)).astype(np.uint8)
    return packed, scale.astype(np.float16), zp


def dequantize_blocks(packed: np.ndarray, scale: np.ndarray, zp: np.ndarray, block: int) -> np.ndarray:
    """The float32 table ``quantize_blocks`` stored (what GatherBlockQuantized returns per row)."""
    rows = packed.shape[0]
    q = np.empty((rows, packed.shape[1] * 2), np.float32)
    q[:, 0::2], q[:, 1::2] = packed & 15, packed >> 4
    zero = np.empty((rows, zp.shape[1] * 2), np.float32)
    zero[:, 0::2], zero[:, 1::2] = zp & 15, zp >> 4
    zero = zero[:, :scale.shape[1]]
    blocks = q.reshape(rows, scale.shape[1], block)
    return ((blocks - zero[..., None]) * scale.astype(np.float32)[..., None]).reshape(rows, -1)


def quantize_word_table(in_path: str | Path, out_path: str | Path, block: int) -> dict:
    """Write ``in_path`` with its ELN word table 4-bit (see the module docstring); returns its figures
    (``{"dtype": "float32", "why"}`` and an unchanged copy when the graph has no such table)."""
    model = load(in_path)
    graph = model.graph
    t = word_table(model)
    if t is None:
        onnx.save(model, str(out_path))
        return {"dtype": "float32", "why": "no fused EmbedLayerNormalization word table that may be quantized"}
    inits = {i.name: i for i in graph.initializer}
    table = numpy_helper.to_array(inits[t.initializer]).astype(np.float32)
    packed, scale, zp = quantize_blocks(table, block)
    p = f"{t.candidate}/int4"
    names = (f"{t.initializer}_uint4", f"{t.initializer}_block_scale", f"{t.initializer}_block_zero")
    graph.initializer.extend(numpy_helper.from_array(a, n) for a, n in zip((packed, scale, zp), names))
    node = next(n for n in graph.node if n.name == t.node)
    ids = node.input[0]
    mk = helper.make_node
    consts = {f"{p}/flat_shape": np.array([-1, t.hidden], np.int64), f"{p}/zero": np.array(0, np.int32),
              f"{p}/one": np.array(1, np.int32)}
    graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in consts.items())
    chain = [mk("GatherBlockQuantized", [names[0], ids, names[1], names[2]], [f"{p}/rows_fp16"],
                name=f"{p}/GatherBlockQuantized", domain="com.microsoft", gather_axis=0, quantize_axis=1,
                block_size=block, bits=4),
             mk("Cast", [f"{p}/rows_fp16"], [f"{p}/rows"], name=f"{p}/Cast", to=TensorProto.FLOAT),
             mk("Reshape", [f"{p}/rows", f"{p}/flat_shape"], [f"{p}/table"], name=f"{p}/Reshape_rows"),
             mk("Size", [ids], [f"{p}/count64"], name=f"{p}/Size"),
             mk("Cast", [f"{p}/count64"], [f"{p}/count"], name=f"{p}/Cast_count", to=TensorProto.INT32),
             mk("Range", [f"{p}/zero", f"{p}/count", f"{p}/one"], [f"{p}/order"], name=f"{p}/Range"),
             mk("Shape", [ids], [f"{p}/ids_shape"], name=f"{p}/Shape"),
             mk("Reshape", [f"{p}/order", f"{p}/ids_shape"], [f"{p}/ids"], name=f"{p}/Reshape_ids")]
    node.input[0], node.input[t.index] = f"{p}/ids", f"{p}/table"
    ordered = []
    for n in graph.node:
        ordered += chain if n.name == t.node else []
        ordered.append(n)
    del graph.node[:]
    graph.node.extend(ordered)
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    drop_unused_initializers(graph)
    onnx.save(model, str(out_path))
    error = float(np.abs(dequantize_blocks(packed, scale, zp, block) - table).max())
    return {"dtype": "uint4", "rows": t.rows, "hidden": t.hidden, "block": block, "scales": SCALES,
            "bytes": packed.nbytes + scale.nbytes + zp.nbytes, "fp32_bytes": t.rows * t.hidden * 4,
            "max_abs_error": float(f"{error:.3g}")}
