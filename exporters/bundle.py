"""Bundle manifest: build it at export time; read and verify it (the logic lives torch-free in
``edgebert.bundle``, which the runtime imports too)."""

from __future__ import annotations

import importlib.metadata as md
from pathlib import Path
from typing import Any

from edgebert.bundle import (BUNDLE_FORMAT, BUNDLE_VERSION, INPUT_NAMES, MANIFEST_NAME, TASK_OUTPUTS,
                             model_path, read_manifest, tokenizer_path, verify_files)
from edgebert.model import BertConfig
from edgebert.files.atomic import sha256_file, write_json
from edgebert.runtime.trt_profile import TrtProfile

__all__ = ["MANIFEST_NAME", "read_manifest", "verify_bundle", "verify_files", "model_path",
           "tokenizer_path", "build_manifest", "write_manifest", "MODEL_FILES", "int8_file"]

MODEL_FILES = {"fp32": "model.onnx", "int8": "model.int8.onnx", "fp16": "model.fp16.onnx"}


def int8_file(target: str, default: bool) -> str:
    """``model.int8.onnx`` for the bundle's default INT8 graph, ``model.int8-<target>.onnx`` for others."""
    return MODEL_FILES["int8"] if default else f"model.int8-{target}.onnx"


def verify_bundle(bundle_dir: str | Path) -> dict[str, Any]:
    """Read the manifest and re-hash every file; ``BundleError`` on any problem. Returns the manifest."""
    manifest = read_manifest(bundle_dir)
    verify_files(bundle_dir, manifest)
    return manifest


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def versions() -> dict[str, str | None]:
    return {"onnxruntime": _version("onnxruntime-gpu") or _version("onnxruntime"),
            "onnx": _version("onnx"), "torch": _version("torch"), "edgebert": _version("edgebert"),
            "tokenizers": _version("tokenizers")}


def io_spec(task: str, cfg: BertConfig) -> tuple[list[dict], list[dict]]:
    inputs = [{"name": n, "dtype": "int64", "shape": ["batch", "sequence"]} for n in INPUT_NAMES]
    logits = {"mlm": ["batch", "sequence", cfg.vocab_size], "token-cls": ["batch", "sequence", cfg.num_labels]}
    shapes = {
        "last_hidden_state": ["batch", "sequence", cfg.hidden_size],
        "pooler_output": ["batch", cfg.hidden_size],
        "logits": logits.get(task, ["batch", cfg.num_labels]),
    }
    outputs = [{"name": n, "dtype": "float32", "shape": shapes[n]} for n in TASK_OUTPUTS[task]]
    return inputs, outputs


def build_manifest(*, task: str, cfg: BertConfig, model_dir: Path, architecture: str, max_len: int,
                   tokenizer: dict, opset: int, models: dict[str, dict], extra: dict | None = None,
                   trt_profile: TrtProfile | None = None) -> dict:
    """The manifest without ``files`` (``write_manifest`` hashes the files and adds it). The top-level
    ``tensorrt_profile`` (batch x sequence, every input) is the export's; TensorRT graphs carry it per input."""
    inputs, outputs = io_spec(task, cfg)
    # the label map of a classifier (id -> name; token-cls: the IOB tags EdgeSession.tag groups)
    labels = ({str(k): v for k, v in cfg.id2label.items()} if task in ("cls", "token-cls") and cfg.id2label
              else None)
    manifest = {
        "format": BUNDLE_FORMAT, "version": BUNDLE_VERSION, "task": task,
        "source": {"model_dir": str(Path(model_dir).resolve()), "architecture": architecture},
        "config": {"hidden_size": cfg.hidden_size, "num_hidden_layers": cfg.num_hidden_layers,
                   "num_attention_heads": cfg.num_attention_heads, "vocab_size": cfg.vocab_size,
                   "max_position_embeddings": cfg.max_position_embeddings,
                   "intermediate_size": cfg.intermediate_size, "type_vocab_size": cfg.type_vocab_size},
        "max_sequence_length": max_len,
        "labels": labels,
        "tokenizer": tokenizer,
        "inputs": inputs, "outputs": outputs,
        "padding": "right",
        "opset": opset,
        "versions": versions(),
        "models": models,
        "tensorrt_profile": (trt_profile or TrtProfile.default(max_len)).as_dict(),
    }
    manifest.update(extra or {})
    return manifest


def write_manifest(bundle_dir: Path, manifest: dict) -> dict:
    """Hash every file in ``bundle_dir`` (except the manifest and logs) into ``files``; write it."""
    files = {p.name: sha256_file(p) for p in sorted(Path(bundle_dir).iterdir())
             if p.is_file() and p.name != MANIFEST_NAME and not p.name.endswith(".jsonl")
             and not p.name.startswith(".")}
    manifest = {**manifest, "files": files}
    write_json(Path(bundle_dir) / MANIFEST_NAME, manifest)
    return manifest
