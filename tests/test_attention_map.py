"""edgebert attention: the drawn map is the model's own attention probabilities."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgebert.cli import main
from edgebert.errors import ConfigError
from edgebert.model import load_model
from edgebert.stages.attention import attention_map, plot_attention
from runtime_fixtures import make_tiny_model_dir


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_tiny_model_dir(tmp_path_factory.mktemp("attn") / "model", "BertForMaskedLM", seed=3)


def test_map_is_the_models_attention(model_dir):
    amap = attention_map(model_dir, "the film was good", layer=1, head=2)
    assert amap.tokens == ["[CLS]", "the", "film", "was", "good", "[SEP]"]
    assert amap.weights.shape == (6, 6) and (amap.layer, amap.head) == (1, 2)
    np.testing.assert_allclose(amap.weights.sum(axis=1), 1.0, atol=1e-5)
    from tokenizers import Tokenizer

    ids = torch.tensor([Tokenizer.from_file(str(model_dir / "tokenizer.json")).encode("the film was good").ids])
    model = load_model(model_dir).eval()
    with torch.inference_mode():
        ref = model.bert(ids, output_attentions=True).attentions[1][0, 2].numpy()
    np.testing.assert_allclose(amap.weights, ref, atol=1e-6)
    mean = attention_map(model_dir, "the film was good", layer=-1)            # last layer, mean of heads
    assert mean.layer == 1 and mean.head is None and mean.head_label == "mean of 4 heads"
    with torch.inference_mode():
        all_heads = model.bert(ids, output_attentions=True).attentions[1][0].numpy()
    np.testing.assert_allclose(mean.weights, all_heads.mean(0), atol=1e-6)
    pair = attention_map(model_dir, "good film", pair="bad movie", layer=0, head=0)
    assert pair.tokens == ["[CLS]", "good", "film", "[SEP]", "bad", "movie", "[SEP]"]


def test_plot_and_cli(model_dir, tmp_path, capsys):
    out = plot_attention(model_dir, "a fun film", tmp_path / "a.png", layer=0, head=1).path
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    target = tmp_path / "cli.png"
    assert main(["attention", str(model_dir), "the story was dull", "--layer", "1", "--head", "3",
                 "--out", str(target)]) == 0
    assert target.read_bytes()[:4] == b"\x89PNG" and "layer 1, head 3, 6 tokens" in capsys.readouterr().out
    assert main(["attention", str(model_dir), "x", "--layer", "7", "--out", str(tmp_path / "b.png")]) == 2
    err = capsys.readouterr().err
    assert "layer 7 is out of range" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "b.png").exists()
    with pytest.raises(ConfigError, match="head 4 is out of range"):
        attention_map(model_dir, "x", head=4)
