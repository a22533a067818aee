"""Distil a BERT teacher into a shallower student (DistilBERT style), on the shared training engine.

Two modes, one ``DistillConfig``:

- **MLM (general) distillation** (``task="mlm"``): the teacher is any edgebert/Hugging Face BERT with
  a masked-LM head (``BertForPreTraining`` or ``BertForMaskedLM``). Text is cut into the same
  sentence-pair examples as pretraining and masked dynamically by the pretraining ``MaskingCollator``.
  The loss is ``alpha_kd * KL(student/T || teacher/T) * T^2`` on the masked-token logits +
  ``alpha_mlm * MLM cross-entropy`` + ``alpha_cos * (1 - cos)(student, teacher last hidden states)``
  over non-padding tokens, plus the optional TinyBERT terms ``alpha_hidden`` (hidden-state MSE per
  mapped layer, embeddings included) and ``alpha_attn`` (attention-probability KL per mapped layer).
- **Task distillation** (``task="sst2"|"mrpc"|"tsv"``): the teacher is a fine-tuned
  ``BertForSequenceClassification``; the loss is ``alpha_kd * KD(logits)`` + ``alpha_ce *`` hard-label
  cross-entropy (+ the optional hidden/attention/cosine terms); dev accuracy/F1 are reported every
  epoch next to the teacher's, and the best student (by dev accuracy) is kept.

The student keeps the teacher's width and starts from the teacher's embeddings, the teacher layers in
``layer_map`` (evenly spaced by default: 6 -> 4 gives [0, 2, 3, 5]), pooler and heads
(``edgebert.student.make_student``); ``student_init="random"`` trains a same-size model from scratch
on the same batches instead (the baseline distillation has to beat). The teacher runs in eval mode
under ``no_grad`` and is never saved in training checkpoints. ``distill_config.json`` in the output
directory records the layer map, the loss weights and the teacher.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .classification_data import collate, eval_batches
from .distill_losses import attention_kl_loss, cosine_loss, hidden_mse_loss, kd_loss
from .errors import CheckpointError, ConfigError
from .evaluate import classifier_metrics, masked_logits, mlm_eval_batches, mlm_metrics
from .finetune import ClassificationTask, TaskData, freeze_word_embeddings, load_task_data
from .fileio import jsonable, write_json
from .glue import SEQUENCE_TASKS, TOKEN_TASKS
from .training import TrainConfig, TrainingTask, check_out_dir, train

DISTILL_CONFIG_FILE = "distill_config.json"
DISTILL_TASKS = ("mlm", *SEQUENCE_TASKS)
STUDENT_INITS = ("teacher", "random")
MLM_ARCHITECTURES = ("BertForPreTraining", "BertForMaskedLM")


# =========================================================================== config
@dataclass(frozen=True)
class DistillConfig:
    """Everything ``distill`` needs. Validated at construction; see ``DISTILL_PRESETS``."""

    teacher: Path
    out: Path
    task: str = "mlm"                      # "mlm" (general distillation) or sst2 / mrpc / tsv
    # MLM distillation data
    corpus: tuple[Path, ...] = ()          # empty: the built-in corpus (Python's documentation)
    corpus_format: str = "auto"
    eval_corpus: tuple[Path, ...] = ()     # empty: hold out ``eval_fraction`` of the documents
    # task distillation data
    train_file: Path | None = None
    dev_file: Path | None = None
    max_train_examples: int | None = None  # a seeded random subset of the training file
    # the student
    layers: int = 4
    layer_map: tuple[int, ...] | None = None  # teacher layer per student layer; None: evenly spaced
    student_init: str = "teacher"          # "teacher" (DistilBERT) or "random" (from-scratch baseline)
    freeze_word_embeddings: bool = False
    # the loss
    temperature: float = 2.0
    alpha_kd: float = 5.0
    alpha_mlm: float = 2.0                 # MLM mode only
    alpha_ce: float = 0.0                  # task mode only: hard-label cross-entropy
    alpha_cos: float = 1.0
    alpha_hidden: float = 0.0
    alpha_attn: float = 0.0
    # examples
    max_seq_len: int = 128
    mlm_probability: float = 0.15
    dupe_factor: int = 1
    eval_fraction: float = 0.05
    max_eval_examples: int = 2000
    eval_batch_size: int = 64
    cache_teacher_logits: bool = True      # task mode with logit-only terms: one teacher pass up front
    # optimisation (the shared engine); ``epochs`` (task mode) sets max_steps from the data size
    train: TrainConfig = field(default_factory=lambda: TrainConfig(max_steps=1000, lr=5e-4, warmup_steps=50))
    epochs: float | None = None
    warmup_ratio: float = 0.06             # with ``epochs``: warmup steps = ratio * steps
    evals_per_epoch: int = 1               # with ``epochs``
    resume: bool = False

    def __post_init__(self) -> None:
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731
        set_("teacher", Path(self.teacher))
        set_("out", Path(self.out))
        set_("corpus", tuple(Path(p) for p in self.corpus))
        set_("eval_corpus", tuple(Path(p) for p in self.eval_corpus))
        for name in ("train_file", "dev_file"):
            if getattr(self, name) is not None:
                set_(name, Path(getattr(self, name)))
        if isinstance(self.layer_map, str):
            text = self.layer_map.strip()
            try:
                set_("layer_map", tuple(int(x) for x in text.split(",")) if text else None)
            except ValueError as exc:
                raise ConfigError(f"--layer-map {self.layer_map!r} is not a comma-separated list of "
                                  "integers", "e.g. --layer-map 0,2,3,5") from exc
        elif self.layer_map is not None:
            set_("layer_map", tuple(int(x) for x in self.layer_map))
        if self.task in TOKEN_TASKS:
            raise ConfigError(f"task distillation of token classifiers ({self.task}) is not supported",
                              f"use one of {', '.join(DISTILL_TASKS)}")
        if self.task not in DISTILL_TASKS:
            raise ConfigError(f"unknown distillation task {self.task!r}", f"use one of {', '.join(DISTILL_TASKS)}")
        if not isinstance(self.layers, int) or self.layers < 1:
            raise ConfigError(f"--layers {self.layers!r} must be a positive integer")
        if self.layer_map is not None:
            if len(self.layer_map) != self.layers:
                raise ConfigError(f"--layer-map has {len(self.layer_map)} entries but the student has "
                                  f"{self.layers} layers", "give one teacher layer per student layer")
            if any(i < 0 for i in self.layer_map):
                raise ConfigError(f"--layer-map {list(self.layer_map)} has a negative layer index")
        if self.student_init not in STUDENT_INITS:
            raise ConfigError(f"student_init={self.student_init!r}", f"use one of {', '.join(STUDENT_INITS)}")
        if not (math.isfinite(self.temperature) and self.temperature > 0):
            raise ConfigError(f"--temperature {self.temperature} must be > 0", "DistilBERT uses 2.0")
        alphas = {n: getattr(self, n) for n in ("alpha_kd", "alpha_mlm", "alpha_ce", "alpha_cos",
                                                "alpha_hidden", "alpha_attn")}
        for name, value in alphas.items():
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ConfigError(f"--{name.replace('_', '-')} {value!r} must be a number >= 0")
        if self.task == "mlm":
            if self.alpha_ce:
                raise ConfigError("--alpha-ce is the hard-label weight of task distillation",
                                  "use --alpha-mlm for MLM distillation, or pass --task")
            if self.train_file or self.dev_file:
                raise ConfigError("--train/--dev are for task distillation", "pass --task sst2|mrpc|tsv")
        else:
            if self.alpha_mlm:
                raise ConfigError(f"--alpha-mlm applies to MLM distillation, not --task {self.task}",
                                  "set --alpha-mlm 0 (use --alpha-ce for the hard labels)")
            if self.train_file is None:
                raise ConfigError(f"task distillation (--task {self.task}) needs --train FILE")
            if self.corpus or self.eval_corpus:
                raise ConfigError("--corpus is for MLM distillation", "drop --task, or drop --corpus")
        if not any(alphas.values()):
            raise ConfigError("every loss weight is 0", "set at least one of --alpha-kd, --alpha-mlm, "
                              "--alpha-ce, --alpha-cos, --alpha-hidden, --alpha-attn")
        if self.student_init == "random" and self.task != "mlm" and not (self.alpha_kd or self.alpha_ce):
            raise ConfigError("a randomly initialised classifier needs --alpha-kd or --alpha-ce")
        if not 16 <= self.max_seq_len <= 4096:
            raise ConfigError(f"max_seq_len={self.max_seq_len} must be between 16 and 4096")
        if not 0.0 < self.mlm_probability < 1.0:
            raise ConfigError(f"mlm_probability={self.mlm_probability} must be in (0, 1)")
        if self.dupe_factor < 1:
            raise ConfigError(f"dupe_factor={self.dupe_factor} must be >= 1")
        if not 0.0 < self.eval_fraction <= 0.5:
            raise ConfigError(f"eval_fraction={self.eval_fraction} must be in (0, 0.5]")
        if self.max_eval_examples < 1 or self.eval_batch_size < 1:
            raise ConfigError("max_eval_examples and eval_batch_size must be >= 1")
        if self.max_train_examples is not None and self.max_train_examples < 1:
            raise ConfigError(f"max_train_examples={self.max_train_examples} must be >= 1")
        if self.epochs is not None:
            if self.task == "mlm":
                raise ConfigError("epochs is for task distillation", "use max_steps for MLM distillation")
            if not (math.isfinite(self.epochs) and self.epochs > 0):
                raise ConfigError(f"epochs={self.epochs} must be > 0")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise ConfigError(f"warmup_ratio={self.warmup_ratio} must be in [0, 1)")
        if self.evals_per_epoch < 1:
            raise ConfigError(f"evals_per_epoch={self.evals_per_epoch} must be >= 1")
        if not isinstance(self.train, TrainConfig):
            raise ConfigError("train must be a TrainConfig")

    @property
    def is_task(self) -> bool:
        return self.task != "mlm"

    @property
    def needs_hidden_states(self) -> bool:
        return self.alpha_hidden > 0

    @property
    def needs_attentions(self) -> bool:
        return self.alpha_attn > 0

    def replace(self, **changes: Any) -> "DistillConfig":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return jsonable(self)

    @classmethod
    def preset(cls, name: str, teacher: str | Path, out: str | Path, **overrides: Any) -> "DistillConfig":
        """A named recipe; ``train`` may be a TrainConfig or a dict of changes to the recipe's."""
        if name not in DISTILL_PRESETS:
            raise ConfigError(f"unknown distillation preset {name!r}", f"use one of {', '.join(DISTILL_PRESETS)}")
        recipe = dict(DISTILL_PRESETS[name])
        train_changes = overrides.pop("train", None) or {}
        base_train = TrainConfig(**recipe.pop("train"))
        train_cfg = train_changes if isinstance(train_changes, TrainConfig) else base_train.replace(**train_changes)
        return cls(teacher=Path(teacher), out=Path(out), train=train_cfg, **{**recipe, **overrides})

    def train_config(self, num_examples: int) -> TrainConfig:
        """The engine's settings; with ``epochs``, steps/warmup/eval cadence come from the data size."""
        if self.epochs is None:
            return self.train
        steps_per_epoch = max(1, math.ceil(num_examples / self.train.batch_size))
        max_steps = max(1, math.ceil(self.epochs * steps_per_epoch))
        every = max(1, math.ceil(steps_per_epoch / self.evals_per_epoch))
        return self.train.replace(max_steps=max_steps,
                                  warmup_steps=min(round(self.warmup_ratio * max_steps), max_steps - 1),
                                  log_every=min(self.train.log_every, max_steps),
                                  eval_every=every if self.dev_file else 0, save_every=every)


DISTILL_PRESETS: dict[str, dict[str, Any]] = {
    # DistilBERT: KD on masked tokens + MLM + cosine; student from evenly spaced teacher layers
    "distilbert": dict(task="mlm", temperature=2.0, alpha_kd=5.0, alpha_mlm=2.0, alpha_cos=1.0,
                       train=dict(max_steps=1000, batch_size=32, lr=5e-4, warmup_steps=50, log_every=20,
                                  eval_every=250, save_every=250)),
    # + TinyBERT's intermediate-layer terms
    "tinybert": dict(task="mlm", temperature=2.0, alpha_kd=5.0, alpha_mlm=2.0, alpha_cos=1.0,
                     alpha_hidden=1.0, alpha_attn=1.0,
                     train=dict(max_steps=1000, batch_size=32, lr=5e-4, warmup_steps=50, log_every=20,
                                eval_every=250, save_every=250)),
    # a fine-tuned classifier -> a 4-layer classifier: logit KD (teacher soft labels only)
    "task": dict(task="sst2", temperature=2.0, alpha_kd=1.0, alpha_mlm=0.0, alpha_ce=0.0, alpha_cos=0.0,
                 max_seq_len=64, epochs=2.0,
                 train=dict(max_steps=1000, batch_size=32, lr=1e-4, warmup_steps=0, log_every=20)),
    # tests
    "tiny": dict(task="mlm", layers=1, max_seq_len=32, max_eval_examples=32, eval_batch_size=16,
                 train=dict(max_steps=8, batch_size=8, lr=1e-3, warmup_steps=1, log_every=1,
                            eval_every=4, progress=False)),
}


# =========================================================================== the loss
@dataclass
class ModelOutputs:
    """What the loss needs from one model on one batch."""

    logits: torch.Tensor                       # (M, V) masked-token logits or (B, C) class logits
    last_hidden_state: torch.Tensor | None     # (B, T, H); None when only the logits are known
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


def distillation_loss(cfg: DistillConfig, student: ModelOutputs, teacher: ModelOutputs,
                      attention_mask: torch.Tensor, hard_targets: torch.Tensor | None,
                      layer_map: Sequence[int]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The weighted sum of the enabled terms, and each term (detached) for the logs.

    Every term is 0 when the student's outputs equal the teacher's (the hard-label term aside).
    """
    terms: dict[str, tuple[float, torch.Tensor]] = {}
    if cfg.alpha_kd:
        terms["kd"] = (cfg.alpha_kd, kd_loss(student.logits, teacher.logits, cfg.temperature))
    hard_alpha = cfg.alpha_ce if cfg.is_task else cfg.alpha_mlm
    if hard_alpha:
        name = "ce" if cfg.is_task else "mlm"
        terms[name] = (hard_alpha, F.cross_entropy(student.logits.float(), hard_targets))
    if cfg.alpha_cos:
        terms["cos"] = (cfg.alpha_cos, cosine_loss(student.last_hidden_state, teacher.last_hidden_state,
                                                   attention_mask))
    if cfg.alpha_hidden:
        terms["hidden"] = (cfg.alpha_hidden, hidden_mse_loss(student.hidden_states, teacher.hidden_states,
                                                             layer_map, attention_mask))
    if cfg.alpha_attn:
        terms["attn"] = (cfg.alpha_attn, attention_kl_loss(student.attentions, teacher.attentions,
                                                           layer_map, attention_mask))
    total = sum(alpha * value for alpha, value in terms.values())
    return total, {f"loss_{k}": v.detach() for k, (_, v) in terms.items()}


# =========================================================================== MLM distillation
class StudentMLM(nn.Module):
    """What the engine optimises in MLM distillation: the student, with its vocabulary projection
    run only at masked positions (the (B, T, V) logits would dominate CPU time)."""

    def __init__(self, student: nn.Module):
        super().__init__()
        self.student = student

    def forward(self, input_ids, attention_mask, token_type_ids, labels, output_hidden_states=False,
                output_attentions=False):
        batch = {"input_ids": input_ids, "attention_mask": attention_mask,
                 "token_type_ids": token_type_ids, "labels": labels}
        return masked_logits(self.student, batch, output_hidden_states=output_hidden_states,
                             output_attentions=output_attentions)


def _outputs(enc, logits) -> ModelOutputs:
    return ModelOutputs(logits, enc.last_hidden_state, enc.hidden_states, enc.attentions)


class MlmDistillationTask(TrainingTask):
    def __init__(self, student: nn.Module, teacher: nn.Module, tokenizer, train_examples, eval_batches_,
                 cfg: DistillConfig, layer_map: list[int]):
        from .pretraining_data import MaskingCollator
        from .tokenizer import SpecialIds

        self.student, self.teacher, self.tokenizer = student, teacher, tokenizer
        self.model = StudentMLM(student)
        self.cfg, self.layer_map = cfg, layer_map
        self.train_examples, self.eval_batches = train_examples, eval_batches_
        self.collator = MaskingCollator(SpecialIds.of(tokenizer), student.config.vocab_size,
                                        seed=cfg.train.seed, mlm_probability=cfg.mlm_probability)
        self.teacher_metrics: dict[str, float] | None = None

    def num_train_examples(self) -> int:
        return len(self.train_examples)

    def to_device(self, device: torch.device) -> None:
        self.model.to(device)
        self.teacher.to(device)

    def make_batch(self, indices, keys):
        batch = self.collator(self.train_examples, indices, keys)
        batch.pop("next_sentence_label")
        return batch

    @property
    def needs_teacher(self) -> bool:
        """False for the MLM-only baseline: then the teacher is not run during training."""
        c = self.cfg
        return bool(c.alpha_kd or c.alpha_cos or c.alpha_hidden or c.alpha_attn)

    def loss(self, model, batch):
        kwargs = dict(output_hidden_states=self.cfg.needs_hidden_states,
                      output_attentions=self.cfg.needs_attentions)
        s_enc, s_logits, targets = model(**batch, **kwargs)
        if not self.needs_teacher:
            loss = F.cross_entropy(s_logits.float(), targets)
            with torch.no_grad():
                acc = (s_logits.argmax(-1) == targets).float().mean()
            return self.cfg.alpha_mlm * loss, {"loss_mlm": loss.detach(), "mlm_accuracy": acc}
        with torch.no_grad():
            t_enc, t_logits, _ = masked_logits(self.teacher, batch, **kwargs)
        total, metrics = distillation_loss(self.cfg, _outputs(s_enc, s_logits), _outputs(t_enc, t_logits),
                                           batch["attention_mask"], targets, self.layer_map)
        with torch.no_grad():
            s_pred = s_logits.argmax(-1)
            metrics["mlm_accuracy"] = (s_pred == targets).float().mean()
            metrics["teacher_agreement"] = (s_pred == t_logits.argmax(-1)).float().mean()
        return total, metrics

    def evaluate(self, model):
        if not self.eval_batches:
            return {}
        if self.teacher_metrics is None:
            self.teacher_metrics = {f"teacher_{k}": v for k, v in mlm_metrics(self.teacher, self.eval_batches).items()
                                    if k != "masked_tokens"}
        return {**mlm_metrics(model.student, self.eval_batches), **self.teacher_metrics}

    def save(self, out_dir: Path) -> None:
        from .checkpoint import save_model
        from .tokenizer import save_tokenizer

        save_model(self.student, out_dir)
        save_tokenizer(self.tokenizer, out_dir, model_max_length=self.cfg.max_seq_len)


# =========================================================================== task distillation
class TaskDistillationTask(ClassificationTask):
    """Classifier -> classifier: KD on the logits (+ hard-label CE and the optional terms); the dev
    evaluation, length-grouped batches and best-checkpoint keeping are fine-tuning's."""

    def __init__(self, student: nn.Module, teacher: nn.Module, tokenizer, data: TaskData,
                 cfg: DistillConfig, layer_map: list[int]):
        super().__init__(student, tokenizer, data, batch_size_hint=cfg.train.batch_size, seed=cfg.train.seed,
                         eval_batch_size=cfg.eval_batch_size, max_seq_len=cfg.max_seq_len)
        self.teacher, self.cfg, self.layer_map = teacher, cfg, layer_map
        self.teacher_metrics: dict[str, float] | None = None
        self.logit_cache: torch.Tensor | None = None   # (N, C) teacher logits of the training set
        self.logits_only = not (cfg.alpha_cos or cfg.alpha_hidden or cfg.alpha_attn)
        # hard labels only (the no-distillation baseline): the teacher is not run during training
        self.needs_teacher = bool(cfg.alpha_kd) or not self.logits_only

    def to_device(self, device: torch.device) -> None:
        self.model.to(device)
        self.teacher.to(device)
        if (self.cfg.cache_teacher_logits and self.needs_teacher and self.logits_only
                and self.logit_cache is None):
            self.logit_cache = self._teacher_logits(device)

    @torch.no_grad()
    def _teacher_logits(self, device: torch.device) -> torch.Tensor:
        """The teacher's logits for every training example (eval mode: deterministic), in one pass
        over length-sorted batches: cheaper than recomputing them every epoch."""
        out = torch.zeros(len(self.data.train), len(self.data.labels))
        for idx, batch in eval_batches(self.data.train, self.eval_batch_size, self.pad_id):
            batch.pop("labels")
            out[torch.as_tensor(idx)] = self.teacher(**{k: v.to(device) for k, v in batch.items()}).logits.float().cpu()
        return out

    def make_batch(self, indices, keys):
        batch = collate(self.data.train, indices, self.pad_id)
        if self.logit_cache is not None:
            batch["teacher_logits"] = self.logit_cache[list(indices)]
        return batch

    def loss(self, model, batch):
        labels = batch["labels"]
        inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
        kwargs = dict(output_hidden_states=self.cfg.needs_hidden_states,
                      output_attentions=self.cfg.needs_attentions)
        if "teacher_logits" in batch:
            t_out = ModelOutputs(batch["teacher_logits"], None)
        elif not self.needs_teacher:
            s = model(**inputs)
            loss = F.cross_entropy(s.logits.float(), labels)
            with torch.no_grad():
                acc = (s.logits.argmax(-1) == labels).float().mean()
            return self.cfg.alpha_ce * loss, {"loss_ce": loss.detach(), "accuracy": acc}
        else:
            with torch.no_grad():
                t = self.teacher(**inputs, **kwargs)
            t_out = _outputs(t.encoder, t.logits)
        s = model(**inputs, **kwargs)
        total, metrics = distillation_loss(self.cfg, _outputs(s.encoder, s.logits), t_out,
                                           inputs["attention_mask"], labels, self.layer_map)
        with torch.no_grad():
            pred = s.logits.argmax(-1)
            metrics["accuracy"] = (pred == labels).float().mean()
            metrics["teacher_agreement"] = (pred == t_out.logits.argmax(-1)).float().mean()
        return total, metrics

    def evaluate(self, model):
        metrics = super().evaluate(model)
        if not metrics:
            return metrics
        if self.teacher_metrics is None:
            m = classifier_metrics(self.teacher, self.data.dev, len(self.data.labels), self.eval_batch_size,
                                   self.pad_id)
            self.teacher_metrics = {"teacher_accuracy": float(m["accuracy"]), "teacher_f1": float(m["f1"])}
        return {**metrics, **self.teacher_metrics}


# =========================================================================== loading
def load_teacher(teacher_dir: Path, task: str) -> nn.Module:
    """The teacher in eval mode with frozen weights; a clear error when it cannot teach ``task``."""
    from .checkpoint import load_model, read_state_dict
    from .config import BertConfig

    if not teacher_dir.is_dir():
        raise CheckpointError(f"teacher directory {teacher_dir} not found",
                              "pass a model directory from edgebert pretrain/finetune/import-hf")
    cfg = BertConfig.load(teacher_dir)
    if task == "mlm":
        if cfg.architecture in MLM_ARCHITECTURES:
            teacher = load_model(teacher_dir)
        elif any(k.endswith("cls.predictions.transform.dense.weight") for k in read_state_dict(teacher_dir)):
            teacher = load_model(teacher_dir, "BertForMaskedLM")
        else:
            raise CheckpointError(
                f"the teacher {teacher_dir} is a {cfg.architecture} without a masked-LM head, so it "
                "cannot teach MLM distillation",
                "use a BertForMaskedLM/BertForPreTraining teacher (e.g. from edgebert pretrain), or "
                "fine-tune it and distil the classifier with --task")
    else:
        if cfg.architecture != "BertForSequenceClassification":
            raise CheckpointError(f"the teacher {teacher_dir} is a {cfg.architecture}, not a fine-tuned "
                                  "sequence classifier",
                                  f"fine-tune it first: edgebert finetune {teacher_dir} --task {task} ...")
        teacher = load_model(teacher_dir)
    teacher.eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    return teacher


def build_student(teacher: nn.Module, cfg: DistillConfig) -> tuple[nn.Module, list[int]]:
    """The student and its layer map (validated against the teacher's depth)."""
    from .model import build_model
    from .student import make_student, parse_layer_map

    depth = teacher.config.num_hidden_layers
    layer_map = parse_layer_map(list(cfg.layer_map) if cfg.layer_map else None, depth, cfg.layers)
    if cfg.student_init == "teacher":
        student, layer_map = make_student(teacher, cfg.layers, layer_map)
    else:
        torch.manual_seed(cfg.train.seed)
        s_cfg = teacher.config.replace(num_hidden_layers=cfg.layers)
        student = build_model(s_cfg, type(teacher).__name__)
    student.train()
    for p in student.parameters():
        p.requires_grad_(True)
    if not cfg.is_task and hasattr(student, "cls") and hasattr(student.cls, "seq_relationship"):
        # MLM distillation trains no NSP: keep the pooler and NSP head as copied (unused parameters
        # would also break DistributedDataParallel)
        for p in [*student.bert.pooler.parameters(), *student.cls.seq_relationship.parameters()]:
            p.requires_grad_(False)
    if cfg.freeze_word_embeddings:
        freeze_word_embeddings(student)
    return student, list(layer_map)




# =========================================================================== the stage
@dataclass
class DistillResult:
    out_dir: Path
    steps: int
    layer_map: list[int]
    eval_metrics: dict[str, float]        # the student at the last evaluation (teacher_* beside it)
    best_metrics: dict[str, float]        # task mode: the kept (best dev accuracy) student
    train_metrics: dict[str, float]
    student_parameters: int
    teacher_parameters: int
    teacher_layers: int
    num_train_examples: int
    wall_s: float
    tokens_per_s: float
    resumed_from: int = 0


def _is_main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def distill(cfg: DistillConfig, *, console=None, stop_at_step: int | None = None) -> DistillResult:
    """Run one distillation stage into ``cfg.out``; see the module docstring."""
    from .corpus import read_corpora, split_documents
    from .model import count_parameters
    from .pretraining_data import create_examples, regroup_documents, tokenize_documents
    from .tokenizer import SpecialIds, load_tokenizer

    t0 = time.perf_counter()
    teacher = load_teacher(cfg.teacher, cfg.task)
    student, layer_map = build_student(teacher, cfg)
    check_out_dir(cfg.out, cfg.resume)
    if cfg.max_seq_len > teacher.config.max_position_embeddings:
        raise ConfigError(f"max_seq_len={cfg.max_seq_len} is longer than the teacher's "
                          f"max_position_embeddings={teacher.config.max_position_embeddings}")
    tok = load_tokenizer(cfg.teacher)
    if not _is_main_process():
        console = None
    if console is not None:
        how = (f"teacher layers {layer_map}" if cfg.student_init == "teacher" else "random initialisation")
        console.print(f"student: {cfg.layers} of the teacher's {teacher.config.num_hidden_layers} layers "
                      f"(width {teacher.config.hidden_size}), from {how}", highlight=False)
    if cfg.is_task:
        labels = [teacher.config.id2label[i] for i in range(teacher.config.num_labels)] \
            if teacher.config.id2label else None
        data = load_task_data(cfg.task, cfg.train_file, cfg.dev_file, tok, cfg.max_seq_len,
                              cfg.max_train_examples, None, cfg.train.seed, labels)
        if len(data.labels) != teacher.config.num_labels:
            raise CheckpointError(f"the teacher has {teacher.config.num_labels} labels, the data "
                                  f"{len(data.labels)}", "distil on the task the teacher was fine-tuned for")
        task = TaskDistillationTask(student, teacher, tok, data, cfg, layer_map)
        num_examples = len(data.train)
        if console is not None and cfg.cache_teacher_logits and task.logits_only and task.needs_teacher:
            console.print(f"teacher logits: one pass over the {num_examples} training examples",
                          highlight=False)
        if cfg.resume:
            task.best.restore(cfg.out, student)
    else:
        docs = regroup_documents(read_corpora(cfg.corpus, cfg.corpus_format))
        if cfg.eval_corpus:
            train_docs, eval_docs = docs, read_corpora(cfg.eval_corpus, cfg.corpus_format)
        else:
            train_docs, eval_docs = split_documents(docs, cfg.eval_fraction, cfg.train.seed)
        segment = max(1, (cfg.max_seq_len - 3) // 2)
        examples = create_examples(tokenize_documents(train_docs, tok, segment), SpecialIds.of(tok),
                                   cfg.max_seq_len, seed=cfg.train.seed, dupe_factor=cfg.dupe_factor,
                                   short_seq_prob=0.1)
        batches = mlm_eval_batches(eval_docs, tok, cfg.max_seq_len, cfg.max_eval_examples,
                                   cfg.eval_batch_size, cfg.mlm_probability)
        task = MlmDistillationTask(student, teacher, tok, examples, batches, cfg, layer_map)
        num_examples = len(examples)
    train_cfg = cfg.train_config(num_examples)
    if _is_main_process() and not cfg.resume:
        write_json(cfg.out / DISTILL_CONFIG_FILE, {
            **cfg.to_dict(), "layer_map": layer_map, "train": train_cfg.to_dict(),
            "teacher_layers": teacher.config.num_hidden_layers,
            "teacher_architecture": type(teacher).__name__,
            "teacher_parameters": count_parameters(teacher),
            "student_parameters": count_parameters(student)})
    result = train(task, train_cfg, cfg.out, resume=cfg.resume, stop_at_step=stop_at_step, console=console)
    best = dict(task.best.metrics) if cfg.is_task else {}
    return DistillResult(cfg.out, result.step, layer_map, dict(result.eval_metrics), best,
                         dict(result.train_metrics), count_parameters(student), count_parameters(teacher),
                         teacher.config.num_hidden_layers, num_examples, time.perf_counter() - t0,
                         result.tokens_per_s, result.resumed_from)
