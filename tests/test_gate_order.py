"""The gate's order (issue #50): ranked by loss per byte saved, a big candidate with a small loss stays quantized
before a small candidate with a bigger loss; without a ``GateOrder`` the ranking (and INT8's messages) are as
before. Fake quantizer and probe: the loss of a graph is the sum of its quantized nodes' fixed losses."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgebert.errors import ValidationError
from edgebert.quantization.accuracy import GateOrder, quantize_with_guard
from edgebert.runtime.fidelity import Fidelity

LOSS = {"big_table": 0.004, "matmul_a": 0.006, "matmul_b": 0.003}
SAVED = {"big_table": 5_000_000, "matmul_a": 200_000, "matmul_b": 50_000}


class SumQuantizer:
    """Writes the names of its quantized nodes into the file: the probe reads them back."""

    def candidates(self):
        return list(LOSS)

    def quantize(self, out_path, exclude=(), only=None):
        nodes = [n for n in LOSS if n not in exclude and only in (None, n)]
        Path(out_path).write_text("\n".join(nodes), encoding="utf-8")
        return Path(out_path)


class SumProbe:
    metric = "cosine"

    def measure(self, path, max_sentences=None):
        loss = sum(LOSS[n] for n in Path(path).read_text(encoding="utf-8").split("\n") if n)
        return Fidelity("cosine", 1.0 - loss, 1.0 - loss, 100, loss, loss)


def test_ranking_by_loss_per_byte_keeps_the_big_table_quantized(tmp_path: Path):
    steps: list[str] = []
    order = GateOrder("INT4", "8-bit", SAVED.__getitem__)
    result = quantize_with_guard(SumQuantizer(), tmp_path / "m.onnx", SumProbe(), 0.005, on_step=steps.append,
                                 order=order)
    # per byte: matmul_b 6e-8, matmul_a 3e-8, big_table 8e-10; 0.013 - 0.003 - 0.006 = 0.004 fits 0.005
    assert [r["node"] for r in result.sensitivity] == ["matmul_b", "matmul_a", "big_table"]
    assert [r["bytes_saved"] for r in result.sensitivity] == [50_000, 200_000, 5_000_000]
    assert result.excluded == ["matmul_b", "matmul_a"] and result.accuracy.loss == pytest.approx(0.004)
    assert (tmp_path / "m.onnx").read_text(encoding="utf-8") == "big_table"
    assert steps[0].startswith("INT4 cosine loss 0.01300 > budget 0.005") and "per byte saved" in steps[0]
    assert any("kept 8-bit" in s for s in steps) and not any("float" in s for s in steps)


def test_without_an_order_the_ranking_is_by_loss_alone(tmp_path: Path):
    steps: list[str] = []
    result = quantize_with_guard(SumQuantizer(), tmp_path / "m.onnx", SumProbe(), 0.005, on_step=steps.append)
    assert [r["node"] for r in result.sensitivity] == ["matmul_a", "big_table", "matmul_b"]
    assert all("bytes_saved" not in r for r in result.sensitivity)
    assert result.excluded == ["matmul_a", "big_table"] and result.accuracy.loss == pytest.approx(0.003)
    assert steps[0].startswith("INT8 cosine loss") and any("kept float" in s for s in steps)


def test_a_miss_names_the_graph_and_what_nodes_became(tmp_path: Path):
    order = GateOrder("INT4", "8-bit", SAVED.__getitem__)
    with pytest.raises(ValidationError) as err:
        quantize_with_guard(SumQuantizer(), tmp_path / "m.onnx", SumProbe(), 0.005, order=order, max_excluded=1)
    assert "INT4 cosine loss" in str(err.value) and "kept 8-bit" in str(err.value)
    assert "--int4" in err.value.hint
    with pytest.raises(ValidationError):
        GateOrder("", "8-bit")
