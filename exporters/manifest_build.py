"""The manifest *builder*: a new bundle's ``Manifest`` from the export's facts, hashed and written.

``build_manifest`` makes the typed ``edgebert.bundle.manifest.Manifest`` (``Manifest.build``: the one
definition of the manifest's keys, inputs and outputs), ``write_manifest`` adds the sha256 of every
file (``with_files``) and writes ``manifest.to_dict()`` atomically, and ``verify_bundle`` re-reads and
re-hashes what was written. Reading a bundle is ``edgebert.bundle.reader``'s. Also here: the bundle's
graph file names and the ``export_host`` field (where the bundle was made).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgebert.bundle import MANIFEST_NAME, Manifest, read_manifest, verify_files
from edgebert.bundle.manifest import ModelShape
from edgebert.bundle.task_registry import bundle_task
from edgebert.exporters.tokenizer_info import highest_token_id
from edgebert.files.atomic import write_json
from edgebert.files.hashing import sha256_file
from edgebert.model import BertConfig
from edgebert.runtime.hostcpu import detect_host
from edgebert.runtime.trt_profile import TrtProfile
from edgebert.system.environment import versions

__all__ = ["MODEL_FILES", "OPENVINO_FILE", "OPENVINO_WEIGHTS", "int8_file", "build_manifest", "write_manifest", "verify_bundle", "export_host"]

# the graphs sit under onnx/ with the names Hugging Face's loaders look for (exporters.hf_folder): fp32
# model.onnx, the default INT8 model_quantized.onnx (transformers.js dtype "q8"), fp16 model_fp16.onnx
MODEL_FILES = {"fp32": "onnx/model.onnx", "int8": "onnx/model_quantized.onnx", "fp16": "onnx/model_fp16.onnx"}
OPENVINO_FILE, OPENVINO_WEIGHTS = "model.int8-openvino.xml", "model.int8-openvino.bin"   # the IR and its weights


def int8_file(target: str, default: bool) -> str:
    """``onnx/model_quantized.onnx`` for the bundle's default INT8 graph, ``onnx/model_qint8_<target>.onnx``
    for others."""
    return MODEL_FILES["int8"] if default else f"onnx/model_qint8_{target}.onnx"


def export_host() -> dict:
    """The machine that exported (a bundle travels; this says where it was made)."""
    host = detect_host()
    return {"arch": host.arch, "kind": host.kind, "flags": host.flags(), "u8s8": host.u8s8, "cpu": host.model}


def build_manifest(*, task: str, cfg: BertConfig, model_dir: Path, max_len: int, tokenizer: dict, opset: int,
                   models: dict[str, dict], trt_profile: TrtProfile | None = None,
                   extra: dict[str, Any] | None = None, output_names: tuple[str, ...] | None = None) -> Manifest:
    """The manifest without file hashes (``write_manifest`` adds them). The top-level ``tensorrt_profile``
    (batch x sequence, every input) is the export's; TensorRT graphs carry it per input."""
    # the label map of a classifier (id -> name; token-cls: the IOB tags EdgeSession.tag groups)
    labels = ({str(k): v for k, v in cfg.id2label.items()} if bundle_task(task).has_labels and cfg.id2label
              else None)
    return Manifest.build(
        task=task, config=shape_of(cfg),
        num_labels=cfg.num_labels,
        source={"model_dir": str(Path(model_dir).resolve()), "architecture": cfg.architecture},
        max_sequence_length=max_len, labels=labels, tokenizer=tokenizer, opset=opset, versions=versions(),
        models=models, tensorrt_profile=(trt_profile or TrtProfile.default(max_len)).as_dict(), extra=extra,
        output_names=output_names)


def shape_of(cfg: BertConfig) -> ModelShape:
    """The sizes the runtime checks inputs against: the positions a token may use (RoBERTa's table starts
    at pad_token_id + 1), and no token types for a model that ignores them (DistilBERT)."""
    sizes = {k: getattr(cfg, k) for k in ModelShape.__dataclass_fields__}
    sizes["max_position_embeddings"] = cfg.max_sequence_length
    if not cfg.has_token_types:
        sizes["type_vocab_size"] = None
    return ModelShape(**sizes)


def write_manifest(bundle_dir: Path, manifest: Manifest) -> Manifest:
    """Hash every file in ``bundle_dir`` (except the manifest, logs and hidden files) into ``files``, its
    size into ``sizes`` (an archive is extracted at these sizes); write the manifest atomically. Returns
    it with the hashes."""
    paths = bundle_paths(bundle_dir)
    files = {n: sha256_file(p) for n, p in paths.items()}
    manifest = manifest.with_files(files, {n: p.stat().st_size for n, p in paths.items()})
    tok = manifest.tokenizer.file
    if tok in paths:    # a session trusts this id for the very file hashed here and skips the vocabulary walk
        value = manifest.to_dict()
        value["tokenizer"].update(max_id=highest_token_id(paths[tok]), max_id_of=files[tok])
        manifest = Manifest.from_dict(value, owned=True)
    write_json(Path(bundle_dir) / MANIFEST_NAME, manifest.to_dict())
    return manifest


def bundle_paths(bundle_dir: Path) -> dict[str, Path]:
    """``{name: path}`` of the files a manifest hashes: every file under ``bundle_dir`` (sub-folders such as
    ``onnx/`` and ``1_Pooling/`` too, named by their posix path) except the manifest, logs and hidden ones."""
    root = Path(bundle_dir)
    found = {p.relative_to(root).as_posix(): p for p in sorted(root.rglob("*")) if p.is_file()}
    return {n: p for n, p in found.items() if n != MANIFEST_NAME and not n.endswith(".jsonl")
            and not any(part.startswith(".") for part in n.split("/"))}


def verify_bundle(bundle_dir: str | Path) -> Manifest:
    """Read the manifest and re-hash every file; ``BundleError`` on any problem. Returns the manifest."""
    manifest = read_manifest(bundle_dir)
    verify_files(bundle_dir, manifest)
    return manifest
