"""A sentence-transformers model's prompts and similarity function (``config_sentence_transformers.json``),
kept by ``import-hf``, put into the manifest by ``export`` (``sentence_transformers``), and read by
``EdgeSession.encode`` / ``encode_query`` / ``encode_document`` / ``similarity``. Torch-free."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from edgebert.errors import BundleError, ConfigError
from edgebert.files.jsonfile import read_json_object

ST_SETTINGS_NAME = "config_sentence_transformers.json"
SIMILARITY_FUNCTIONS = ("cosine", "dot", "euclidean", "manhattan")
MANIFEST_KEY = "sentence_transformers"
# the prompts sentence-transformers (5.x, the pinned one) gives every model, empty unless the model's own
# prompts fill them: ``encode_document`` then takes "document" before "passage" / "corpus"
DEFAULT_PROMPTS = {"query": "", "document": ""}


def check_settings(value: Any, where: str, error: type = ConfigError) -> dict[str, Any]:
    """``{"prompts": {name: text}, "default_prompt_name": str | None, "similarity_fn_name": str | None}`` (and
    ``truncate_dim`` where stated) from ``value`` (a config_sentence_transformers.json or a manifest entry);
    ``error`` names ``where``."""
    if not isinstance(value, dict):
        raise error(f"{where} must hold a JSON object")
    prompts = value.get("prompts") or {}
    if not isinstance(prompts, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in prompts.items()):
        raise error(f"{where}: prompts must map names to texts")
    default = value.get("default_prompt_name")
    if default is not None and default not in {**DEFAULT_PROMPTS, **prompts}:
        raise error(f"{where}: default_prompt_name {default!r} is not one of its prompts "
                    f"({', '.join({**DEFAULT_PROMPTS, **prompts})})")
    similarity = value.get("similarity_fn_name")
    if similarity is not None and similarity not in SIMILARITY_FUNCTIONS:
        raise error(f"{where}: similarity_fn_name {similarity!r} is not one of {', '.join(SIMILARITY_FUNCTIONS)}")
    dims = value.get("truncate_dim")      # sentence-transformers cuts every embedding to it unless told otherwise
    if dims is not None and (not isinstance(dims, int) or isinstance(dims, bool) or dims < 1):
        raise error(f"{where}: truncate_dim {dims!r} is not a positive whole number of dimensions")
    return {"prompts": dict(prompts), "default_prompt_name": default, "similarity_fn_name": similarity,
            **({"truncate_dim": dims} if dims is not None else {})}


def read_settings(model_dir: str | os.PathLike) -> dict[str, Any] | None:
    """The settings of a model directory's config_sentence_transformers.json (None: it has none)."""
    path = Path(model_dir) / ST_SETTINGS_NAME
    if not path.is_file():
        return None
    return check_settings(read_json_object(path), str(path))


def manifest_settings(manifest: Any) -> dict[str, Any]:
    """A bundle's settings (no prompts, default similarity when its manifest states none)."""
    value = manifest.get(MANIFEST_KEY) if hasattr(manifest, "get") else None
    if value is None:
        return {"prompts": {}, "default_prompt_name": None, "similarity_fn_name": None}
    return check_settings(value, f"manifest {MANIFEST_KEY}", BundleError)
