"""INT8 graphs of a bundle: one per deployment target (CPU), and the static QDQ graph for TensorRT.

Per target (``quantization.targets``): channel ranges on calibration text (once), the outlier split
(validated against PyTorch: exact in fp32), the target's quantization with calibrated activation
scales, the accuracy gate on held-out text (sensitive nodes kept float until the budget is met), then
validation at untraced shapes and a batch-invariance measurement. Every figure lands in the graph's
manifest entry, with what a host needs to run the graph exactly (``requires``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from edgebert.errors import ValidationError
from edgebert.runtime.hostcpu import detect_host
from edgebert.runtime.trt_profile import TrtProfile
from quantization.accuracy import AccuracyProbe, batch_invariance, quantize_with_guard
from quantization.activations import ChannelStats
from quantization.calibration import TextBatches, calibration_split, encode_batch, prepared_tokenizer
from quantization.config import Int8Config
from quantization.dynamic import DynamicInt8Quantizer
from edgebert.graph.ops import op_type_counts, quantized_biases, weight_node_inputs
from quantization.outliers import split_outliers
from quantization.static import StaticQdqInt8Quantizer
from quantization.targets import Int8Recipe

from .bundle import int8_file
from .gpu_graphs import GPU_FILES, tensorrt_fields
from .validate import Case, validate_graph

Say = Callable[..., None]


class Int8Export:
    """Everything the INT8 graphs of one export share: text, tokenizer, fp32 reference, validation."""

    def __init__(self, qcfg: Int8Config, task: str, raw: Path, fused: Path, work: Path, tok_file: Path,
                 pad_id: int, cases: list[Case], refs: list, names: tuple[str, ...], fp32_tolerance: float,
                 say: Say):
        self.qcfg, self.task, self.raw, self.fused, self.work = qcfg, task, raw, fused, work
        self.cases, self.refs, self.names, self.fp32_tolerance, self.say = cases, refs, names, fp32_tolerance, say
        self.pad_id = pad_id
        self.tok = prepared_tokenizer(tok_file, qcfg.calib_seq_len)
        self.split = calibration_split(qcfg.calib, qcfg.calib_size, qcfg.gate_size)
        self.calib_batches = self._batches(self.split.calibration)
        self.gate_batches = self._batches(self.split.held_out)
        say(f"fp32 reference on held-out text ({self.split.held_out.describe()['source']})")
        self.probe = AccuracyProbe(task, fused, self.gate_batches)
        self.budget = qcfg.budget(task)
        self._stats: ChannelStats | None = None
        self._splits: dict[float, tuple[Path, dict, dict]] = {}

    def _batches(self, source, pad_to: int | None = None) -> TextBatches:
        return TextBatches(source, self.tok, None, self.qcfg.calib_batch_size, self.qcfg.calib_seq_len,
                           pad_to=pad_to, pad_id=self.pad_id)

    def calibration(self) -> dict:
        return {**self.split.describe(), "max_length": self.qcfg.calib_seq_len}

    # ------------------------------------------------------------------ CPU targets
    def stats(self, op_types: tuple[str, ...]) -> ChannelStats:
        """Per-channel ranges of every quantizable input on the calibration text (collected once)."""
        if self._stats is None:
            self.say(f"activation ranges on {self.split.calibration.describe()['texts']} calibration texts")
            self._stats = ChannelStats.collect(self.fused, self.calib_batches,
                                               weight_node_inputs(self.fused, (*op_types, "Gemm")))
        return self._stats

    def outlier_split(self, ratio: float, stats: ChannelStats) -> tuple[Path, dict, dict]:
        """(graph, plan, manifest figures) of the split at ``ratio`` (made and validated once per ratio)."""
        if ratio == 0:
            return self.fused, {}, {"applied": False, "reason": "off (outlier ratio 0)"}
        if ratio not in self._splits:
            self.say(f"splitting outlier channels (ratio {ratio:g})")
            path = self.work / f"model.split-{ratio:g}.onnx"
            plan = split_outliers(self.fused, path, None, ratio, stats=stats)
            val = validate_graph(path, self.cases, self.refs, self.names, self.fp32_tolerance, "outlier split")
            figures = {"applied": True, "ratio": ratio, "nodes": len(plan),
                       "channels": sum(len(c) for c in plan.values()), "float_channels": plan,
                       "max_abs_diff": val["max_abs_diff"]}
            self.say("validated outlier split", nodes=len(plan), channels=figures["channels"],
                     max_abs_diff=val["max_abs_diff"])
            self._splits[ratio] = (path, plan, figures)
        return self._splits[ratio]

    def target_graph(self, recipe: Int8Recipe, out: Path) -> dict:
        """Make, gate, validate and measure one target's graph at ``out``; its manifest entry."""
        stats = self.stats(recipe.op_types)
        source, plan, split_figures = self.outlier_split(recipe.outlier_ratio, stats)
        quantizer = DynamicInt8Quantizer(source, recipe, stats, plan)
        candidates = quantizer.candidates()
        self.say(f"quantizing INT8 for {recipe.target} ({len(candidates)} nodes)")
        # the guard's last quantize() call wrote the kept file, so last_scales describe it
        guard = quantize_with_guard(quantizer, out, self.probe, self.budget, self.qcfg.sensitivity_size, self.say)
        quant = {**quantizer.describe(), "candidate_nodes": len(candidates),
                 "quantized_nodes": len(candidates) - len(guard.excluded), "excluded_nodes": guard.excluded,
                 "op_counts": op_type_counts(out), "outlier_split": split_figures,
                 "calibration": self.calibration()}
        if quantizer.last_scales is not None:
            quant["calibrated_scales"] = {k: quantizer.last_scales[k] for k in ("tensors", "fused_matmuls")}
        return self._entry(out, recipe.target, quant, guard, recipe.requirements(), recipe.as_dict())

    # ------------------------------------------------------------------ TensorRT (static QDQ)
    def static_graph(self, out: Path, profile: TrtProfile, input_names: list[str]) -> dict:
        """The TensorRT INT8 graph: QDQ S8S8 on the standard-op graph, biases float, with its profile."""
        padded = self._batches(self.split.calibration, pad_to=self.qcfg.calib_seq_len)
        quantizer = StaticQdqInt8Quantizer(self.raw, self.qcfg, padded, self.work)
        candidates = quantizer.candidates()
        self.say(f"quantizing INT8 (static QDQ, {len(candidates)} nodes)")
        guard = quantize_with_guard(quantizer, out, self.probe, self.budget, self.qcfg.sensitivity_size, self.say)
        biases = quantized_biases(out)
        if biases:
            raise ValidationError(f"int8 tensorrt: {len(biases)} bias(es) quantized to int32 ({biases[0]} ...); "
                                  "TensorRT rejects them", figures={"stage": "int8 tensorrt", "nodes": biases})
        quant = {**quantizer.describe(), "candidate_nodes": len(candidates),
                 "quantized_nodes": len(candidates) - len(guard.excluded), "excluded_nodes": guard.excluded,
                 "op_counts": op_type_counts(out), "quantized_biases": 0, "calibration": self.calibration()}
        needs = {"arch": ["any"], "u8s8_exact": False, "exact_on": ["TensorRT (QDQ S8S8, trt_int8_enable)"]}
        entry = self._entry(out, "tensorrt", quant, guard, needs, None)
        return {**entry, **tensorrt_fields(out, profile, input_names, "int8 tensorrt")}

    # ------------------------------------------------------------------ shared
    def _entry(self, out: Path, target: str, quant: dict, guard, requires: dict, recipe: dict | None) -> dict:
        validation = validate_graph(out, self.cases, self.refs, self.names, None, f"int8 {target}")
        accuracy = {**guard.as_dict(self.budget), "held_out": self.split.held_out.describe(),
                    "arithmetic": "exact U8S8 products (session.x64quantprecision=1 where the export host "
                                  "saturates): the figure of a host that runs the graph correctly"}
        invariance = batch_invariance(out, self.task, self._invariance_probe(), self._long_batch_mates())
        entry = {"file": out.name, "precision": "int8", "target": target, "requires": requires,
                 "recipe": recipe, "graph": quant.get("graph", "fused"), "quantization": quant,
                 "accuracy": accuracy, "batch_invariance": invariance, "validation": validation}
        self.say(f"INT8 {target} done", op_counts=quant["op_counts"],
                 accuracy={k: accuracy[k] for k in ("metric", "mean", "min", "n", "loss")},
                 excluded=quant["excluded_nodes"], batch_invariance=invariance["max_1_minus_cos"])
        return entry

    def _invariance_probe(self) -> list[dict]:
        texts = [t for _, t in zip(range(8), self.split.held_out)]
        return [encode_batch(self.tok, texts, self.qcfg.calib_seq_len, pad_id=self.pad_id)]

    def _long_batch_mates(self) -> dict:
        longest = sorted(self.split.calibration, key=len, reverse=True)[:8]
        return encode_batch(self.tok, longest, self.qcfg.calib_seq_len, pad_id=self.pad_id)


def export_int8(qcfg: Int8Config, staging: Path, shared: Int8Export, say: Say,
                tensorrt: TrtProfile | None = None, input_names: list[str] | None = None) -> dict[str, dict]:
    """The bundle's INT8 manifest entries: ``{"int8": default CPU target's, "int8-<target>": ...}`` (dynamic
    mode), and ``"int8-trt"`` (static QDQ) when a TensorRT profile is given (static mode: only that one)."""
    entries = {}
    if qcfg.mode == "dynamic":
        recipes, notes = qcfg.recipes()
        for note in notes:
            say(note)
        for i, recipe in enumerate(recipes):
            key = "int8" if i == 0 else f"int8-{recipe.target}"
            entries[key] = {**shared.target_graph(recipe, staging / int8_file(recipe.target, default=i == 0)),
                            "providers": ["cpu"]}
    if tensorrt is not None:
        entries["int8-trt"] = shared.static_graph(staging / GPU_FILES["int8-trt"], tensorrt, list(input_names or []))
    return entries


def export_host() -> dict:
    """The machine that exported (a bundle travels; this says where it was made)."""
    host = detect_host()
    return {"arch": host.arch, "kind": host.kind, "flags": host.flags(), "u8s8": host.u8s8, "cpu": host.model}
