"""The ONNX bundle on disk: ``manifest.json`` + model files + tokenizer, read and hash-checked.

Torch-free on purpose (stdlib only): the runtime and ``edgebert bench`` import this module to open a
bundle written by ``edgebert export`` (``exporters.bundle``), so it must not pull in torch, onnx or
onnxruntime.

Layout of a bundle directory::

    manifest.json      {"format": "edgebert-bundle", "version": 1, "task": ..., "models": {...}, "files": {...}}
    model.onnx         fused fp32 graph            (models.fp32.file)
    model.int8.onnx    default INT8 graph          (models.int8.file; its target, e.g. "portable")
    model.int8-<t>.onnx  more INT8 graphs          (models["int8-<t>"], one per extra target)
    model.fp16.onnx    FP16 graph, if exported     (models.fp16.file)
    tokenizer.json     Hugging Face tokenizers JSON
    config.json        the source model's Hugging Face BertConfig JSON

``manifest["files"]`` maps every file name (except the manifest) to its sha256; ``verify_files``
re-hashes them and raises ``BundleError`` on any mismatch.

Version 2 gives every model entry a ``precision``, and every INT8 entry its ``target`` and
``requires`` (what a host needs to run it exactly: ``u8s8_exact``, see ``edgebert.runtime.hostcpu``).
Version 1 bundles are still read: their one INT8 graph has 8-bit int8 weights, so it is treated as
needing exact U8S8 products (``LEGACY_INT8``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .errors import BundleError
from .fileio import sha256_file  # stdlib only, like this module

__all__ = ["MANIFEST_NAME", "BUNDLE_FORMAT", "BUNDLE_VERSION", "TASKS", "PRECISIONS", "TASK_OUTPUTS",
           "INPUT_NAMES", "sha256_file", "read_manifest", "verify_files", "model_path", "tokenizer_path",
           "open_bundle"]

MANIFEST_NAME = "manifest.json"
BUNDLE_FORMAT = "edgebert-bundle"
BUNDLE_VERSION = 2
READABLE_VERSIONS = (1, 2)
TASKS = ("embed", "mlm", "cls", "token-cls")
PRECISIONS = ("fp32", "int8", "fp16")
# Output names per task, in graph order.
TASK_OUTPUTS: dict[str, tuple[str, ...]] = {
    "embed": ("last_hidden_state", "pooler_output"),
    "mlm": ("logits",),
    "cls": ("logits",),
    "token-cls": ("logits",),       # (batch, sequence, num_labels): one score row per token
}
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
_REQUIRED_KEYS = ("format", "version", "task", "config", "tokenizer", "inputs", "outputs", "models", "files")


def read_manifest(bundle_dir: str | os.PathLike) -> dict[str, Any]:
    """Parse and structurally check ``bundle_dir/manifest.json``; raise ``BundleError`` if unusable."""
    bundle_dir = Path(bundle_dir)
    path = bundle_dir / MANIFEST_NAME
    if not bundle_dir.is_dir():
        raise BundleError(f"bundle directory {bundle_dir} not found", "run `edgebert export` first")
    if not path.is_file():
        raise BundleError(f"{bundle_dir} has no {MANIFEST_NAME}",
                          "pass a directory written by `edgebert export`")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BundleError(f"{path} is not valid JSON ({exc})", "re-export the bundle") from exc
    if not isinstance(manifest, dict):
        raise BundleError(f"{path} must hold a JSON object", "re-export the bundle")
    if manifest.get("format") != BUNDLE_FORMAT:
        raise BundleError(f"{path} is not an edgebert bundle manifest (format={manifest.get('format')!r})")
    if manifest.get("version") not in READABLE_VERSIONS:
        raise BundleError(f"{path} has bundle version {manifest.get('version')!r}; this edgebert reads "
                          f"versions {', '.join(map(str, READABLE_VERSIONS))}",
                          "re-export the bundle with this edgebert")
    missing = [k for k in _REQUIRED_KEYS if k not in manifest]
    if missing:
        raise BundleError(f"{path} lacks {', '.join(missing)}", "re-export the bundle")
    if manifest["task"] not in TASKS:
        raise BundleError(f"{path} has unknown task {manifest['task']!r}")
    if not isinstance(manifest["models"], dict) or "fp32" not in manifest["models"]:
        raise BundleError(f"{path} lists no fp32 model", "re-export the bundle")
    return manifest


def verify_files(bundle_dir: str | os.PathLike, manifest: dict[str, Any] | None = None) -> dict[str, str]:
    """Re-hash every file listed in ``manifest['files']``; ``BundleError`` on a missing or changed file.

    Also checks that every model file and the tokenizer named in the manifest is listed.
    Returns the verified ``{name: sha256}``.
    """
    bundle_dir = Path(bundle_dir)
    manifest = manifest if manifest is not None else read_manifest(bundle_dir)
    files: dict[str, str] = manifest.get("files") or {}
    named = [m["file"] for m in manifest["models"].values()] + [manifest["tokenizer"]["file"]]
    unlisted = [n for n in named if n not in files]
    if unlisted:
        raise BundleError(f"{bundle_dir}/{MANIFEST_NAME} has no hash for {', '.join(unlisted)}",
                          "re-export the bundle")
    for name, expected in files.items():
        path = bundle_dir / name
        if Path(name).is_absolute() or ".." in Path(name).parts:
            raise BundleError(f"{bundle_dir}/{MANIFEST_NAME} names a file outside the bundle: {name!r}")
        if not path.is_file():
            raise BundleError(f"{path} is missing", "the bundle is incomplete; re-export it")
        actual = sha256_file(path)
        if actual != expected:
            raise BundleError(f"{path} does not match its manifest hash "
                              f"(sha256 {actual[:12]}..., expected {expected[:12]}...)",
                              "the file was changed or corrupted; re-export the bundle")
    return dict(files)


LEGACY_INT8 = {"target": "legacy-8bit",
               "requires": {"arch": ["x86_64", "arm64"], "u8s8_exact": True,
                            "exact_on": ["x86-vnni", "arm64"],
                            "elsewhere": "run with session.x64quantprecision=1"}}


def model_precision(key: str, entry: dict[str, Any]) -> str:
    """An entry's precision (version 1 entries: their key)."""
    return str(entry.get("precision") or key.split("-", 1)[0])


def int8_graphs(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{model key: entry}`` of every INT8 graph, the default (``int8``) first; version 1 entries get
    ``LEGACY_INT8``'s target and requirements."""
    out = {}
    for key, entry in manifest["models"].items():
        if model_precision(key, entry) == "int8":
            out[key] = entry if "requires" in entry else {**LEGACY_INT8, **entry}
    return dict(sorted(out.items(), key=lambda kv: kv[0] != "int8"))


def model_path(bundle_dir: str | os.PathLike, precision: str = "fp32",
               manifest: dict[str, Any] | None = None, key: str | None = None) -> Path:
    """Path of the ``fp32`` / ``int8`` / ``fp16`` model of a bundle (or of the model entry ``key``, e.g.
    ``int8-x86-vnni``); ``BundleError`` if not exported."""
    if precision not in PRECISIONS:
        raise BundleError(f"unknown precision {precision!r}", f"use one of {', '.join(PRECISIONS)}")
    bundle_dir = Path(bundle_dir)
    manifest = manifest if manifest is not None else read_manifest(bundle_dir)
    entry = manifest["models"].get(key or precision)
    if entry is None:
        have = ", ".join(manifest["models"])
        flag = {"int8": " with --int8", "fp16": " with --fp16"}.get(precision, "")
        raise BundleError(f"{bundle_dir} has no {precision} model (it has: {have})",
                          f"re-export{flag}")
    path = bundle_dir / entry["file"]
    if not path.is_file():
        raise BundleError(f"{path} is missing", "the bundle is incomplete; re-export it")
    return path


def tokenizer_path(bundle_dir: str | os.PathLike, manifest: dict[str, Any] | None = None) -> Path:
    """Path of the bundle's ``tokenizer.json``."""
    bundle_dir = Path(bundle_dir)
    manifest = manifest if manifest is not None else read_manifest(bundle_dir)
    path = bundle_dir / manifest["tokenizer"]["file"]
    if not path.is_file():
        raise BundleError(f"{path} is missing", "the bundle is incomplete; re-export it")
    return path


def open_bundle(bundle_dir: str | os.PathLike, verify: bool = True) -> dict[str, Any]:
    """``read_manifest`` + (optionally) ``verify_files``: the one call a runtime needs before loading."""
    manifest = read_manifest(bundle_dir)
    if verify:
        verify_files(bundle_dir, manifest)
    return manifest
