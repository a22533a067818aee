"""The INT8 graphs of one fp32 model, made and measured on text: what an exporter asks of quantization.

``Int8Maker`` is built once per export and holds what every INT8 graph shares: the task's feeds
(``quantization.feeds``: the calibration / held-out split of texts, multiple-choice inputs or question
windows, and the fp32 accuracy probe on the held-out part) and the channel ranges (collected once). Per graph it makes the outlier split (``outlier_split``, once per ratio), a target's
CPU graph (``target_graph``) or the static QDQ graph for TensorRT (``static_graph``): quantization, the
accuracy gate (sensitive nodes kept float until the budget is met) and a batch-invariance measurement,
returned as an ``Int8Graph`` holding the graph's manifest figures.

Nothing here compares with PyTorch or names bundle files: the exporter validates the split and each
graph it is handed (``exporters.validate``), so this package never calls back into ``exporters``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from edgebert.bundle.task_registry import bundle_task
from edgebert.errors import ValidationError
from edgebert.graph.ir_graph import read_ir
from edgebert.graph.ops import op_type_counts, quantized_biases, weight_node_inputs
from edgebert.quantization.accuracy import GuardResult, batch_invariance, quantize_with_guard
from edgebert.quantization.activations import ChannelStats
from edgebert.quantization.config import Int8Config
from edgebert.quantization.dynamic import DynamicInt8Quantizer
from edgebert.quantization.feeds import task_feeds
from edgebert.quantization.outliers import split_outliers
from edgebert.quantization.static import STATIC_REQUIREMENTS, StaticQdqInt8Quantizer
from edgebert.quantization.targets import Int8Recipe

Say = Callable[..., None]
# A task whose gate may miss (``BundleTask.gate_may_miss``: question answering) keeps at most a quarter of
# the quantizable nodes float (a graph mostly float is not worth shipping as INT8); a miss beyond that
# marks the graph and makes fp32 the bundle's default instead of failing the export.
FLOAT_SHARE = 4
ARITHMETIC = ("exact U8S8 products (session.x64quantprecision=1 where the export host saturates): the figure "
              "of a host that runs the graph correctly")


@dataclass(frozen=True)
class OutlierSplit:
    """The graph a target quantizes: the fused graph, smoothed where the recipe asks (``quantization.smoothing``),
    with outlier channels split off (or not, at ratio 0); the split's ``{node: channels}``, its manifest figures
    and the channel ranges of the graph it was made from (the smoothed one's, where smoothed)."""
    path: Path
    plan: dict[str, list[int]]
    figures: dict[str, Any]
    made: bool                     # a new graph: the exporter validates it before it is quantized
    stats: ChannelStats | None = None

    def with_figures(self, **figures: Any) -> "OutlierSplit":
        return dataclasses.replace(self, figures={**self.figures, **figures})


@dataclass(frozen=True)
class Int8Graph:
    """One INT8 graph written at ``path`` and what was measured on it (its manifest figures)."""
    path: Path
    target: str
    requires: dict[str, Any]
    recipe: dict[str, Any] | None
    quantization: dict[str, Any]
    accuracy: dict[str, Any]
    batch_invariance: dict[str, Any]


class Int8Maker:
    """Makes and measures the INT8 graphs of the fused fp32 graph ``fused`` (see the module docstring).
    ``work``: a scratch folder for split graphs and calibration caches; ``say``: progress; ``max_length``:
    the bundle's longest input (question windows are cut to it)."""

    def __init__(self, qcfg: Int8Config, task: str, fused: Path, *, tokenizer: Path, pad_id: int, work: Path,
                 say: Say, max_length: int | None = None):
        self.qcfg, self.task, self.fused, self.work, self.say, self.pad_id = qcfg, task, fused, work, say, pad_id
        self.feeds = task_feeds(qcfg, task, fused, tokenizer=tokenizer, pad_id=pad_id, max_length=max_length,
                                say=say)
        self.probe = self.feeds.probe
        self.budget = qcfg.budget(task)
        self._stats: ChannelStats | None = None

    def calibration(self) -> dict:
        return self.feeds.describe()

    # ------------------------------------------------------------------ CPU targets
    def stats(self, op_types: tuple[str, ...]) -> ChannelStats:
        """Per-channel ranges of every quantizable input on the calibration text (collected once)."""
        if self._stats is None:
            self.say(f"activation ranges on {self.feeds.calibration_count()} calibration inputs")
            self._stats = ChannelStats.collect(self.fused, self.feeds.calibration(),
                                               weight_node_inputs(self.fused, (*op_types, "Gemm")))
        return self._stats

    def outlier_split(self, recipe: Int8Recipe) -> OutlierSplit:
        """The graph ``recipe`` quantizes, written to the scratch folder: the fused graph smoothed by its alpha
        (if any), then split at its outlier ratio (if any)."""
        source, stats, smoothing = self.fused, self.stats(recipe.op_types), {"applied": False}
        if recipe.smooth_alpha:
            from edgebert.quantization.smoothing import fold_smoothing

            self.say(f"folding smoothing scales into the LayerNorms (alpha {recipe.smooth_alpha:g})")
            smoothed = self.work / f"model.smooth-{recipe.smooth_alpha:g}.onnx"
            smoothing, stats = fold_smoothing(self.fused, smoothed, stats, recipe.smooth_alpha)
            if smoothing["applied"]:
                source = smoothed
        ratio = recipe.outlier_ratio
        if ratio == 0:
            return OutlierSplit(source, {}, {"applied": False, "reason": "off (outlier ratio 0)",
                                             "smoothing": smoothing}, made=source != self.fused, stats=stats)
        self.say(f"splitting outlier channels (ratio {ratio:g})")
        stem = source.stem if source != self.fused else "model"          # in the scratch folder, never the bundle's
        path = self.work / f"{stem}.split-{ratio:g}.onnx"
        plan = split_outliers(source, path, None, ratio, stats=stats)
        return OutlierSplit(path, plan, {"applied": True, "ratio": ratio, "nodes": len(plan),
                                         "channels": sum(len(c) for c in plan.values()), "float_channels": plan,
                                         "smoothing": smoothing},
                            made=True, stats=stats)

    def target_graph(self, recipe: Int8Recipe, split: OutlierSplit, out: Path) -> Int8Graph:
        """Quantize ``split`` by ``recipe`` into ``out``, gate and measure it."""
        quantizer = DynamicInt8Quantizer(split.path, recipe, split.stats or self.stats(recipe.op_types), split.plan)
        candidates = quantizer.candidates()
        self.say(f"quantizing INT8 for {recipe.target} ({len(candidates)} nodes)")
        guard, quant = self._quantize(quantizer, candidates, out, {"outlier_split": split.figures})
        # the guard's last quantize() call wrote the kept file, so last_scales describe it
        if quantizer.last_scales is not None:
            quant["calibrated_scales"] = {k: quantizer.last_scales[k] for k in ("tensors", "fused_matmuls", "biases_folded",
                                                                             "gelus_tanh")}
            if quantizer.gelu_fallback:      # the tanh form missed the gate: erf GELUs rather than float nodes
                quant["calibrated_scales"]["gelu_fallback"] = quantizer.gelu_fallback
        return self._measured(out, recipe.target, quant, guard, recipe.requirements(), recipe.as_dict())

    # ------------------------------------------------------------------ OpenVINO (NNCF)
    def openvino_graph(self, raw: Path, out: Path, host_kind: str) -> Int8Graph:
        """The ``openvino`` target of the traced graph ``raw`` (``quantization.openvino_int8``), gated
        like the onnxruntime targets; ``host_kind``: the export host's CPU kind, where it was measured."""
        from edgebert.quantization.openvino_int8 import REQUIREMENTS, TARGET, OpenVinoInt8Quantizer

        quantizer = OpenVinoInt8Quantizer(raw, self.feeds.calibration())
        self.say(f"quantizing INT8 for {TARGET} (NNCF, {len(quantizer.candidates())} nodes static, "
                 f"{len(quantizer.weight_only)} weight-only)")
        guard, quant = self._quantize(quantizer, quantizer.candidates(), out, {})
        requires = {**REQUIREMENTS, "measured_on": host_kind}
        return self._measured(out, TARGET, quant, guard, requires, None,
                              arithmetic=f"OpenVINO's CPU plugin on the export host ({host_kind}), float parts in fp32")

    # ------------------------------------------------------------------ TensorRT (static QDQ)
    def static_graph(self, raw: Path, out: Path) -> Int8Graph:
        """The TensorRT INT8 graph of the traced graph ``raw``: QDQ S8S8 on standard ops, biases float."""
        quantizer = StaticQdqInt8Quantizer(raw, self.qcfg, self.feeds.padded_calibration(), self.work)
        candidates = quantizer.candidates()
        self.say(f"quantizing INT8 (static QDQ, {len(candidates)} nodes)")
        guard, quant = self._quantize(quantizer, candidates, out, {"quantized_biases": 0})
        biases = quantized_biases(out)
        if biases:
            raise ValidationError(f"int8 tensorrt: {len(biases)} bias(es) quantized to int32 ({biases[0]} ...); "
                                  "TensorRT rejects them", figures={"stage": "int8 tensorrt", "nodes": biases})
        return self._measured(out, "tensorrt", quant, guard, STATIC_REQUIREMENTS, None)

    # ------------------------------------------------------------------ shared
    def _quantize(self, quantizer: DynamicInt8Quantizer | StaticQdqInt8Quantizer, candidates: list[str], out: Path,
                  figures: dict) -> tuple[GuardResult, dict]:
        """Quantize through the accuracy gate; the quantization figures (``figures`` after the counts)."""
        bounded = bundle_task(self.task).gate_may_miss     # then the bundle keeps fp32 its default
        guard = quantize_with_guard(quantizer, out, self.probe, self.budget, self.qcfg.sensitivity_size, self.say,
                                    max_excluded=max(1, len(candidates) // FLOAT_SHARE) if bounded else None,
                                    allow_miss=bounded, fallback=getattr(quantizer, "erf_gelus", None))
        quant = {**quantizer.describe(), "candidate_nodes": len(candidates),
                 "quantized_nodes": len(candidates) - len(guard.excluded), "excluded_nodes": guard.excluded,
                 "op_counts": _op_counts(out), **figures, "calibration": self.calibration()}
        return guard, quant

    def _measured(self, out: Path, target: str, quant: dict, guard: GuardResult, requires: dict,
                  recipe: dict | None, arithmetic: str = ARITHMETIC) -> Int8Graph:
        accuracy = {**guard.as_dict(self.budget), "held_out": self.feeds.describe()["held_out"],
                    "arithmetic": arithmetic}
        invariance = batch_invariance(out, self.task, *self.feeds.invariance())
        return Int8Graph(out, target, requires, recipe, quant, accuracy, invariance)


def _op_counts(path: Path) -> dict[str, int]:
    """Op types of an ONNX graph, or the layer types of an OpenVINO IR."""
    return read_ir(path).op_counts if Path(path).suffix == ".xml" else op_type_counts(path)
