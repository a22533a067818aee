"""INT8 for CPUs on the fused graph, by target recipe (``quantization.targets``): integer ops
(``QAttention``, ``MatMulInteger`` / ``MatMulIntegerToFloat``), int8 or uint8 weights quantized offline,
uint8 activations quantized per call or with calibrated scales (``quantization.scales``).

``quantize_dynamic`` cannot type the outputs of ORT's fused contrib ops (Attention,
SkipLayerNormalization ...) with ONNX shape inference; ``DefaultTensorType=FLOAT`` tells it they are
float. ``MatMulConstBOnly`` keeps activation x activation MatMuls float (a fused graph has none).
``Attention`` in the op types turns the fused attention into ``QAttention``. On a graph whose
outlier channels were split off (``quantization.outliers``) the float outlier MatMuls stay float.
The embedding tables become int8 looked up per token (``quantization.embedding_tables``): each table is
one more candidate of the accuracy gate, named ``<EmbedLayerNormalization node>/<table>``. With calibrated
scales (``quantization.scales``) each bias moves into the INT8 product before it (``quantization.bias_fold``)
and a GELU rounded to a coarse step takes its tanh form (``quantization.gelu_form``; ``erf_gelus`` is the gate's
way back). The written graph is stored compactly (``quantization.storage``).
"""

from __future__ import annotations

from pathlib import Path

import onnx
from onnxruntime.quantization import QuantType, quantize_dynamic

from edgebert.files.atomic import work_dir
from edgebert.graph.ops import quiet_logging, weight_nodes
from edgebert.quantization.activations import ChannelStats
from edgebert.quantization.embedding_tables import GATE_KEPT, RECIPE_OFF, quantize_tables, table_plan
from edgebert.quantization.outliers import float_only_nodes
from edgebert.quantization.scales import freeze_activation_scales
from edgebert.quantization.storage import compact_storage
from edgebert.quantization.targets import Int8Recipe


class DynamicInt8Quantizer:
    """Quantize one fused fp32 graph (optionally outlier-split) by ``recipe``, leaving named nodes float.

    ``stats`` (channel ranges on calibration text) is needed for calibrated activation scales;
    ``plan`` is the outlier split's ``{node: channels}``.
    """

    format = "QOperator"
    graph = "fused"

    def __init__(self, fp32_path: str | Path, recipe: Int8Recipe, stats: ChannelStats | None = None,
                 plan: dict[str, list[int]] | None = None):
        if recipe.activation_scales == "calibrated" and stats is None:
            raise ValueError("calibrated activation scales need ChannelStats from calibration text")
        self.source = Path(fp32_path)
        self.recipe = recipe
        self.op_types = recipe.op_types
        self.stats = stats
        self.plan = plan or {}
        self.float_only = float_only_nodes(self.source)
        self.tables = [t.candidate for t in table_plan(self.source)[0]] if recipe.embedding_tables else []
        self.tables_fp32_why = GATE_KEPT if recipe.embedding_tables else RECIPE_OFF
        self.last_scales: dict | None = None
        self.last_tables: dict | None = None
        self.last_storage: dict | None = None
        self.tanh_gelus = True             # quantization.gelu_form, where it applies (calibrated scales)
        self.gelu_fallback: dict | None = None   # set when the gate sent GELU back to its erf form

    def candidates(self) -> list[str]:
        """Nodes this quantizer turns into INT8 (weight-bearing nodes of the op types), under the names
        ``nodes_to_exclude`` understands: the quantizer first rewrites every Gemm (the pooler) into
        ``<name>_MatMul`` + Add and quantizes that MatMul too. Then the embedding tables."""
        names = [n for n in weight_nodes(self.source, self.op_types) if n not in self.float_only]
        if "MatMul" in self.op_types:
            names += [f"{name}_MatMul" for name in weight_nodes(self.source, ("Gemm",))]
        return names + self.tables

    def quantize(self, out_path: str | Path, exclude: list[str] | tuple[str, ...] = (),
                 only: str | None = None) -> Path:
        r = self.recipe
        out_path = Path(out_path)
        tables = [t for t in self.tables if t not in exclude and only in (None, t)]
        with work_dir("q") as tmp:
            nodes = Path(tmp) / "nodes.onnx"
            if only in self.tables:          # that table alone: no node quantized
                self.last_tables = quantize_tables(self.source, out_path, tables, self.tables_fp32_why)
                return out_path
            per_call = nodes if r.activation_scales == "per-call" else Path(tmp) / "per_call.onnx"
            with quiet_logging():
                quantize_dynamic(
                    str(self.source), str(per_call),
                    op_types_to_quantize=list(self.op_types),
                    per_channel=r.per_channel,
                    reduce_range=r.reduce_range,
                    weight_type=QuantType.QInt8 if r.weight_type == "int8" else QuantType.QUInt8,
                    nodes_to_quantize=[only] if only else None,
                    nodes_to_exclude=[n for n in (*exclude, *self.float_only) if n not in self.tables],
                    extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT, "MatMulConstBOnly": True},
                )
            if r.activation_scales == "calibrated":
                self.last_scales = freeze_activation_scales(per_call, nodes, self.stats, self.plan,
                                                            tanh_gelu=self.tanh_gelus)
            self.last_tables = quantize_tables(nodes, out_path, tables, self.tables_fp32_why)
        self.last_storage = compact_storage(out_path)
        return out_path

    def erf_gelus(self, missed) -> str | None:
        """The gate's fallback before it keeps any node float: GELU back to its erf form when the graph it
        measured (``missed``: that ``Fidelity``) had tanh GELUs; says so, or None when nothing changes."""
        tanh = (self.last_scales or {}).get("gelus_tanh", 0)
        if not (self.tanh_gelus and tanh):
            return None
        self.tanh_gelus = False
        self.gelu_fallback = {"tanh_gelus": tanh, "tanh_loss": round(missed.loss, 6)}
        return f"{tanh} GELU(s) back to the erf form"

    def describe(self) -> dict:
        r = self.recipe
        return {"mode": "dynamic", "format": self.format, "graph": self.graph, "target": r.target,
                "per_channel": r.per_channel, "weight_type": r.weight_type, "reduce_range": r.reduce_range,
                "weight_range": "[-64, 64] (7-bit)" if r.reduce_range else
                                "[0, 255]" if r.weight_type == "uint8" else "[-127, 127]",
                "activation_type": "uint8",
                "activation_scales": r.activation_scales + (" (fixed from calibration text: batch-invariant)"
                                                            if r.activation_scales == "calibrated" else
                                                            " (from each call's min/max: batch-dependent)"),
                "op_types": list(self.op_types),
                "embedding_tables": self.last_tables, "storage": self.last_storage}
