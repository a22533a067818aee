"""Accuracy and F1 of predicted class labels, as GLUE reports them (F1 of the positive class for two
labels, as for MRPC; macro F1 otherwise).

Torch-free: ``edgebert evaluate`` scores an ONNX bundle with it in a runtime install, and
``edgebert.stages.metrics`` scores PyTorch models with the same functions, so the figures compare.
"""

from __future__ import annotations

from typing import Sequence


def accuracy(preds: Sequence[int], labels: Sequence[int]) -> float:
    if not labels:
        return 0.0
    return sum(int(p == t) for p, t in zip(preds, labels)) / len(labels)


def f1_binary(preds: Sequence[int], labels: Sequence[int], positive: int = 1) -> float:
    tp = sum(1 for p, t in zip(preds, labels) if p == positive and t == positive)
    fp = sum(1 for p, t in zip(preds, labels) if p == positive and t != positive)
    fn = sum(1 for p, t in zip(preds, labels) if p != positive and t == positive)
    return 0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn)


def f1_macro(preds: Sequence[int], labels: Sequence[int], num_labels: int) -> float:
    return sum(f1_binary(preds, labels, c) for c in range(num_labels)) / max(num_labels, 1)


def classification_metrics(preds: Sequence[int], labels: Sequence[int], num_labels: int) -> dict[str, float]:
    """accuracy, and F1 of the positive class for binary tasks (GLUE's MRPC F1) else macro F1."""
    f1 = f1_binary(preds, labels) if num_labels == 2 else f1_macro(preds, labels, num_labels)
    return {"accuracy": accuracy(preds, labels), "f1": f1, "n": len(labels)}
