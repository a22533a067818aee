"""A length-mix row of a tiny model: its total time keeps significant digits (rounded to 4 decimals, 4 texts
of a 1-layer model in 40 microseconds were 0.0 s, and deriving GFLOP/s from it divided by zero in CI)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from edgebert.bench.measure import Latency
from edgebert.bench.timing import mix_row


def test_a_tiny_total_keeps_its_digits():
    feeds = [{"input_ids": np.ones((4, 8), np.int64), "attention_mask": np.ones((4, 8), np.int64)}]
    row = mix_row(SimpleNamespace(provider="cpu", precision="int8"), "int8", 4, "bucketed", feeds,
                  Latency(np.array([4.2e-5])), 4)
    assert row.total_s == 4.2e-5
    assert row.sequences_per_s == round(4 / 4.2e-5, 2)
