"""The bundle's small graph (``int4``: 4-bit MatMuls and word table, the rest 8-bit; ``quantization.int4``).

Gated on the same held-out text and budget as INT8 (an ``Int8Maker``'s feeds and probe), validated against
PyTorch at untraced shapes (reported, not gated, like INT8), written as ``onnx/model_q4.onnx`` (the name
transformers.js loads for dtype ``q4``). Its manifest entry says what was done: bits, blocks,
accuracy_level, which candidates stayed 8-bit, the gate's figures and the bytes. A graph over its budget
is written and marked (``accuracy.within_budget: false``); a session loads the small graph only when asked
(``precision="int4"``), never by default.
"""

from __future__ import annotations

from edgebert.exporters.job import ExportJob
from edgebert.exporters.validate import GraphValidator
from edgebert.quantization.int4 import Int4Config, small_graph
from edgebert.quantization.int8_graphs import Int8Maker

INT4_FILE = "onnx/model_q4.onnx"


def export_int4(job: ExportJob, check: GraphValidator, maker: Int8Maker, cfg: Int4Config) -> dict[str, dict]:
    """``{"int4": entry}``: the small graph of the job's fused graph, gated like INT8 (the INT8 export's
    ``maker``: its feeds and budget; ``cfg.max_accuracy_loss`` overrides the budget)."""
    out = job.staging / INT4_FILE
    graph = small_graph(job.fused, out, cfg, maker.probe, maker.budget, check.say,
                        maker.qcfg.sensitivity_size, calibration=maker.feeds.calibration)
    validation = check.measure(out, "int4")
    accuracy = {**graph.accuracy, "within_budget": graph.within_budget,
                "held_out": maker.feeds.describe()["held_out"]}
    check.say("INT4 (small) done", op_counts=graph.quantization["op_counts"], bytes=graph.bytes,
              eight_bit=graph.quantization["eight_bit"],
              accuracy={k: accuracy.get(k) for k in ("metric", "mean", "min", "loss", "within_budget")})
    return {"int4": {"file": job.name_of(out), "precision": "int4", "target": "portable", "providers": ["cpu"],
                     "requires": graph.requires, "graph": "fused", "quantization": graph.quantization,
                     "accuracy": accuracy, "bytes": graph.bytes, "validation": validation}}
