"""``TrainingTask``: what a stage tells the trainer about *what* to train (see ``edgebert.training``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import torch
from torch import nn

from edgebert.training.batches import ShuffledBatches


class TrainingTask:
    """What a stage must provide. Subclass and override; ``model`` must be set in ``__init__``.

    ``model`` is the module whose parameters are optimised (and wrapped in DDP); keep frozen helpers
    (e.g. a distillation teacher) elsewhere on the task and move them in ``to_device``.
    """

    model: nn.Module

    def num_train_examples(self) -> int:
        raise NotImplementedError

    def describe_data(self) -> str:
        """What one epoch trains on, for the run's start line (e.g. "160 questions in 230 windows")."""
        return f"{self.num_train_examples()} training examples"

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
        from edgebert.model import save_model

        save_model(self.model, out_dir)

    def to_device(self, device: torch.device) -> None:
        self.model.to(device)

    def batch_tokens(self, batch: dict[str, torch.Tensor]) -> int:
        """Real (non-padding) tokens in a batch, for tokens/s."""
        mask = batch.get("attention_mask") if isinstance(batch, dict) else None
        return int(mask.sum()) if mask is not None else 0

    def sampler(self, batch_size: int, seed: int) -> ShuffledBatches:
        return ShuffledBatches(self.num_train_examples(), batch_size, seed)

    def data_fingerprint(self) -> str:
        """Identifies the training data; resuming on different data is refused ("" = unchecked)."""
        return ""
