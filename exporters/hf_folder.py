"""The bundle as a Hugging Face model folder, so that the ecosystem's loaders open it as it is.

sentence-transformers (``backend="onnx"``), Optimum's ``ORTModelFor...`` and transformers.js read a model
folder: ``config.json`` (architectures, labels), ``tokenizer.json`` with ``tokenizer_config.json`` and
``special_tokens_map.json``, for an embedding model the sentence-transformers modules, and the graphs
under ``onnx/`` (``GRAPH_DIR``: transformers.js looks only there; sentence-transformers looks there for
``model.onnx`` and any ``file_name``). The graphs are written there under the names those tools use
(``exporters.manifest_build.MODEL_FILES``), so nothing is copied: the manifest maps each target to its
file, and ``loaders_note`` says which file each loader takes and how.

The bundle's ``tokenizer.json`` is the model's with its stored padding and truncation removed: a loader
that honours them (the ``tokenizers`` npm package) would pad every text to the stored length and
truncate elsewhere than ``max_length``; ``EdgeSession`` pads per batch and truncates itself anyway.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from edgebert.bundle.cross_encoder import hf_config_entry, settings_file
from edgebert.bundle.pooling import ST_CONFIG_NAME, SentencePooling, write_pooling
from edgebert.bundle.st_settings import ST_SETTINGS_NAME
from edgebert.bundle.task_registry import bundle_task
from edgebert.files.atomic import write_json, write_text
from edgebert.model import CONFIG_NAME, BertConfig

__all__ = ["GRAPH_DIR", "HF_FILES", "write_hf_folder", "clean_tokenizer", "loaders_note"]

GRAPH_DIR = "onnx"
TOKENIZER_CONFIG, SPECIAL_TOKENS = "tokenizer_config.json", "special_tokens_map.json"
HF_FILES = (TOKENIZER_CONFIG, SPECIAL_TOKENS)
# the transformers.js dtype whose file name (onnx/model<suffix>.onnx) each bundle entry has
_JS_DTYPES = {"fp32": "fp32", "int8": "q8", "fp16": "fp16", "int4": "q4"}     # int4: the small graph
# transformers' tokenizer class per model family (transformers.js picks its tokenizer by this name)
_TOKENIZER_CLASSES = {"bert": "BertTokenizer", "distilbert": "DistilBertTokenizer", "roberta": "RobertaTokenizer",
                      "xlm-roberta": "XLMRobertaTokenizer"}


def clean_tokenizer(source: Path, target: Path) -> None:
    """``source``'s tokenizer.json without stored padding / truncation, written atomically to ``target``,
    compact (no blanks between items: a page or a device downloads it; BERT's: 466 KB, 527 KB with them)."""
    spec = json.loads(Path(source).read_text(encoding="utf-8"))
    spec["padding"] = spec["truncation"] = None
    write_text(target, json.dumps(spec, ensure_ascii=False, separators=(",", ":")) + "\n")


def _hf_config(task: str, cfg: BertConfig, num_labels: int) -> dict[str, Any]:
    """The model's HF config with the architecture of the task's head and, for classifiers, every label."""
    labels = None
    if bundle_task(task).has_labels:
        labels = dict(cfg.id2label or {}) or {i: f"LABEL_{i}" for i in range(num_labels)}
    return cfg.replace(architecture=bundle_task(task).architecture, id2label=labels).to_hf_dict()


def _special_tokens(tok_file: Path, tok_meta: dict, model_type: str) -> dict[str, str]:
    """The tokenizer's own special tokens ([CLS] ... or <s> ...), by the ids the export found."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tok_file))
    names = {"unk_token": "unk_id", "sep_token": "sep_id", "pad_token": "pad_id", "cls_token": "cls_id",
             "mask_token": "mask_id"}
    found = {name: tok.id_to_token(tok_meta[key]) for name, key in names.items() if tok_meta.get(key) is not None}
    if model_type in ("roberta", "xlm-roberta"):
        found.update(bos_token=found["cls_token"], eos_token=found["sep_token"])
    return found


def _tokenizer_config(specials: dict[str, str], tok_meta: dict, max_len: int, model_type: str) -> dict[str, Any]:
    """What transformers / transformers.js need to build the tokenizer (``tokenizer_class`` above all)."""
    config = {"tokenizer_class": _TOKENIZER_CLASSES.get(model_type, "BertTokenizer"),
              "model_max_length": int(max_len), "clean_up_tokenization_spaces": True, **specials}
    if model_type in ("bert", "distilbert"):
        config.update(do_lower_case=bool(tok_meta["lowercase"]), tokenize_chinese_chars=True, strip_accents=None)
    return config


def write_hf_folder(staging: Path, *, task: str, cfg: BertConfig, num_labels: int, tok_file: Path, tok_meta: dict,
                    max_len: int, pooling: SentencePooling | None, source_dir: Path,
                    st_settings: dict[str, Any] | None = None,
                    cross_encoder: dict[str, Any] | None = None) -> list[str]:
    """Write the loaders' files into ``staging`` (the graphs are the export's own, under ``GRAPH_DIR``);
    returns the names written. An embedding model without stated pooling gets edgebert's default, mean
    pooling then unit length, which ``EdgeSession`` reads back from these files (``bundle.bundle_pooling``);
    its ``st_settings`` (prompts, similarity function: the manifest's ``sentence_transformers``) go into
    ``config_sentence_transformers.json``, so that sentence-transformers prompts as ``EdgeSession`` does. A
    cross-encoder's activation (``bundle.cross_encoder``) goes where sentence-transformers 6 reads it
    (config_sentence_transformers.json) and where 4 and 5 do (config.json's ``sentence_transformers``)."""
    staging = Path(staging)
    hf_config = _hf_config(task, cfg, num_labels)
    if cross_encoder:
        hf_config["sentence_transformers"] = hf_config_entry(cross_encoder["activation"])
    write_json(staging / CONFIG_NAME, hf_config)
    clean_tokenizer(tok_file, staging / tok_meta["file"])
    specials = _special_tokens(tok_file, tok_meta, cfg.model_type)
    limit = min(max_len, (cross_encoder or {}).get("max_length") or max_len)     # a CrossEncoder cuts pairs there
    write_json(staging / TOKENIZER_CONFIG, _tokenizer_config(specials, tok_meta, limit, cfg.model_type))
    write_json(staging / SPECIAL_TOKENS, specials)
    names = [CONFIG_NAME, tok_meta["file"], *HF_FILES]
    if bundle_task(task).has_pooling:
        pooling = pooling or SentencePooling("mean", normalize=True, source="edgebert default (EdgeSession.embed)")
        names += write_pooling(staging, pooling, cfg.hidden_size, write_text)
        limit = min(pooling.max_seq_length or max_len, max_len)
        write_json(staging / ST_CONFIG_NAME, {"max_seq_length": limit, "do_lower_case": False})
        names.append(ST_CONFIG_NAME)
        if st_settings:
            write_json(staging / ST_SETTINGS_NAME, {"model_type": "SentenceTransformer", **st_settings})
            names.append(ST_SETTINGS_NAME)
    if cross_encoder:
        write_json(staging / ST_SETTINGS_NAME, settings_file(cross_encoder["activation"]))
        names.append(ST_SETTINGS_NAME)
    return list(dict.fromkeys(names))


def loaders_note(task: str, models: dict[str, dict]) -> dict[str, Any]:
    """The manifest's ``loaders``: for each loader, the file of each graph it can take and how to ask for it
    (names relative to the bundle); a graph it cannot take is named with the reason."""
    graphs = {k: e for k, e in models.items() if str(e["file"]).startswith(f"{GRAPH_DIR}/")}
    cpu = {k: e for k, e in graphs.items() if e.get("precision") in ("fp32", "int8")
           and "cpu" in (e.get("providers") or ["cpu"])}
    plain = {k: e for k, e in graphs.items() if k in cpu or k == "fp32-trt"}    # what a CPU provider runs
    note: dict[str, Any] = {
        "optimum": {k: {"subfolder": GRAPH_DIR, "file_name": Path(e["file"]).name} for k, e in plain.items()},
        "transformers.js": {}, "sentence-transformers": {}}
    for key, entry in graphs.items():
        stem = Path(entry["file"]).name.removesuffix(".onnx")
        dtype = _JS_DTYPES.get(key)
        if dtype is not None and stem == "model" + {"fp32": "", "q8": "_quantized", "fp16": "_fp16", "q4": "_q4"}[dtype]:
            note["transformers.js"][key] = {"dtype": dtype}
        elif key in plain:
            note["transformers.js"][key] = {"dtype": "fp32", "model_file_name": stem}
    if bundle_task(task).has_pooling or bundle_task(task).cross_encoder == "always":   # SentenceTransformer / CrossEncoder
        note["sentence-transformers"] = {k: ({"backend": "onnx"} if Path(e["file"]).name == "model.onnx" else
                                             {"backend": "onnx", "model_kwargs": {"file_name": Path(e["file"]).name}})
                                         for k, e in cpu.items()}
    note["webgpu"] = ("the fused graphs' Attention takes a raw 2-D mask, which onnxruntime-web's WebGPU backend "
                      "lacks (Mask not supported): on device 'webgpu' load the standard-ops graph "
                      + (f"{graphs['fp32-trt']['file']} (model_file_name '{Path(graphs['fp32-trt']['file']).stem}')"
                         if "fp32-trt" in graphs else "(export with --tensorrt to include it)")
                      + "; WASM runs every CPU graph")
    return note
