"""The BERT families edgebert builds on its one model (``bert.py``): BERT, DistilBERT, RoBERTa, XLM-RoBERTa.

They share the network (embeddings -> post-LN layers -> heads); what differs is named here, once:

* parameter names: edgebert's modules keep BERT's names; a checkpoint on disk carries its family's
  Hugging Face names (``distilbert.transformer.layer.0.attention.q_lin``, ``roberta.encoder...``,
  ``lm_head.dense``), so ``transformers.<Family>For<Task>.from_pretrained`` reads what edgebert writes.
  ``internal_key`` / ``hf_key`` translate one key each way.
* config.json: DistilBERT's own keys (``dim``, ``n_layers`` ...) <-> ``BertConfig`` fields
  (``config_fields`` / ``family_config``).
* architecture names: ``RobertaForQuestionAnswering`` <-> edgebert's class ``BertForQuestionAnswering``
  with ``model_type`` roberta (``split_architecture`` / ``hf_architecture``).

Heads that transformers writes differently map onto the BERT classes' modules: DistilBERT's
``pre_classifier`` (+ ReLU) and RoBERTa's ``classifier.dense`` (+ tanh) are the pooler of the sequence
classifier, RoBERTa's ``classifier.out_proj`` its ``classifier``; the masked-LM heads are BERT's transform
+ tied decoder.
"""

from __future__ import annotations

import re
from typing import Any

from edgebert.errors import ConfigError

MODEL_TYPES = ("bert", "distilbert", "roberta", "xlm-roberta")
CLASS_PREFIX = {"bert": "Bert", "distilbert": "DistilBert", "roberta": "Roberta", "xlm-roberta": "XLMRoberta"}
KEY_PREFIX = {"bert": "bert.", "distilbert": "distilbert.", "roberta": "roberta.", "xlm-roberta": "roberta."}
# edgebert classes each family has in transformers (BertForPreTraining is BERT's alone)
FAMILY_ARCHITECTURES = {
    "bert": ("Model", "ForPreTraining", "ForMaskedLM", "ForSequenceClassification", "ForTokenClassification",
             "ForQuestionAnswering", "ForMultipleChoice"),
    "distilbert": ("Model", "ForMaskedLM", "ForSequenceClassification", "ForTokenClassification",
                   "ForQuestionAnswering", "ForMultipleChoice"),
    "roberta": ("Model", "ForMaskedLM", "ForSequenceClassification", "ForTokenClassification",
                "ForQuestionAnswering", "ForMultipleChoice"),
}
FAMILY_ARCHITECTURES["xlm-roberta"] = FAMILY_ARCHITECTURES["roberta"]

# DistilBertConfig key -> BertConfig field
DISTILBERT_CONFIG = {"dim": "hidden_size", "n_layers": "num_hidden_layers", "n_heads": "num_attention_heads",
                     "hidden_dim": "intermediate_size", "activation": "hidden_act", "dropout": "hidden_dropout_prob",
                     "attention_dropout": "attention_probs_dropout_prob"}
DISTILBERT_LAYER_NORM_EPS = 1e-12      # fixed in transformers' DistilBERT, not in its config

# (edgebert name inside a layer, DistilBERT name): regex-free suffix renames under encoder.layer.N.
_DISTIL_LAYER = (("attention.self.query.", "attention.q_lin."), ("attention.self.key.", "attention.k_lin."),
                 ("attention.self.value.", "attention.v_lin."), ("attention.output.dense.", "attention.out_lin."),
                 ("attention.output.LayerNorm.", "sa_layer_norm."), ("intermediate.dense.", "ffn.lin1."),
                 ("output.dense.", "ffn.lin2."), ("output.LayerNorm.", "output_layer_norm."))
# heads outside the encoder: edgebert name -> family name
_HEADS = {
    "distilbert": {"bert.pooler.dense.": "pre_classifier.", "cls.predictions.transform.dense.": "vocab_transform.",
                   "cls.predictions.transform.LayerNorm.": "vocab_layer_norm.",
                   "cls.predictions.bias": "vocab_projector.bias",
                   "cls.predictions.decoder.weight": "vocab_projector.weight"},
    "roberta": {"cls.predictions.transform.dense.": "lm_head.dense.",
                "cls.predictions.transform.LayerNorm.": "lm_head.layer_norm.", "cls.predictions.bias": "lm_head.bias",
                "cls.predictions.decoder.weight": "lm_head.decoder.weight",
                "cls.predictions.decoder.bias": "lm_head.decoder.bias"},
}
_HEADS["xlm-roberta"] = _HEADS["roberta"]
# RoBERTa's sequence classifier (classifier.dense + tanh + classifier.out_proj) is pooler + classifier
_ROBERTA_SEQUENCE_HEAD = {"bert.pooler.dense.": "classifier.dense.", "classifier.": "classifier.out_proj."}
_LAYER = re.compile(r"^((?:bert\.|distilbert\.)?)(encoder|transformer)\.layer\.(\d+)\.(.*)$")


def check_model_type(model_type: Any) -> str:
    if model_type not in MODEL_TYPES:
        raise ConfigError(f"model_type={model_type!r} is not a BERT family edgebert builds",
                          f"use a checkpoint of one of {', '.join(MODEL_TYPES)}")
    return model_type


def split_architecture(name: str) -> tuple[str, str | None]:
    """``RobertaForQuestionAnswering`` -> (``BertForQuestionAnswering``, ``roberta``); an unknown
    name -> (name, None)."""
    for model_type, prefix in sorted(CLASS_PREFIX.items(), key=lambda kv: -len(kv[1])):
        suffix = name.removeprefix(prefix)
        if suffix != name and suffix in FAMILY_ARCHITECTURES[model_type]:
            return f"Bert{suffix}", model_type
    return name, None


def hf_architecture(architecture: str, model_type: str) -> str:
    """edgebert's ``BertForX`` -> the family's ``<Family>ForX``."""
    return CLASS_PREFIX[model_type] + architecture.removeprefix("Bert")


def supports(architecture: str, model_type: str) -> bool:
    return architecture.removeprefix("Bert") in FAMILY_ARCHITECTURES[model_type]


def position_offset(model_type: str, pad_token_id: int) -> int:
    """Index of the first position embedding: RoBERTa counts positions from ``padding_idx + 1``."""
    return pad_token_id + 1 if model_type in ("roberta", "xlm-roberta") else 0


def check_pad_id(model_type: str, pad_token_id: int, tokenizer_pad_id: int | None, where: str) -> None:
    """RoBERTa's positions depend on its pad id: transformers numbers the tokens from config.json's
    ``pad_token_id`` + 1 and gives every token whose id is ``pad_token_id`` the padding position. When the
    tokenizer pads with another id, a real token can have that id (``<s>`` when ``pad_token_id`` is 0), which
    no exported graph's positions (``offset + 0..T-1``) reproduce: a ``ConfigError`` in one line (refused, not
    followed), never vectors that differ from transformers'."""
    if not position_offset(model_type, pad_token_id) or tokenizer_pad_id is None or tokenizer_pad_id == pad_token_id:
        return
    raise ConfigError(f"{where}: config.json has pad_token_id={pad_token_id} but the tokenizer pads with id "
                      f"{tokenizer_pad_id}; {model_type} numbers its positions from pad_token_id + 1, so edgebert "
                      "cannot give transformers' vectors for it (refused)",
                      f"set pad_token_id to {tokenizer_pad_id} in config.json if the model was trained with this "
                      "tokenizer, or use the tokenizer it was trained with")


def internal_key(key: str, model_type: str, architecture: str) -> str:
    """A family's Hugging Face weight name -> the name of the same weight in edgebert's modules."""
    if model_type == "bert":
        return key
    prefix = KEY_PREFIX[model_type]
    if key.startswith(prefix):
        key = "bert." + key[len(prefix):]
    if model_type in ("roberta", "xlm-roberta") and architecture == "BertForSequenceClassification":
        for ours, theirs in _ROBERTA_SEQUENCE_HEAD.items():
            if key.startswith(theirs):
                return ours + key[len(theirs):]
    for ours, theirs in _HEADS[model_type].items():
        if key.startswith(theirs):
            return ours + key[len(theirs):]
    if model_type == "distilbert":
        match = _LAYER.match(key)
        if match:
            head, _, index, rest = match.groups()
            for ours, theirs in _DISTIL_LAYER:
                if rest.startswith(theirs):
                    return f"{head}encoder.layer.{index}.{ours}{rest[len(theirs):]}"
    return key


def hf_key(key: str, model_type: str, architecture: str) -> str:
    """edgebert's weight name -> the family's Hugging Face name (``internal_key`` reversed)."""
    if model_type == "bert":
        return key
    if model_type in ("roberta", "xlm-roberta") and architecture == "BertForSequenceClassification":
        for ours, theirs in _ROBERTA_SEQUENCE_HEAD.items():
            if key.startswith(ours):
                return theirs + key[len(ours):]
    for ours, theirs in _HEADS[model_type].items():
        if key.startswith(ours):
            return theirs + key[len(ours):]
    if model_type == "distilbert":
        match = _LAYER.match(key)
        if match:
            head, _, index, rest = match.groups()
            for ours, theirs in _DISTIL_LAYER:
                if rest.startswith(ours):
                    key = f"{head}transformer.layer.{index}.{theirs}{rest[len(ours):]}"
                    break
    if key.startswith("bert."):
        key = KEY_PREFIX[model_type] + key[len("bert."):]
    return key


def config_fields(d: dict[str, Any]) -> dict[str, Any]:
    """A family's config.json -> the same dict in BERT's keys (DistilBERT's are renamed; no token types)."""
    model_type = check_model_type(d.get("model_type", "bert"))
    if model_type != "distilbert":
        return dict(d)
    out = {k: v for k, v in d.items() if k not in DISTILBERT_CONFIG}
    out.update({ours: d[theirs] for theirs, ours in DISTILBERT_CONFIG.items() if theirs in d})
    if d.get("sinusoidal_pos_embds"):
        out["sinusoidal_pos_embds"] = True    # kept: the table is in the weights either way
    out.setdefault("layer_norm_eps", DISTILBERT_LAYER_NORM_EPS)
    out["type_vocab_size"] = 1
    return out


def family_config(d: dict[str, Any], model_type: str) -> dict[str, Any]:
    """BERT-keyed config.json (``BertConfig.to_hf_dict``) -> the family's keys (``config_fields`` reversed)."""
    d = {**d, "model_type": model_type}
    if model_type != "distilbert":
        return d
    for theirs, ours in DISTILBERT_CONFIG.items():
        d[theirs] = d.pop(ours)
    for key in ("type_vocab_size", "layer_norm_eps", "position_embedding_type"):
        d.pop(key, None)
    d.setdefault("sinusoidal_pos_embds", False)
    return d
