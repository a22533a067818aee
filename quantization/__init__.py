"""INT8 for CPUs by deployment target (``quantization.targets``: portable, x86-avx2, x86-vnni, arm64,
host), static QDQ S8S8 for TensorRT, and FP16, with an accuracy gate on held-out text that keeps the
most sensitive nodes float until a loss budget is met.

CPU INT8 on the fused graph: outlier activation channels split off into float
(``quantization.outliers``), weights per channel in the target's range, activation scales calibrated
on text (``quantization.scales``: batch-invariant). Calibration text defaults to the built-in English
text shipped with edgebert.

Modules, each with one job:

* ``int8_graphs``: ``Int8Maker``, what an exporter asks for: the INT8 graphs of one fp32 model, made
  and measured on text (it never compares with PyTorch nor imports ``exporters``: the exporter validates);
* ``config``: ``Int8Config`` / ``Fp16Config``; ``targets``: the target recipes, as data;
* ``calibration``: text sources, the calibration / held-out split, token batches; ``feeds``: what each
  task's graph calibrates and is gated on (texts, multiple-choice inputs, question windows);
  ``span_gate``: the question-answering gate (answers vs fp32's on held-out questions);
* ``activations``: per-channel ranges on calibration text; ``outliers``: the outlier-channel split;
  ``scales``: calibrated activation scales; ``embedding_tables``: int8 word / position tables, per-row
  scales, looked up per token; ``bias_fold``: biases into the INT8 products; ``storage``: a finished graph stored compactly (float16 scales, no
  zero zero points, no inferred shapes);
* ``dynamic``: CPU integer-op quantization; ``static``: QDQ S8S8 for TensorRT; ``fp16``: FP16 conversion
  and its structural check;
* ``accuracy``: the accuracy gate (probe, sensitivity search), batch invariance, exact CPU sessions.

    from edgebert.quantization import Int8Config, DynamicInt8Quantizer, AccuracyProbe, quantize_with_guard
"""

from edgebert.graph.ops import op_type_counts
from edgebert.quantization.accuracy import (
                          AccuracyProbe,
                          GuardResult,
                          batch_invariance,
                          cpu_session,
                          quantize_with_guard,
)
from edgebert.quantization.activations import ChannelStats
from edgebert.quantization.calibration import (
                          CalibrationSplit,
                          TextBatches,
                          TextCalibrationReader,
                          TextSource,
                          calibration_split,
                          encode_batch,
                          iter_sentences,
                          prepared_tokenizer,
)
from edgebert.quantization.config import INT8_MODES, INT8_PRESETS, Fp16Config, Int8Config
from edgebert.quantization.dynamic import DynamicInt8Quantizer
from edgebert.quantization.fp16 import check_fp16_structure, convert_to_fp16, fp16_structure, make_fp16
from edgebert.quantization.int8_graphs import Int8Graph, Int8Maker, OutlierSplit
from edgebert.quantization.outliers import OUTLIER_SUFFIX, float_only_nodes, outlier_channels, split_outliers
from edgebert.quantization.scales import freeze_activation_scales
from edgebert.quantization.static import StaticQdqInt8Quantizer
from edgebert.quantization.targets import TARGET_NAMES, TARGETS, Int8Recipe, resolve_targets

__all__ = [
    "AccuracyProbe", "GuardResult", "batch_invariance", "cpu_session", "quantize_with_guard", "ChannelStats",
    "CalibrationSplit", "TextBatches", "TextCalibrationReader", "TextSource", "calibration_split",
    "encode_batch", "iter_sentences", "prepared_tokenizer",
    "INT8_MODES", "INT8_PRESETS", "Fp16Config", "Int8Config", "DynamicInt8Quantizer",
    "check_fp16_structure", "convert_to_fp16", "fp16_structure", "make_fp16", "op_type_counts",
    "Int8Graph", "Int8Maker", "OutlierSplit",
    "OUTLIER_SUFFIX", "float_only_nodes", "outlier_channels", "split_outliers", "freeze_activation_scales",
    "StaticQdqInt8Quantizer", "TARGETS", "TARGET_NAMES", "Int8Recipe", "resolve_targets",
]
