"""The training engine shared by pretraining, distillation and fine-tuning.

A stage describes *what* to train as a ``TrainingTask`` (the module to optimise, how to build a
batch from example indices, the loss, evaluation, and how to save the model files); ``train`` does
the rest the same way for every stage:

- AdamW (no weight decay on biases and LayerNorm weights), linear warmup then linear decay to 0,
  gradient clipping, gradient accumulation, optional bf16 autocast (CPU and GPU), seeded.
- Batches: ``ShuffledBatches`` draws ``batch_size`` example indices per optimizer step from a stream
  reshuffled every epoch with ``(seed, epoch)``. Every example of the stream has a key (its position
  in the stream) that the task may use to seed per-example randomness (e.g. MLM masking), so a
  batch does not depend on how it is split across processes or whether the run was resumed.
- ``batch_size`` is the *global* batch of one optimizer step. Under ``torchrun`` each of the W
  processes takes its contiguous 1/W of it, and splits that into ``grad_accum`` micro-batches; the
  gradient is the mean over the W x grad_accum micro-batch losses (so W processes with
  ``grad_accum=A`` give the same update as one process with ``grad_accum=W*A``).
- Checkpoints in the output directory: the task's model files (``config.json``,
  ``model.safetensors``, tokenizer files) and ``training_state.pt`` (model + optimizer + scheduler
  state, step, RNG states, data position, config), every file written atomically. ``resume=True``
  continues exactly where the checkpoint left off: same batches, same masking, same loss curve.
- ``metrics.jsonl``: one JSON object per logged step (train metrics averaged over the steps since
  the last log, lr, grad norm, tokens/s, and ``eval_*`` metrics on evaluation steps).
- Distributed: under ``torchrun`` (``WORLD_SIZE`` > 1) the model is wrapped in
  DistributedDataParallel (gloo on CPU, nccl on GPU); only rank 0 writes files, logs and evaluates.

A task plugs in like this::

    class MyTask(TrainingTask):
        def __init__(self, model, data):
            self.model, self.data = model, data
        def num_train_examples(self):
            return len(self.data)
        def make_batch(self, indices, keys):
            return collate([self.data[i] for i in indices])      # dict of CPU tensors
        def loss(self, model, batch):
            out = model(**batch)                                 # call the given (maybe DDP) model
            return out.loss, {"accuracy": ...}
        def evaluate(self, model):
            return {"accuracy": ...}
        def save(self, out_dir):
            save_model(self.model, out_dir); save_tokenizer(self.tokenizer, out_dir)

    result = train(MyTask(model, data), TrainConfig.preset("tiny", max_steps=100), "runs/x")
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from .errors import CheckpointError, ConfigError, EdgebertError
from .fileio import atomic_path, write_json, write_text

STATE_FILE = "training_state.pt"
METRICS_FILE = "metrics.jsonl"
TRAIN_CONFIG_FILE = "train_config.json"
STATE_FORMAT = 1


class TrainingError(EdgebertError):
    """Training cannot go on (e.g. the loss became NaN)."""


# =========================================================================== config
@dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings of one training run. Validated at construction."""

    max_steps: int = 1000
    batch_size: int = 32           # global examples per optimizer step (all processes, all micro-batches)
    lr: float = 5e-4
    warmup_steps: int = 100
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
        def positive_int(name: str, minimum: int = 1) -> None:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
                raise ConfigError(f"{name}={value!r} must be an integer >= {minimum}")

        positive_int("max_steps")
        positive_int("batch_size")
        positive_int("grad_accum")
        for name in ("warmup_steps", "log_every", "eval_every", "save_every", "seed"):
            positive_int(name, 0)
        if self.log_every < 1:
            raise ConfigError(f"log_every={self.log_every} must be >= 1")
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            raise ConfigError(f"lr={self.lr!r} must be a positive number", "e.g. 5e-4")
        if self.warmup_steps >= self.max_steps:
            raise ConfigError(f"warmup_steps={self.warmup_steps} must be smaller than "
                              f"max_steps={self.max_steps}", "use about 5-10% of the steps")
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
    def preset(cls, name: str, **overrides: Any) -> "TrainConfig":
        if name not in TRAIN_PRESETS:
            raise ConfigError(f"unknown training preset {name!r}",
                              f"use one of {', '.join(TRAIN_PRESETS)}")
        return cls(**{**TRAIN_PRESETS[name], **overrides})


TRAIN_PRESETS: dict[str, dict[str, Any]] = {
    # Unit tests: a handful of steps on a tiny model.
    "tiny": dict(max_steps=20, batch_size=8, lr=1e-3, warmup_steps=2, log_every=1, eval_every=10),
    # `make demo`: a couple of minutes on 2 CPU cores.
    "demo": dict(max_steps=300, batch_size=32, lr=1e-3, warmup_steps=30, log_every=10, eval_every=100),
    # `make demo`'s 12-layer teacher (edgebert.pipeline): deep post-LN wants the lower peak LR.
    "demo-12l": dict(max_steps=120, batch_size=16, lr=5e-4, warmup_steps=12, log_every=10, eval_every=120),
    # WikiText-2 recipe (see edgebert.pretrain): 1000 steps x 32 sequences of <= 128 tokens.
    "wiki-small": dict(max_steps=1000, batch_size=32, lr=7e-4, warmup_steps=80, log_every=20,
                       eval_every=250, save_every=250),
    # The 12-layer WikiText teacher (edgebert.pretrain "wiki-12l").
    "wiki-12l": dict(max_steps=1000, batch_size=32, lr=5e-4, warmup_steps=40, log_every=20,
                     eval_every=250, save_every=250),
}


# =========================================================================== the task protocol
class TrainingTask:
    """What a stage must provide. Subclass and override; ``model`` must be set in ``__init__``.

    ``model`` is the module whose parameters are optimised (and wrapped in DDP); keep frozen helpers
    (e.g. a distillation teacher) elsewhere on the task and move them in ``to_device``.
    """

    model: nn.Module

    def num_train_examples(self) -> int:
        raise NotImplementedError

    def make_batch(self, indices: Sequence[int], keys: Sequence[int]) -> dict[str, torch.Tensor]:
        """Tensors for examples ``indices``; ``keys`` are their unique stream positions (seed with them)."""
        raise NotImplementedError

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, Any]]:
        """(scalar loss to minimise, metrics of floats or 0-d tensors). Call ``model``, not ``self.model``."""
        raise NotImplementedError

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        """Metrics on held-out data, computed on rank 0 with ``model`` in eval mode and no grad."""
        return {}

    def save(self, out_dir: Path) -> None:
        """Write the model files (config.json, model.safetensors, tokenizer) into ``out_dir``."""
        from .checkpoint import save_model

        save_model(self.model, out_dir)

    def to_device(self, device: torch.device) -> None:
        self.model.to(device)

    def batch_tokens(self, batch: dict[str, torch.Tensor]) -> int:
        """Real (non-padding) tokens in a batch, for tokens/s."""
        mask = batch.get("attention_mask") if isinstance(batch, dict) else None
        return int(mask.sum()) if mask is not None else 0

    def sampler(self, batch_size: int, seed: int) -> "ShuffledBatches":
        return ShuffledBatches(self.num_train_examples(), batch_size, seed)

    def data_fingerprint(self) -> str:
        """Identifies the training data; resuming on different data is refused ("" = unchecked)."""
        return ""


class ShuffledBatches:
    """Endless stream of example indices, a fresh permutation per epoch (seeded by seed and epoch).

    ``next_batch`` returns the next ``batch_size`` indices (a batch may span two epochs) and their
    keys (positions in the stream). The position is the whole state: resume by loading it.
    """

    def __init__(self, num_examples: int, batch_size: int, seed: int):
        if num_examples < 1:
            raise ConfigError("there are no training examples")
        self.num_examples, self.batch_size, self.seed = num_examples, batch_size, seed
        self.position = 0  # examples drawn so far
        self._perm_epoch, self._perm = -1, np.arange(0)

    def _permutation(self, epoch: int) -> np.ndarray:
        if epoch != self._perm_epoch:
            self._perm = np.random.default_rng([self.seed, epoch]).permutation(self.num_examples)
            self._perm_epoch = epoch
        return self._perm

    @property
    def epoch(self) -> float:
        return self.position / self.num_examples

    def next_batch(self) -> tuple[list[int], list[int]]:
        indices, keys = [], []
        for _ in range(self.batch_size):
            epoch, offset = divmod(self.position, self.num_examples)
            indices.append(int(self._permutation(epoch)[offset]))
            keys.append(self.position)
            self.position += 1
        return indices, keys

    def state_dict(self) -> dict[str, int]:
        return {"position": self.position, "num_examples": self.num_examples}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if int(state["num_examples"]) != self.num_examples:
            raise CheckpointError(
                f"the checkpoint was trained on {state['num_examples']} examples, this run has "
                f"{self.num_examples}", "resume with the same data and settings")
        self.position = int(state["position"])


# =========================================================================== building blocks
def build_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW; biases and LayerNorm weights (and any 1-d parameter) get no weight decay."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():  # tied parameters are listed once
        if not param.requires_grad:
            continue
        if name.endswith("bias") or "LayerNorm" in name or "layer_norm" in name or param.ndim < 2:
            no_decay.append(param)
        else:
            decay.append(param)
    groups = [{"params": decay, "weight_decay": cfg.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.adam_beta1, cfg.adam_beta2),
                             eps=cfg.adam_eps)


def lr_factor(step: int, cfg: TrainConfig) -> float:
    """Linear warmup from 0 over ``warmup_steps``, then linear decay to 0 at ``max_steps``."""
    if step < cfg.warmup_steps:
        return (step + 1) / (cfg.warmup_steps + 1)
    return max(0.0, (cfg.max_steps - step) / max(1, cfg.max_steps - cfg.warmup_steps))


def build_scheduler(optimizer: torch.optim.Optimizer, cfg: TrainConfig) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(step, cfg))


@dataclass
class DistContext:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    owns_group: bool = False  # we initialised the process group, so we tear it down

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()


def init_distributed(device: str) -> DistContext:
    """Join the process group torchrun describes in the environment (no-op for one process)."""
    if dist.is_available() and dist.is_initialized():
        return DistContext(dist.get_rank(), dist.get_world_size(),
                           int(os.environ.get("LOCAL_RANK", dist.get_rank())))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistContext()
    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    backend = "nccl" if device == "cuda" else "gloo"
    if device == "cuda":
        torch.cuda.set_device(local)
    dist.init_process_group(backend=backend, rank=rank, world_size=world)
    return DistContext(rank, world, local, owns_group=True)


def check_out_dir(out_dir: str | Path, resume: bool) -> Path:
    """Refuse to overwrite a checkpoint unless resuming; refuse to resume without one."""
    out_dir = Path(out_dir)
    state = out_dir / STATE_FILE
    if resume and not state.is_file():
        raise CheckpointError(f"cannot resume: {state} not found",
                              "run without --resume to start a new run")
    if not resume and state.exists():
        raise CheckpointError(f"{out_dir} already holds a training checkpoint",
                              "pass --resume to continue it, or choose another --out")
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"--out {out_dir} is a file, not a directory")
    return out_dir


def _to_device(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: _to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to_device(v, device) for v in batch)
    return batch


def _float(value: Any) -> float:
    return float(value.detach().float().item()) if isinstance(value, torch.Tensor) else float(value)


def _rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"python": list(random.getstate()[1]), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    random.setstate((3, tuple(int(x) for x in state["python"]), None))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# =========================================================================== the loop
@dataclass
class TrainResult:
    out_dir: Path
    step: int
    train_metrics: dict[str, float] = field(default_factory=dict)  # last logged window
    eval_metrics: dict[str, float] = field(default_factory=dict)   # last evaluation
    tokens_per_s: float = 0.0                                      # over this process's run
    wall_s: float = 0.0
    resumed_from: int = 0


class _Window:
    """Sums of metrics since the last log line (saved in checkpoints so resume logs the same)."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.steps = 0
        self.tokens = 0

    def add(self, metrics: dict[str, float], tokens: int) -> None:
        for k, v in metrics.items():
            self.sums[k] = self.sums.get(k, 0.0) + v
        self.steps += 1
        self.tokens += tokens

    def state_dict(self) -> dict[str, Any]:
        return {"sums": dict(self.sums), "steps": self.steps, "tokens": self.tokens}

    def load_state_dict(self, s: dict[str, Any]) -> None:
        self.sums, self.steps, self.tokens = dict(s["sums"]), int(s["steps"]), int(s["tokens"])


class Trainer:
    """Runs a ``TrainingTask`` with a ``TrainConfig``; see the module docstring."""

    def __init__(self, task: TrainingTask, cfg: TrainConfig, out_dir: str | Path, *,
                 resume: bool = False, console=None):
        self.task, self.cfg, self.resume = task, cfg, resume
        self.out_dir = Path(out_dir)
        self.dist = init_distributed(cfg.resolved_device())
        check_out_dir(self.out_dir, resume)
        per_rank, rem = divmod(cfg.batch_size, self.dist.world_size * cfg.grad_accum)
        if rem or per_rank < 1:
            raise ConfigError(f"batch_size={cfg.batch_size} must be a multiple of processes x grad_accum "
                              f"= {self.dist.world_size} x {cfg.grad_accum}")
        self.micro_batch = per_rank
        dev = cfg.resolved_device()
        self.device = torch.device(f"cuda:{self.dist.local_rank}" if dev == "cuda" else "cpu")
        if console is None:
            from rich.console import Console

            console = Console()
        self.console = console
        task.to_device(self.device)
        self.model = task.model
        self.wrapped: nn.Module = self.model
        if self.dist.enabled:
            from torch.nn.parallel import DistributedDataParallel as DDP

            ids = [self.device.index] if self.device.type == "cuda" else None
            self.wrapped = DDP(self.model, device_ids=ids)
        self.optimizer = build_optimizer(self.model, cfg)
        self.scheduler = build_scheduler(self.optimizer, cfg)
        self.sampler = task.sampler(cfg.batch_size, cfg.seed)
        self.step = 0
        self.window = _Window()
        self.last_train: dict[str, float] = {}
        self.last_eval: dict[str, float] = {}
        torch.manual_seed(cfg.seed * 1000 + self.dist.rank)  # dropout stream, distinct per rank
        random.seed(cfg.seed * 1000 + self.dist.rank)
        self.resumed_from = self._load_state() if resume else 0

    # ------------------------------------------------------------------ checkpoint state
    def _state(self) -> dict[str, Any]:
        rng = [_rng_state()]
        if self.dist.enabled:
            rng = [None] * self.dist.world_size
            dist.all_gather_object(rng, _rng_state())
        metrics = self.out_dir / METRICS_FILE
        return {
            "format": STATE_FORMAT,
            "step": self.step,
            "config": self.cfg.to_dict(),
            "world_size": self.dist.world_size,
            "model": {k: v.detach().cpu() for k, v in self.model.state_dict().items()},
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "sampler": self.sampler.state_dict(),
            "data_fingerprint": self.task.data_fingerprint(),
            "rng": rng,
            "window": self.window.state_dict(),
            "last_eval": dict(self.last_eval),
            "metrics_bytes": metrics.stat().st_size if metrics.exists() else 0,
        }

    def save_checkpoint(self) -> None:
        """Model files first, then training_state.pt (the resume point), each atomically."""
        state = self._state()  # a collective under DDP: every rank takes part
        if self.dist.is_main:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            self.task.save(self.out_dir)
            write_json(self.out_dir / TRAIN_CONFIG_FILE, self.cfg.to_dict())
            with atomic_path(self.out_dir / STATE_FILE) as tmp:
                torch.save(state, tmp)
        self.dist.barrier()

    def _load_state(self) -> int:
        path = self.out_dir / STATE_FILE
        if not path.is_file():
            raise CheckpointError(f"cannot resume: {path} not found",
                                  "run without --resume to start a new run")
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
            if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
                raise ValueError("not an edgebert training state")
        except Exception as exc:
            raise CheckpointError(f"{path} is corrupt or not a training state "
                                  f"({' '.join(str(exc).split())[:200]})",
                                  "start a new run without --resume") from exc
        saved = TrainConfig.from_dict(state["config"])
        fixed = ("batch_size", "lr", "warmup_steps", "weight_decay", "grad_accum", "seed",
                 "max_grad_norm", "adam_beta1", "adam_beta2", "adam_eps", "bf16")
        for name in fixed:
            if getattr(saved, name) != getattr(self.cfg, name):
                raise ConfigError(f"cannot resume with {name}={getattr(self.cfg, name)!r}: the checkpoint "
                                  f"used {getattr(saved, name)!r}", "resume with the same settings")
        try:
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            self.scheduler.load_state_dict(state["scheduler"])
        except (RuntimeError, ValueError, KeyError) as exc:
            raise CheckpointError(f"{path} does not match this model ({' '.join(str(exc).split())[:200]})",
                                  "resume with the same model settings") from exc
        saved_data, data = str(state.get("data_fingerprint", "")), self.task.data_fingerprint()
        if saved_data and data and saved_data != data:
            raise CheckpointError(f"{path} was trained on other data (fingerprint {saved_data}, "
                                  f"now {data})", "resume with the same corpus and data settings")
        self.sampler.load_state_dict(state["sampler"])
        self.step = int(state["step"])
        self.window.load_state_dict(state["window"])
        self.last_eval = {k: float(v) for k, v in state.get("last_eval", {}).items()}
        rng = state["rng"]
        if int(state.get("world_size", 1)) == self.dist.world_size and self.dist.rank < len(rng):
            _set_rng_state(rng[self.dist.rank])
        if self.dist.is_main:  # drop log lines written after this checkpoint by the interrupted run
            metrics = self.out_dir / METRICS_FILE
            keep = int(state.get("metrics_bytes", 0))
            if metrics.exists() and metrics.stat().st_size > keep:
                write_text(metrics, metrics.read_bytes()[:keep].decode("utf-8"))
        return self.step

    # ------------------------------------------------------------------ one optimizer step
    def _autocast(self):
        if not self.cfg.bf16:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)

    def train_step(self) -> tuple[dict[str, float], int]:
        indices, keys = self.sampler.next_batch()
        start = self.dist.rank * self.micro_batch * self.cfg.grad_accum
        self.wrapped.train()
        sums: dict[str, float] = {}
        tokens = 0
        for m in range(self.cfg.grad_accum):
            lo = start + m * self.micro_batch
            batch = self.task.make_batch(indices[lo:lo + self.micro_batch], keys[lo:lo + self.micro_batch])
            tokens += self.task.batch_tokens(batch)
            batch = _to_device(batch, self.device)
            last = m == self.cfg.grad_accum - 1
            sync = self.wrapped.no_sync() if self.dist.enabled and not last else contextlib.nullcontext()
            with sync:
                with self._autocast():
                    loss, metrics = self.task.loss(self.wrapped, batch)
                (loss / self.cfg.grad_accum).backward()
            for k, v in {"loss": loss, **metrics}.items():
                sums[k] = sums.get(k, 0.0) + _float(v) / self.cfg.grad_accum
        clip = self.cfg.max_grad_norm if self.cfg.max_grad_norm > 0 else float("inf")
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
        sums["grad_norm"] = _float(grad_norm)
        bad = not (math.isfinite(sums["loss"]) and math.isfinite(sums["grad_norm"]))
        if self.dist.enabled:  # every process must stop together, or the others hang
            flag = torch.tensor([float(bad)], device=self.device)  # nccl reduces GPU tensors only
            dist.all_reduce(flag)
            bad = bool(flag.item())
        if bad:
            raise TrainingError(f"the loss became {sums['loss']:.4g} (gradient norm "
                                f"{sums['grad_norm']:.4g}) at step {self.step + 1}",
                                "lower the learning rate or enable gradient clipping")
        sums["lr"] = self.scheduler.get_last_lr()[0]
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        return sums, tokens

    def _reduce(self, values: dict[str, float]) -> dict[str, float]:
        """Mean over processes (keys are the same on every rank)."""
        if not self.dist.enabled:
            return values
        keys = sorted(values)
        t = torch.tensor([values[k] for k in keys], dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return {k: float(v) / self.dist.world_size for k, v in zip(keys, t.tolist())}

    def run_eval(self) -> dict[str, float]:
        metrics: dict[str, float] = {}
        if self.dist.is_main:
            was_training = self.model.training
            self.model.eval()
            with torch.no_grad(), self._autocast():
                metrics = {k: float(v) for k, v in self.task.evaluate(self.model).items()}
            self.model.train(was_training)
        self.dist.barrier()
        return metrics

    # ------------------------------------------------------------------ the loop
    def fit(self, stop_at_step: int | None = None) -> TrainResult:
        """Train to ``max_steps`` (or stop early at ``stop_at_step``, checkpointing there)."""
        cfg = self.cfg
        end = min(cfg.max_steps, stop_at_step) if stop_at_step else cfg.max_steps
        t0 = time.perf_counter()
        t_log, run_tokens, window_tokens_since = t0, 0, 0
        progress = _Progress(self.console, cfg, enabled=self.dist.is_main and cfg.progress,
                             start=self.step)
        try:
            with progress:
                while self.step < end:
                    metrics, tokens = self.train_step()
                    self.window.add(metrics, tokens)
                    run_tokens += tokens
                    window_tokens_since += tokens
                    record: dict[str, Any] = {}
                    if self.step % cfg.log_every == 0 or self.step == end:
                        now = time.perf_counter()
                        totals = self._reduce({**{k: v / self.window.steps for k, v in self.window.sums.items()},
                                               "_tokens": float(window_tokens_since)})
                        rate = totals.pop("_tokens") * self.dist.world_size / max(1e-9, now - t_log)
                        totals["lr"] = metrics["lr"]
                        self.last_train = totals
                        record = {"step": self.step, "epoch": round(self.sampler.epoch, 4), **totals,
                                  "tokens_per_s": round(rate, 1), "elapsed_s": round(now - t0, 2)}
                        self.window = _Window()
                        t_log, window_tokens_since = now, 0
                    if (cfg.eval_every and self.step % cfg.eval_every == 0) or self.step == cfg.max_steps:
                        self.last_eval = self.run_eval()
                        record.setdefault("step", self.step)
                        record.update({f"eval_{k}": v for k, v in self.last_eval.items()})
                    if record and self.dist.is_main:
                        self._log(record)
                        progress.update(self.step, record)
                    elif self.dist.is_main:
                        progress.update(self.step, None)
                    if (cfg.save_every and self.step % cfg.save_every == 0) or self.step == end:
                        self.save_checkpoint()
                    if any(k.startswith("eval_") for k in record):
                        t_log = time.perf_counter()  # tokens/s measures training, not evaluation
        except KeyboardInterrupt:
            if not self.dist.enabled and self.step > self.resumed_from:
                self.save_checkpoint()  # keep the finished steps; --resume continues from here
            raise
        finally:
            if self.dist.owns_group and dist.is_initialized():
                dist.destroy_process_group()
        wall = time.perf_counter() - t0
        return TrainResult(self.out_dir, self.step, dict(self.last_train), dict(self.last_eval),
                           run_tokens * self.dist.world_size / max(1e-9, wall), wall, self.resumed_from)

    def _log(self, record: dict[str, Any]) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        clean = {k: (round(v, 6) if isinstance(v, float) and k not in ("lr",) else v)
                 for k, v in record.items()}
        with open(self.out_dir / METRICS_FILE, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(clean) + "\n")


class _Progress:
    """A rich progress bar on a terminal; plain log lines otherwise (e.g. under nohup)."""

    def __init__(self, console, cfg: TrainConfig, enabled: bool, start: int):
        self.console, self.cfg, self.enabled, self.start = console, cfg, enabled, start
        self.bar = None
        if enabled and console.is_terminal:
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                       TimeElapsedColumn, TimeRemainingColumn)

            self.bar = Progress(TextColumn("step"), MofNCompleteColumn(), BarColumn(),
                                TextColumn("{task.fields[info]}"), TimeElapsedColumn(),
                                TimeRemainingColumn(), console=console, transient=False)
            self.task_id = self.bar.add_task("train", total=cfg.max_steps, completed=start, info="")

    def __enter__(self):
        if self.bar is not None:
            self.bar.__enter__()
        return self

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.__exit__(*exc)

    def update(self, step: int, record: dict[str, Any] | None) -> None:
        record = record or {}
        train_info = (f"loss {record['loss']:.4f}  lr {record['lr']:.2e}  "
                      f"{record['tokens_per_s']:.0f} tok/s") if "loss" in record else None
        eval_info = "  ".join(f"{k} {v:.4f}" for k, v in record.items()
                              if k.startswith("eval_") and isinstance(v, float))
        if self.bar is not None:
            self.bar.update(self.task_id, completed=step,
                            **({"info": train_info} if train_info else {}))
            if eval_info:  # printed above the bar, which keeps to one terminal line
                self.bar.console.print(f"step {step}  {eval_info}", highlight=False, soft_wrap=True)
        elif self.enabled and (train_info or eval_info):
            line = "  ".join(x for x in (train_info, eval_info) if x)
            self.console.print(f"step {step}/{self.cfg.max_steps}  {line}", highlight=False,
                               soft_wrap=True)


def train(task: TrainingTask, cfg: TrainConfig, out_dir: str | Path, *, resume: bool = False,
          stop_at_step: int | None = None, console=None) -> TrainResult:
    """Train ``task`` with ``cfg``, checkpointing into ``out_dir``; see the module docstring."""
    return Trainer(task, cfg, out_dir, resume=resume, console=console).fit(stop_at_step)
