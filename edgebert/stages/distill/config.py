"""``DistillConfig``: one distillation run, validated at construction, with named recipes.

Three modes (``task``): ``mlm`` (general distillation of a masked-LM teacher on text), ``embed``
(general distillation of any BERT encoder on text, on its hidden states only: e.g. a sentence-embedding
model without an MLM head) and a labelled task: ``sst2|mrpc|tsv`` (a fine-tuned sequence classifier),
``ner`` (a fine-tuned token classifier, per-token logits) or ``squad`` (a fine-tuned span model: its
start and end distributions over each window) on its labelled data.
``build_distill_config`` picks the mode from the teacher when none is given.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgebert.data.corpus import FORMATS
from edgebert.data.tasks import RANK_PRESETS, SEQUENCE_PRESETS, SPAN_PRESETS, TOKEN_PRESETS, TaskShape
from edgebert.errors import ConfigError
from edgebert.files.atomic import jsonable
from edgebert.qa.windows import check_window
from edgebert.stages.distill.presets import CLOSEST, DISTILL_PRESETS, MLM_ARCHITECTURES, default_preset  # noqa: F401
from edgebert.training import TrainConfig

TEXT_MODES = ("mlm", "embed")              # distillation on unlabelled text (--corpus)
LABELLED_TASKS = (*SEQUENCE_PRESETS, *TOKEN_PRESETS, *SPAN_PRESETS, *RANK_PRESETS)   # task distillation of a fine-tuned model
DISTILL_TASKS = (*TEXT_MODES, *LABELLED_TASKS)
STUDENT_INITS = ("teacher", "random")
ALPHAS = ("alpha_kd", "alpha_mlm", "alpha_ce", "alpha_cos", "alpha_pool", "alpha_sim", "alpha_hidden", "alpha_attn")
# loss terms a mode cannot compute (mlm: no labels; task: no masked tokens; embed: no logits), and why
_EMBED = ("applies to logits, which embed distillation has none of",
          "embed distils hidden states: --alpha-cos, --alpha-pool, --alpha-sim, --alpha-hidden, --alpha-attn")
_SIM = ("compares pooled sentence embeddings: embed distillation only", "pass --task embed, or set --alpha-sim 0")
_POOL = ("compares pooled sentence embeddings: embed distillation only", "pass --task embed, or set --alpha-pool 0")
NOT_IN_MODE: dict[str, dict[str, tuple[str, str]]] = {
    "mlm": {"alpha_ce": ("is the hard-label weight of task distillation",
                         "use --alpha-mlm for MLM distillation, or pass --task"), "alpha_sim": _SIM,
            "alpha_pool": _POOL},
    "task": {"alpha_mlm": ("applies to MLM distillation, not --task {task}",
                           "set --alpha-mlm 0 (use --alpha-ce for the hard labels)"), "alpha_sim": _SIM,
             "alpha_pool": _POOL},
    "embed": {"alpha_kd": _EMBED, "alpha_mlm": _EMBED, "alpha_ce": _EMBED},
}


@dataclass(frozen=True)
class DistillConfig(TaskShape):
    """Everything ``distill`` needs. Validated at construction; see ``DISTILL_PRESETS``."""

    teacher: Path
    out: Path
    task: str = "mlm"                      # mlm | embed (text) or sst2 / mrpc / tsv / ner / squad (labelled)
    # text modes: the data
    corpus: tuple[Path, ...] = ()          # empty: the built-in corpus (Python's documentation)
    corpus_format: str = "auto"
    eval_corpus: tuple[Path, ...] = ()     # empty: hold out ``eval_fraction`` of the documents
    # task mode: the data
    train_file: Path | None = None
    dev_file: Path | None = None
    max_train_examples: int | None = None  # a seeded random subset of the training file
    tag_column: int | None = None          # ner: the CoNLL tag column (1-based; None: the last)
    doc_stride: int | None = None          # squad: context tokens consecutive windows share (None: default_stride)
    retriever: Path | None = None          # rerank: hard negatives' and dev top-k's bi-encoder (None: the teacher's)
    # the student
    layers: int = 4
    layer_map: tuple[int, ...] | str | None = None  # per student layer; None: evenly spaced; "closest": measured
    student_init: str = "teacher"          # "teacher" (DistilBERT), "random" (baseline), or a student's folder
    freeze_word_embeddings: bool = False
    hidden: int | None = None              # a narrower student (None: the teacher's width); see width.student_width
    heads: int | None = None               # with hidden; None: keep the teacher's head size
    intermediate: int | None = None        # with hidden; None: the teacher's FFN/hidden ratio
    int4_block: int | None = None          # 4-bit-aware (stages.distill.int4_aware): trains as export --int4 rounds
    # the loss
    temperature: float = 2.0
    alpha_kd: float = 5.0                  # KL of the softened logits (masked tokens, classes, or tokens)
    alpha_mlm: float = 2.0                 # mlm: MLM cross-entropy
    alpha_ce: float = 0.0                  # task: hard-label cross-entropy
    alpha_cos: float = 1.0                 # 1 - cos of the last hidden states, real tokens
    alpha_pool: float = 0.0                # embed: 1 - cos of the mean-pooled sentence vectors
    alpha_sim: float = 0.0                 # embed: in-batch similarity matrices of the pooled vectors (MSE)
    alpha_hidden: float = 0.0              # TinyBERT: hidden-state MSE per mapped layer
    alpha_attn: float = 0.0                # TinyBERT: attention KL per mapped layer
    # examples
    max_seq_len: int = 128
    mlm_probability: float = 0.15
    dupe_factor: int = 1
    eval_fraction: float = 0.05
    max_eval_examples: int | None = None   # None: 2000 held-out examples (text modes), all of --dev (task)
    eval_batch_size: int = 64
    cache_teacher_logits: bool = True      # task mode with logit-only terms: one teacher pass up front
    # optimisation (the shared engine); ``epochs`` (task mode) sets max_steps from the data size
    train: TrainConfig = field(default_factory=lambda: TrainConfig(max_steps=1000, lr=5e-4, warmup_ratio=0.05))
    epochs: float | None = None
    evals_per_epoch: int = 1               # with ``epochs``
    resume: bool = False
    overwrite: bool = False      # start again in a folder an earlier distill run wrote

    def __post_init__(self) -> None:
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731
        set_("teacher", Path(self.teacher))
        set_("out", Path(self.out))
        set_("corpus", tuple(Path(p) for p in self.corpus))
        set_("eval_corpus", tuple(Path(p) for p in self.eval_corpus))
        if self.is_rank_task and self.retriever is None:
            set_("retriever", _teacher_retriever(Path(self.teacher)))
        for name in ("train_file", "dev_file", "retriever"):
            if getattr(self, name) is not None:
                set_(name, Path(getattr(self, name)))
        set_("layer_map", _layer_map(self.layer_map))
        self._check_mode()
        self._check_student()
        self._check_loss()
        self._check_examples()

    # ------------------------------------------------------------------ validation, by concern
    def _check_mode(self) -> None:
        if self.task not in DISTILL_TASKS:
            raise ConfigError(f"unknown distillation task {self.task!r}", f"use one of {', '.join(DISTILL_TASKS)}")
        if self.is_task:
            if self.train_file is None:
                raise ConfigError(f"task distillation (--task {self.task}) needs --train FILE")
            if self.corpus or self.eval_corpus:
                raise ConfigError("--corpus is for text distillation (mlm, embed)", "drop --task, or drop --corpus")
        elif self.train_file or self.dev_file:
            raise ConfigError("--train/--dev are for task distillation", "pass --task sst2|mrpc|tsv|ner|squad")
        if self.tag_column is not None and not self.is_token_task:
            raise ConfigError(f"--tag-column is for CoNLL files (--task ner), not --task {self.task}")
        if self.retriever is not None and not self.is_rank_task:
            raise ConfigError(f"--retriever is for --task rerank, not --task {self.task}")
        if self.tag_column is not None and self.tag_column < 2:
            raise ConfigError(f"--tag-column {self.tag_column} must be 2 or more", "column 1 holds the word")
        if self.doc_stride is not None and not self.is_span_task:
            raise ConfigError(f"--doc-stride is for SQuAD files (--task squad), not --task {self.task}")
        if self.is_span_task:
            check_window(self.max_seq_len, self.stride)
        if self.corpus_format not in FORMATS:
            raise ConfigError(f"unknown corpus format {self.corpus_format!r}", f"use one of {', '.join(FORMATS)}")
        if self.epochs is not None:
            if not self.is_task:
                raise ConfigError("epochs is for task distillation", "use --max-steps for text distillation")
            if not (math.isfinite(self.epochs) and self.epochs > 0):
                raise ConfigError(f"epochs={self.epochs} must be > 0")
        if self.evals_per_epoch < 1:
            raise ConfigError(f"evals_per_epoch={self.evals_per_epoch} must be >= 1")
        if not isinstance(self.train, TrainConfig):
            raise ConfigError("train must be a TrainConfig")

    def _check_student(self) -> None:
        if not isinstance(self.layers, int) or self.layers < 1:
            raise ConfigError(f"--layers {self.layers!r} must be a positive integer")
        if self.layer_map == CLOSEST and self.student_init != "teacher":
            raise ConfigError("--layer-map closest picks teacher layers to copy, not another student",
                              "drop --layer-map, or use --init teacher")
        elif self.layer_map is not None and self.layer_map != CLOSEST:
            if len(self.layer_map) != self.layers:
                raise ConfigError(f"--layer-map has {len(self.layer_map)} entries but the student has "
                                  f"{self.layers} layers", "give one teacher layer per student layer")
            if any(i < 0 for i in self.layer_map):
                raise ConfigError(f"--layer-map {list(self.layer_map)} has a negative layer index")
        if self.student_init not in STUDENT_INITS and not (Path(self.student_init) / "config.json").is_file():
            raise ConfigError(f"--init {self.student_init}: not teacher, random, or a folder with a config.json",
                              "give teacher, random, or a trained student's folder (config.json + weights)")
        if self.int4_block is not None and self.int4_block not in (16, 32, 64, 128):
            raise ConfigError(f"--int4-aware block {self.int4_block} is not a 4-bit block size",
                              "use a block of 16, 32, 64 or 128 (as export --int4-block)")
        self._check_width()

    def _check_width(self) -> None:
        """What can be said of a narrower student without the teacher (``width.student_width`` checks the rest)."""
        for name in ("hidden", "heads", "intermediate"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ConfigError(f"--{name} {value!r} must be a positive integer")
        if self.hidden is None:
            if self.heads is not None or self.intermediate is not None:
                raise ConfigError("--heads and --intermediate size a narrower student",
                                  "pass --hidden N as well (the student's width)")
            return
        if self.heads is not None and self.hidden % self.heads:
            raise ConfigError(f"--hidden {self.hidden} is not divisible by --heads {self.heads}",
                              "choose a head count that divides the width")
        if self.is_task and (self.alpha_cos or self.alpha_hidden or self.alpha_attn):   # no projection in task mode
            raise ConfigError(f"a narrower --task {self.task} student learns the teacher's logits only, not its "
                              "hidden states", "drop --alpha-cos, --alpha-hidden and --alpha-attn, or --hidden")
        if self.layer_map == CLOSEST:
            raise ConfigError("--layer-map closest measures students of the teacher's width, not --hidden",
                              "drop --layer-map closest, or --hidden")

    def _check_loss(self) -> None:
        if not (math.isfinite(self.temperature) and self.temperature > 0):
            raise ConfigError(f"--temperature {self.temperature} must be > 0", "DistilBERT uses 2.0")
        alphas = {name: getattr(self, name) for name in ALPHAS}
        for name, value in alphas.items():
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ConfigError(f"--{name.replace('_', '-')} {value!r} must be a number >= 0")
        for name, (why, hint) in NOT_IN_MODE[self.mode].items():
            if alphas[name]:
                raise ConfigError(f"--{name.replace('_', '-')} {why.format(task=self.task)}", hint)
        if not any(alphas.values()):
            raise ConfigError("every loss weight is 0", "set at least one of --alpha-kd, --alpha-mlm, "
                              "--alpha-ce, --alpha-cos, --alpha-pool, --alpha-sim, --alpha-hidden, --alpha-attn")
        if self.student_init == "random" and self.is_task and not (self.alpha_kd or self.alpha_ce):
            raise ConfigError("a randomly initialised classifier needs --alpha-kd or --alpha-ce")

    def _check_examples(self) -> None:
        if not 16 <= self.max_seq_len <= 4096:
            raise ConfigError(f"max_seq_len={self.max_seq_len} must be between 16 and 4096")
        if not 0.0 < self.mlm_probability < 1.0:
            raise ConfigError(f"mlm_probability={self.mlm_probability} must be in (0, 1)")
        if self.dupe_factor < 1:
            raise ConfigError(f"dupe_factor={self.dupe_factor} must be >= 1")
        if not 0.0 < self.eval_fraction <= 0.5:
            raise ConfigError(f"eval_fraction={self.eval_fraction} must be in (0, 0.5]")
        if (self.max_eval_examples is not None and self.max_eval_examples < 1) or self.eval_batch_size < 1:
            raise ConfigError("max_eval_examples and eval_batch_size must be >= 1")
        if self.max_train_examples is not None and self.max_train_examples < 1:
            raise ConfigError(f"max_train_examples={self.max_train_examples} must be >= 1")

    # ------------------------------------------------------------------ what the config implies
    @property
    def is_task(self) -> bool:
        """Task distillation of a fine-tuned classifier (sequence or token)."""
        return self.task in LABELLED_TASKS

    @property
    def eval_limit(self) -> int | None:
        """Examples evaluated: ``max_eval_examples``, else 2000 held-out examples in the text modes and
        the whole dev file in task mode (None)."""
        if self.max_eval_examples is not None:
            return self.max_eval_examples
        return None if self.is_task else 2000

    @property
    def mode(self) -> str:
        """``mlm``, ``embed`` or ``task``."""
        return "task" if self.is_task else self.task

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
        train = TrainConfig.of(recipe.pop("train"), overrides.pop("train", None))
        return cls(teacher=Path(teacher), out=Path(out), train=train, **{**recipe, **overrides})

    def train_config(self, num_examples: int) -> TrainConfig:
        """The engine's settings; with ``epochs``, steps and eval cadence come from the data size."""
        if self.epochs is None:
            return self.train
        return self.train.for_epochs(self.epochs, num_examples, self.evals_per_epoch, self.dev_file is not None)


def check_student_depth(cfg: DistillConfig, teacher_layers: int) -> None:
    """A student takes ``cfg.layers`` of the teacher's ``teacher_layers`` layers (its ``layer_map`` indices
    among them): anything else is refused in one line naming the teacher's depth and the valid values.
    ``distill`` calls it as soon as the teacher is loaded, before any data is read (``closest`` would
    have no choice of layers to measure)."""
    if cfg.layers > teacher_layers:
        how = "--layer-map closest picks" if cfg.layer_map == CLOSEST else "a student copies"
        raise ConfigError(f"--layers {cfg.layers} is larger than the teacher's depth ({teacher_layers} layers); "
                          f"{how} its layers among those of {cfg.teacher}",
                          f"use --layers 1 to {teacher_layers}")
    if isinstance(cfg.layer_map, tuple):
        bad = [i for i in cfg.layer_map if i >= teacher_layers]
        if bad:
            raise ConfigError(f"--layer-map entry {bad[0]} is out of range for a {teacher_layers}-layer teacher "
                              f"({cfg.teacher})", f"use indices 0..{teacher_layers - 1}")


def _layer_map(value: Any) -> tuple[int, ...] | str | None:
    """``"0,2,3,5"`` / a sequence / None -> a tuple of ints (checked against the teacher later);
    ``"closest"`` stays as it is."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        if text == CLOSEST:
            return CLOSEST
        try:
            return tuple(int(x) for x in text.split(",")) if text else None
        except ValueError as exc:
            raise ConfigError(f"--layer-map {value!r} is not a comma-separated list of integers",
                              "e.g. --layer-map 0,2,3,5, or --layer-map closest") from exc
    return tuple(int(x) for x in value)


def _teacher_retriever(teacher: Path) -> Path:
    """The retriever a rerank teacher was fine-tuned with (its finetune_config.json), so that the student trains
    and is judged on the same candidates; ``ConfigError`` when the teacher's folder does not say."""
    import json

    record = teacher / "finetune_config.json"
    try:
        found = json.loads(record.read_text(encoding="utf-8")).get("retriever") if record.is_file() else None
    except (OSError, ValueError):
        found = None
    if not found:
        raise ConfigError(f"--task rerank: {teacher} does not record the retriever it was fine-tuned with",
                          "pass --retriever DIR (the sentence-embedding model of its hard negatives)")
    return Path(found)



def build_distill_config(teacher: str | Path, out: str | Path, preset: str | None = None, *,
                         train: dict[str, Any] | None = None, **fields: Any) -> DistillConfig:
    """The config for a run: ``preset`` (default: ``default_preset``) with ``fields`` and ``train``
    changes; None values keep the recipe's. An explicit step count wins over the recipe's epochs."""
    fields = {k: v for k, v in fields.items() if v is not None}
    train = {k: v for k, v in (train or {}).items() if v is not None}
    name = preset or default_preset(teacher, fields.get("task"))
    if "max_steps" in train and "epochs" not in fields:
        fields["epochs"] = None
    return DistillConfig.preset(name, teacher, out, train=train, **fields)
