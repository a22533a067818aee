"""``export --max-seq-len N`` below the model's positions leaves the position rows past N out of every graph:
the bundle's config, manifest and graphs agree on N, and its outputs equal the uncropped bundle's."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from edgebert.exporters import ExportConfig, export_bundle
from edgebert.runtime import EdgeSession
from runtime_fixtures import make_tiny_model_dir

TEXTS = ["the cat sat on the mat", "a dog", "the quick brown fox jumps over the lazy dog " * 4]


def _position_rows(path) -> set[int]:
    """Row counts of every initializer of the position table's shape family (rows x hidden 64)."""
    model = onnx.load(str(path))
    return {numpy_helper.to_array(t).shape[0] for t in model.graph.initializer
            if "position" in t.name and len(t.dims) == 2}


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    root = tmp_path_factory.mktemp("crop")
    model = make_tiny_model_dir(root / "model", "BertModel")           # 128 positions
    full = export_bundle(ExportConfig(model_dir=model, out_dir=root / "full", int8=True, calib_size=16,
                                      gate_size=16)).bundle_dir
    cropped = export_bundle(ExportConfig(model_dir=model, out_dir=root / "cropped", int8=True, calib_size=16,
                                         gate_size=16, max_sequence_length=24)).bundle_dir
    return model, full, cropped


def test_the_cropped_bundle_carries_24_position_rows_and_says_so(bundles):
    model, full, cropped = bundles
    assert json.loads((model / "config.json").read_text())["max_position_embeddings"] == 128
    assert json.loads((cropped / "config.json").read_text())["max_position_embeddings"] == 24
    manifest = json.loads((cropped / "manifest.json").read_text())
    assert manifest["max_sequence_length"] == 24
    assert manifest["config"]["max_position_embeddings"] == 24
    assert _position_rows(full / "onnx" / "model.onnx") == {128}
    assert _position_rows(cropped / "onnx" / "model.onnx") == {24}
    assert (cropped / "onnx" / "model.onnx").stat().st_size < (full / "onnx" / "model.onnx").stat().st_size - 100 * 64 * 4


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_the_cropped_bundle_embeds_as_the_full_one_at_its_length(bundles, precision):
    _, full, cropped = bundles
    a = EdgeSession(full, precision=precision, max_length=24).embed(TEXTS)
    b = EdgeSession(cropped, precision=precision).embed(TEXTS)         # the third text is cut at 24 tokens
    assert a.shape == b.shape == (3, 64)
    if precision == "fp32":
        np.testing.assert_allclose(a, b, atol=1e-5)
    else:   # each INT8 graph is calibrated on its own texts (cut at 24 vs 128 tokens): close, not equal
        cosine = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
        assert cosine.min() > 0.999 and np.abs(a - b).max() < 5e-3


def test_the_cropped_bundle_refuses_a_longer_max_length(bundles):
    from edgebert.errors import ConfigError

    with pytest.raises(ConfigError, match="max_length=64 is outside 3..24"):
        EdgeSession(bundles[2], max_length=64)


@pytest.mark.parametrize("model_type, pad", [("bert", 0), ("roberta", 1)])
def test_crop_positions_keeps_the_outputs_of_shorter_inputs(model_type, pad):
    torch = pytest.importorskip("torch")
    from edgebert.model import BertConfig, build_model
    from edgebert.model.bert import BertEmbeddings

    cfg = BertConfig.preset("tiny", model_type=model_type, pad_token_id=pad, hidden_dropout_prob=0.0,
                            architecture="BertModel",
                            attention_probs_dropout_prob=0.0, max_position_embeddings=66)
    torch.manual_seed(0)
    model = build_model(cfg, "BertModel").eval()
    ids = torch.randint(5, cfg.vocab_size, (2, 20))
    ids[1, 15:] = pad                                               # right padding
    mask = (ids != pad).long()
    with torch.no_grad():
        before = model(ids, attention_mask=mask).last_hidden_state
        embeddings = [m for m in model.modules() if isinstance(m, BertEmbeddings)][0]
        embeddings.crop_positions(24)
        after = model(ids, attention_mask=mask).last_hidden_state
    assert embeddings.position_embeddings.num_embeddings == 24 + cfg.position_offset == 24 + 2 * pad
    torch.testing.assert_close(after, before, atol=1e-6, rtol=0)

