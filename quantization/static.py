"""Static INT8, QDQ format, symmetric S8S8, on the standard-op (unfused) graph: what TensorRT reads.

Biases stay float (``QuantizeBias: False``): a bias quantized to an int32 DequantizeLinear is rejected
by TensorRT (onnxruntime issue #14229), which fuses the float bias into the INT8 GEMM itself.

Calibration runs once (ranges cached in the work folder); every later quantization (with nodes
excluded by the accuracy guard) reuses the cached ranges. Calibration batches are padded to a fixed
length so ORT's histogram calibrators (percentile, entropy) can stack them.
"""

from __future__ import annotations

from pathlib import Path

from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
from onnxruntime.quantization.shape_inference import quant_pre_process

from edgebert.graph.ops import activation_matmuls, quiet_logging, weight_nodes
from edgebert.quantization.calibration import TextBatches, TextCalibrationReader
from edgebert.quantization.config import Int8Config

_METHODS = {"minmax": CalibrationMethod.MinMax, "percentile": CalibrationMethod.Percentile,
            "entropy": CalibrationMethod.Entropy}
# what a host needs to run the QDQ graph (its manifest ``requires``): TensorRT, on any architecture
STATIC_REQUIREMENTS = {"arch": ["any"], "u8s8_exact": False, "exact_on": ["TensorRT (QDQ S8S8, trt_int8_enable)"]}


class StaticQdqInt8Quantizer:
    """QDQ S8S8 quantization of an unfused fp32 graph with ranges calibrated on real text."""

    format = "QDQ"
    graph = "standard-ops"

    def __init__(self, fp32_unfused_path: str | Path, cfg: Int8Config, calib_batches: TextBatches,
                 work_dir: str | Path):
        self.cfg = cfg
        self.op_types = cfg.resolved_op_types
        self.work_dir = Path(work_dir)
        self.source = self.work_dir / "static_source.onnx"
        self.cache = self.work_dir / "calibration_ranges.json"
        self.batches = calib_batches
        with quiet_logging():
            # ORT basic optimizations (constant folding) + ONNX shape inference; standard ops only.
            quant_pre_process(str(fp32_unfused_path), str(self.source), skip_symbolic_shape=True)
        self.float_matmuls = activation_matmuls(self.source)
        import onnx  # the inputs the graph takes (a DistilBERT's has no token_type_ids)

        self.input_names = {i.name for i in onnx.load(str(self.source), load_external_data=False).graph.input}

    def candidates(self) -> list[str]:
        return weight_nodes(self.source, self.op_types)

    def quantize(self, out_path: str | Path, exclude: list[str] | tuple[str, ...] = (),
                 only: str | None = None) -> Path:
        extra = {"ActivationSymmetric": True, "WeightSymmetric": True, "QuantizeBias": False}
        if self.cfg.calibrate_method == "percentile":
            extra["CalibPercentile"] = 99.999
        with quiet_logging():
            quantize_static(
                str(self.source), str(out_path), TextCalibrationReader(self.batches, self.input_names),
                quant_format=QuantFormat.QDQ,
                op_types_to_quantize=list(self.op_types),
                per_channel=self.cfg.static_per_channel,
                activation_type=QuantType.QInt8,
                weight_type=QuantType.QInt8,
                calibrate_method=_METHODS[self.cfg.calibrate_method],
                nodes_to_quantize=[only] if only else self.candidates(),
                nodes_to_exclude=list(exclude),
                calibration_cache_path=str(self.cache),
                extra_options=extra,
            )
        return Path(out_path)

    def describe(self) -> dict:
        return {"mode": "static", "format": self.format, "graph": self.graph,
                "per_channel": self.cfg.static_per_channel, "weight_type": "int8", "activation_type": "int8",
                "symmetric": True, "bias": "float (not quantized)", "op_types": list(self.op_types),
                "calibrate_method": self.cfg.calibrate_method,
                "float_by_design": {"activation_matmuls": len(self.float_matmuls)}}
