"""INT8 (dynamic on the fused graph, static QDQ S8S8 for TensorRT) and FP16 conversion, with an
accuracy guard that keeps the most sensitive MatMuls float until a loss budget is met; dynamic INT8
first splits the few outlier activation channels off into float (``quantization.outliers``).

    from quantization import Int8Config, DynamicInt8Quantizer, AccuracyProbe, quantize_with_guard
"""

from .accuracy import METRICS, AccuracyFigures, AccuracyProbe, GuardResult, quantize_with_guard
from .calibration import TextBatches, TextCalibrationReader, encode_batch, iter_sentences, prepared_tokenizer
from .config import INT8_MODES, INT8_PRESETS, Fp16Config, Int8Config
from .dynamic import DynamicInt8Quantizer
from .fp16 import check_fp16_structure, convert_to_fp16, fp16_structure
from .graph import op_type_counts
from .outliers import OUTLIER_SUFFIX, activation_absmax, float_only_nodes, outlier_channels, split_outliers
from .static import StaticQdqInt8Quantizer

__all__ = [
    "METRICS", "AccuracyFigures", "AccuracyProbe", "GuardResult", "quantize_with_guard",
    "TextBatches", "TextCalibrationReader", "encode_batch", "iter_sentences", "prepared_tokenizer",
    "INT8_MODES", "INT8_PRESETS", "Fp16Config", "Int8Config", "DynamicInt8Quantizer",
    "check_fp16_structure", "convert_to_fp16", "fp16_structure", "op_type_counts",
    "StaticQdqInt8Quantizer", "OUTLIER_SUFFIX", "activation_absmax", "float_only_nodes", "outlier_channels",
    "split_outliers",
]
