"""``Trainer``: runs a ``TrainingTask`` with a ``TrainConfig``; the sole owner of the process group."""

from __future__ import annotations

import contextlib
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from edgebert.errors import CheckpointError, ConfigError, Interrupted, TrainingError
from edgebert.files.atomic import atomic_path, write_json
from edgebert.training.config import TrainConfig
from edgebert.training.distributed import init_distributed
from edgebert.training.optim import build_optimizer, build_scheduler
from edgebert.training.progress import Progress
from edgebert.training.state import (
    STATE_FILE,
    STATE_FORMAT,
    TRAIN_CONFIG_FILE,
    MetricsLog,
    check_out_dir,
    check_same_data,
    checkpoint_dir,
    prune,
    publish,
    read_state,
    rng_state,
    set_rng_state,
    write_checkpoint,
)
from edgebert.training.task import TrainingTask


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


class Trainer:
    """Joins the process group on construction and leaves it on ``close()`` (or at the end of a
    ``with`` block); ``fit(task)`` trains one task into ``out_dir``. See ``edgebert.training``.

    A stage that must coordinate its processes before training (e.g. rank 0 trains the tokenizer)
    opens the trainer first and asks ``trainer.is_main`` / calls ``trainer.barrier()``.
    """

    def __init__(self, cfg: TrainConfig, out_dir: str | Path, *, resume: bool = False, overwrite: bool = False,
                 console=None):
        capped = cfg.capped()               # $EDGEBERT_MAX_STEPS: the README walked quickly (make test-readme)
        self.capped_from = cfg.max_steps if capped is not cfg else None
        cfg = capped
        self.cfg, self.resume = cfg, resume
        self.out_dir = Path(out_dir)
        if not overwrite:  # with overwrite the stage's OutputDir removes the old run before training
            check_out_dir(self.out_dir, resume)
        self.dist = init_distributed(cfg.resolved_device())
        per_rank, rem = divmod(cfg.batch_size, self.dist.world_size * cfg.grad_accum)
        if rem or per_rank < 1:
            self.close()
            raise ConfigError(f"batch_size={cfg.batch_size} must be a multiple of processes x grad_accum "
                              f"= {self.dist.world_size} x {cfg.grad_accum}")
        self.micro_batch = per_rank
        dev = cfg.resolved_device()
        self.device = torch.device(f"cuda:{self.dist.local_rank}" if dev == "cuda" else "cpu")
        if console is None:
            from rich.console import Console

            console = Console()
        self.console = console
        self.log = MetricsLog(self.out_dir)

    # ------------------------------------------------------------------ the process group
    @property
    def is_main(self) -> bool:
        return self.dist.is_main

    def barrier(self) -> None:
        self.dist.barrier()

    def close(self) -> None:
        self.dist.leave()

    def __enter__(self) -> "Trainer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ checkpoint state
    def _state(self) -> dict[str, Any]:
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
            "rng": self.dist.gather(rng_state()),
            "window": self.window.state_dict(),
            "last_eval": dict(self.last_eval),
            "metrics_bytes": self.log.size(),
        }

    def save_checkpoint(self) -> None:
        """One checkpoint set (model files, train_config.json, training_state.pt), committed by
        switching the pointer: see ``edgebert.training.state``."""
        state = self._state()  # a collective under DDP: every rank takes part
        if self.dist.is_main:
            self.out_dir.mkdir(parents=True, exist_ok=True)

            def fill(folder: Path) -> None:
                self.task.save(folder)
                write_json(folder / TRAIN_CONFIG_FILE, self.cfg.to_dict())
                with atomic_path(folder / STATE_FILE) as tmp:
                    torch.save(state, tmp)

            write_checkpoint(self.out_dir, self.step, fill)
        self.dist.barrier()

    def _load_state(self) -> int:
        state = read_state(self.out_dir, self.cfg)
        folder = checkpoint_dir(self.out_dir)
        path = folder / STATE_FILE
        if self.dist.is_main and folder != self.out_dir:  # repair a kill while publishing; drop leftovers
            publish(folder, self.out_dir)
            prune(self.out_dir, folder)
        try:
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            self.scheduler.load_state_dict(state["scheduler"])
        except (RuntimeError, ValueError, KeyError) as exc:
            raise CheckpointError(f"{path} does not match this model ({' '.join(str(exc).split())[:200]})",
                                  "resume with the same model settings") from exc
        check_same_data(state, self.task.data_fingerprint(), path)
        self.sampler.load_state_dict(state["sampler"])
        self.step = int(state["step"])
        self.window.load_state_dict(state["window"])
        self.last_eval = {k: float(v) for k, v in state.get("last_eval", {}).items()}
        rng = state["rng"]
        if int(state.get("world_size", 1)) == self.dist.world_size and self.dist.rank < len(rng):
            set_rng_state(rng[self.dist.rank])
        if self.dist.is_main:  # drop log lines written after this checkpoint by the interrupted run
            self.log.truncate(int(state.get("metrics_bytes", 0)))
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
        sums["grad_norm"] = _float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip))
        bad = not (math.isfinite(sums["loss"]) and math.isfinite(sums["grad_norm"]))
        if self.dist.any(bad, self.device):
            raise TrainingError(f"the loss became {sums['loss']:.4g} (gradient norm "
                                f"{sums['grad_norm']:.4g}) at step {self.step + 1}",
                                "lower the learning rate or enable gradient clipping")
        sums["lr"] = self.scheduler.get_last_lr()[0]
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        return sums, tokens

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

    # ------------------------------------------------------------------ the run
    def _kept(self) -> str:
        """What an interrupted run leaves, for the CLI's ``error: interrupted (...)`` line."""
        ckpt = checkpoint_dir(self.out_dir) if self.dist.is_main else None
        if ckpt is None:
            return f"at step {self.step}, before the first checkpoint; nothing is kept"
        kept = ckpt.name.removeprefix("step-").lstrip("0") or "0"
        return f"at step {self.step}; the checkpoint of step {kept} in {self.out_dir} is kept: pass --resume to continue"

    def _start(self, task: TrainingTask) -> None:
        """Put ``task`` on the device, wrap it for DDP, build the optimizer, load the resume point."""
        cfg = self.cfg
        self.task = task
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
        self.resumed_from = self._load_state() if self.resume else 0

    def fit(self, task: TrainingTask, stop_at_step: int | None = None) -> TrainResult:
        """Train ``task`` to ``max_steps`` (or stop early at ``stop_at_step``, checkpointing there)."""
        self._start(task)
        cfg = self.cfg
        end = min(cfg.max_steps, stop_at_step) if stop_at_step else cfg.max_steps
        t0 = time.perf_counter()
        t_log, run_tokens, window_tokens_since = t0, 0, 0
        progress = Progress(self.console, cfg, enabled=self.dist.is_main, start=self.step)
        first, timed_eval = self.step, False
        try:
            with progress:
                if self.capped_from is not None:
                    progress.say(f"EDGEBERT_MAX_STEPS: {cfg.max_steps} steps instead of {self.capped_from}")
                if self.step < end:
                    progress.started(task.describe_data(), cfg.max_steps, cfg.batch_size, first)
                while self.step < end:
                    t_step = time.perf_counter()
                    metrics, tokens = self.train_step()
                    if self.step == first + 1:
                        progress.first_step(self.step, time.perf_counter() - t_step, end)
                    self.window.add(metrics, tokens)
                    run_tokens += tokens
                    window_tokens_since += tokens
                    record: dict[str, Any] = {}
                    if self.step % cfg.log_every == 0 or self.step == end:
                        now = time.perf_counter()
                        means = {k: v / self.window.steps for k, v in self.window.sums.items()}
                        totals = self.dist.mean({**means, "_tokens": float(window_tokens_since)}, self.device)
                        rate = totals.pop("_tokens") * self.dist.world_size / max(1e-9, now - t_log)
                        totals["lr"] = metrics["lr"]
                        self.last_train = totals
                        record = {"step": self.step, "epoch": round(self.sampler.epoch, 4), **totals,
                                  "tokens_per_s": round(rate, 1), "elapsed_s": round(now - t0, 2)}
                        self.window = _Window()
                        t_log, window_tokens_since = now, 0
                    if (cfg.eval_every and self.step % cfg.eval_every == 0) or self.step == cfg.max_steps:
                        t_eval = time.perf_counter()
                        self.last_eval = self.run_eval()
                        if not timed_eval and self.step < end:
                            progress.first_eval(self.step, time.perf_counter() - t_eval, end)
                            timed_eval = True
                        record.setdefault("step", self.step)
                        record.update({f"eval_{k}": v for k, v in self.last_eval.items()})
                    if self.dist.is_main:
                        if record:
                            self.log.append(record)
                        progress.update(self.step, record or None)
                    if (cfg.save_every and self.step % cfg.save_every == 0) or self.step == end:
                        self.save_checkpoint()
                    if any(k.startswith("eval_") for k in record):
                        t_log = time.perf_counter()  # tokens/s measures training, not evaluation
        except KeyboardInterrupt as exc:
            if not self.dist.enabled and self.step > self.resumed_from:
                self.save_checkpoint()  # keep the finished steps; --resume continues from here
            if isinstance(exc, Interrupted):   # the CLI's: it prints this message
                exc.message = self._kept()
                raise
            raise Interrupted(self._kept()) from exc
        wall = time.perf_counter() - t0
        return TrainResult(self.out_dir, self.step, dict(self.last_train), dict(self.last_eval),
                           run_tokens * self.dist.world_size / max(1e-9, wall), wall, self.resumed_from)


def train(task: TrainingTask, cfg: TrainConfig, out_dir: str | Path, *, resume: bool = False,
          stop_at_step: int | None = None, console=None) -> TrainResult:
    """Train ``task`` with ``cfg``, checkpointing into ``out_dir``; see ``edgebert.training``."""
    with Trainer(cfg, out_dir, resume=resume, console=console) as trainer:
        return trainer.fit(task, stop_at_step)
