"""The bundle's GPU graphs: TensorRT's standard-op graphs and CUDA's fused-gpu graphs (+ the fp16 graph).

* ``fp32-trt`` (``model.trt.onnx``): the traced graph, standard ONNX ops only. TensorRT cannot read
  onnxruntime's contrib ops (Attention, SkipLayerNormalization ...): given the fused graph, onnxruntime
  splits it around them and hands TensorRT subgraphs whose inputs have no shape profile. It carries
  a min/opt/max profile for every input (``--trt-profile``). TensorRT runs fp16 from it too.
* ``int8-trt`` (``model.int8.trt.onnx``, ``exporters.int8``): its static QDQ S8S8 form.
* ``fp32-cuda`` / ``fp16-cuda`` (``model.cuda.onnx`` / ``model.fp16.cuda.onnx``): fused with the 1-D
  mask index (``exporters.fusion``): CUDA fp16 Attention runs cuDNN flash attention with it (measured);
  fp16 keeps fp32 inputs and outputs.
* ``fp16`` (``model.fp16.onnx``): the fused CPU graph in fp16 (``quantization.fp16`` converts it).

Each graph is validated against the PyTorch reference on CPU (``GraphValidator``), like every other
graph; the TensorRT graphs must also hold no ``com.microsoft`` op.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgebert.bundle import INPUT_NAMES
from edgebert.errors import ValidationError
from edgebert.exporters.fusion import fused_entry
from edgebert.exporters.job import ExportJob
from edgebert.exporters.validate import GraphValidator
from edgebert.graph.ops import op_domains
from edgebert.quantization.accuracy import cpu_session
from edgebert.quantization.config import Fp16Config
from edgebert.quantization.fp16 import make_fp16
from edgebert.runtime.trt_profile import TrtProfile

GPU_FILES = {"fp32-trt": "onnx/model.trt.onnx", "int8-trt": "onnx/model.int8.trt.onnx",
             "fp32-cuda": "onnx/model.cuda.onnx", "fp16-cuda": "onnx/model.fp16.cuda.onnx"}
STANDARD_DOMAINS = ("ai.onnx",)


def check_standard_ops(path: Path, label: str) -> list[str]:
    """The graph's op domains; ``ValidationError`` if any is not standard ONNX (TensorRT reads only those)."""
    domains = op_domains(path)
    foreign = [d for d in domains if d not in STANDARD_DOMAINS]
    if foreign:
        raise ValidationError(f"{label}: {path.name} uses {', '.join(foreign)} ops; a TensorRT graph must hold "
                              "standard ONNX ops only", figures={"stage": label, "domains": domains})
    return domains


def tensorrt_fields(path: Path, profile: TrtProfile, label: str) -> dict[str, Any]:
    """Manifest fields every TensorRT graph carries (the profile for every input the graph takes: a
    DistilBERT's takes no token_type_ids)."""
    import onnx

    inputs = {i.name for i in onnx.load(str(path), load_external_data=False).graph.input}
    return {"graph": "standard-ops", "providers": ["tensorrt"], "op_domains": check_standard_ops(path, label),
            "tensorrt_profile": profile.per_input([n for n in INPUT_NAMES if n in inputs])}


class GpuGraphs:
    """Makes and validates the GPU graphs (and the fp16 graph) of one export."""

    def __init__(self, job: ExportJob, check: GraphValidator, fp16: Fp16Config):
        self.job, self.check, self.fp16 = job, check, fp16

    def tensorrt_fp32(self, profile: TrtProfile) -> dict[str, Any]:
        out = self.job.staging / GPU_FILES["fp32-trt"]
        out.write_bytes(self.job.raw.read_bytes())
        fields = tensorrt_fields(out, profile, "tensorrt fp32")
        validation = self.check.check(out, "tensorrt fp32")
        self.check.say("TensorRT graph (standard ops) validated", max_abs_diff=validation["max_abs_diff"])
        return {"file": self.job.name_of(out), "precision": "fp32", **fields, "serves": ["fp32", "fp16"],
                "validation": validation}

    def cuda(self) -> dict[str, dict[str, Any]]:
        """``fp32-cuda`` and ``fp16-cuda``: fused with the 1-D mask index, validated."""
        fp32 = fused_entry(self.job, self.check, self.job.staging / GPU_FILES["fp32-cuda"], mask="index")
        common = {k: fp32[k] for k in ("graph", "providers", "attention_mask")}
        return {"fp32-cuda": fp32,
                "fp16-cuda": {**self.fp16_graph(self.job.staging / fp32["file"], GPU_FILES["fp16-cuda"]), **common}}

    def fp16_graph(self, source: Path, name: str) -> dict[str, Any]:
        """fp16 weights, fp32 inputs/outputs; validated on CPU where the CPU provider runs it."""
        out = self.job.staging / name
        self.check.say(f"converting {source.name} to FP16")
        structure = make_fp16(source, out, self.fp16)
        try:
            cpu_session(out)
        except Exception as exc:  # the CPU provider lacks an fp16 kernel: check the structure only
            validation = {"mode": "structural", "reason": f"CPU provider cannot run it: {str(exc)[:200]}"}
        else:
            validation = {"mode": "cpu", **self.check.measure(out, "fp16", self.fp16.tolerance, relative=True)}
        self.check.say("FP16 done", max_abs_diff=validation.get("max_abs_diff"))
        return {"file": name, "precision": "fp16", "graph": "fused", "providers": ["cuda"],
                "op_block_list": list(self.fp16.op_block_list), "keep_io_types": True, "structure": structure,
                "validation": validation}
