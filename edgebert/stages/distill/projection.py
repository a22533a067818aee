"""``HiddenProjection``: the learned map from a narrow student's hidden space to its teacher's (TinyBERT's
W_h), and ``StudentWithProjection``: what the engine optimises when the student is narrower.

One (h_s -> h_t) matrix, shared by every mapped layer and the embeddings (TinyBERT shares it too: one
matrix learns one correspondence of the two spaces rather than a free fit per layer). The hidden-state MSE,
the token cosine and the pooled cosine compare ``projection(student) `` with the teacher; the similarity
term (in-batch cosines) and the logit terms need no projection. The projection starts as the identity on
the dims the student was sliced from (``edgebert.model.narrow``), so the first step already compares the
teacher's own coordinates.

The projection trains with the student and is saved in the engine's resume state only (``training_state.pt``):
the student directory holds a plain BERT of the narrow width.
"""

from __future__ import annotations

import torch
from torch import nn


class HiddenProjection(nn.Module):
    """y = x @ W^T, W: (h_t, h_s), no bias; W starts as [I; 0]."""

    def __init__(self, student_hidden: int, teacher_hidden: int):
        super().__init__()
        self.proj = nn.Linear(student_hidden, teacher_hidden, bias=False)
        with torch.no_grad():
            self.proj.weight.zero_()
            self.proj.weight[:student_hidden].copy_(torch.eye(student_hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


class StudentWithProjection(nn.Module):
    """The student (called as it is) and the projection the loss uses, as one module so that the engine's
    optimiser, gradient clipping and resume state include the projection. ``student`` is what is saved."""

    def __init__(self, student: nn.Module, projection: HiddenProjection):
        super().__init__()
        self.student, self.projection = student, projection

    @property
    def config(self):
        return self.student.config

    def forward(self, *args, **kwargs):
        return self.student(*args, **kwargs)
