"""``ExportResult``: what ``export_bundle`` returns (the bundle folder, its typed ``Manifest``, the time
taken, the progress log) and the export's summary, one line per graph, read from the manifest's
typed fields and each entry's recorded figures."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from edgebert.bundle import Manifest, ModelEntry

INT8_OPS = ("QAttention", "MatMulIntegerToFloat", "MatMulInteger", "DynamicQuantizeMatMul", "MatMul", "FastGelu",
            "QuantizeLinear", "DequantizeLinear", "Attention")
OPENVINO_INT8_OPS = ("FakeQuantize", "MatMul", "ScaledDotProductAttention")   # an OpenVINO IR's ops


@dataclass
class ExportResult:
    bundle_dir: Path
    manifest: Manifest
    seconds: float
    log: list[dict] = field(default_factory=list)

    def summary_lines(self) -> list[str]:
        m = self.manifest
        fp32 = m.models["fp32"]
        val = fp32.get_extra("validation")
        ops = ", ".join(f"{k}={v}" for k, v in fp32.get_extra("fused_ops").items() if k not in ("MatMul", "Gemm"))
        unfused = (fp32.get_extra("cpu_passes") or {}).get("unfuse_skip_layernorm")
        if unfused:
            ops += f" (then {unfused} SkipLayerNormalization -> Add + LayerNormalization: faster on the CPU)"
        lines = [f"bundle: {self.bundle_dir} (task {m.task}, opset {m.get_extra('opset')}, {self.seconds:.1f}s)",
                 f"fp32 {fp32.file}: {ops}; max |onnx - torch| = {val['max_abs_diff']:.2g} "
                 f"(tolerance {val['tolerance']:g}, {len(val['cases'])} shapes)"]
        lines += [_int8_line(e) for e in m.models.values() if e.precision == "int8"]
        lines += [_fp16_line(e) for e in map(m.entry, ("fp16", "fp16-cuda")) if e is not None]
        lines += [_gpu_line(e) for e in map(m.entry, ("fp32-trt", "fp32-cuda")) if e is not None]
        return lines


def _fp16_line(e: ModelEntry) -> str:
    v = e.get_extra("validation")
    if v["mode"] == "structural":
        return f"{e.key} {e.file}: checked structurally ({v['reason']})"
    return f"{e.key} {e.file}: max |onnx - torch| = {v['max_abs_diff']:.2g} on CPU"


def _gpu_line(e: ModelEntry) -> str:
    where = (f"TensorRT profile {_profile_text(e.tensorrt_profile)}" if e.tensorrt_profile
             else e.get_extra("attention_mask", ""))
    return (f"{e.key} {e.file} ({e.graph}, for {', '.join(e.providers)}): max |onnx - torch| "
            f"= {e.get_extra('validation')['max_abs_diff']:.2g}; {where}")


def _profile_text(per_input) -> str:
    first = next(iter(per_input.values()))
    return ", ".join(f"{k} {'x'.join(map(str, v))}" for k, v in first.items()) + f" (every input: {len(per_input)})"


def _int8_line(q: ModelEntry) -> str:
    """One summary line per INT8 graph: target, recipe, ops, gate figure, batch invariance."""
    quant = q.quantization
    ops = OPENVINO_INT8_OPS if q.engine == "openvino" else INT8_OPS
    counts = ", ".join(f"{k}={v}" for k, v in (quant.get("op_counts") or {}).items() if k in ops)
    kind = _recipe_text(q)
    acc = q.get_extra("accuracy")
    line = (f"int8 {q.file} (target {q.target}): {kind}; {counts}; {acc['metric']} mean {acc['mean']:.4f}"
            + (f" min {acc['min']:.4f}" if acc.get("min") is not None else "")
            + (f", top-1 {acc['top1_agreement']:.4f}" if acc.get("top1_agreement") is not None else "")
            + (f" on {acc['n']} held-out queries of {acc['pairs']} passages in all" if acc.get("pairs") else
               f" on {acc['n']} held-out texts")
            + (f" of the {acc['held_out']['source']}" if (acc.get("held_out") or {}).get("source") else "")
            + f" (loss {acc['loss']:.4f}, budget {acc['max_accuracy_loss']})")
    if quant.get("excluded_nodes"):
        line += f"; kept float: {len(quant['excluded_nodes'])} of {quant.get('candidate_nodes')} node(s)"
    fallback = (quant.get("calibrated_scales") or {}).get("gelu_fallback")
    if fallback:
        line += f"; GELU erf form (the tanh form lost {fallback['tanh_loss']:g})"
    line += _tables_text(quant.get("embedding_tables") or {})
    split = quant.get("outlier_split") or {}
    smoothing = split.get("smoothing") or {}
    if smoothing.get("applied"):
        line += f"; smoothing scales (alpha {smoothing['alpha']:g}) folded into {smoothing['layernorms']} LayerNorm(s)"
    if split.get("channels"):
        line += f"; {split['channels']} outlier channel(s) float in {split['nodes']} MatMul(s)"
    line += f"; batch-invariance 1-cos {q.get_extra('batch_invariance')['max_1_minus_cos']:.2g}"
    if q.engine == "onnxruntime" and q.needs_exact_u8s8:
        line += "; needs exact U8S8 (VNNI/ARM64, elsewhere the runtime sets session.x64quantprecision=1)"
    return line


def _tables_text(tables: dict[str, dict]) -> str:
    """Which embedding tables the graph stores int8 and which stay fp32, with why."""
    int8 = [name for name, t in tables.items() if t.get("dtype") == "int8"]
    fp32 = [f"{name} ({t.get('why', '')})" for name, t in tables.items() if t.get("dtype") != "int8"]
    parts = ([f"int8 per row: {', '.join(int8)}"] if int8 else []) + ([f"fp32: {'; '.join(fp32)}"] if fp32 else [])
    return f"; embedding tables {', '.join(parts)}" if parts else ""


def _recipe_text(q: ModelEntry) -> str:
    """How the graph was quantized, from what its entry records (each graph kind records other keys)."""
    quant = q.quantization
    if q.engine == "openvino":
        weight_only = len(quant.get("weight_only_int8") or ())
        return (f"{quant.get('format', 'OpenVINO IR')} by {quant.get('tool', 'nncf')}, static INT8"
                + (f" + {weight_only} weight-only MatMul(s)" if weight_only else ""))
    if q.is_static_qdq:
        return f"static {quant.get('format', 'QDQ')}"
    scales = str(quant.get("activation_scales") or "dynamic").split(" ")[0]
    return f"{quant.get('weight_type', 'int8')} weights {quant.get('weight_range', '')}, {scales} scales"
