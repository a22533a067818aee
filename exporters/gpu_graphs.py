"""The bundle's GPU graphs: TensorRT's standard-op graphs and CUDA's fused-gpu graphs (+ the fp16 graph).

* ``fp32-trt`` (``model.trt.onnx``): the traced graph, standard ONNX ops only. TensorRT cannot read
  onnxruntime's contrib ops (Attention, SkipLayerNormalization ...): given the fused graph, onnxruntime
  splits it around them and hands TensorRT subgraphs whose inputs have no shape profile. It carries
  a min/opt/max profile for every input (``--trt-profile``). TensorRT runs fp16 from it too.
* ``int8-trt`` (``model.int8.trt.onnx``, ``exporters.int8``): its static QDQ S8S8 form.
* ``fp32-cuda`` / ``fp16-cuda`` (``model.cuda.onnx`` / ``model.fp16.cuda.onnx``): fused with the 1-D
  mask index (``exporters.fusion``), so CUDA's Attention can use flash / memory-efficient kernels;
  fp16 keeps fp32 inputs and outputs.

Each graph is validated against the PyTorch reference on CPU, like every other graph; the TensorRT
graphs must also hold no ``com.microsoft`` op.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from edgebert.errors import ValidationError
from edgebert.graph.ops import op_domains
from edgebert.runtime.trt_profile import TrtProfile
from quantization.config import Fp16Config
from quantization.fp16 import check_fp16_structure, convert_to_fp16

from .fusion import MASK_FORMATS, check_fusion, fuse_bert
from .validate import Case, cpu_session, validate_graph

Say = Callable[..., None]
GPU_FILES = {"fp32-trt": "model.trt.onnx", "int8-trt": "model.int8.trt.onnx", "fp32-cuda": "model.cuda.onnx",
             "fp16-cuda": "model.fp16.cuda.onnx"}
STANDARD_DOMAINS = ("ai.onnx",)


def check_standard_ops(path: Path, label: str) -> list[str]:
    """The graph's op domains; ``ValidationError`` if any is not standard ONNX (TensorRT reads only those)."""
    domains = op_domains(path)
    foreign = [d for d in domains if d not in STANDARD_DOMAINS]
    if foreign:
        raise ValidationError(f"{label}: {path.name} uses {', '.join(foreign)} ops; a TensorRT graph must hold "
                              "standard ONNX ops only", figures={"stage": label, "domains": domains})
    return domains


def tensorrt_fields(path: Path, profile: TrtProfile, input_names: list[str], label: str) -> dict[str, Any]:
    """Manifest fields every TensorRT graph carries."""
    return {"graph": "standard-ops", "providers": ["tensorrt"], "op_domains": check_standard_ops(path, label),
            "tensorrt_profile": profile.per_input(input_names)}


class GpuGraphs:
    """Makes and validates the GPU graphs of one export (everything they share is given once)."""

    def __init__(self, raw: Path, staging: Path, cases: list[Case], refs: list, names: tuple[str, ...],
                 fp32_tolerance: float, fp16: Fp16Config, say: Say):
        self.raw, self.staging, self.cases, self.refs, self.names = raw, staging, cases, refs, names
        self.fp32_tolerance, self.fp16, self.say = fp32_tolerance, fp16, say

    def tensorrt_fp32(self, profile: TrtProfile, input_names: list[str]) -> dict[str, Any]:
        out = self.staging / GPU_FILES["fp32-trt"]
        out.write_bytes(self.raw.read_bytes())
        fields = tensorrt_fields(out, profile, input_names, "tensorrt fp32")
        validation = validate_graph(out, self.cases, self.refs, self.names, self.fp32_tolerance, "tensorrt fp32")
        self.say("TensorRT graph (standard ops) validated", max_abs_diff=validation["max_abs_diff"])
        return {"file": out.name, "precision": "fp32", **fields, "serves": ["fp32", "fp16"],
                "validation": validation}

    def cuda(self, model_cfg, task: str) -> dict[str, dict[str, Any]]:
        """``fp32-cuda`` and ``fp16-cuda``: fused with the 1-D mask index, validated."""
        self.say("fusing the CUDA graph (1-D mask index)")
        fp32 = self.staging / GPU_FILES["fp32-cuda"]
        counts = fuse_bert(self.raw, fp32, model_cfg, mask="index")
        check_fusion(counts, model_cfg, task)
        validation = validate_graph(fp32, self.cases, self.refs, self.names, self.fp32_tolerance, "cuda fusion")
        self.say("validated CUDA graph", fused_ops=counts, max_abs_diff=validation["max_abs_diff"])
        common = {"graph": "fused-gpu", "providers": ["cuda"], "attention_mask": MASK_FORMATS["index"]}
        return {"fp32-cuda": {"file": fp32.name, "precision": "fp32", **common, "fused_ops": counts,
                              "validation": validation},
                "fp16-cuda": {**self.fp16_graph(fp32, GPU_FILES["fp16-cuda"]), **common}}

    def fp16_graph(self, source: Path, name: str) -> dict[str, Any]:
        """fp16 weights, fp32 inputs/outputs; validated on CPU where the CPU provider runs it."""
        out = self.staging / name
        self.say(f"converting {source.name} to FP16")
        convert_to_fp16(source, out, self.fp16)
        structure = check_fp16_structure(out)
        if not structure["ok"]:
            raise ValidationError(f"fp16: {structure['fp16_weight_matrices']} of {structure['weight_matrices']} "
                                  "weight matrices are fp16, or graph inputs/outputs are not fp32",
                                  figures={"stage": "fp16", **structure})
        try:
            cpu_session(out)
        except Exception as exc:  # the CPU provider lacks an fp16 kernel: check the structure only
            validation = {"mode": "structural", "reason": f"CPU provider cannot run it: {str(exc)[:200]}"}
        else:
            validation = {"mode": "cpu", **validate_graph(out, self.cases, self.refs, self.names,
                                                          self.fp16.tolerance, "fp16", relative=True)}
        self.say("FP16 done", max_abs_diff=validation.get("max_abs_diff"))
        return {"file": name, "precision": "fp16", "graph": "fused", "providers": ["cuda"],
                "op_block_list": list(self.fp16.op_block_list), "keep_io_types": True, "structure": structure,
                "validation": validation}
