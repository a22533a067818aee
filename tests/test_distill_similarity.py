"""The in-batch similarity term of embedding distillation (``alpha_sim``): zero when the student's pooled
vectors relate like the teacher's, positive otherwise, blind to padding, and refused outside embed mode."""

from __future__ import annotations

import pytest
import torch

from edgebert.errors import ConfigError
from edgebert.stages.distill.config import DistillConfig
from edgebert.stages.distill.losses import cosine_loss, pooled_cosine_loss, similarity_loss
from edgebert.stages.metrics import mean_pool


def test_similarity_loss_is_zero_for_the_same_geometry_and_positive_otherwise():
    g = torch.Generator().manual_seed(0)
    teacher = torch.randn(6, 5, 8, generator=g)
    mask = torch.ones(6, 5, dtype=torch.long)
    assert similarity_loss(teacher, teacher, mask).item() == pytest.approx(0.0, abs=1e-9)
    # a scaled copy pools to parallel vectors: the similarities, and so the loss, do not change
    assert similarity_loss(3.0 * teacher, teacher, mask).item() == pytest.approx(0.0, abs=1e-6)
    other = torch.randn(6, 5, 8, generator=g)
    assert similarity_loss(other, teacher, mask).item() > 1.0
    assert similarity_loss(other[:1], teacher[:1], mask[:1]).item() == 0.0


def test_padding_does_not_count():
    g = torch.Generator().manual_seed(1)
    teacher = torch.randn(3, 4, 8, generator=g)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]])
    student = teacher.clone()
    student[mask == 0] = 100.0          # garbage under the padding
    assert torch.allclose(mean_pool(student, mask), mean_pool(teacher, mask))
    assert similarity_loss(student, teacher, mask).item() == pytest.approx(0.0, abs=1e-9)


def test_alpha_sim_is_refused_outside_embed_distillation(tmp_path):
    with pytest.raises(ConfigError, match="alpha-sim"):
        DistillConfig(teacher=tmp_path, out=tmp_path / "s", task="mlm", alpha_sim=1.0)
    cfg = DistillConfig.preset("embed", tmp_path, tmp_path / "s", alpha_sim=1.0)
    assert cfg.alpha_sim == 1.0 and cfg.mode == "embed"


def test_pooled_cosine_loss_is_zero_for_parallel_pooled_vectors_and_positive_otherwise():
    g = torch.Generator().manual_seed(2)
    teacher = torch.randn(4, 6, 8, generator=g)
    mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2, [1] * 3 + [0] * 3, [1] * 6])
    assert pooled_cosine_loss(teacher, teacher, mask).item() == pytest.approx(0.0, abs=1e-6)
    assert pooled_cosine_loss(2.5 * teacher, teacher, mask).item() == pytest.approx(0.0, abs=1e-6)
    student = teacher.clone()
    student[mask == 0] = -50.0                     # garbage under the padding does not count
    assert pooled_cosine_loss(student, teacher, mask).item() == pytest.approx(0.0, abs=1e-6)
    other = torch.randn(4, 6, 8, generator=g)
    loss = pooled_cosine_loss(other, teacher, mask).item()
    assert 0.3 < loss < 2.0
    # token-level cosine can be perfect while the pooled vectors differ: token lengths weigh the mean
    scaled = teacher * torch.linspace(0.1, 3.0, 6)[None, :, None]
    assert cosine_loss(scaled, teacher, mask).item() == pytest.approx(0.0, abs=1e-6)
    assert pooled_cosine_loss(scaled, teacher, mask).item() > 1e-3


def test_alpha_pool_is_refused_outside_embed_distillation(tmp_path):
    with pytest.raises(ConfigError, match="alpha-pool"):
        DistillConfig(teacher=tmp_path, out=tmp_path / "s", task="mlm", alpha_pool=1.0)
    cfg = DistillConfig.preset("embed", tmp_path, tmp_path / "s", alpha_pool=1.0)
    assert cfg.alpha_pool == 1.0
