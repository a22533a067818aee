"""FP16 conversion of the fused graph for GPU execution providers (CUDA, TensorRT, DirectML...), and
its structural check (``make_fp16``: convert, then every weight matrix must be fp16 and the graph's
inputs and outputs fp32, or ``ValidationError``). Comparing its outputs with PyTorch is the exporter's.

Uses onnxruntime.transformers' converter (symbolic shape inference types the fused contrib ops);
graph inputs/outputs stay fp32 so callers feed and read the same arrays as the fp32 model.
"""

from __future__ import annotations

from pathlib import Path

import onnx

from edgebert.errors import ValidationError
from edgebert.graph.ops import quiet_logging
from edgebert.quantization.config import Fp16Config

WEIGHT_OPS = ("MatMul", "Gemm", "Attention")


def convert_to_fp16(fused_path: str | Path, out_path: str | Path, cfg: Fp16Config | None = None) -> Path:
    from onnxruntime.transformers.float16 import DEFAULT_OP_BLOCK_LIST
    from onnxruntime.transformers.onnx_model import OnnxModel

    cfg = cfg or Fp16Config()
    with quiet_logging():
        model = OnnxModel(onnx.load(str(fused_path)))
        model.convert_float_to_float16(keep_io_types=True,
                                       op_block_list=list(DEFAULT_OP_BLOCK_LIST) + list(cfg.op_block_list))
        model.save_model_to_file(str(out_path))
    return Path(out_path)


def fp16_structure(path: str | Path) -> dict:
    """Structural facts of an fp16 graph: weight dtypes of the big ops, and graph io dtypes."""
    model = onnx.load(str(path))
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    weights = [inits[name] for n in graph.node if n.op_type in WEIGHT_OPS
               for name in n.input if name in inits and len(inits[name].dims) >= 2]
    fp16_weights = sum(1 for w in weights if w.data_type == onnx.TensorProto.FLOAT16)
    io_types = {v.name: onnx.TensorProto.DataType.Name(v.type.tensor_type.elem_type).lower()
                for v in list(graph.input) + list(graph.output)}
    return {"weight_matrices": len(weights), "fp16_weight_matrices": fp16_weights, "io_types": io_types}


def check_fp16_structure(path: str | Path) -> dict:
    """``fp16_structure`` plus a verdict; used when the CPU provider cannot run the graph."""
    facts = fp16_structure(path)
    outputs_fp32 = all(t in ("float", "int64") for t in facts["io_types"].values())
    facts["ok"] = facts["weight_matrices"] > 0 and facts["fp16_weight_matrices"] == facts["weight_matrices"] \
        and outputs_fp32
    return facts


def make_fp16(fused_path: str | Path, out_path: str | Path, cfg: Fp16Config | None = None) -> dict:
    """``convert_to_fp16``, then ``check_fp16_structure``: its facts, ``ValidationError`` if not fp16."""
    convert_to_fp16(fused_path, out_path, cfg)
    structure = check_fp16_structure(out_path)
    if not structure["ok"]:
        raise ValidationError(f"fp16: {structure['fp16_weight_matrices']} of {structure['weight_matrices']} "
                              "weight matrices are fp16, or graph inputs/outputs are not fp32",
                              figures={"stage": "fp16", **structure})
    return structure
