"""Compact storage for a finished CPU INT8 graph: the same graph in fewer bytes (what a page or a device
downloads), measured by the accuracy gate like every other step because the gate reads the stored file.

* no ``value_info``: the shapes ONNX inferred while quantizing (onnxruntime infers its own when it loads);
* no all-zero weight zero points: they are optional inputs of ``MatMulIntegerToFloat`` and ``QAttention``,
  and an absent one means 0 (symmetric int8 weights);
* per-channel weight scales, and the 4-bit graph's per-block ``MatMulNBits`` scales, stored as float16 (the
  embedding tables' row scales already are: ``quantization.embedding_tables``), each read through one ``Cast``
  to float32 (a constant: onnxruntime folds it when the session loads). Rounding a scale to float16 moves it by
  at most 2^-11 of itself, a sixteenth of the rounding of a 7-bit weight (half a step, 1/128 of the column's
  largest weight) and 1/128 of a 4-bit one's. At block 32 that is 2 bytes per 32 weights instead of 4.

A scale outside float16's normal range stays float32.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from edgebert.graph.ops import drop_unused_initializers, load

# (op type, input index) of the optional weight zero points, and of the per-channel weight scales
ZERO_POINT_INPUTS = {"MatMulIntegerToFloat": 5, "QAttention": 7}
SCALE_INPUTS = {"MatMulIntegerToFloat": 3, "QAttention": 4, "MatMulNBits": 2}
FP16_SUFFIX = "_fp16"
MIN_ELEMENTS = 64                        # a scalar or a handful of scales: the Cast costs more than it saves
FP16_NORMAL = (2.0 ** -14, 65504.0)      # float16's normal range (also the embedding tables' row scales)


def compact_storage(path: str | Path, out_path: str | Path | None = None) -> dict[str, int]:
    """Rewrite the INT8 graph at ``path`` (in place unless ``out_path``) as above; the counts of what changed."""
    model = load(path)
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    counts = {"value_info": len(graph.value_info), "zero_points_dropped": 0, "scales_float16": 0}
    del graph.value_info[:]
    for node in graph.node:
        index = ZERO_POINT_INPUTS.get(node.op_type)
        if index is None or len(node.input) <= index or node.input[index] not in inits:
            continue
        if not numpy_helper.to_array(inits[node.input[index]]).any():
            node.input[index] = ""
            while node.input and not node.input[-1]:
                node.input.pop()
            counts["zero_points_dropped"] += 1
    scales = {n.input[i] for n in graph.node for op, i in SCALE_INPUTS.items() if n.op_type == op and len(n.input) > i}
    casts = []
    for name in sorted(scales & set(inits)):
        values = numpy_helper.to_array(inits[name])
        magnitude = np.abs(values)
        if (values.dtype != np.float32 or values.size < MIN_ELEMENTS or not np.isfinite(values).all()
                or magnitude.min() < FP16_NORMAL[0] or magnitude.max() > FP16_NORMAL[1]):
            continue
        inits[name].CopyFrom(numpy_helper.from_array(values.astype(np.float16), name + FP16_SUFFIX))
        casts.append(helper.make_node("Cast", [name + FP16_SUFFIX], [name], to=onnx.TensorProto.FLOAT,
                                      name=f"{name}{FP16_SUFFIX}_Cast"))
    for offset, cast in enumerate(casts):
        graph.node.insert(offset, cast)
    counts["scales_float16"] = len(casts)
    drop_unused_initializers(graph)
    onnx.save(model, str(out_path or path))
    return counts
