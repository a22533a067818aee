"""Model configuration: a typed dataclass that reads and writes Hugging Face ``BertConfig`` JSON
(and the config.json of the other BERT families, ``model_type`` distilbert / roberta / xlm-roberta:
``edgebert.model.families``).

Validated at construction; named presets ``tiny`` (tests), ``small``, ``base``, ``large``.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgebert.errors import CheckpointError, ConfigError
from edgebert.files.jsonfile import read_json_object
from edgebert.model import families

# Architectures we can build, in Hugging Face naming (config.json "architectures").
ARCHITECTURES = (
    "BertModel",
    "BertForPreTraining",
    "BertForMaskedLM",
    "BertForSequenceClassification",
    "BertForTokenClassification",
    "BertForQuestionAnswering",       # SQuAD span head: qa_outputs, start/end logits
    "BertForMultipleChoice",          # one score per choice: (batch, choices, sequence) input
)


@dataclass(frozen=True)
class BertConfig:
    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    initializer_range: float = 0.02
    hidden_act: str = "gelu"
    # Classification labels (sequence / token classification heads); None for other heads.
    id2label: dict[int, str] | None = None
    architecture: str = "BertForPreTraining"
    # The family (families.MODEL_TYPES): parameter names, positions (RoBERTa), token types (not DistilBERT).
    model_type: str = "bert"
    # Keys from a Hugging Face config.json that we do not use; written back unchanged.
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        positive = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                    "intermediate_size", "max_position_embeddings", "type_vocab_size")
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"config {name}={value!r} must be a positive integer")
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(
                f"hidden_size={self.hidden_size} is not divisible by num_attention_heads="
                f"{self.num_attention_heads}", "choose a head count that divides the hidden size")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob", "layer_norm_eps", "initializer_range"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                raise ConfigError(f"config {name}={value!r} must be a number")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            value = getattr(self, name)
            if not 0.0 <= float(value) < 1.0:
                raise ConfigError(f"config {name}={value!r} must be in [0, 1)")
        if not self.layer_norm_eps > 0:
            raise ConfigError(f"config layer_norm_eps={self.layer_norm_eps!r} must be > 0")
        if not isinstance(self.pad_token_id, int) or isinstance(self.pad_token_id, bool):
            raise ConfigError(f"config pad_token_id={self.pad_token_id!r} must be an integer")
        if not isinstance(self.hidden_act, str):
            raise ConfigError(f"config hidden_act={self.hidden_act!r} must be a string")
        if not 0 <= self.pad_token_id < self.vocab_size:
            raise ConfigError(f"config pad_token_id={self.pad_token_id} is outside the vocabulary "
                              f"(size {self.vocab_size})")
        if self.hidden_act not in ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu"):
            raise ConfigError(f"config hidden_act={self.hidden_act!r} is not supported",
                              "use gelu, gelu_new, gelu_pytorch_tanh or relu")
        if self.architecture not in ARCHITECTURES:
            raise ConfigError(f"unknown architecture {self.architecture!r}",
                              f"use one of {', '.join(ARCHITECTURES)}")
        families.check_model_type(self.model_type)
        if not families.supports(self.architecture, self.model_type):
            raise ConfigError(f"{self.architecture} has no {self.model_type} form",
                              f"use {self.model_type} as one of "
                              f"{', '.join('Bert' + a for a in families.FAMILY_ARCHITECTURES[self.model_type])}")
        if self.position_offset and self.max_position_embeddings <= self.position_offset:
            raise ConfigError(f"max_position_embeddings={self.max_position_embeddings} leaves no position after "
                              f"the offset {self.position_offset} (pad_token_id + 1) of {self.model_type}")
        if self.id2label is not None:
            if not isinstance(self.id2label, dict) or not self.id2label:
                raise ConfigError(f"id2label={self.id2label!r} must be a non-empty mapping", "give at least one label")
            try:
                object.__setattr__(self, "id2label", {int(k): str(v) for k, v in self.id2label.items()})
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"id2label keys must be integers 0..N-1 ({exc})") from exc
            if sorted(self.id2label) != list(range(len(self.id2label))):
                raise ConfigError("id2label keys must be 0..N-1")

    # ----------------------------------------------------------------- derived values
    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def position_offset(self) -> int:
        """First position embedding a token uses (RoBERTa: pad_token_id + 1, others 0)."""
        return families.position_offset(self.model_type, self.pad_token_id)

    @property
    def max_sequence_length(self) -> int:
        """Longest input the position table serves (RoBERTa: 514 rows serve 512 tokens)."""
        return self.max_position_embeddings - self.position_offset

    @property
    def has_token_types(self) -> bool:
        """Whether the model reads ``token_type_ids``: DistilBERT has no table (and ignores them);
        RoBERTa's has one row, and its tokenizers give type 0 to both texts of a pair."""
        return self.model_type != "distilbert"

    @property
    def hf_architecture(self) -> str:
        """The transformers class name (``RobertaForQuestionAnswering``)."""
        return families.hf_architecture(self.architecture, self.model_type)

    @property
    def num_labels(self) -> int:
        return len(self.id2label) if self.id2label else 2

    def replace(self, **changes: Any) -> "BertConfig":
        return dataclasses.replace(self, **changes)

    def parameter_estimate(self) -> int:
        """Parameters of the largest head (pretraining: encoder, pooler, MLM transform and NSP)."""
        h, i, v = self.hidden_size, self.intermediate_size, self.vocab_size
        embeddings = (v + self.max_position_embeddings + self.type_vocab_size) * h + 2 * h
        layer = 4 * (h * h + h) + 2 * h * i + i + h + 4 * h
        heads = (h * h + h) + (h * h + 3 * h + v) + 2 * h + 2
        return embeddings + self.num_hidden_layers * layer + heads

    def check_memory(self, training: bool = False) -> None:
        """``ConfigError`` when the float32 weights (x4 for training: gradients and two AdamW moments)
        cannot fit in this machine's memory: a typo such as hidden_size 1e12 fails here, not in torch."""
        need = self.parameter_estimate() * 4 * (4 if training else 1)
        have = _physical_memory()
        if have and need > have:
            raise ConfigError(f"the model config describes about {self.parameter_estimate():.3g} parameters, "
                              f"{need / 2**30:.3g} GiB to {'train' if training else 'hold'}, more than this "
                              f"machine's {have / 2**30:.3g} GiB of memory",
                              "check hidden_size, intermediate_size, num_hidden_layers and vocab_size")

    # ----------------------------------------------------------------- presets
    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "BertConfig":
        if name not in PRESETS:
            raise ConfigError(f"unknown preset {name!r}", f"use one of {', '.join(PRESETS)}")
        return cls(**{**PRESETS[name], **overrides})

    # ----------------------------------------------------------------- HF JSON
    def to_hf_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = dict(self.extra)
        d.update({
            "architectures": [self.hf_architecture],
            "model_type": "bert",
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "intermediate_size": self.intermediate_size,
            "hidden_act": self.hidden_act,
            "hidden_dropout_prob": self.hidden_dropout_prob,
            "attention_probs_dropout_prob": self.attention_probs_dropout_prob,
            "max_position_embeddings": self.max_position_embeddings,
            "type_vocab_size": self.type_vocab_size,
            "initializer_range": self.initializer_range,
            "layer_norm_eps": self.layer_norm_eps,
            "pad_token_id": self.pad_token_id,
            "position_embedding_type": "absolute",
        })
        if self.id2label:
            d["id2label"] = {str(k): v for k, v in self.id2label.items()}
            d["label2id"] = {v: k for k, v in self.id2label.items()}
        return families.family_config(d, self.model_type)

    @classmethod
    def from_hf_dict(cls, d: dict[str, Any]) -> "BertConfig":
        model_type = d.get("model_type", "bert")
        if model_type not in families.MODEL_TYPES:
            raise ConfigError(f"model_type={model_type!r} is not a BERT",
                              f"edgebert reads checkpoints of {', '.join(families.MODEL_TYPES)} only")
        d = families.config_fields(d)
        if d.get("position_embedding_type", "absolute") != "absolute":
            raise ConfigError(f"position_embedding_type={d['position_embedding_type']!r} "
                              "is not supported", "only absolute position embeddings are")
        names = {f.name for f in dataclasses.fields(cls)} - {"extra", "architecture", "id2label", "model_type"}
        kwargs = {k: d[k] for k in names if k in d}
        archs = d.get("architectures") or ["BertModel"]
        arch, family = families.split_architecture(archs[0])
        if arch not in ARCHITECTURES or family not in (None, model_type):
            arch = "BertModel"
        id2label = d.get("id2label")
        if arch not in ("BertForSequenceClassification", "BertForTokenClassification"):
            id2label = None
        used = names | {"architectures", "id2label", "label2id", "model_type"}
        extra = {k: v for k, v in d.items() if k not in used}
        return cls(**kwargs, architecture=arch, model_type=model_type, id2label=id2label, extra=extra)

    def save(self, path: str | Path) -> None:
        from edgebert.files.atomic import write_json

        write_json(path, self.to_hf_dict())

    @classmethod
    def load(cls, path: str | Path) -> "BertConfig":
        path = Path(path)
        if path.is_dir():
            path = path / "config.json"
        if not path.exists():
            raise CheckpointError(f"{path} not found", "pass a model directory with a config.json")
        d = read_json_object(path)
        try:
            return cls.from_hf_dict(d)
        except TypeError as exc:
            raise ConfigError(f"{path}: {exc}") from exc


def _physical_memory() -> int | None:
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return None


PRESETS: dict[str, dict[str, Any]] = {
    # For tests: runs in milliseconds.
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                 max_position_embeddings=128, vocab_size=1024),
    # 4 layers, hidden 512: trains on a laptop CPU.
    "small": dict(hidden_size=512, num_hidden_layers=4, num_attention_heads=8, intermediate_size=2048),
    "base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
    "large": dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                  intermediate_size=4096),
}
