"""The bundle's INT8 entries: one CPU graph per deployment target, and the static QDQ graph for TensorRT.

``quantization.int8_graphs.Int8Maker`` makes each graph and measures it on text (channel ranges, the
outlier split, the target's quantization with calibrated activation scales, the accuracy gate, batch
invariance). This module is the export's side: it validates against PyTorch what it is handed (the
outlier split exactly, once per ratio; each INT8 graph at untraced shapes, reported), names the files
and writes each graph's manifest entry, with what a host needs to run it exactly (``requires``).
"""

from __future__ import annotations

from edgebert.exporters.gpu_graphs import GPU_FILES, tensorrt_fields
from edgebert.exporters.int4 import export_int4
from edgebert.exporters.job import ExportJob
from edgebert.exporters.manifest_build import OPENVINO_FILE, OPENVINO_WEIGHTS, export_host, int8_file
from edgebert.exporters.validate import GraphValidator
from edgebert.quantization.config import Int8Config
from edgebert.quantization.int4 import Int4Config
from edgebert.quantization.int8_graphs import Int8Graph, Int8Maker, OutlierSplit
from edgebert.runtime.trt_profile import TrtProfile

SUMMARY = ("metric", "mean", "min", "n", "loss", "f1", "fp32_f1", "within_budget")   # the progress line's figures


def export_int8(job: ExportJob, check: GraphValidator, qcfg: Int8Config,
                tensorrt: TrtProfile | None = None, small: Int4Config | None = None) -> dict[str, dict]:
    """The bundle's INT8 manifest entries: ``{"int8": default CPU target's, "int8-<target>": ...}`` (dynamic
    mode; ``"int8-openvino"`` for ``--target openvino``: an OpenVINO IR, ``.xml`` + ``.bin``), and ``"int8-trt"`` (static QDQ) when a TensorRT profile is given (static mode: only that one); with ``small``, the
    small graph's ``"int4"`` (``exporters.int4``), gated on the same feeds."""
    maker = Int8Maker(qcfg, job.task, job.fused, tokenizer=job.tokenizer, pad_id=job.pad_id, work=job.work,
                      say=check.say, max_length=job.max_len)
    entries = {}
    if qcfg.mode == "dynamic":
        recipes, notes = qcfg.recipes()
        for note in notes:
            check.say(note)
        splits: dict[tuple[float, float], OutlierSplit] = {}
        for i, recipe in enumerate(recipes):
            key = (recipe.smooth_alpha, recipe.outlier_ratio)
            if key not in splits:
                splits[key] = _validated(maker.outlier_split(recipe), check)
            out = job.staging / int8_file(recipe.target, default=i == 0)
            graph = maker.target_graph(recipe, splits[key], out)
            entries["int8" if i == 0 else f"int8-{recipe.target}"] = {**_entry(graph, check, job), "providers": ["cpu"]}
        if qcfg.openvino:
            graph = maker.openvino_graph(job.raw, job.staging / OPENVINO_FILE, export_host()["kind"])
            entries["int8-openvino"] = {**_entry(graph, check, job), "engine": "openvino", "providers": ["openvino"],
                                        "weights": OPENVINO_WEIGHTS}
        if small is not None:
            entries.update(export_int4(job, check, maker, small))
    if tensorrt is not None:
        graph = maker.static_graph(job.raw, job.staging / GPU_FILES["int8-trt"])
        entries["int8-trt"] = {**_entry(graph, check, job), **tensorrt_fields(graph.path, tensorrt, "int8 tensorrt")}
    return entries


def default_precision(models: dict[str, dict]) -> dict:
    """``{"default_precision": {"precision": "fp32", "reason"}}`` when every CPU INT8 graph missed its
    accuracy budget (a question-answering gate may: ``accuracy.within_budget`` false), else ``{}``: the bundle
    then says so, and a session that names no precision loads fp32 (``edgebert.runtime.precision``). Where
    some graph passed, a session runs INT8 with a passing graph (``runtime.int8_choice``: a graph over its
    budget is passed over while another runs here)."""
    cpu_int8 = {k: e for k, e in models.items() if e["precision"] == "int8" and k != "int8-trt" and "accuracy" in e}
    missed = {k: e["accuracy"] for k, e in cpu_int8.items() if e["accuracy"].get("within_budget") is False}
    if not missed or len(missed) < len(cpu_int8):
        return {}
    said = "; ".join(f"{k} loses {a['loss']:g} (> {a['max_accuracy_loss']:g}, {a['metric']})" for k, a in missed.items())
    return {"default_precision": {"precision": "fp32", "reason": f"the INT8 accuracy gate missed its budget at "
                                                                 f"export: {said}; INT8 stays loadable by name"}}


def _validated(split: OutlierSplit, check: GraphValidator) -> OutlierSplit:
    """A new split (or smoothed) graph must compute what the fused graph does (exact in fp32): checked like any
    graph."""
    if not split.made:
        return split
    stage = "smoothing + outlier split" if split.figures["smoothing"]["applied"] else "outlier split"
    val = check.check(split.path, stage)
    split = split.with_figures(max_abs_diff=val["max_abs_diff"])
    check.say(f"validated {stage}", nodes=len(split.plan), channels=split.figures.get("channels", 0),
              max_abs_diff=val["max_abs_diff"])
    return split


def _entry(graph: Int8Graph, check: GraphValidator, job: ExportJob) -> dict:
    """``graph``'s manifest entry, with its outputs compared with PyTorch (reported, not gated: INT8)."""
    validation = check.measure(graph.path, f"int8 {graph.target}")
    quant, accuracy = graph.quantization, graph.accuracy
    entry = {"file": job.name_of(graph.path), "precision": "int8", "target": graph.target, "requires": graph.requires,
             "recipe": graph.recipe, "graph": quant["graph"], "quantization": quant,
             "accuracy": accuracy, "batch_invariance": graph.batch_invariance, "validation": validation}
    check.say(f"INT8 {graph.target} done", op_counts=quant["op_counts"],
              accuracy={k: v for k, v in accuracy.items() if k in SUMMARY},
              excluded=quant["excluded_nodes"], batch_invariance=graph.batch_invariance["max_1_minus_cos"],
              embedding_tables={k: t["dtype"] for k, t in (quant.get("embedding_tables") or {}).items()})
    return entry
