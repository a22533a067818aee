"""AdamW with the usual BERT parameter groups, and the linear warmup / linear decay schedule."""

from __future__ import annotations

import torch
from torch import nn

from edgebert.training.config import TrainConfig


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
    """Linear warmup from 0 over the warmup steps, then linear decay to 0 at ``max_steps``."""
    warmup = cfg.resolved_warmup_steps()
    if step < warmup:
        return (step + 1) / (warmup + 1)
    return max(0.0, (cfg.max_steps - step) / max(1, cfg.max_steps - warmup))


def build_scheduler(optimizer: torch.optim.Optimizer, cfg: TrainConfig) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(step, cfg))
