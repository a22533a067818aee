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

``read_manifest`` checks the structure the runtime relies on (``check_structure``: types and presence
of what is read, never a ban on extra keys, so newer entries and tasks pass) and every file it names
must stay inside the bundle, symlinks resolved (``bundle_file``), with or without hash checks.
``open_bundle`` also checks that each graph's declared inputs and outputs agree with the ONNX file's
own (``check_graph_io``, read by ``edgebert.onnx_io`` without onnxruntime). Every problem is a one-line
``BundleError``.

Version 2 gives every model entry a ``precision``, and every INT8 entry its ``target`` and
``requires`` (what a host needs to run it exactly: ``u8s8_exact``, see ``edgebert.runtime.hostcpu``).
Version 1 bundles are still read: their one INT8 graph has 8-bit int8 weights, so it is treated as
needing exact U8S8 products (``LEGACY_INT8``).

GPU graphs are further entries (``edgebert.runtime.graphs``): ``fp32-trt`` / ``int8-trt``
(``model.trt.onnx`` / ``model.int8.trt.onnx``: standard ONNX ops only, QDQ S8S8 for INT8, with a
TensorRT min/opt/max profile for every input) and ``fp32-cuda`` / ``fp16-cuda`` (``model.cuda.onnx`` /
``model.fp16.cuda.onnx``: fused with the 1-D mask index). Every entry names its ``graph`` kind and the
``providers`` it is made for; entries written before that carry neither (``entry_providers``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .errors import BundleError
from .fileio import sha256_file  # stdlib only, like this module
from .onnx_io import FLOAT_TYPES, NotOnnx, graph_io

__all__ = ["MANIFEST_NAME", "BUNDLE_FORMAT", "BUNDLE_VERSION", "TASKS", "PRECISIONS", "TASK_OUTPUTS",
           "INPUT_NAMES", "sha256_file", "read_manifest", "entry_providers", "int8_graphs", "verify_files",
           "model_path", "tokenizer_path", "open_bundle", "check_structure", "check_graph_io", "bundle_file"]

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
    check_structure(manifest, path)
    for name in _named_files(manifest):
        bundle_file(bundle_dir, name)
    return manifest


# --------------------------------------------------------------------------- structure
def _is_int(value: Any, minimum: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _problem(manifest: dict[str, Any]) -> str | None:
    """The first structural problem of a manifest, as a phrase (None if it is usable)."""
    cfg = manifest["config"]
    if not isinstance(cfg, dict):
        return "config must be an object"
    for key in ("hidden_size", "max_position_embeddings", "vocab_size", "num_hidden_layers", "num_attention_heads"):
        if not _is_int(cfg.get(key), 1):
            return f"config.{key} is {cfg.get(key)!r}, not a positive integer"
    max_len = manifest.get("max_sequence_length")
    if max_len is not None and not _is_int(max_len, 3):
        return f"max_sequence_length is {max_len!r}, not an integer >= 3"
    tok = manifest["tokenizer"]
    if not isinstance(tok, dict) or not isinstance(tok.get("file"), str):
        return "tokenizer must be an object with a file name"
    for key in ("pad_id", "mask_id", "cls_id", "sep_id", "unk_id"):
        if tok.get(key) is not None and not _is_int(tok[key]):
            return f"tokenizer.{key} is {tok[key]!r}, not a token id"
    for key in ("inputs", "outputs"):
        if not (isinstance(manifest[key], list) and manifest[key]
                and all(isinstance(i, dict) and isinstance(i.get("name"), str) for i in manifest[key])):
            return f"{key} must be a non-empty list of objects with a name"
    bad_inputs = sorted({i["name"] for i in manifest["inputs"]} - set(INPUT_NAMES))
    if bad_inputs:
        return f"input {bad_inputs[0]!r} is not one the runtime feeds ({', '.join(INPUT_NAMES)})"
    expected = TASK_OUTPUTS.get(manifest["task"])
    declared = tuple(o["name"] for o in manifest["outputs"])
    if expected is not None and declared != expected:
        return f"task {manifest['task']!r} has outputs {', '.join(expected)}, the manifest declares {', '.join(declared)}"
    for key, entry in manifest["models"].items():
        if not isinstance(entry, dict) or not isinstance(entry.get("file"), str):
            return f"models.{key} must be an object with a file name"
        if manifest.get("version", 1) >= 2 and not isinstance(entry.get("precision"), str):
            return f"models.{key} has no precision"
        if model_precision(key, entry) == "int8" and "requires" in entry:
            if not isinstance(entry["requires"], dict) or not isinstance(entry.get("target"), str):
                return f"models.{key} must carry a target name and a requires object"
    files = manifest["files"]
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        return "files must map file names to sha256 strings"
    labels = manifest.get("labels")
    if labels is not None and not (isinstance(labels, dict) and all(isinstance(v, str) for v in labels.values())
                                   and sorted(labels, key=str) == sorted(map(str, range(len(labels))), key=str)):
        return "labels must map 0..N-1 to label names"
    return None


def check_structure(manifest: dict[str, Any], where: str | os.PathLike = MANIFEST_NAME) -> None:
    """``BundleError`` naming the first field the runtime reads that is missing or of the wrong type.
    Extra keys and entries are allowed (newer exporters add them)."""
    problem = _problem(manifest)
    if problem:
        raise BundleError(f"{where}: {problem}", "re-export the bundle")


def _named_files(manifest: dict[str, Any]) -> list[str]:
    return [*(m["file"] for m in manifest["models"].values()), manifest["tokenizer"]["file"], *manifest["files"]]


def bundle_file(bundle_dir: str | os.PathLike, name: str) -> Path:
    """``bundle_dir/name``, refused unless it stays inside the bundle once symlinks are resolved."""
    bundle_dir = Path(bundle_dir)
    if not name or Path(name).is_absolute() or ".." in Path(name).parts:
        raise BundleError(f"{bundle_dir}/{MANIFEST_NAME} names a file outside the bundle: {name!r}",
                          "re-export the bundle")
    path = bundle_dir / name
    root = bundle_dir.resolve()
    if not path.resolve().is_relative_to(root):
        raise BundleError(f"{path} is a symlink that leaves the bundle (to {path.resolve()})",
                          "copy the file into the bundle, or re-export it")
    return path


# --------------------------------------------------------------------------- graphs vs manifest
def check_graph_io(bundle_dir: str | os.PathLike, manifest: dict[str, Any], key: str) -> None:
    """``BundleError`` unless the graph of ``models[key]`` takes exactly the manifest's inputs (int64)
    and gives its outputs (floating point, of the manifest's fixed sizes, e.g. hidden_size)."""
    path = bundle_file(bundle_dir, manifest["models"][key]["file"])
    if not path.is_file():
        raise BundleError(f"{path} is missing", "the bundle is incomplete; re-export it")
    try:
        inputs, outputs = graph_io(path)
    except (NotOnnx, OSError, ValueError) as exc:
        raise BundleError(f"{path} is not a readable ONNX model ({exc})", "re-export the bundle") from exc
    where = f"{path.name} ({key})"
    wanted = {i["name"] for i in manifest["inputs"]}
    have = {i.name: i for i in inputs}
    if set(have) != wanted:
        raise BundleError(f"{where} takes inputs {', '.join(sorted(have))}; the manifest declares "
                          f"{', '.join(sorted(wanted))}", "the manifest and the graph come from different exports")
    wrong = [i.name for i in inputs if i.dtype and i.dtype != "int64"]
    if wrong:
        raise BundleError(f"{where} input {wrong[0]} is {have[wrong[0]].dtype}, the runtime feeds int64")
    produced = {o.name: o for o in outputs}
    for out in manifest["outputs"]:
        got = produced.get(out["name"])
        if got is None:
            raise BundleError(f"{where} has no output {out['name']!r} (it gives {', '.join(produced)}), yet the "
                              f"manifest's task {manifest['task']!r} needs it",
                              "the manifest and the graph come from different exports")
        if got.dtype and got.dtype not in FLOAT_TYPES:
            raise BundleError(f"{where} output {got.name} is {got.dtype}, not floating point")
        declared = out.get("shape")
        if got.shape and isinstance(declared, list) and len(declared) == len(got.shape):
            for axis, (a, b) in enumerate(zip(declared, got.shape)):
                if _is_int(a) and _is_int(b) and a != b:
                    raise BundleError(f"{where} output {got.name} has size {b} on axis {axis}; the manifest "
                                      f"says {a}", "the manifest and the graph come from different exports")
    hidden = produced.get("last_hidden_state")
    if hidden is not None and hidden.shape and _is_int(hidden.shape[-1]) \
            and hidden.shape[-1] != manifest["config"]["hidden_size"]:
        raise BundleError(f"{where} gives vectors of {hidden.shape[-1]}; config.hidden_size is "
                          f"{manifest['config']['hidden_size']}", "the manifest and the graph come from different exports")


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
        path = bundle_file(bundle_dir, name)
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


def entry_providers(key: str, entry: dict[str, Any]) -> tuple[str, ...]:
    """The providers a model entry is made for (entries written before GPU graphs: by their kind)."""
    if entry.get("providers"):
        return tuple(entry["providers"])
    if model_precision(key, entry) == "fp16":
        return ("cuda",)
    if (entry.get("quantization") or {}).get("format") == "QDQ":
        return ("cpu",)
    return ("cpu", "cuda")


def int8_graphs(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{model key: entry}`` of every CPU INT8 graph, the default (``int8``) first; version 1 entries get
    ``LEGACY_INT8``'s target and requirements. The TensorRT INT8 graph (``int8-trt``) is not one of them."""
    out = {}
    for key, entry in manifest["models"].items():
        if model_precision(key, entry) == "int8" and "cpu" in entry_providers(key, entry):
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
    path = bundle_file(bundle_dir, entry["file"])
    if not path.is_file():
        raise BundleError(f"{path} is missing", "the bundle is incomplete; re-export it")
    return path


def tokenizer_path(bundle_dir: str | os.PathLike, manifest: dict[str, Any] | None = None) -> Path:
    """Path of the bundle's ``tokenizer.json``."""
    bundle_dir = Path(bundle_dir)
    manifest = manifest if manifest is not None else read_manifest(bundle_dir)
    path = bundle_file(bundle_dir, manifest["tokenizer"]["file"])
    if not path.is_file():
        raise BundleError(f"{path} is missing", "the bundle is incomplete; re-export it")
    return path


def open_bundle(bundle_dir: str | os.PathLike, verify: bool = True) -> dict[str, Any]:
    """``read_manifest`` + (optionally) ``verify_files`` + ``check_graph_io`` of every graph: the one
    call a runtime needs before loading."""
    manifest = read_manifest(bundle_dir)
    if verify:
        verify_files(bundle_dir, manifest)
    for key, entry in manifest["models"].items():
        if model_precision(key, entry) in PRECISIONS:   # graphs of kinds this runtime loads
            check_graph_io(bundle_dir, manifest, key)
    return manifest
