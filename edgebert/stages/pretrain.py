"""Pretrain a BERT from text: WordPiece tokenizer + MLM/NSP examples + the shared training engine.

``pretrain(PretrainConfig(...))`` reads the corpus (or the built-in Python docs corpus), trains a
tokenizer (or loads ``vocab``), builds sentence-pair examples, holds out documents for evaluation
(or reads ``eval_corpus``), and trains ``BertForPreTraining`` on MLM + NSP with dynamic masking.
Evaluation reports MLM accuracy, MLM perplexity (exp of the mean masked-token cross-entropy), NSP
accuracy, and next to them the unigram baseline (always predict the most frequent training token),
always on the same masked eval batches (fixed masking seed), so evaluations are comparable.

Recipes (``PretrainConfig.preset``): ``tiny`` (tests, seconds), ``demo`` (a few minutes on 2 CPU
cores, built-in corpus), ``demo-12l`` (the 12-layer teacher of ``edgebert pipeline --from-scratch``),
``wiki-12l`` (its WikiText-2 counterpart), ``wiki-small`` (4 layers, hidden 256, 12k WordPiece,
seq 128, 1000 steps of 32 = ~3.7M tokens: ~11 minutes at the ~6k tokens/s this model reaches on 2
idle CPU cores, several times longer when the cores are shared; trains on WikiText-2 valid and
evaluates on WikiText-2 test)::

    edgebert pretrain --preset wiki-small \\
        --corpus /work/shared/data/wikitext-2-raw/wiki.valid.raw \\
        --eval-corpus /work/shared/data/wikitext-2-raw/wiki.test.raw --out runs/wiki-small
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from edgebert.data.corpus import FORMATS
from edgebert.data.mlm import (
    MaskingCollator,
    PretrainingExamples,
    mlm_documents,
    mlm_eval_batches,
    mlm_examples,
    most_frequent_token,
)
from edgebert.data.tokenizer import (
    TOKENIZER_OUTPUTS,
    SpecialIds,
    load_tokenizer,
    load_vocab_tokenizer,
    save_tokenizer,
    train_tokenizer,
)
from edgebert.errors import ConfigError, DataError
from edgebert.files.atomic import jsonable, write_json
from edgebert.files.jsonfile import read_json_object
from edgebert.files.outdirs import OutputDir
from edgebert.model import (
    MODEL_OUTPUTS,
    BertConfig,
    BertForPreTraining,
    count_parameters,
    masked_positions_logits,
    save_model,
)
from edgebert.model import PRESETS as MODEL_SIZES
from edgebert.stages.metrics import MlmCounts
from edgebert.training import STATE_FILE, TRAINING_OUTPUTS, TrainConfig, Trainer, TrainingTask, checkpoint_dir

PRETRAIN_CONFIG_FILE = "pretrain_config.json"
PRETRAIN_OUTPUTS = (*MODEL_OUTPUTS, *TOKENIZER_OUTPUTS, *TRAINING_OUTPUTS, PRETRAIN_CONFIG_FILE)


@dataclass(frozen=True)
class PretrainConfig:
    """Everything ``pretrain`` needs. Validated at construction; see ``PRETRAIN_PRESETS``."""

    out: Path
    corpus: tuple[Path, ...] = ()          # empty: the built-in corpus (Python's documentation)
    corpus_format: str = "auto"
    eval_corpus: tuple[Path, ...] = ()     # empty: hold out ``eval_fraction`` of the documents
    model_size: str = "small"              # a BertConfig preset ...
    model_overrides: dict[str, Any] = field(default_factory=dict)  # ... with these changes
    model_config: Path | None = None       # or a config.json (Hugging Face BertConfig JSON)
    vocab_size: int = 8000                 # WordPiece size to train ...
    vocab: Path | None = None              # ... or an existing vocab.txt / tokenizer.json / model dir
    lowercase: bool = True
    min_frequency: int = 2
    max_seq_len: int = 128
    short_seq_prob: float = 0.1
    dupe_factor: int = 5                   # passes over the corpus with different segment cuts
    mlm_probability: float = 0.15
    eval_fraction: float = 0.05
    max_eval_examples: int = 2000
    eval_batch_size: int = 64
    train: TrainConfig = field(default_factory=TrainConfig)
    resume: bool = False
    overwrite: bool = False                # start again in a folder an earlier pretrain run wrote

    def __post_init__(self) -> None:
        object.__setattr__(self, "out", Path(self.out))
        object.__setattr__(self, "corpus", tuple(Path(p) for p in self.corpus))
        object.__setattr__(self, "eval_corpus", tuple(Path(p) for p in self.eval_corpus))
        for name in ("model_config", "vocab"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, Path(getattr(self, name)))
        if self.corpus_format not in FORMATS:
            raise ConfigError(f"unknown corpus format {self.corpus_format!r}",
                              f"use one of {', '.join(FORMATS)}")
        if self.model_size not in MODEL_SIZES:
            raise ConfigError(f"unknown model size {self.model_size!r}",
                              f"use one of {', '.join(MODEL_SIZES)}")
        if self.model_config is not None and self.model_overrides:
            raise ConfigError("give a model config file or model overrides, not both")
        if not 100 <= self.vocab_size <= 1_000_000:
            raise ConfigError(f"vocab_size={self.vocab_size} must be between 100 and 1000000")
        if self.min_frequency < 1:
            raise ConfigError(f"min_frequency={self.min_frequency} must be >= 1")
        if not 16 <= self.max_seq_len <= 4096:
            raise ConfigError(f"max_seq_len={self.max_seq_len} must be between 16 and 4096")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise ConfigError(f"short_seq_prob={self.short_seq_prob} must be in [0, 1]")
        if self.dupe_factor < 1:
            raise ConfigError(f"dupe_factor={self.dupe_factor} must be >= 1")
        if not 0.0 < self.mlm_probability < 1.0:
            raise ConfigError(f"mlm_probability={self.mlm_probability} must be in (0, 1)")
        if not 0.0 < self.eval_fraction <= 0.5:
            raise ConfigError(f"eval_fraction={self.eval_fraction} must be in (0, 0.5]")
        if self.max_eval_examples < 1 or self.eval_batch_size < 1:
            raise ConfigError("max_eval_examples and eval_batch_size must be >= 1")
        if not isinstance(self.train, TrainConfig):
            raise ConfigError("train must be a TrainConfig")

    def replace(self, **changes: Any) -> "PretrainConfig":
        return dataclasses.replace(self, **changes)

    @classmethod
    def preset(cls, name: str, out: str | Path, **overrides: Any) -> "PretrainConfig":
        """A named recipe; ``train`` may be given as a dict of TrainConfig changes."""
        if name not in PRETRAIN_PRESETS:
            raise ConfigError(f"unknown pretraining preset {name!r}",
                              f"use one of {', '.join(PRETRAIN_PRESETS)}")
        recipe = dict(PRETRAIN_PRESETS[name])
        train = TrainConfig.of(recipe.pop("train_preset"), overrides.pop("train", None))
        return cls(out=Path(out), train=train, **{**recipe, **overrides})

    def to_dict(self) -> dict[str, Any]:
        return jsonable(self)

    def bert_config(self, vocab_size: int, pad_token_id: int) -> BertConfig:
        """The model config: preset or file, with the tokenizer's vocab size and pad id."""
        if self.model_config is not None:
            base = BertConfig.load(self.model_config)
        else:
            base = BertConfig.preset(self.model_size, **self.model_overrides)
        cfg = base.replace(vocab_size=vocab_size, pad_token_id=pad_token_id,
                           architecture="BertForPreTraining", id2label=None)
        if cfg.max_position_embeddings < self.max_seq_len:
            raise ConfigError(f"max_seq_len={self.max_seq_len} is longer than the model's "
                              f"max_position_embeddings={cfg.max_position_embeddings}",
                              "lower --max-seq-len or use a larger model config")
        if cfg.type_vocab_size < 2:
            raise ConfigError("the model config has type_vocab_size < 2; NSP needs segment ids 0 and 1")
        cfg.check_memory(training=True)
        return cfg


_SMALL_256 = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024,
                  max_position_embeddings=512)

PRETRAIN_PRESETS: dict[str, dict[str, Any]] = {
    # tests: seconds on one core
    "tiny": dict(model_size="tiny", model_overrides=dict(hidden_dropout_prob=0.0,
                                                           attention_probs_dropout_prob=0.0),
                 vocab_size=1000, max_seq_len=64, dupe_factor=1, max_eval_examples=64,
                 eval_batch_size=32, train_preset="tiny"),
    # `edgebert pretrain` on the built-in corpus: a few minutes on 2 CPU cores
    "demo": dict(model_size="small", model_overrides=dict(hidden_size=192, num_hidden_layers=3,
                                                            num_attention_heads=3, intermediate_size=768,
                                                            max_position_embeddings=128),
                 vocab_size=4000, max_seq_len=128, dupe_factor=2, eval_fraction=0.1,
                 max_eval_examples=500, train_preset="demo"),
    # `edgebert pipeline --from-scratch`: a 12-layer teacher, 3x the depth of the 4-layer student
    "demo-12l": dict(model_size="small", model_overrides=dict(hidden_size=128, num_hidden_layers=12,
                                                                num_attention_heads=2, intermediate_size=512,
                                                                max_position_embeddings=128),
                     vocab_size=4000, max_seq_len=128, dupe_factor=2, eval_fraction=0.1,
                     max_eval_examples=300, train_preset="demo-12l"),
    # WikiText-2 recipe (train wiki.valid.raw, eval wiki.test.raw): ~3.7M tokens, ~11 min at 6k tok/s
    "wiki-small": dict(model_size="small", model_overrides=_SMALL_256, vocab_size=12000,
                       max_seq_len=128, dupe_factor=5, max_eval_examples=2000,
                       train_preset="wiki-small"),
    # The 12-layer teacher of the pipeline's benchmark (a 4-layer student is 1/3 of its depth): the
    # wiki-small data and width, 12 layers, 1000 steps at a lower peak LR (deep post-LN needs it).
    "wiki-12l": dict(model_size="small", model_overrides={**_SMALL_256, "num_hidden_layers": 12},
                     vocab_size=12000, max_seq_len=128, dupe_factor=5, max_eval_examples=2000,
                     train_preset="wiki-12l"),
}


# =========================================================================== the task
@dataclass
class PretrainingOutput:
    loss: torch.Tensor
    mlm_loss: torch.Tensor
    nsp_loss: torch.Tensor
    mlm_logits: torch.Tensor      # (M, V) at the M masked positions only
    mlm_targets: torch.Tensor     # (M,)
    nsp_logits: torch.Tensor      # (B, 2)


class MaskedPositionsObjective(nn.Module):
    """``BertForPreTraining``'s MLM + NSP loss, with the vocabulary projection run only at masked
    positions (15% of tokens): the same loss, without the (B, T, V) logits that dominate CPU time."""

    def __init__(self, model: BertForPreTraining):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, token_type_ids, labels, next_sentence_label):
        enc, logits, targets = masked_positions_logits(self.model, input_ids, attention_mask, token_type_ids,
                                                       labels)                          # (M, V), (M,)
        mlm_loss = F.cross_entropy(logits.float(), targets)
        nsp_logits = self.model.cls.seq_relationship(enc.pooler_output)                 # (B, 2)
        nsp_loss = F.cross_entropy(nsp_logits.float(), next_sentence_label.view(-1))
        return PretrainingOutput(mlm_loss + nsp_loss, mlm_loss, nsp_loss, logits, targets, nsp_logits)


class PretrainingTask(TrainingTask):
    def __init__(self, model: BertForPreTraining, tokenizer, train_examples: PretrainingExamples,
                 eval_batches: Sequence[dict[str, torch.Tensor]], cfg: PretrainConfig):
        self.bert_model = model
        self.model = MaskedPositionsObjective(model)
        self.tokenizer, self.cfg = tokenizer, cfg
        self.ids = SpecialIds.of(tokenizer)
        self.train_examples, self.eval_batches = train_examples, list(eval_batches)
        self.collator = MaskingCollator(self.ids, model.config.vocab_size, seed=cfg.train.seed,
                                        mlm_probability=cfg.mlm_probability)
        self.unigram_token, _ = most_frequent_token(train_examples, self.ids)

    def num_train_examples(self) -> int:
        return len(self.train_examples)

    def data_fingerprint(self) -> str:
        return self.train_examples.fingerprint()

    def make_batch(self, indices, keys):
        return self.collator(self.train_examples, indices, keys)

    def loss(self, model, batch):
        out = model(**batch)
        with torch.no_grad():
            mlm_acc = (out.mlm_logits.argmax(-1) == out.mlm_targets).float().mean()
            nsp_acc = (out.nsp_logits.argmax(-1) == batch["next_sentence_label"]).float().mean()
        return out.loss, {"mlm_loss": out.mlm_loss.detach(), "nsp_loss": out.nsp_loss.detach(),
                          "mlm_accuracy": mlm_acc, "nsp_accuracy": nsp_acc}

    def evaluate(self, model):
        """MLM and NSP on the fixed eval batches, next to the unigram baseline (always guess the most
        frequent training token)."""
        if not self.eval_batches:
            return {}
        device = next(model.parameters()).device
        mlm, unigram, nsp_correct, pairs = MlmCounts(), 0, 0, 0
        for batch in self.eval_batches:
            batch = {k: v.to(device) for k, v in batch.items()}
            out = model(**batch)
            mlm.add(out.mlm_logits, out.mlm_targets)
            unigram += int((out.mlm_targets == self.unigram_token).sum())
            nsp_correct += int((out.nsp_logits.argmax(-1) == batch["next_sentence_label"]).sum())
            pairs += batch["next_sentence_label"].numel()
        summary = mlm.summary()
        return {**summary, "nsp_accuracy": nsp_correct / max(1, pairs),
                "unigram_mlm_accuracy": unigram / max(1, mlm.masked)}

    def save(self, out_dir: Path) -> None:
        save_model(self.bert_model, out_dir)
        save_tokenizer(self.tokenizer, out_dir, model_max_length=self.cfg.max_seq_len)


# =========================================================================== the stage
@dataclass
class PretrainResult:
    out_dir: Path
    step: int
    eval_metrics: dict[str, float]
    train_metrics: dict[str, float]
    tokens_per_s: float
    wall_s: float
    num_parameters: int
    vocab_size: int
    num_train_examples: int
    num_eval_examples: int
    resumed_from: int = 0
    warnings: list[str] = field(default_factory=list)


def _tokenizer_for(cfg: PretrainConfig, train_docs: Sequence[str]):
    """The run's tokenizer: from the checkpoint when resuming, ``vocab`` if given, else trained (in
    memory, by every process of a torchrun job alike: training is deterministic)."""
    if cfg.resume:
        return load_tokenizer(checkpoint_dir(cfg.out) or cfg.out)
    if cfg.vocab is not None:
        if cfg.vocab.suffix == ".txt":  # a bare vocab.txt: lower-case as the config says
            return load_vocab_tokenizer(cfg.vocab, lowercase=cfg.lowercase)
        return load_tokenizer(cfg.vocab)
    return train_tokenizer(train_docs, cfg.vocab_size, cfg.lowercase, cfg.min_frequency)


def pretrain(cfg: PretrainConfig, *, console=None, stop_at_step: int | None = None) -> PretrainResult:
    """Run one pretraining stage; checkpoints and metrics.jsonl go to ``cfg.out``. Everything is
    checked and built before the first file is written; a run that fails before its first checkpoint
    leaves nothing behind (``edgebert.files.outdirs``)."""
    t0 = time.perf_counter()
    out = OutputDir(cfg.out, "pretrain", names=PRETRAIN_OUTPUTS, resume=cfg.resume, overwrite=cfg.overwrite,
                    signature=STATE_FILE)
    with Trainer(cfg.train, cfg.out, resume=cfg.resume, overwrite=cfg.overwrite, console=console) as trainer:
        train_docs, eval_docs = mlm_documents(cfg.corpus, cfg.eval_corpus, cfg.corpus_format,
                                              cfg.eval_fraction, cfg.train.seed)
        if len(train_docs) < 2:
            raise DataError("the training corpus has fewer than 2 documents", "give more text")
        warnings = [] if len(eval_docs) != 1 else [
            "the held-out text is one document, so NSP is evaluated without random-next pairs from other "
            "documents and nsp_accuracy means little (hold out several documents, e.g. --eval-corpus)"]
        cfg.bert_config(cfg.vocab_size, 0)  # a bad model config fails before the tokenizer is trained
        tok = _tokenizer_for(cfg, train_docs)
        model_cfg = cfg.bert_config(tok.get_vocab_size(), SpecialIds.of(tok).pad)
        train_examples = mlm_examples(train_docs, tok, cfg.max_seq_len, seed=cfg.train.seed,
                                      dupe_factor=cfg.dupe_factor, short_seq_prob=cfg.short_seq_prob)
        eval_batches = mlm_eval_batches(eval_docs, tok, cfg.max_seq_len, cfg.max_eval_examples,
                                        cfg.eval_batch_size, cfg.mlm_probability, cfg.short_seq_prob)
        torch.manual_seed(cfg.train.seed)
        model = BertForPreTraining(model_cfg)
        task = PretrainingTask(model, tok, train_examples, eval_batches, cfg)
        with out.writing(keep=lambda: checkpoint_dir(cfg.out) is not None, enabled=trainer.is_main):
            if trainer.is_main and not cfg.resume:
                write_json(cfg.out / PRETRAIN_CONFIG_FILE, {**cfg.to_dict(), "overwrite": False})
            result = trainer.fit(task, stop_at_step)
    return PretrainResult(cfg.out, result.step, result.eval_metrics, result.train_metrics,
                          result.tokens_per_s, time.perf_counter() - t0, count_parameters(model),
                          model_cfg.vocab_size, len(train_examples),
                          sum(len(b["input_ids"]) for b in eval_batches), result.resumed_from, warnings)


def _from_dict(d: dict[str, Any]) -> PretrainConfig:
    names = {f.name for f in dataclasses.fields(PretrainConfig)}
    unknown = sorted(set(d) - names)
    if unknown:
        raise ConfigError(f"unknown pretraining setting {unknown[0]!r}")
    d = dict(d)
    d["train"] = TrainConfig.from_dict(d.get("train") or {})
    return PretrainConfig(**d)


def build_pretrain_config(out: str | Path, recipe: str | None = None, *, resume: bool = False,
                          overwrite: bool = False, train: dict[str, Any] | None = None,
                          **changes: Any) -> PretrainConfig:
    """The config for a run: a recipe (default ``demo``) with ``changes`` (PretrainConfig fields)
    and ``train`` (TrainConfig fields). With ``resume`` and no recipe, the run's own
    ``pretrain_config.json`` is the starting point, so ``--resume`` needs no other option."""
    out = Path(out)
    saved = out / PRETRAIN_CONFIG_FILE
    train = {k: v for k, v in (train or {}).items() if v is not None}
    changes = {k: v for k, v in changes.items() if v is not None}
    if "model_size" in changes and "model_config" in changes:
        raise ConfigError("give --model-size or --config, not both")
    if "vocab_size" in changes and "vocab" in changes:
        raise ConfigError("give --vocab-size or --vocab, not both")
    if ("model_size" in changes or "model_config" in changes) and "model_overrides" not in changes:
        changes["model_overrides"] = {}  # a named model size replaces the recipe's model
    if resume and recipe is None and saved.is_file():
        base = read_json_object(saved)
        base_train = dict(base.get("train") or {})
        base.update(changes)
        base.update(out=str(out), resume=True, train={**base_train, **train})
        try:
            return _from_dict(base)
        except TypeError as exc:
            raise ConfigError(f"{saved}: {exc}") from exc
    return PretrainConfig.preset(recipe or "demo", out, resume=resume, overwrite=overwrite, train=train, **changes)
