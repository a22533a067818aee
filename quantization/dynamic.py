"""Dynamic INT8 on the fused graph: weights quantized offline, activations per call.

``quantize_dynamic`` cannot type the outputs of ORT's fused contrib ops (Attention,
SkipLayerNormalization ...) with ONNX shape inference; ``DefaultTensorType=FLOAT`` tells it they are
float. ``MatMulConstBOnly`` keeps activation x activation MatMuls float (a fused graph has none).
``Attention`` in the op types turns the fused attention into ``QAttention``. On a graph whose
outlier channels were split off (``quantization.outliers``) the float outlier MatMuls stay float.
"""

from __future__ import annotations

from pathlib import Path

import onnx
from onnxruntime.quantization import QuantType, quantize_dynamic

from .config import Int8Config
from .graph import quiet_logging, weight_nodes
from .outliers import float_only_nodes


class DynamicInt8Quantizer:
    """Quantize one fused fp32 graph, optionally leaving named nodes float."""

    format = "QOperator"
    graph = "fused"

    def __init__(self, fp32_path: str | Path, cfg: Int8Config):
        self.source = Path(fp32_path)
        self.cfg = cfg
        self.op_types = cfg.resolved_op_types
        self.float_only = float_only_nodes(self.source)

    def candidates(self) -> list[str]:
        """Nodes this quantizer turns into INT8 (weight-bearing nodes of the op types), under the names
        ``nodes_to_exclude`` understands: the quantizer first rewrites every Gemm (the pooler) into
        ``<name>_MatMul`` + Add and quantizes that MatMul too."""
        names = [n for n in weight_nodes(self.source, self.op_types) if n not in self.float_only]
        if "MatMul" in self.op_types:
            names += [f"{name}_MatMul" for name in weight_nodes(self.source, ("Gemm",))]
        return names

    def quantize(self, out_path: str | Path, exclude: list[str] | tuple[str, ...] = (),
                 only: str | None = None) -> Path:
        with quiet_logging():
            quantize_dynamic(
                str(self.source), str(out_path),
                op_types_to_quantize=list(self.op_types),
                per_channel=self.cfg.per_channel,
                weight_type=QuantType.QInt8,
                nodes_to_quantize=[only] if only else None,
                nodes_to_exclude=[*exclude, *self.float_only],
                extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT, "MatMulConstBOnly": True},
            )
        return Path(out_path)

    def describe(self) -> dict:
        return {"mode": "dynamic", "format": self.format, "graph": self.graph,
                "per_channel": self.cfg.per_channel, "weight_type": "int8",
                "activation_type": "uint8 (dynamic, per call)", "op_types": list(self.op_types)}
