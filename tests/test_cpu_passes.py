"""The CPU graph pass (``exporters.cpu_passes.unfuse_skip_layernorm``): on a tiny seeded BERT fused by
onnxruntime's optimizer it replaces every SkipLayerNormalization, keeps the outputs to float rounding at
untraced shapes with padding, leaves a node whose extra outputs are read alone, and does nothing twice."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from edgebert.exporters.cpu_passes import unfuse_skip_layernorm
from edgebert.exporters.fusion import fuse_bert
from edgebert.exporters.onnx_export import export_onnx, prepare
from edgebert.graph.ops import op_type_counts
from edgebert.model import load_model
from export_fixtures import make_model_dir

LAYERS = 2


@pytest.fixture(scope="module")
def fused(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("cpu_passes")
    model = load_model(make_model_dir(work / "model", "BertModel"), "BertModel")
    raw = export_onnx(prepare(model, "embed"), work / "raw.onnx", 17)
    fuse_bert(raw, work / "fused.onnx", model.config)
    return work / "fused.onnx"


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _feeds(batch: int, seq: int, seed: int = 3) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, 60, (batch, seq)).astype(np.int64)
    mask = np.ones_like(ids)
    mask[batch - 1, seq - 5:] = 0          # right padding on the last row
    ids[mask == 0] = 0
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}


def test_every_skip_layernorm_becomes_add_and_layernorm_with_the_same_outputs(fused):
    before = onnx.load(str(fused))
    counts_before = op_type_counts(before)
    assert counts_before["SkipLayerNormalization"] == 2 * LAYERS and "LayerNormalization" not in counts_before
    model = onnx.load(str(fused))
    assert unfuse_skip_layernorm(model) == 2 * LAYERS
    onnx.checker.check_model(model)
    counts = op_type_counts(model)
    assert "SkipLayerNormalization" not in counts and counts["LayerNormalization"] == 2 * LAYERS
    assert counts.get("Add", 0) - counts_before.get("Add", 0) == 4 * LAYERS      # residual + bias per node
    for batch, seq in ((2, 7), (3, 19)):   # shapes the graph was not traced at, with padding
        feeds = _feeds(batch, seq)
        keep = feeds["attention_mask"].astype(bool)
        for reference, out in zip(_run(before, feeds), _run(model, feeds)):
            assert out.shape == reference.shape
            diff = np.abs(out - reference)
            assert float((diff[keep] if diff.ndim == 3 else diff).max()) < 2e-5
    assert unfuse_skip_layernorm(model) == 0


def test_a_node_whose_mean_output_is_read_is_left_alone(fused):
    model = onnx.load(str(fused))
    node = next(n for n in model.graph.node if n.op_type == "SkipLayerNormalization")
    while len(node.output) < 2:
        node.output.append("")
    node.output[1] = "ln_mean"
    model.graph.output.append(helper.make_tensor_value_info("ln_mean", onnx.TensorProto.FLOAT, None))
    assert unfuse_skip_layernorm(model) == 2 * LAYERS - 1
    assert op_type_counts(model)["SkipLayerNormalization"] == 1
