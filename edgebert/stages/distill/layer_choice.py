"""``closest_layer_map``: which teacher layers a student starts from, chosen by measuring (``--layer-map closest``).

A student copies some of the teacher's layers and trains on from there. Evenly spaced layers (DistilBERT's
rule: 6 -> 4 keeps [0, 2, 3, 5]) is a guess; this module measures instead. Every choice of layers is a
student that runs without any training, and the one whose outputs are nearest the teacher's on a sample of
the training examples starts nearest to where the training has to go:

- task distillation: the KD term itself (KL of the softened task logits at the run's temperature: classes,
  each token's tags, or a window's start/end distributions);
- text distillation (mlm, embed): 1 - cosine of the last hidden states over the real tokens.

All ``C(L, n)`` choices are tried when there are at most ``EXHAUSTIVE`` of them (6 -> 4: 15), else layers are
dropped one at a time, each time the one whose loss moves the distance least (12 -> 4: 68 students, not 495).

Measured on the SQuAD span teacher of ``benchmarks/squad_qa.py`` (all-MiniLM-L6-v2 fine-tuned, 6 layers) ->
4 layers, 2-core AMD EPYC Zen 4 (``benchmarks/results/squad_student_choices/squad_student_choices.md``): before training the
KD term is 3.50 for [0, 2, 3, 4] (the closest) and 3.63 for the evenly spaced [0, 2, 3, 5]; after the first
of 6 epochs the dev F1 is 55.6 against 51.0, after the sixth 61.3 against 58.3 (97.5% of the teacher's 62.8
against 92.8%).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch
from torch import nn

from edgebert.errors import ConfigError
from edgebert.model import make_student
from edgebert.stages.distill.losses import cosine_loss, kd_loss
from edgebert.stages.distill.tasks import span_logits

EXHAUSTIVE = 64                 # try every choice up to this many, else drop layers greedily
PROBE_EXAMPLES = 128            # training examples the distance is measured on
PROBE_BATCH = 32

Batch = dict[str, torch.Tensor]
Distance = Callable[[nn.Module, Batch, object], torch.Tensor]


@dataclass
class LayerChoice:
    """The chosen map and every map measured (distance: lower is closer to the teacher)."""

    layer_map: list[int]
    measure: str
    examples: int
    tried: list[tuple[list[int], float]] = field(default_factory=list)

    def distance_of(self, layer_map: Sequence[int]) -> float | None:
        return next((d for m, d in self.tried if m == list(layer_map)), None)

    def as_dict(self) -> dict:
        return {"layer_map": self.layer_map, "measure": self.measure, "examples": self.examples,
                "tried": [{"layer_map": m, "distance": round(d, 6)} for m, d in self.tried]}


def _inputs(batch: Batch) -> Batch:
    return {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}


def task_distance(kind: str, temperature: float) -> tuple[str, Callable]:
    """(name, outputs -> comparable tensor) for a task model: ``sequence``, ``token`` or ``span``."""
    def logits(model: nn.Module, batch: Batch) -> torch.Tensor:
        out = model(**_inputs(batch))
        return span_logits(out, batch["attention_mask"]) if kind == "span" else out.logits

    def distance(student: torch.Tensor, teacher: torch.Tensor, batch: Batch) -> torch.Tensor:
        select = batch["attention_mask"].bool() if kind == "token" else None
        return kd_loss(student, teacher, temperature, select)

    return f"KD of the {kind} logits at T={temperature:g}", (logits, distance)


def hidden_distance() -> tuple[str, Callable]:
    """(name, ...) for text distillation: 1 - cos of the last hidden states over the real tokens."""
    def hidden(model: nn.Module, batch: Batch) -> torch.Tensor:
        out = model(**_inputs(batch))
        return getattr(out, "encoder", out).last_hidden_state

    def distance(student: torch.Tensor, teacher: torch.Tensor, batch: Batch) -> torch.Tensor:
        return cosine_loss(student, teacher, batch["attention_mask"])

    return "1 - cos of the last hidden states", (hidden, distance)


def probe_indices(n: int, lengths: np.ndarray, seed: int) -> list[list[int]]:
    """A seeded sample of ``PROBE_EXAMPLES`` of ``n`` examples, in length-sorted batches."""
    picked = np.random.default_rng(seed).permutation(n)[:PROBE_EXAMPLES]
    picked = sorted(picked.tolist(), key=lambda i: lengths[i])
    return [picked[k:k + PROBE_BATCH] for k in range(0, len(picked), PROBE_BATCH)]


@torch.no_grad()
def closest_layer_map(teacher: nn.Module, student_layers: int, batches: Sequence[Batch],
                      measure: tuple[str, Callable]) -> LayerChoice:
    """The teacher layers whose untrained student is closest to the teacher on ``batches``."""
    name, (outputs, distance) = measure
    depth = teacher.config.num_hidden_layers
    if not 1 <= student_layers <= depth:
        raise ConfigError(f"cannot pick {student_layers} of the teacher's {depth} layers",
                          f"use 1 to {depth} student layers")
    was_training = teacher.training
    teacher.eval()
    reference = [outputs(teacher, b) for b in batches]
    examples = sum(len(b["input_ids"]) for b in batches)

    def score(layers: Sequence[int]) -> float:
        student, _ = make_student(teacher, len(layers), list(layers))
        student.eval()
        total = sum(float(distance(outputs(student, b), t, b)) * len(b["input_ids"])
                    for b, t in zip(batches, reference))
        return total / examples

    tried: list[tuple[list[int], float]] = []
    if math.comb(depth, student_layers) <= EXHAUSTIVE:
        for layers in itertools.combinations(range(depth), student_layers):
            tried.append((list(layers), score(layers)))
        best = min(tried, key=lambda t: t[1])[0]
    else:
        best = list(range(depth))
        while len(best) > student_layers:
            options = [[x for x in best if x != drop] for drop in best]
            scored = [(layers, score(layers)) for layers in options]
            tried.extend(scored)
            best = min(scored, key=lambda t: t[1])[0]
    teacher.train(was_training)
    return LayerChoice(best, name, examples, tried)
