"""INT8 for CPUs by deployment target (``quantization.targets``: portable, x86-avx2, x86-vnni, arm64,
host), static QDQ S8S8 for TensorRT, and FP16, with an accuracy gate on held-out text that keeps the
most sensitive nodes float until a loss budget is met.

CPU INT8 on the fused graph: outlier activation channels split off into float
(``quantization.outliers``), weights per channel in the target's range, activation scales calibrated
on text (``quantization.scales``: batch-invariant). Calibration text defaults to the built-in English
text shipped with edgebert.

    from quantization import Int8Config, DynamicInt8Quantizer, AccuracyProbe, quantize_with_guard
"""

from .accuracy import AccuracyProbe, GuardResult, batch_invariance, quantize_with_guard
from .activations import ChannelStats
from .calibration import (CalibrationSplit, TextBatches, TextCalibrationReader, TextSource, calibration_split,
                          encode_batch, iter_sentences, prepared_tokenizer)
from .config import INT8_MODES, INT8_PRESETS, Fp16Config, Int8Config
from .dynamic import DynamicInt8Quantizer
from .fp16 import check_fp16_structure, convert_to_fp16, fp16_structure
from edgebert.graph.ops import op_type_counts
from .outliers import OUTLIER_SUFFIX, float_only_nodes, outlier_channels, split_outliers
from .scales import freeze_activation_scales
from .static import StaticQdqInt8Quantizer
from .targets import TARGET_NAMES, TARGETS, Int8Recipe, resolve_targets

__all__ = [
    "AccuracyProbe", "GuardResult", "batch_invariance", "quantize_with_guard", "ChannelStats",
    "CalibrationSplit", "TextBatches", "TextCalibrationReader", "TextSource", "calibration_split",
    "encode_batch", "iter_sentences", "prepared_tokenizer",
    "INT8_MODES", "INT8_PRESETS", "Fp16Config", "Int8Config", "DynamicInt8Quantizer",
    "check_fp16_structure", "convert_to_fp16", "fp16_structure", "op_type_counts",
    "OUTLIER_SUFFIX", "float_only_nodes", "outlier_channels", "split_outliers", "freeze_activation_scales",
    "StaticQdqInt8Quantizer", "TARGETS", "TARGET_NAMES", "Int8Recipe", "resolve_targets",
]
