"""ONNX export: trace -> validate -> fuse (ORT transformer optimizer) -> INT8 / FP16 / GPU graphs -> bundle.

    from edgebert.exporters import ExportConfig, export_bundle
    result = export_bundle(ExportConfig(model_dir="runs/minilm", out_dir="runs/bundle", int8=True))
    result.manifest.models["fp32"].get_extra("fused_ops")   # {"Attention": 6, ...}

Modules, each with one job:

* ``config``: ``ExportConfig`` (every option, validated) and the export presets;
* ``pipeline``: ``export_bundle``, the order of the steps and the atomic bundle folder;
* ``job``: ``ExportJob``, the export's facts every graph step reads (task, graphs, folders, tokenizer);
* ``validate``: ``GraphValidator``, the validation context built once per export (cases, PyTorch
  references, output names, tolerance, progress) that every graph step is handed;
* ``onnx_export``: tracing; ``fusion``: the fused graph and its gate; ``gpu_graphs``: the TensorRT,
  CUDA and fp16 graphs; ``int8``: the INT8 entries (``quantization`` makes the graphs, this validates them);
* ``manifest_build``: the manifest *builder* (``Manifest.build``, hashes, atomic write, re-verification);
  reading a bundle is ``edgebert.bundle``'s;
* ``result``: ``ExportResult`` and its summary lines; ``tokenizer_info``: the tokenizer facts the manifest records.
"""

from edgebert.bundle import model_path, read_manifest, tokenizer_path, verify_files
from edgebert.exporters.config import EXPORT_PRESETS, MAX_OPSET, MIN_OPSET, ExportConfig, default_task
from edgebert.exporters.manifest_build import MODEL_FILES, verify_bundle
from edgebert.exporters.pipeline import export_bundle
from edgebert.exporters.result import ExportResult

__all__ = ["ExportConfig", "ExportResult", "export_bundle", "read_manifest", "verify_bundle",
           "verify_files", "model_path", "tokenizer_path", "default_task", "EXPORT_PRESETS",
           "MIN_OPSET", "MAX_OPSET", "MODEL_FILES"]
