"""What ``EdgeSession.classify`` and ``EdgeSession.fill_mask`` return."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ClassificationResult:
    """Predictions for N inputs over C classes."""

    labels: list[str]            # predicted label name per input
    label_ids: np.ndarray        # (N,) int64
    probabilities: np.ndarray    # (N, C) float32, softmax of the logits
    label_names: list[str]       # the C class names in id order

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def scores(self) -> np.ndarray:
        """(N,) probability of each predicted label."""
        if not len(self):
            return np.zeros(0, np.float32)
        return self.probabilities[np.arange(len(self)), self.label_ids]

    def as_dicts(self) -> list[dict[str, object]]:
        """JSON-ready: ``[{"label": ..., "score": ..., "probabilities": {name: p}}]``."""
        return [{"label": lab, "score": float(self.probabilities[i, self.label_ids[i]]),
                 "probabilities": {n: float(p) for n, p in zip(self.label_names, self.probabilities[i])}}
                for i, lab in enumerate(self.labels)]


@dataclass(frozen=True)
class MaskPrediction:
    """The top-k candidates for one ``[MASK]`` (``position`` is its token index incl. [CLS])."""

    position: int
    tokens: list[str]
    token_ids: list[int]
    scores: list[float]          # softmax probabilities, descending

    @property
    def best(self) -> str:
        return self.tokens[0]
