"""Fine-tune a BERT for sequence classification (SST-2, MRPC, any sentence(-pair) TSV) or token
classification (CoNLL-style tags), on the shared training engine (``edgebert.training``).

``finetune(FinetuneConfig(...))`` loads the model directory (a pretrained edgebert checkpoint, a
Hugging Face BERT directory, or an earlier classifier), puts a fresh classification head on it,
trains with AdamW + linear warmup/decay in length-grouped, dynamically padded batches, evaluates on
the dev file every epoch (``eval_accuracy`` / ``eval_f1`` in ``metrics.jsonl``) and keeps the best
checkpoint by dev accuracy as the output directory's model (``config.json`` with ``id2label``,
``model.safetensors``, tokenizer files; ``best_checkpoint.json`` says which step it is).

Recipes (``FinetuneConfig.preset``): ``glue`` (the usual BERT recipe: 3 epochs, lr 2e-5, batch 32,
seq 128), ``cpu-quick`` (1 epoch, lr 5e-5, seq 64: a 2-core CPU fine-tunes MiniLM on ~20k SST-2
examples in ~15 minutes), ``tiny`` (tests).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from torch import nn

from .classification_data import (EncodedDataset, LengthGroupedBatches, collate, encode_examples,
                                  encode_tagged)
from .errors import CheckpointError, ConfigError
from .evaluate import classifier_metrics
from .fileio import jsonable, write_json
from .glue import TASKS, TOKEN_TASKS, read_tagged, read_task_tsv
from .pretraining_data import IGNORE_INDEX
from .training import TrainConfig, TrainingTask, check_out_dir, train

FINETUNE_CONFIG_FILE = "finetune_config.json"
BEST_FILE = "best_checkpoint.json"


# =========================================================================== config
@dataclass(frozen=True)
class FinetuneConfig:
    """Everything ``finetune`` needs. Validated at construction; see ``FINETUNE_PRESETS``."""

    model: Path
    task: str
    train_file: Path
    out: Path
    dev_file: Path | None = None
    epochs: float = 3.0
    max_steps: int | None = None           # overrides epochs when set
    lr: float = 2e-5
    batch_size: int = 32
    max_seq_len: int = 128
    max_train_examples: int | None = None  # a seeded random subset of the training file
    max_eval_examples: int | None = None   # the first N dev examples
    warmup_ratio: float = 0.06
    weight_decay: float = 0.01
    grad_accum: int = 1
    max_grad_norm: float = 1.0
    freeze_word_embeddings: bool = False   # ~2x faster optimizer steps on CPU; little accuracy cost
    evals_per_epoch: int = 1
    eval_batch_size: int = 64
    bf16: bool = False
    seed: int = 0
    device: str = "auto"
    log_every: int = 20
    progress: bool = True
    resume: bool = False

    def __post_init__(self) -> None:
        for name in ("model", "train_file", "out", "dev_file"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, Path(value))
        if self.task not in TASKS:
            raise ConfigError(f"unknown task {self.task!r}", f"use one of {', '.join(TASKS)}")
        if not (math.isfinite(self.epochs) and self.epochs > 0):
            raise ConfigError(f"epochs={self.epochs} must be > 0")
        for name in ("max_steps", "max_train_examples", "max_eval_examples"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ConfigError(f"{name}={value!r} must be a positive integer")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ConfigError(f"lr={self.lr} must be > 0", "fine-tuning uses 1e-5 .. 1e-4")
        if self.batch_size < 1 or self.eval_batch_size < 1:
            raise ConfigError("batch sizes must be >= 1")
        if not 8 <= self.max_seq_len <= 4096:
            raise ConfigError(f"max_seq_len={self.max_seq_len} must be between 8 and 4096")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise ConfigError(f"warmup_ratio={self.warmup_ratio} must be in [0, 1)")
        if self.evals_per_epoch < 1:
            raise ConfigError(f"evals_per_epoch={self.evals_per_epoch} must be >= 1")
        if self.log_every < 1:
            raise ConfigError(f"log_every={self.log_every} must be >= 1")
        # the optimisation settings are checked by TrainConfig itself
        self.train_config(max(self.batch_size, 1))

    @property
    def is_token_task(self) -> bool:
        return self.task in TOKEN_TASKS

    def replace(self, **changes: Any) -> "FinetuneConfig":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return jsonable(self)

    @classmethod
    def preset(cls, name: str, **fields: Any) -> "FinetuneConfig":
        if name not in FINETUNE_PRESETS:
            raise ConfigError(f"unknown fine-tuning preset {name!r}",
                              f"use one of {', '.join(FINETUNE_PRESETS)}")
        return cls(**{**FINETUNE_PRESETS[name], **fields})

    def train_config(self, num_examples: int) -> TrainConfig:
        """The engine's settings for ``num_examples`` training examples: steps from epochs, warmup
        from the ratio, one evaluation + checkpoint per 1/evals_per_epoch epoch."""
        steps_per_epoch = max(1, math.ceil(num_examples / self.batch_size))
        max_steps = self.max_steps or max(1, math.ceil(self.epochs * steps_per_epoch))
        warmup = min(round(self.warmup_ratio * max_steps), max_steps - 1)
        every = max(1, math.ceil(steps_per_epoch / self.evals_per_epoch))
        return TrainConfig(max_steps=max_steps, batch_size=self.batch_size, lr=self.lr,
                           warmup_steps=warmup, weight_decay=self.weight_decay, grad_accum=self.grad_accum,
                           max_grad_norm=self.max_grad_norm, bf16=self.bf16, seed=self.seed,
                           log_every=min(self.log_every, max_steps),
                           eval_every=every if self.dev_file else 0,
                           save_every=every, device=self.device, progress=self.progress)


FINETUNE_PRESETS: dict[str, dict[str, Any]] = {
    "glue": dict(epochs=3.0, lr=2e-5, batch_size=32, max_seq_len=128),
    "cpu-quick": dict(epochs=1.0, lr=5e-5, batch_size=32, max_seq_len=64, freeze_word_embeddings=True),
    "tiny": dict(epochs=3.0, lr=3e-3, batch_size=8, max_seq_len=32, warmup_ratio=0.0, log_every=1,
                 eval_batch_size=16, progress=False),
}


# =========================================================================== data
@dataclass
class TaskData:
    train: EncodedDataset
    dev: EncodedDataset | None
    labels: tuple[str, ...]            # label names in id order (-> id2label)
    is_pair: bool


def load_task_data(task: str, train_file: Path, dev_file: Path | None, tok, max_seq_len: int,
                   max_train_examples: int | None = None, max_eval_examples: int | None = None,
                   seed: int = 0, labels: Sequence[str] | None = None) -> TaskData:
    """Read and tokenize a task's train (and dev) file; the dev file uses the train file's labels.

    ``labels`` (e.g. a teacher classifier's id2label) fixes the label order for ``tsv``/``conll``.
    """
    from .glue import TaskSpec, task_spec

    def subset(items: list, n: int | None) -> list:
        if n is None or n >= len(items):
            return items
        keep = np.sort(np.random.default_rng(seed).permutation(len(items))[:n])
        return [items[i] for i in keep]

    if task in TOKEN_TASKS:
        train_rows, tags = read_tagged(train_file, labels)
        dev_rows = read_tagged(dev_file, tags)[0] if dev_file else None
        train = encode_tagged(subset(train_rows, max_train_examples), tok, max_seq_len)
        dev = encode_tagged(dev_rows[:max_eval_examples] if max_eval_examples else dev_rows, tok,
                            max_seq_len) if dev_rows else None
        return TaskData(train, dev, tags, False)
    spec = None
    if labels and task == "tsv" and train_file.is_file():  # the teacher's label order, the file's columns
        header = train_file.read_text(encoding="utf-8-sig").split("\n", 1)[0].rstrip("\r").split("\t")
        base = task_spec("tsv", [h.strip() for h in header])
        spec = TaskSpec("tsv", base.text_columns, base.label_column, tuple(labels), tuple(labels))
    train_rows, spec = read_task_tsv(train_file, task, spec)
    if labels and len(labels) != len(spec.labels):
        raise CheckpointError(f"the teacher has {len(labels)} labels, task {task} has {len(spec.labels)}")
    dev_rows = read_task_tsv(dev_file, task, spec)[0] if dev_file else None
    train = encode_examples(subset(train_rows, max_train_examples), tok, max_seq_len)
    dev = encode_examples(dev_rows[:max_eval_examples] if max_eval_examples else dev_rows, tok,
                          max_seq_len) if dev_rows else None
    return TaskData(train, dev, spec.label_names, spec.is_pair)


# =========================================================================== best checkpoint
class BestCheckpoint:
    """Remembers the weights of the best evaluation so far (by ``metric``, higher is better) and
    writes those, not the latest, as the output directory's model."""

    def __init__(self, metric: str = "accuracy"):
        self.metric = metric
        self.value: float | None = None
        self.step: int | None = None
        self.metrics: dict[str, float] = {}
        self.state: dict[str, torch.Tensor] | None = None

    def update(self, model: nn.Module, metrics: dict[str, float], step: int) -> bool:
        value = metrics.get(self.metric)
        if value is None or (self.value is not None and value <= self.value):
            return False
        self.value, self.step, self.metrics = float(value), step, dict(metrics)
        self.state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
        return True

    def save(self, model: nn.Module, out_dir: Path) -> None:
        """Write the best weights (or ``model`` as it is, before any evaluation) + best_checkpoint.json."""
        from .checkpoint import save_model

        if self.state is None:
            save_model(model, out_dir)
            return
        best = copy.deepcopy(model).cpu()
        best.load_state_dict(self.state)
        save_model(best, out_dir)
        write_json(out_dir / BEST_FILE, {"metric": self.metric, "value": self.value, "step": self.step,
                                         "metrics": self.metrics})

    def restore(self, out_dir: Path, model: nn.Module) -> None:
        """On resume: the best so far is what the output directory holds."""
        from .checkpoint import load_model

        path = out_dir / BEST_FILE
        if not path.is_file():
            return
        info = json.loads(path.read_text(encoding="utf-8"))
        self.value, self.step, self.metrics = float(info["value"]), int(info["step"]), dict(info["metrics"])
        best = load_model(out_dir, type(model).__name__)
        self.state = {k: v.detach().cpu().clone() for k, v in best.state_dict().items()}


# =========================================================================== the task
class ClassificationTask(TrainingTask):
    """Cross-entropy on a sequence or token classifier; dev accuracy/F1; best checkpoint kept."""

    def __init__(self, model: nn.Module, tokenizer, data: TaskData, *, batch_size_hint: int,
                 seed: int, eval_batch_size: int = 64, max_seq_len: int = 128):
        from .tokenizer import SpecialIds

        self.model, self.tokenizer, self.data = model, tokenizer, data
        self.pad_id = SpecialIds.of(tokenizer).pad
        self.eval_batch_size, self.max_seq_len = eval_batch_size, max_seq_len
        self.batch_size, self.seed = batch_size_hint, seed
        self.best = BestCheckpoint("accuracy")
        self._sampler: LengthGroupedBatches | None = None

    def num_train_examples(self) -> int:
        return len(self.data.train)

    def sampler(self, batch_size: int, seed: int) -> LengthGroupedBatches:
        self._sampler = LengthGroupedBatches(self.data.train.lengths, batch_size, seed)
        self.batch_size = batch_size
        return self._sampler

    @property
    def step(self) -> int:
        return self._sampler.position // self.batch_size if self._sampler else 0

    def make_batch(self, indices, keys):
        return collate(self.data.train, indices, self.pad_id)

    def loss(self, model, batch):
        out = model(**batch)
        with torch.no_grad():
            labels = batch["labels"]
            keep = labels != IGNORE_INDEX
            acc = (out.logits.argmax(-1)[keep] == labels[keep]).float().mean()
        return out.loss, {"accuracy": acc}

    def evaluate(self, model):
        if self.data.dev is None:
            return {}
        metrics = classifier_metrics(model, self.data.dev, len(self.data.labels), self.eval_batch_size,
                                     self.pad_id)
        metrics = {k: float(v) for k, v in metrics.items()}
        self.best.update(model, metrics, self.step)
        return metrics

    def save(self, out_dir: Path) -> None:
        from .tokenizer import save_tokenizer

        self.best.save(self.model, out_dir)
        save_tokenizer(self.tokenizer, out_dir, model_max_length=self.max_seq_len)


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
    (an existing head of the same size is kept, e.g. to continue fine-tuning)."""
    from .checkpoint import load_model
    from .config import BertConfig

    if not Path(model_dir).is_dir():
        raise CheckpointError(f"model directory {model_dir} not found",
                              "pass a directory from edgebert pretrain/distill or a Hugging Face BERT")
    src = BertConfig.load(model_dir)
    if src.architecture == architecture and src.num_labels != len(labels):
        raise CheckpointError(f"{model_dir} is a classifier with {src.num_labels} labels; the task has "
                              f"{len(labels)}", "fine-tune from the pretrained (not fine-tuned) model")
    if max_seq_len > src.max_position_embeddings:
        raise ConfigError(f"max_seq_len={max_seq_len} is longer than the model's "
                          f"max_position_embeddings={src.max_position_embeddings}")
    id2label = {i: name for i, name in enumerate(labels)}
    model = load_model(model_dir, architecture, allow_new_heads=True,
                       config_overrides={"id2label": id2label})
    return model


def freeze_word_embeddings(model: nn.Module) -> None:
    """Keep the word-embedding matrix fixed: no (V x H) gradient and no AdamW update of it."""
    from .model import encoder_of

    encoder_of(model).embeddings.word_embeddings.weight.requires_grad_(False)


def finetune(cfg: FinetuneConfig, *, console=None, stop_at_step: int | None = None) -> FinetuneResult:
    """Run one fine-tuning stage into ``cfg.out``; see the module docstring."""
    from .model import count_parameters
    from .tokenizer import load_tokenizer

    t0 = time.perf_counter()
    if not cfg.model.is_dir():
        raise CheckpointError(f"model directory {cfg.model} not found",
                              "pass a directory from edgebert pretrain/distill or a Hugging Face BERT")
    check_out_dir(cfg.out, cfg.resume)
    tok = load_tokenizer(cfg.model)
    data = load_task_data(cfg.task, cfg.train_file, cfg.dev_file, tok, cfg.max_seq_len,
                          cfg.max_train_examples, cfg.max_eval_examples, cfg.seed)
    arch = "BertForTokenClassification" if cfg.is_token_task else "BertForSequenceClassification"
    torch.manual_seed(cfg.seed)  # the new head's initialisation
    model = load_classifier_start(cfg.model, arch, data.labels, cfg.max_seq_len)
    if cfg.freeze_word_embeddings:
        freeze_word_embeddings(model)
    train_cfg = cfg.train_config(len(data.train))
    task = ClassificationTask(model, tok, data, batch_size_hint=cfg.batch_size, seed=cfg.seed,
                              eval_batch_size=cfg.eval_batch_size, max_seq_len=cfg.max_seq_len)
    if cfg.resume:
        task.best.restore(cfg.out, model)
    elif int(os.environ.get("RANK", "0")) == 0:  # under torchrun only rank 0 writes
        write_json(cfg.out / FINETUNE_CONFIG_FILE, {**cfg.to_dict(), "labels": list(data.labels),
                                                    "train": train_cfg.to_dict()})
    result = train(task, train_cfg, cfg.out, resume=cfg.resume, stop_at_step=stop_at_step, console=console)
    return FinetuneResult(cfg.out, result.step, dict(task.best.metrics), task.best.step,
                          dict(result.eval_metrics), dict(result.train_metrics), data.labels,
                          len(data.train), len(data.dev) if data.dev else 0, count_parameters(model),
                          time.perf_counter() - t0, result.tokens_per_s, result.resumed_from)
