"""A cross-encoder's score activation, as sentence-transformers saves and reads it. Stdlib only.

A sentence-transformers ``CrossEncoder`` is a ``...ForSequenceClassification`` whose logits pass through an
activation before ``predict`` returns them: ``Sigmoid`` by default for one label (a relevance score in 0..1),
``Identity`` for several, or what the model states. Three releases store it in three places, all read here:

* sentence-transformers 6: ``config_sentence_transformers.json`` (``model_type: CrossEncoder``, ``activation_fn``);
* 4 and 5: ``config.json`` ``sentence_transformers: {"activation_fn": ...}``;
* before 4: ``config.json`` ``sbert_ce_default_activation_function``.

``import-hf`` keeps it (``settings_file``), ``export`` puts it into the manifest (``MANIFEST_KEY``) and into the
bundle's files for both readers, ``EdgeSession.predict`` / ``rank`` apply it. Only activations numpy computes
exactly as torch does are accepted (``ACTIVATIONS``); another is refused, never silently replaced.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from edgebert.bundle.st_settings import ST_SETTINGS_NAME
from edgebert.errors import ConfigError
from edgebert.files.jsonfile import read_json_object

__all__ = ["ACTIVATIONS", "MANIFEST_KEY", "CROSS_ENCODER", "ST_SETTINGS_NAME", "read_cross_encoder", "default_activation",
           "activation_name", "settings_file", "hf_config_entry"]

CROSS_ENCODER = "CrossEncoder"                  # config_sentence_transformers.json "model_type"
MANIFEST_KEY = "cross_encoder"
# edgebert's name -> sentence-transformers' dotted path (what it saves; torch.nn's classes)
ACTIVATIONS = {"sigmoid": "torch.nn.modules.activation.Sigmoid",
               "identity": "torch.nn.modules.linear.Identity",
               "tanh": "torch.nn.modules.activation.Tanh"}
_SHORT = {"Sigmoid": "sigmoid", "Identity": "identity", "Tanh": "tanh"}


def default_activation(num_labels: int) -> str:
    """sentence-transformers' default: Sigmoid for one label, Identity for several."""
    return "sigmoid" if num_labels == 1 else "identity"


def activation_name(value: Any, where: str) -> str:
    """``sigmoid`` / ``identity`` / ``tanh`` for a dotted path (``torch.nn.modules.activation.Sigmoid``,
    ``torch.nn.Sigmoid``), a short name, or a torch module instance; ``ConfigError`` naming ``where`` else."""
    if isinstance(value, str):
        last = value.rsplit(".", 1)[-1]
        if value.lower() in ACTIVATIONS:
            return value.lower()
        if last in _SHORT and (value == last or value.startswith("torch.")):
            return _SHORT[last]
    elif type(value).__name__ in _SHORT and type(value).__module__.startswith("torch.nn"):
        return _SHORT[type(value).__name__]
    raise ConfigError(f"{where}: activation {value!r} is not one edgebert computes",
                      f"use one of {', '.join(ACTIVATIONS)} (torch.nn.Sigmoid, Identity, Tanh)")


def read_cross_encoder(model_dir: str | os.PathLike, num_labels: int) -> dict[str, str] | None:
    """``{"activation": name, "activation_fn": dotted path, "stated_in": file}`` of a cross-encoder folder, None for
    any other model (one that states nothing of a cross-encoder). The ST 6 file wins over config.json's."""
    folder = Path(model_dir)
    settings = folder / ST_SETTINGS_NAME
    config = folder / "config.json"
    st = read_json_object(settings) if settings.is_file() else {}
    cfg = read_json_object(config) if config.is_file() else {}
    stated, where = None, None
    if st.get("model_type") == CROSS_ENCODER:
        stated, where = st.get("activation_fn"), ST_SETTINGS_NAME
    if stated is None and isinstance(cfg.get("sentence_transformers"), dict) and "activation_fn" in cfg["sentence_transformers"]:
        stated, where = cfg["sentence_transformers"]["activation_fn"], "config.json sentence_transformers"
    if stated is None and cfg.get("sbert_ce_default_activation_function"):
        stated, where = cfg["sbert_ce_default_activation_function"], "config.json sbert_ce_default_activation_function"
    if where is None and st.get("model_type") != CROSS_ENCODER:
        return None
    name = activation_name(stated, f"{folder / (where or ST_SETTINGS_NAME).split()[0]}") if stated else \
        default_activation(num_labels)
    return {"activation": name, "activation_fn": ACTIVATIONS[name],
            "stated_in": where or f"{ST_SETTINGS_NAME} (sentence-transformers' default)"}


def settings_file(activation: str) -> dict[str, Any]:
    """config_sentence_transformers.json of a cross-encoder, as sentence-transformers 6 writes it."""
    return {"model_type": CROSS_ENCODER, "activation_fn": ACTIVATIONS[activation], "prompts": {},
            "default_prompt_name": None}


def hf_config_entry(activation: str) -> dict[str, Any]:
    """config.json's ``sentence_transformers`` entry, where sentence-transformers 4 and 5 read the activation."""
    return {"activation_fn": ACTIVATIONS[activation]}
