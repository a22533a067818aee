"""torchrun support in one place: which process this is, and the collectives the trainer needs.

Under ``torchrun`` (``WORLD_SIZE`` > 1) the ``Trainer`` joins the process group when it starts and
leaves it when it closes (gloo on CPU, nccl on GPU); nothing else joins or leaves it. Code that runs
before a trainer exists (writing a stage's config file, printing a summary) asks
``is_main_process()``; inside a run, ``DistContext`` answers the same question from the group.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


def is_main_process() -> bool:
    """True on rank 0 of a torchrun job, and in a plain single-process run."""
    return int(os.environ.get("RANK", "0")) == 0


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

    def mean(self, values: dict[str, float], device: torch.device) -> dict[str, float]:
        """Mean of each value over processes (every rank passes the same keys)."""
        if not self.enabled:
            return values
        keys = sorted(values)
        t = torch.tensor([values[k] for k in keys], dtype=torch.float64, device=device)
        dist.all_reduce(t)
        return {k: float(v) / self.world_size for k, v in zip(keys, t.tolist())}

    def any(self, flag: bool, device: torch.device) -> bool:
        """True if ``flag`` is set on any process (all must stop together, or the others hang)."""
        if not self.enabled:
            return flag
        t = torch.tensor([float(flag)], device=device)  # nccl reduces GPU tensors only
        dist.all_reduce(t)
        return bool(t.item())

    def gather(self, obj: Any) -> list[Any]:
        """``obj`` of every process, in rank order."""
        if not self.enabled:
            return [obj]
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def leave(self) -> None:
        """Tear the process group down if this context created it."""
        if self.owns_group and dist.is_initialized():
            dist.destroy_process_group()
        self.owns_group = False


def init_distributed(device: str) -> DistContext:
    """Join the process group torchrun describes in the environment (no-op for one process)."""
    if dist.is_available() and dist.is_initialized():
        return DistContext(dist.get_rank(), dist.get_world_size(),
                           int(os.environ.get("LOCAL_RANK", dist.get_rank())))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistContext()
    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if device == "cuda":
        torch.cuda.set_device(local)
    dist.init_process_group(backend="nccl" if device == "cuda" else "gloo", rank=rank, world_size=world)
    return DistContext(rank, world, local, owns_group=True)
