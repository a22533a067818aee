"""The manifest's schema checks: what ``Manifest.from_dict`` refuses before it reads a field, each as one
phrase naming the field (``manifest.py`` turns it into the ``BundleError``)."""

from __future__ import annotations

from typing import Any

from edgebert.bundle.task_registry import BUNDLE_TASKS

__all__ = ["INPUT_NAMES", "TASK_OUTPUTS", "TOKEN_IDS", "entry_problem", "manifest_problem", "is_whole"]

# Output names per task, in graph order (read from the registry).
TASK_OUTPUTS: dict[str, tuple[str, ...]] = {t.name: t.output_names for t in BUNDLE_TASKS}
REQUIRED_OUTPUTS: dict[str, tuple[str, ...]] = {t.name: t.required_outputs for t in BUNDLE_TASKS}
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
TOKEN_IDS = ("pad_id", "mask_id", "cls_id", "sep_id", "unk_id")
CONFIG_KEYS = ("hidden_size", "max_position_embeddings", "vocab_size", "num_hidden_layers", "num_attention_heads")
MAX_ID = 2 ** 31 - 1          # ids are int64 in the graph; anything past int32 is no vocabulary's


def is_whole(value: Any, minimum: int = 0, maximum: int | None = None) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool) and value >= minimum
            and (maximum is None or value <= maximum))


def entry_problem(key: str, entry: Any, version: int) -> str | None:
    if not isinstance(entry, dict) or not isinstance(entry.get("file"), str):
        return f"models.{key} must be an object with a file name"
    if version >= 2 and not isinstance(entry.get("precision"), str):
        return f"models.{key} has no precision"
    if entry.get("providers") is not None and not (isinstance(entry["providers"], list)
                                                   and all(isinstance(p, str) for p in entry["providers"])):
        return f"models.{key}.providers must be a list of provider names"
    if entry.get("quantization") is not None and not isinstance(entry["quantization"], dict):
        return f"models.{key}.quantization must be an object"
    precision = str(entry.get("precision") or key.split("-", 1)[0])
    if precision == "int8" and "requires" in entry:
        if not isinstance(entry["requires"], dict) or not isinstance(entry.get("target"), str):
            return f"models.{key} must carry a target name and a requires object"
    return None


def manifest_problem(manifest: dict[str, Any]) -> str | None:
    """The first structural problem of a manifest, as a phrase (None if it is usable)."""
    cfg = manifest["config"]
    if not isinstance(cfg, dict):
        return "config must be an object"
    for key in CONFIG_KEYS:
        if not is_whole(cfg.get(key), 1, MAX_ID):
            return f"config.{key} is {cfg.get(key)!r}, not a positive integer"
    max_len = manifest.get("max_sequence_length")
    if max_len is not None and not is_whole(max_len, 3, MAX_ID):
        return f"max_sequence_length is {max_len!r}, not an integer >= 3"
    tok = manifest["tokenizer"]
    if not isinstance(tok, dict) or not isinstance(tok.get("file"), str):
        return "tokenizer must be an object with a file name"
    for key in TOKEN_IDS:
        if tok.get(key) is not None and not is_whole(tok[key], 0, MAX_ID):
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
    if expected is not None and declared not in (expected, REQUIRED_OUTPUTS[manifest["task"]]):
        return f"task {manifest['task']!r} has outputs {', '.join(expected)}, the manifest declares {', '.join(declared)}"
    for key, entry in manifest["models"].items():
        problem = entry_problem(key, entry, manifest["version"])
        if problem:
            return problem
    files = manifest["files"]
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        return "files must map file names to sha256 strings"
    sizes = manifest.get("sizes")
    if sizes is not None and not (isinstance(sizes, dict) and all(isinstance(k, str) and is_whole(v, 0)
                                                                  for k, v in sizes.items())):
        return "sizes must map file names to byte counts"
    labels = manifest.get("labels")
    if labels is not None and not (isinstance(labels, dict) and all(isinstance(v, str) for v in labels.values())
                                   and sorted(labels, key=str) == sorted(map(str, range(len(labels))), key=str)):
        return "labels must map 0..N-1 to label names"
    return None
