"""INT8 and FP16 settings: one typed, validated dataclass per precision, with named presets.

CPU INT8 (``mode="dynamic"``: integer ops on the fused graph) is made per deployment target; each
target's recipe (weight range, outlier split, activation scales) is data in ``quantization.targets``,
with the measurements that chose it. The fields here that default to ``None`` take the recipe's value;
set them to override every target's recipe.

Static INT8 (``mode="static"``) is QDQ, symmetric S8S8 on the *standard-op* (unfused) graph: the form
TensorRT consumes (TensorRT does not read ORT's contrib ops). Only MatMul/Gemm with a weight
initializer are quantized; activation x activation MatMuls (QK^T, PV) stay float.

Calibration text defaults to the built-in English text (``edgebert.files.textfiles.builtin_texts``); the
accuracy gate measures on held-out text the calibration did not see, against a default budget per task
(the task's entry in ``edgebert.bundle.task_registry``: the budget ``edgebert check`` uses).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgebert.bundle.task_registry import bundle_task, check_budget
from edgebert.errors import ConfigError, DataError
from edgebert.quantization.targets import ACTIVATION_SCALES, ENGINE_TARGET, Int8Recipe, resolve_targets, target_names

INT8_MODES = ("dynamic", "static")
CALIBRATE_METHODS = ("minmax", "percentile", "entropy")
STATIC_OP_TYPES = ("MatMul", "Gemm")


def check_gate_file(calib: Path | None, gate_data: Path | None) -> None:
    """``ConfigError`` when ``gate_data`` (``--gate-data``) is the ``calib`` file itself (the same path, or a
    link to it): a training file's questions never gate (``feeds.question_split`` leaves out any of its
    questions that another gate file holds)."""
    if gate_data is None or calib is None:
        return
    try:
        same = Path(calib).resolve() == Path(gate_data).resolve() or os.path.samefile(calib, gate_data)
    except OSError:
        return
    if same:
        raise ConfigError(f"--gate-data {gate_data} is the --calib file: its questions are training questions, "
                          "which never gate", "pass a SQuAD file of questions the model did not train on (a dev "
                                              "file), or drop --gate-data to gate on the built-in questions")


@dataclass(frozen=True)
class Int8Config:
    """How to quantize to INT8, for which targets, and how much accuracy loss is acceptable.

    ``max_accuracy_loss`` is in the task metric's loss units: 1 - mean cosine (embed), 1 - label
    agreement (cls), 1 - top-1 agreement (mlm), against the fp32 model on held-out text; 1 - mean
    overlap of the answers with fp32's on held-out questions (qa); ``None`` takes the task's default
    budget (its ``task_registry`` entry's).
    """

    mode: str = "dynamic"
    targets: tuple[str, ...] = ("portable",)     # dynamic mode: one INT8 graph per target (first = default)
    per_channel: bool | None = None              # None: the recipe's (per-channel)
    op_types: tuple[str, ...] | None = None      # None: the recipe's / STATIC_OP_TYPES
    calib: Path | None = None                    # None: the built-in English text
    calib_size: int = 256                        # texts that calibrate (cap; streamed)
    gate_size: int | None = None                 # held-out items the gate measures: None, GATE_TEXTS texts (all
                                                 # of the built-in questions for question answering)
    gate_data: Path | None = None                # qa: a SQuAD file the gate measures on (questions not trained on)
    calib_batch_size: int = 32
    calib_seq_len: int = 128                     # truncation length (static: also the fixed padding)
    gate_seq_len: int | None = None              # the held-out texts' truncation (None: calib_seq_len); the export
                                                 # gives the bundle's max length: the gate measures what check and
                                                 # the runtime run (long texts cut at 128 had hidden a 0.0001 loss)
    calibrate_method: str = "minmax"             # static QDQ only
    max_accuracy_loss: float | None = None       # None: the task's registry budget
    sensitivity_size: int = 64                   # texts used to rank nodes by sensitivity
    outlier_ratio: float | None = None           # None: the recipe's; 0: no outlier split
    smooth_alpha: float | None = None            # None: the recipe's (0.75); 0: no smoothing scales
    activation_scales: str | None = None         # None: the recipe's (calibrated); or per-call
    embedding_tables: bool | None = None         # None: the recipe's (int8 tables); False: tables fp32

    def __post_init__(self) -> None:
        if self.mode not in INT8_MODES:
            raise ConfigError(f"unknown INT8 mode {self.mode!r}", f"use one of {', '.join(INT8_MODES)}")
        if self.calibrate_method not in CALIBRATE_METHODS:
            raise ConfigError(f"unknown calibration method {self.calibrate_method!r}",
                              f"use one of {', '.join(CALIBRATE_METHODS)}")
        object.__setattr__(self, "targets", target_names(self.targets))
        if self.targets == (ENGINE_TARGET,):     # a bundle always carries an onnxruntime graph too
            object.__setattr__(self, "targets", ("portable", ENGINE_TARGET))
        if ENGINE_TARGET in self.targets and self.mode == "static":
            raise ConfigError("--target openvino is a CPU INT8 graph; static QDQ INT8 is one graph for TensorRT",
                              "drop --target, or use --int8-mode dynamic")
        if ENGINE_TARGET in self.targets:        # fail before any graph is made, not after the others
            from edgebert.quantization.openvino_int8 import require_openvino

            require_openvino()
        if self.mode == "static" and self.targets != ("portable",):
            raise ConfigError("--target chooses CPU INT8 graphs; static QDQ INT8 is one graph for TensorRT",
                              "drop --target, or use --int8-mode dynamic")
        if self.calib is not None:
            object.__setattr__(self, "calib", Path(self.calib))
            if not self.calib.is_file():
                raise DataError(f"calibration file {self.calib} not found",
                                "pass a text file (one sentence per line), a TSV with a 'sentence' "
                                "column, or WikiText raw; or leave --calib out for the built-in text")
        if self.gate_data is not None:
            object.__setattr__(self, "gate_data", Path(self.gate_data))
            if not self.gate_data.is_file() or self.gate_data.suffix.lower() != ".json":
                raise DataError(f"gate file {self.gate_data} is not a SQuAD JSON file that exists",
                                "pass a SQuAD 1.1 / 2.0 JSON file of questions the model did not train on")
            check_gate_file(self.calib, self.gate_data)      # before the export, not after its fp32 graph
            from edgebert.qa.squad_file import read_squad

            read_squad(self.gate_data)                        # a file that cannot be read: the same
        check_budget(self.max_accuracy_loss)
        for name in ("calib_size", "gate_size", "calib_batch_size", "calib_seq_len", "sensitivity_size"):
            value = getattr(self, name)
            if name == "gate_size" and value is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"{name}={value!r} must be a positive integer")
        if self.outlier_ratio is not None and not (
                isinstance(self.outlier_ratio, (int, float)) and not isinstance(self.outlier_ratio, bool)
                and (self.outlier_ratio == 0 or self.outlier_ratio > 1)):
            raise ConfigError(f"outlier ratio {self.outlier_ratio!r} must be 0 (off) or > 1",
                              "3 keeps a few channels per MatMul float on BERT")
        if self.smooth_alpha is not None and not (isinstance(self.smooth_alpha, (int, float))
                                                  and not isinstance(self.smooth_alpha, bool)
                                                  and 0 <= self.smooth_alpha < 1):
            raise ConfigError(f"smoothing alpha {self.smooth_alpha!r} must be 0 (off) or in (0, 1)",
                              "0.75 moves most of a LayerNorm output's outliers into the weights")
        if self.activation_scales is not None and self.activation_scales not in ACTIVATION_SCALES:
            raise ConfigError(f"unknown activation scales {self.activation_scales!r}",
                              f"use one of {', '.join(ACTIVATION_SCALES)}")
        if self.op_types is not None:
            object.__setattr__(self, "op_types", tuple(self.op_types))
            if not self.op_types:
                raise ConfigError("op_types is empty", "leave it unset for the defaults")

    def recipes(self) -> tuple[list[Int8Recipe], list[str]]:
        """The targets' recipes with this config's overrides, and notes (how ``host`` was resolved)."""
        recipes, notes = resolve_targets(self.targets)
        overrides = {k: v for k, v in (("per_channel", self.per_channel), ("op_types", self.op_types),
                                       ("outlier_ratio", self.outlier_ratio),
                                       ("smooth_alpha", self.smooth_alpha),
                                       ("activation_scales", self.activation_scales),
                                       ("embedding_tables", self.embedding_tables)) if v is not None}
        return [r.replace(**overrides) for r in recipes], notes

    @property
    def openvino(self) -> bool:
        """``--target`` names the OpenVINO graph (made besides the onnxruntime ones)."""
        return ENGINE_TARGET in self.targets

    def budget(self, task: str) -> float:
        """The accuracy gate's budget for ``task``."""
        return float(self.max_accuracy_loss) if self.max_accuracy_loss is not None else bundle_task(task).budget

    @property
    def resolved_op_types(self) -> tuple[str, ...]:
        """Static QDQ mode's op types."""
        return self.op_types if self.op_types is not None else STATIC_OP_TYPES

    @property
    def static_per_channel(self) -> bool:
        return True if self.per_channel is None else self.per_channel

    def replace(self, **changes: Any) -> "Int8Config":
        return dataclasses.replace(self, **changes)

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "Int8Config":
        if name not in INT8_PRESETS:
            raise ConfigError(f"unknown INT8 preset {name!r}", f"use one of {', '.join(INT8_PRESETS)}")
        return cls(**{**INT8_PRESETS[name], **overrides})


INT8_PRESETS: dict[str, dict[str, Any]] = {
    # any x86-64 / ARM64 CPU: the portable recipe (7-bit weights, calibrated scales, outlier split)
    "cpu": dict(mode="dynamic", targets=("portable",)),
    # a portable graph plus an 8-bit one the runtime picks on VNNI / ARM64 hosts
    "cpu-fleet": dict(mode="dynamic", targets=("portable", "x86-vnni")),
    # the recipe for the machine exporting (when it is also the device)
    "cpu-host": dict(mode="dynamic", targets=("host",)),
    # TensorRT: QDQ, symmetric S8S8, standard ops only.
    "tensorrt": dict(mode="static"),
}


@dataclass(frozen=True)
class Fp16Config:
    """FP16 conversion for GPU execution providers; inputs and outputs stay fp32 (``keep_io_types``).

    ``op_block_list`` ops stay fp32: plain LayerNorm / Softmax (and the reductions of an unfused
    LayerNorm) overflow or lose precision in fp16. In a fused graph these live inside
    SkipLayerNormalization / Attention, whose kernels accumulate in fp32.
    """

    op_block_list: tuple[str, ...] = ("LayerNormalization", "SimplifiedLayerNormalization", "Softmax",
                                      "ReduceMean", "Pow", "Sqrt")
    tolerance: float = 2e-2         # max |fp16 - torch fp32| on CPU, relative to max(1, max|ref|)

    def __post_init__(self) -> None:
        object.__setattr__(self, "op_block_list", tuple(self.op_block_list))
        if not self.tolerance > 0:
            raise ConfigError(f"fp16 tolerance {self.tolerance!r} must be > 0")
