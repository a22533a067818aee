"""benchmarks/embed_rescore.py on fabricated per-item figures: the paired bootstrap interval of a retention
contains 1 for a student equal to its teacher, lies below 1 for one that ranks worse, and pairs the items."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("sklearn")
REPO = Path(__file__).resolve().parents[1]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


rescore = _load("embed_rescore")


def _items(seed: int, worse: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    ranks = rng.integers(1, 30, 400).astype(float)
    return {"cos": rng.uniform(-1, 1, 120), "correct": (rng.uniform(size=200) < 0.8).astype(float),
            "ranks": ranks + worse}


def test_a_student_equal_to_its_teacher_keeps_exactly_everything():
    teacher = _items(0)
    labels = np.random.default_rng(1).integers(0, 2, 120)
    interval = rescore.bootstrap(teacher, teacher, labels, resamples=200)
    assert set(interval) == set(rescore.METRICS)
    for low, high in interval.values():
        assert low == pytest.approx(1.0) and high == pytest.approx(1.0)


def test_a_student_that_ranks_every_right_document_lower_is_below_one():
    teacher, labels = _items(0), np.random.default_rng(1).integers(0, 2, 120)
    student = {**teacher, "ranks": teacher["ranks"] + 3}
    interval = rescore.bootstrap(student, teacher, labels, resamples=200)
    low, high = interval["retrieval_mrr"]
    assert high < 1.0 and low > 0.3
    assert interval["retrieval_recall_at_1"][1] < 1.0
    assert interval["mrpc_auc"] == [pytest.approx(1.0), pytest.approx(1.0)]   # the pairs were not touched
