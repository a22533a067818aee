"""INT8 and FP16 settings: one typed, validated dataclass per precision, with named presets.

Why these defaults (measured on all-MiniLM-L6-v2, see benchmarks/export_minilm.py):

* dynamic INT8 runs on the *fused* graph (ORT CPU kernels ``QAttention``, ``MatMulInteger`` /
  ``DynamicQuantizeMatMul``); per-channel weights keep sentence-embedding cosine ~0.992 where
  per-tensor weights drop it to ~0.96, and quantizing the ``Attention`` op (-> ``QAttention``) gives the
  largest speed-up.
* with calibration text, dynamic INT8 first computes the few outlier activation channels in float
  (``outlier_ratio`` 6, ``quantization.outliers``): cosine 0.992 -> 0.9967 with every node still INT8
  (ratio 8: 0.9962, 10: 0.9957, 12: 0.9951, 16: 0.9922; 6 splits 10 MatMuls, 16 channels).
* static INT8 is QDQ, symmetric S8S8 on the *standard-op* (unfused) graph: the form TensorRT
  consumes (TensorRT does not read ORT's contrib ops). Only MatMul/Gemm with a weight initializer are
  quantized; activation x activation MatMuls (QK^T, PV) stay float.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgebert.errors import ConfigError, DataError

INT8_MODES = ("dynamic", "static")
CALIBRATE_METHODS = ("minmax", "percentile", "entropy")
DYNAMIC_OP_TYPES = ("MatMul", "Attention")   # Attention -> QAttention, MatMul -> MatMulInteger
STATIC_OP_TYPES = ("MatMul", "Gemm")


@dataclass(frozen=True)
class Int8Config:
    """How to quantize to INT8 and how much accuracy loss is acceptable.

    ``max_accuracy_loss`` is in the task metric's units: 1 - mean cosine (embed), 1 - label agreement
    (cls), 1 - top-1 agreement (mlm), all against the fp32 model on ``calib`` text. ``None`` measures
    and reports only.
    """

    mode: str = "dynamic"
    per_channel: bool = True
    op_types: tuple[str, ...] | None = None      # None: DYNAMIC_OP_TYPES / STATIC_OP_TYPES by mode
    calib: Path | None = None                    # text / TSV (sentence column) / WikiText raw
    calib_size: int = 256                        # sentences read from calib (cap; streamed)
    calib_batch_size: int = 32
    calib_seq_len: int = 128                     # truncation length (static: also the fixed padding)
    calibrate_method: str = "minmax"
    max_accuracy_loss: float | None = None
    sensitivity_size: int = 64                   # sentences used to rank nodes by sensitivity
    # dynamic mode with calib: input channels whose calibration |max| exceeds this x the median
    # channel's stay float (quantization.outliers); 0 turns the split off
    outlier_ratio: float = 6.0

    def __post_init__(self) -> None:
        if self.mode not in INT8_MODES:
            raise ConfigError(f"unknown INT8 mode {self.mode!r}", f"use one of {', '.join(INT8_MODES)}")
        if self.calibrate_method not in CALIBRATE_METHODS:
            raise ConfigError(f"unknown calibration method {self.calibrate_method!r}",
                              f"use one of {', '.join(CALIBRATE_METHODS)}")
        if self.calib is not None:
            object.__setattr__(self, "calib", Path(self.calib))
            if not self.calib.is_file():
                raise DataError(f"calibration file {self.calib} not found",
                                "pass a text file (one sentence per line), a TSV with a 'sentence' "
                                "column, or WikiText raw")
        if self.mode == "static" and self.calib is None:
            raise ConfigError("static INT8 needs calibration text", "pass --calib FILE")
        if self.max_accuracy_loss is not None:
            if not 0.0 <= float(self.max_accuracy_loss) < 1.0:
                raise ConfigError(f"max accuracy loss {self.max_accuracy_loss!r} must be in [0, 1)",
                                  "e.g. 0.005 = at most 0.5 points")
            if self.calib is None:
                raise ConfigError("--max-accuracy-loss needs text to measure accuracy on",
                                  "pass --calib FILE")
        for name in ("calib_size", "calib_batch_size", "calib_seq_len", "sensitivity_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"{name}={value!r} must be a positive integer")
        if not (isinstance(self.outlier_ratio, (int, float)) and not isinstance(self.outlier_ratio, bool)
                and (self.outlier_ratio == 0 or self.outlier_ratio > 1)):
            raise ConfigError(f"outlier ratio {self.outlier_ratio!r} must be 0 (off) or > 1",
                              "6 keeps ~1 channel per MatMul float on BERT")
        if self.op_types is not None:
            object.__setattr__(self, "op_types", tuple(self.op_types))
            if not self.op_types:
                raise ConfigError("op_types is empty", "leave it unset for the defaults")

    @property
    def splits_outliers(self) -> bool:
        """The outlier split needs activation statistics (calib) and per-call scales (dynamic)."""
        return self.mode == "dynamic" and self.calib is not None and self.outlier_ratio > 0

    @property
    def resolved_op_types(self) -> tuple[str, ...]:
        if self.op_types is not None:
            return self.op_types
        return DYNAMIC_OP_TYPES if self.mode == "dynamic" else STATIC_OP_TYPES

    def replace(self, **changes: Any) -> "Int8Config":
        return dataclasses.replace(self, **changes)

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "Int8Config":
        if name not in INT8_PRESETS:
            raise ConfigError(f"unknown INT8 preset {name!r}", f"use one of {', '.join(INT8_PRESETS)}")
        return cls(**{**INT8_PRESETS[name], **overrides})


INT8_PRESETS: dict[str, dict[str, Any]] = {
    # CPU (x86 AVX2/AVX512-VNNI, ARM): fused graph, QAttention + MatMulInteger, per-channel weights.
    "cpu": dict(mode="dynamic", per_channel=True),
    # Smallest/fastest CPU graph when accuracy allows: per-tensor weights.
    "cpu-per-tensor": dict(mode="dynamic", per_channel=False),
    # TensorRT: QDQ, symmetric S8S8, standard ops only.
    "tensorrt": dict(mode="static", per_channel=True),
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
