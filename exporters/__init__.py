"""ONNX export: trace -> validate -> fuse (ORT transformer optimizer) -> INT8 / FP16 -> bundle.

    from exporters import ExportConfig, export_bundle
    result = export_bundle(ExportConfig(model_dir="runs/minilm", out_dir="runs/bundle", int8=True))
    result.manifest["models"]["fp32"]["fused_ops"]   # {"Attention": 6, ...}
"""

from .bundle import MODEL_FILES, model_path, read_manifest, tokenizer_path, verify_bundle, verify_files
from .config import EXPORT_PRESETS, MAX_OPSET, MIN_OPSET, ExportConfig, default_task
from .pipeline import ExportResult, export_bundle

__all__ = ["ExportConfig", "ExportResult", "export_bundle", "read_manifest", "verify_bundle",
           "verify_files", "model_path", "tokenizer_path", "default_task", "EXPORT_PRESETS",
           "MIN_OPSET", "MAX_OPSET", "MODEL_FILES"]
