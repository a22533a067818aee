"""GELU in its tanh form where an INT8 product rounds its output anyway.

BERT's GELU is the erf form, ``x * Phi(x)``. onnxruntime also has the tanh form (``FastGelu``:
``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``), which differs from it by at most 4.74e-4 anywhere
(at |x| = 2.70). In a calibrated INT8 graph the GELU output is rounded straight away to the uint8 step of
the feed-forward's second product (about 0.02 in all-MiniLM-L6-v2), or, for an outlier channel, carried in
float only beyond that product's clip range, where the two forms differ by less still. When that step is at
least ``STEP_MULTIPLE`` times the largest difference, the tanh form moves what the product sees by at most a
tenth of a rounding step (MiniLM: a 44th), and ``tanh_gelus`` uses it.

Why: onnxruntime-web's WASM kernels compute erf slower than tanh; measured on all-MiniLM-L6-v2's portable
graph, 1 thread, Node 20, onnxruntime-web 1.31 (Intel Xeon, x86-vnni kind): 5-6 % faster at 24 and at 128
tokens; native onnxruntime about the same (benchmarks/results/int8_targets/decisions.md). Accuracy against the
fp32 graph, 300 SST-2 sentences: token cosine mean 0.99608 -> 0.99606, 1st percentile 0.99136 -> 0.99140.
The export gate measures the graph after this as after every other change, and the tanh form never costs a node
kept float: when the all-INT8 graph misses the budget with it, the gate makes it again with the erf form first
(``DynamicInt8Quantizer.erf_gelus``; the SST-2 student's portable graph: 3 labels of 200 -> 2, within 0.01).
The fp32 graphs keep the erf form.
"""

from __future__ import annotations

import onnx
from onnx import numpy_helper

from edgebert.graph.ops import readers as graph_readers
from edgebert.quantization.bias_fold import MS_DOMAIN

TANH_MAX_ERROR = 4.74e-4           # max over x of |erf-form GELU - tanh-form GELU|
STEP_MULTIPLE = 10                 # the rounding step must be >= 10x that difference
OUTLIER_GATHER_SUFFIX = "/outlier_Gather"


def tanh_gelus(model: onnx.ModelProto) -> int:
    """Turn each ``Gelu`` / ``BiasGelu`` (com.microsoft) whose output only an INT8 quantization reads (a
    ``QuantizeLinear`` with a constant step >= ``STEP_MULTIPLE * TANH_MAX_ERROR``, and the outlier split's
    ``Gather`` beside it) into ``FastGelu`` with the same inputs, in place; returns how many."""
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    readers = graph_readers(graph)
    outputs = {o.name for o in graph.output}

    def coarse_step(node: onnx.NodeProto) -> bool:
        scale = inits.get(node.input[1]) if len(node.input) > 1 else None
        if scale is None:
            return False
        step = numpy_helper.to_array(scale)
        return step.size > 0 and float(step.min()) >= STEP_MULTIPLE * TANH_MAX_ERROR

    changed = 0
    for node in graph.node:
        if node.domain != MS_DOMAIN or node.op_type not in ("Gelu", "BiasGelu"):
            continue
        out = node.output[0]
        found = readers.get(out, [])
        quantizers = [r for r in found if r.op_type == "QuantizeLinear"]
        others = [r for r in found if r.op_type != "QuantizeLinear"]
        if (out in outputs or not quantizers or not all(coarse_step(q) for q in quantizers)
                or not all(r.op_type == "Gather" and r.name.endswith(OUTLIER_GATHER_SUFFIX) for r in others)):
            continue
        node.op_type = "FastGelu"          # FastGelu(X[, bias]): the same inputs as Gelu / BiasGelu
        changed += 1
    return changed
