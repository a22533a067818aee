"""``TrainConfig``: the optimisation settings of one run, validated at construction, with named presets."""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from typing import Any

import torch

from edgebert.errors import ConfigError

STEP_CAP_ENV = "EDGEBERT_MAX_STEPS"       # caps every training run's steps (make test-readme)


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings of one training run. Validated at construction.

    Warmup is ``warmup_ratio`` of the run unless ``warmup_steps`` sets it exactly, so a short run of
    a long recipe (``--max-steps 5``) just works; an explicit ``warmup_steps`` must be < ``max_steps``.
    """

    max_steps: int = 1000
    batch_size: int = 32           # global examples per optimizer step (all processes, all micro-batches)
    lr: float = 5e-4
    warmup_ratio: float = 0.06     # linear warmup over this fraction of max_steps ...
    warmup_steps: int | None = None  # ... or over exactly this many steps
    weight_decay: float = 0.01
    grad_accum: int = 1
    max_grad_norm: float = 1.0     # 0 disables clipping
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1e-6
    bf16: bool = False
    seed: int = 0
    log_every: int = 10
    eval_every: int = 0            # 0: evaluate only at the end
    save_every: int = 0            # 0: checkpoint only at the end
    device: str = "auto"           # auto | cpu | cuda
    progress: bool = True          # progress bar on a terminal, plain log lines otherwise

    def __post_init__(self) -> None:
        def integer(name: str, minimum: int = 1) -> None:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
                raise ConfigError(f"{name}={value!r} must be an integer >= {minimum}")

        for name in ("max_steps", "batch_size", "grad_accum", "log_every"):
            integer(name)
        for name in ("eval_every", "save_every", "seed"):
            integer(name, 0)
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            raise ConfigError(f"lr={self.lr!r} must be a positive number", "e.g. 5e-4")
        if not (isinstance(self.warmup_ratio, (int, float)) and 0.0 <= self.warmup_ratio < 1.0):
            raise ConfigError(f"warmup_ratio={self.warmup_ratio!r} must be in [0, 1)", "e.g. 0.06")
        if self.warmup_steps is not None:
            integer("warmup_steps", 0)
            if self.warmup_steps >= self.max_steps:
                raise ConfigError(f"warmup_steps={self.warmup_steps} must be smaller than "
                                  f"max_steps={self.max_steps}", "use about 5-10% of the steps, or "
                                  "leave warmup to --warmup-ratio")
        if self.batch_size % self.grad_accum:
            raise ConfigError(f"batch_size={self.batch_size} is not divisible by "
                              f"grad_accum={self.grad_accum}")
        if not 0.0 <= self.weight_decay < 1.0:
            raise ConfigError(f"weight_decay={self.weight_decay} must be in [0, 1)")
        if not self.max_grad_norm >= 0:
            raise ConfigError(f"max_grad_norm={self.max_grad_norm} must be >= 0 (0 = no clipping)")
        for name in ("adam_beta1", "adam_beta2"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ConfigError(f"{name}={getattr(self, name)} must be in [0, 1)")
        if not self.adam_eps > 0:
            raise ConfigError(f"adam_eps={self.adam_eps} must be > 0")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ConfigError(f"device={self.device!r} must be auto, cpu or cuda")
        if self.device == "cuda" and not torch.cuda.is_available():
            raise ConfigError("device=cuda but no CUDA GPU is available", "use --device cpu")
        if self.bf16 and self.resolved_device() == "cuda" and not torch.cuda.is_bf16_supported():
            raise ConfigError("bf16 is not supported on this GPU", "train without --bf16")

    def resolved_device(self) -> str:
        if self.device == "auto":
            return "cuda" if torch.cuda.is_available() else "cpu"
        return self.device

    def resolved_warmup_steps(self) -> int:
        """The warmup length: ``warmup_steps`` if set, else ``warmup_ratio`` of the run."""
        if self.warmup_steps is not None:
            return self.warmup_steps
        return min(round(self.warmup_ratio * self.max_steps), self.max_steps - 1)

    def capped(self, cap: int | None = None) -> "TrainConfig":
        """This config at most ``cap`` steps (default: ``$EDGEBERT_MAX_STEPS``; unset: unchanged), for walking the
        README's commands quickly (``make test-readme``): logging, an explicit warmup and the checkpoint and
        evaluation intervals shrink to fit; the last step still evaluates and saves."""
        if cap is None:
            value = os.environ.get(STEP_CAP_ENV, "").strip()
            if not value:
                return self
            if not value.isdigit() or int(value) < 1:
                raise ConfigError(f"{STEP_CAP_ENV}={value!r} must be a whole number of steps >= 1",
                                  f"unset it, or e.g. {STEP_CAP_ENV}=20")
            cap = int(value)
        if self.max_steps <= cap:
            return self
        warmup = self.warmup_steps if self.warmup_steps is None or self.warmup_steps < cap else None
        return self.replace(max_steps=cap, log_every=min(self.log_every, cap), warmup_steps=warmup,
                            eval_every=min(self.eval_every, cap), save_every=min(self.save_every, cap))

    def for_epochs(self, epochs: float, num_examples: int, evals_per_epoch: int = 1,
                   evaluate: bool = True) -> "TrainConfig":
        """This config with ``max_steps`` for ``epochs`` over ``num_examples``, and an evaluation (if
        ``evaluate``) and a checkpoint every 1/evals_per_epoch epoch."""
        steps_per_epoch = max(1, math.ceil(num_examples / self.batch_size))
        max_steps = max(1, math.ceil(epochs * steps_per_epoch))
        every = max(1, math.ceil(steps_per_epoch / evals_per_epoch))
        return self.replace(max_steps=max_steps, log_every=min(self.log_every, max_steps),
                            eval_every=every if evaluate else 0, save_every=every)

    def replace(self, **changes: Any) -> "TrainConfig":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TrainConfig":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ConfigError(f"unknown training setting {unknown[0]!r}",
                              f"known: {', '.join(sorted(names))}")
        return cls(**d)

    @classmethod
    def of(cls, recipe: "TrainConfig | dict[str, Any] | str",
           changes: "TrainConfig | dict[str, Any] | None" = None) -> "TrainConfig":
        """A stage recipe's settings (a config, a dict of fields or a preset name) with ``changes`` on
        top; a whole ``TrainConfig`` as ``changes`` replaces the recipe's."""
        if isinstance(changes, TrainConfig):
            return changes
        base = cls.preset(recipe) if isinstance(recipe, str) else \
            recipe if isinstance(recipe, TrainConfig) else cls(**recipe)
        return base.replace(**(changes or {}))

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "TrainConfig":
        if name not in TRAIN_PRESETS:
            raise ConfigError(f"unknown training preset {name!r}",
                              f"use one of {', '.join(TRAIN_PRESETS)}")
        return cls(**{**TRAIN_PRESETS[name], **overrides})


TRAIN_PRESETS: dict[str, dict[str, Any]] = {
    # Unit tests: a handful of steps on a tiny model.
    "tiny": dict(max_steps=20, batch_size=8, lr=1e-3, warmup_ratio=0.1, log_every=1, eval_every=10),
    # `edgebert pretrain` on the built-in corpus: a couple of minutes on 2 CPU cores.
    "demo": dict(max_steps=300, batch_size=32, lr=1e-3, warmup_ratio=0.1, log_every=10, eval_every=100),
    # The pipeline's --from-scratch 12-layer teacher: deep post-LN wants the lower peak LR.
    "demo-12l": dict(max_steps=120, batch_size=16, lr=5e-4, warmup_ratio=0.1, log_every=10, eval_every=120),
    # WikiText-2 recipe (see edgebert.stages.pretrain): 1000 steps x 32 sequences of <= 128 tokens.
    "wiki-small": dict(max_steps=1000, batch_size=32, lr=7e-4, warmup_ratio=0.08, log_every=20,
                       eval_every=250, save_every=250),
    # The 12-layer WikiText teacher (pretrain recipe "wiki-12l").
    "wiki-12l": dict(max_steps=1000, batch_size=32, lr=5e-4, warmup_ratio=0.04, log_every=20,
                     eval_every=250, save_every=250),
}
