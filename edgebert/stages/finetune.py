"""Fine-tune a BERT for sequence classification (SST-2, MRPC, any sentence(-pair) TSV), token
classification (``ner``: CoNLL named-entity tags) or extractive question answering (``squad``: SQuAD
JSON, a ``BertForQuestionAnswering`` span head), on the shared training engine
(``edgebert.training``); the training task and the best-checkpoint keeping are
``edgebert.stages.classification``'s.

``finetune(FinetuneConfig(...))`` loads the model directory (a pretrained edgebert checkpoint, a
Hugging Face BERT directory, or an earlier classifier), puts a fresh classification head on it,
trains with AdamW + linear warmup/decay in length-grouped, dynamically padded batches, evaluates on
the dev file every epoch (``eval_accuracy`` / ``eval_f1`` in ``metrics.jsonl``; for ``ner`` entity
precision / recall / F1 by seqeval, overall and per type) and keeps the best checkpoint by dev
accuracy (``ner``: entity F1) as the output directory's model (``config.json`` with ``id2label`` /
``label2id``, ``model.safetensors``, tokenizer files; ``best_checkpoint.json`` says which step it is).

``ner`` reads the label set from the training file (``O`` first, then ``B-``/``I-`` per type) and
labels the first sub-token of every word (the others, and the special tokens, get -100).

``squad`` trains on windows of ``max_seq_len`` tokens overlapping by ``doc_stride`` (384 / 128, as
transformers' ``run_qa``; ``edgebert.qa``) and reports dev EM / F1 (percent, SQuAD 1.1
scoring of the dev file's answerable questions: ``edgebert.scores.squad``); the best checkpoint is
kept by dev F1.

Recipes (``FinetuneConfig.preset``): ``glue`` (the usual BERT recipe: 3 epochs, lr 2e-5, batch 32,
seq 128), ``cpu-quick`` (1 epoch, lr 5e-5, seq 64: a 2-core CPU fine-tunes MiniLM on ~20k SST-2
examples in ~15 minutes), ``ner`` (3 epochs, lr 1e-4, batch 32, seq 128: MiniLM-sized models on
CoNLL-2003), ``run-qa`` (transformers' ``run_qa`` recipe: 2 epochs, lr 1e-4, batch 16, 384/128, no warmup
or weight decay), ``squad`` (the default for SQuAD: ``run-qa`` with a third epoch and 10% warmup), ``tiny``
(tests).
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch
from torch import nn

from edgebert.bundle.cross_encoder import ST_SETTINGS_NAME
from edgebert.bundle.pooling import POOLING_FILES, read_pooling
from edgebert.data.task_data import load_task_data
from edgebert.data.tasks import DATASET_PRESETS, RANK_PRESETS, SPAN_PRESETS, TOKEN_PRESETS, TaskShape
from edgebert.data.tokenizer import TOKENIZER_OUTPUTS, load_tokenizer
from edgebert.errors import CheckpointError, ConfigError
from edgebert.files.atomic import jsonable, write_json
from edgebert.files.outdirs import OutputDir
from edgebert.model import MODEL_OUTPUTS, BertConfig, count_parameters, freeze_word_embeddings, load_model
from edgebert.qa.windows import check_window
from edgebert.stages.classification import BEST_FILE, ClassificationTask
from edgebert.stages.retriever import bi_encoder
from edgebert.training import STATE_FILE, TRAINING_OUTPUTS, TrainConfig, Trainer, checkpoint_dir

FINETUNE_CONFIG_FILE = "finetune_config.json"
FINETUNE_OUTPUTS = (*MODEL_OUTPUTS, *TOKENIZER_OUTPUTS, *POOLING_FILES, *TRAINING_OUTPUTS, BEST_FILE,
                    FINETUNE_CONFIG_FILE, ST_SETTINGS_NAME)


# =========================================================================== config
@dataclass(frozen=True)
class FinetuneConfig(TaskShape):
    """Everything ``finetune`` needs. Validated at construction; see ``FINETUNE_PRESETS``."""

    model: Path
    task: str
    train_file: Path
    out: Path
    dev_file: Path | None = None
    epochs: float | None = 3.0             # None: train.max_steps steps
    max_seq_len: int = 128
    max_train_examples: int | None = None  # a seeded random subset of the training file
    max_eval_examples: int | None = None   # the first N dev examples
    freeze_word_embeddings: bool = False   # ~2x faster optimizer steps on CPU; little accuracy cost
    evals_per_epoch: int = 1               # with epochs: dev evaluations (and checkpoints) per epoch
    eval_batch_size: int = 64
    tag_column: int | None = None          # ner: the CoNLL tag column (1-based; None: the last)
    doc_stride: int | None = None          # squad: context tokens consecutive windows share (None: default_stride)
    retriever: Path | None = None          # rerank: the bi-encoder of the hard negatives and dev top-k (None: model)
    train: TrainConfig = field(default_factory=lambda: TrainConfig(lr=2e-5, log_every=20))
    resume: bool = False
    overwrite: bool = False                # start again in a folder an earlier finetune run wrote

    def __post_init__(self) -> None:
        if self.retriever is not None and not self.is_rank_task:
            raise ConfigError(f"--retriever is for --task rerank, not --task {self.task}")
        if self.is_rank_task and self.retriever is None:
            object.__setattr__(self, "retriever", self.model)     # a sentence-embedding start model (MiniLM)
        for name in ("model", "train_file", "out", "dev_file", "retriever"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, Path(value))
        if self.train_file is None:
            raise ConfigError("fine-tuning needs a training file", "pass --train FILE")
        if self.task not in DATASET_PRESETS:
            raise ConfigError(f"unknown task {self.task!r}", f"use one of {', '.join(DATASET_PRESETS)}")
        if self.epochs is not None and not (math.isfinite(self.epochs) and self.epochs > 0):
            raise ConfigError(f"epochs={self.epochs} must be > 0")
        for name in ("max_train_examples", "max_eval_examples"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ConfigError(f"{name}={value!r} must be a positive integer")
        if self.eval_batch_size < 1:
            raise ConfigError("eval_batch_size must be >= 1")
        if not 8 <= self.max_seq_len <= 4096:
            raise ConfigError(f"max_seq_len={self.max_seq_len} must be between 8 and 4096")
        if self.evals_per_epoch < 1:
            raise ConfigError(f"evals_per_epoch={self.evals_per_epoch} must be >= 1")
        if self.tag_column is not None and not self.is_token_task:
            raise ConfigError(f"--tag-column is for CoNLL files (--task ner), not --task {self.task}")
        if self.tag_column is not None and self.tag_column < 2:
            raise ConfigError(f"--tag-column {self.tag_column} must be 2 or more", "column 1 holds the word")
        if self.doc_stride is not None and not self.is_span_task:
            raise ConfigError(f"--doc-stride is for SQuAD files (--task squad), not --task {self.task}")
        if self.is_span_task:
            check_window(self.max_seq_len, self.stride)
        if not isinstance(self.train, TrainConfig):
            raise ConfigError("train must be a TrainConfig")

    @property
    def architecture(self) -> str:
        """The head the task trains."""
        if self.is_span_task:
            return "BertForQuestionAnswering"
        return "BertForTokenClassification" if self.is_token_task else "BertForSequenceClassification"

    def replace(self, **changes: Any) -> "FinetuneConfig":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return jsonable(self)

    @classmethod
    def preset(cls, name: str, **fields: Any) -> "FinetuneConfig":
        """A named recipe; ``train`` may be a TrainConfig or a dict of changes to the recipe's."""
        if name not in FINETUNE_PRESETS:
            raise ConfigError(f"unknown fine-tuning preset {name!r}",
                              f"use one of {', '.join(FINETUNE_PRESETS)}")
        recipe = dict(FINETUNE_PRESETS[name])
        train = TrainConfig.of(recipe.pop("train"), fields.pop("train", None))
        return cls(train=train, **{**recipe, **fields})

    def train_config(self, num_examples: int) -> TrainConfig:
        """The engine's settings for ``num_examples`` training examples: with ``epochs``, the steps
        and one evaluation + checkpoint per 1/evals_per_epoch epoch come from the data size."""
        if self.epochs is None:
            return self.train
        return self.train.for_epochs(self.epochs, num_examples, self.evals_per_epoch, self.dev_file is not None)


FINETUNE_PRESETS: dict[str, dict[str, Any]] = {
    "glue": dict(epochs=3.0, max_seq_len=128, train=dict(lr=2e-5, batch_size=32, log_every=20)),
    "cpu-quick": dict(epochs=1.0, max_seq_len=64, freeze_word_embeddings=True,
                      train=dict(lr=5e-5, batch_size=32, log_every=20)),
    # token classification on CoNLL-2003 (14k sentences, ~20 sub-tokens each): a small model such as
    # all-MiniLM-L6-v2 wants a higher rate than BERT-base's 2e-5..5e-5
    "ner": dict(epochs=3.0, max_seq_len=128, train=dict(lr=1e-4, batch_size=32, warmup_ratio=0.1, log_every=20)),
    # SQuAD spans: transformers' run_qa recipe (its TrainingArguments defaults: no warmup, no weight decay,
    # Adam eps 1e-8, linear decay), the reference the squad figures are compared with
    "run-qa": dict(epochs=2.0, max_seq_len=384, train=dict(lr=1e-4, batch_size=16, warmup_ratio=0.0, weight_decay=0.0,
                                                           adam_eps=1e-8, log_every=20)),
    # the default for SQuAD: run_qa's recipe with a third epoch and BERT's 10% warmup. On the 3.8k questions
    # of ../shared/data/squad, all-MiniLM-L6-v2 was still improving after run_qa's 2 epochs (dev F1 59.7, best
    # at the last epoch); this recipe: dev F1 55.5, 62.6, 62.9 after epochs 1-3, transformers' own run_qa
    # fine-tuning 61.2 (benchmarks/results/squad_qa/squad_qa.md; 29 minutes with --bf16 on a 2-core AMD EPYC Zen 4)
    "squad": dict(epochs=3.0, max_seq_len=384, train=dict(lr=1e-4, batch_size=16, warmup_ratio=0.1, weight_decay=0.0,
                                                          adam_eps=1e-8, log_every=20)),
    # a cross-encoder reranker (binary cross-entropy on one relevance logit) on SQuAD question-sentence pairs:
    # ~8 pairs per question (1 relevant, 4 of its article, 3 the retriever ranks high); MiniLM-sized models
    "rerank": dict(epochs=1.0, max_seq_len=128, evals_per_epoch=2,
                   train=dict(lr=5e-5, batch_size=32, warmup_ratio=0.1, log_every=20)),
    "tiny": dict(epochs=3.0, max_seq_len=32, eval_batch_size=16,
                 train=dict(lr=3e-3, batch_size=8, warmup_ratio=0.0, log_every=1, progress=False)),
}


def build_finetune_config(model: str | Path, task: str, train_file: str | Path | None, out: str | Path,
                          preset: str | None = None, *, train: dict[str, Any] | None = None,
                          **fields: Any) -> FinetuneConfig:
    """The config for a run: ``preset`` (default ``ner`` / ``squad`` for those tasks, else ``glue``) with ``fields``
    and ``train`` changes; None values keep the recipe's. An explicit step count wins over the recipe's
    epochs."""
    fields = {k: v for k, v in fields.items() if v is not None}
    train = {k: v for k, v in (train or {}).items() if v is not None}
    if "max_steps" in train and "epochs" not in fields:
        fields["epochs"] = None
    preset = preset or ("ner" if task in TOKEN_PRESETS else "squad" if task in SPAN_PRESETS else
                        "rerank" if task in RANK_PRESETS else "glue")
    return FinetuneConfig.preset(preset, model=model, task=task, train_file=train_file, out=out,
                                 train=train, **fields)


# =========================================================================== the stage
@dataclass
class FinetuneResult:
    out_dir: Path
    steps: int
    best_metrics: dict[str, float]       # dev metrics of the kept checkpoint
    best_step: int | None
    last_metrics: dict[str, float]       # dev metrics at the end
    train_metrics: dict[str, float]
    labels: tuple[str, ...]
    num_train_examples: int
    num_dev_examples: int
    num_parameters: int
    wall_s: float
    tokens_per_s: float
    resumed_from: int = 0


def load_classifier_start(model_dir: Path, architecture: str, labels: Sequence[str],
                          max_seq_len: int) -> nn.Module:
    """The model to fine-tune: any BERT directory, with a new ``architecture`` head for ``labels``
    (none: a span head) (an existing head of the same size is kept, e.g. to continue fine-tuning)."""
    if not Path(model_dir).is_dir():
        raise CheckpointError(f"model directory {model_dir} not found",
                              "pass a directory from edgebert pretrain/distill or a Hugging Face BERT")
    src = BertConfig.load(model_dir)
    if labels and src.architecture == architecture and src.num_labels != len(labels):
        raise CheckpointError(f"{model_dir} is a classifier with {src.num_labels} labels; the task has "
                              f"{len(labels)}", "fine-tune from the pretrained (not fine-tuned) model")
    if max_seq_len > src.max_position_embeddings:
        raise ConfigError(f"max_seq_len={max_seq_len} is longer than the model's "
                          f"max_position_embeddings={src.max_position_embeddings}")
    id2label = {i: name for i, name in enumerate(labels)} or None
    return load_model(model_dir, architecture, allow_new_heads=True, config_overrides={"id2label": id2label})


def finetune(cfg: FinetuneConfig, *, console=None, stop_at_step: int | None = None) -> FinetuneResult:
    """Run one fine-tuning stage into ``cfg.out``; see the module docstring."""
    t0 = time.perf_counter()
    if not cfg.model.is_dir():
        raise CheckpointError(f"model directory {cfg.model} not found",
                              "pass a directory from edgebert pretrain/distill or a Hugging Face BERT")
    out = OutputDir(cfg.out, "finetune", names=FINETUNE_OUTPUTS, resume=cfg.resume, overwrite=cfg.overwrite,
                    signature=STATE_FILE)
    read_pooling(cfg.model)     # sentence-transformers modules every save keeps: refused now, not at the first save
    tok = load_tokenizer(cfg.model)
    data = load_task_data(cfg.task, cfg.train_file, cfg.dev_file, tok, cfg.max_seq_len,
                          cfg.max_train_examples, cfg.max_eval_examples, cfg.train.seed,
                          tag_column=cfg.tag_column, doc_stride=cfg.stride,
                          retriever=bi_encoder(cfg.retriever) if cfg.retriever else None)
    torch.manual_seed(cfg.train.seed)  # the new head's initialisation
    model = load_classifier_start(cfg.model, cfg.architecture, data.labels, cfg.max_seq_len)
    if cfg.freeze_word_embeddings:
        freeze_word_embeddings(model)
    train_cfg = cfg.train_config(len(data.train))
    task = ClassificationTask(model, tok, data, batch_size_hint=train_cfg.batch_size, seed=train_cfg.seed,
                              eval_batch_size=cfg.eval_batch_size, max_seq_len=cfg.max_seq_len,
                              source_dir=cfg.model)
    with Trainer(train_cfg, cfg.out, resume=cfg.resume, overwrite=cfg.overwrite, console=console) as trainer, \
            out.writing(keep=lambda: checkpoint_dir(cfg.out) is not None, enabled=trainer.is_main):
        if cfg.resume:
            task.best.restore(checkpoint_dir(cfg.out), model)
        elif trainer.is_main:
            write_json(cfg.out / FINETUNE_CONFIG_FILE, {**cfg.to_dict(), "labels": list(data.labels),
                                                        "train": train_cfg.to_dict()})
        result = trainer.fit(task, stop_at_step)
    return FinetuneResult(cfg.out, result.step, dict(task.best.metrics), task.best.step,
                          dict(result.eval_metrics), dict(result.train_metrics), data.labels,
                          len(data.train), len(data.dev) if data.dev else 0, count_parameters(model),
                          time.perf_counter() - t0, result.tokens_per_s, result.resumed_from)
