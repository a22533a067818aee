"""BERT core: config validation, shapes, attention paths, padding, heads, checkpoints."""

from __future__ import annotations

import json

import pytest
import torch

from edgebert.errors import CheckpointError, ConfigError
from edgebert.model import (
    PRESETS,
    BertConfig,
    BertForMaskedLM,
    BertForPreTraining,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertModel,
    build_model,
    count_parameters,
    load_model,
    save_model,
)


def batch(cfg, B=3, T=11, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, cfg.vocab_size, (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.long)
    mask[1, 7:] = 0
    mask[2, 4:] = 0
    ids[mask == 0] = cfg.pad_token_id
    types = torch.zeros(B, T, dtype=torch.long)
    types[:, 5:] = 1
    return ids, mask, types


def test_presets_and_validation():
    assert set(PRESETS) == {"tiny", "small", "base", "large"}
    small = BertConfig.preset("small")
    assert (small.num_hidden_layers, small.hidden_size) == (4, 512)
    assert BertConfig.preset("base").hidden_size == 768
    assert BertConfig.preset("large").num_hidden_layers == 24
    with pytest.raises(ConfigError, match="divisible"):
        BertConfig(hidden_size=100, num_attention_heads=12)
    with pytest.raises(ConfigError, match="positive"):
        BertConfig(num_hidden_layers=0)
    with pytest.raises(ConfigError, match="dropout"):
        BertConfig(hidden_dropout_prob=1.5)
    with pytest.raises(ConfigError, match="unknown preset"):
        BertConfig.preset("huge")
    with pytest.raises(ConfigError, match="pad_token_id"):
        BertConfig(vocab_size=10, pad_token_id=10)


def test_hf_json_roundtrip(tmp_path, tiny_config):
    cfg = tiny_config.replace(architecture="BertForSequenceClassification", id2label={0: "neg", 1: "pos"})
    cfg.save(tmp_path / "config.json")
    d = json.loads((tmp_path / "config.json").read_text())
    assert d["model_type"] == "bert" and d["architectures"] == ["BertForSequenceClassification"]
    assert d["label2id"] == {"neg": 0, "pos": 1}
    back = BertConfig.load(tmp_path)
    assert back == cfg and back.num_labels == 2


def test_shapes_and_optional_outputs(tiny_config):
    torch.manual_seed(0)
    model = BertModel(tiny_config).eval()
    ids, mask, types = batch(tiny_config)
    out = model(ids, mask, types, output_hidden_states=True, output_attentions=True)
    assert out.last_hidden_state.shape == (3, 11, 64)
    assert out.pooler_output.shape == (3, 64)
    assert len(out.hidden_states) == 3 and len(out.attentions) == 2
    assert out.attentions[0].shape == (3, 4, 11, 11)
    # attention probabilities sum to 1 and give padded keys (almost) no weight
    assert torch.allclose(out.attentions[0].sum(-1), torch.ones(3, 4, 11), atol=1e-5)
    assert out.attentions[1][2, :, :, 4:].max().item() < 1e-6


def test_sdpa_and_eager_give_same_numbers(tiny_config):
    torch.manual_seed(0)
    model = BertModel(tiny_config).eval()
    ids, mask, types = batch(tiny_config)
    model.set_attention_impl("sdpa")
    fast = model(ids, mask, types).last_hidden_state
    model.set_attention_impl("eager")
    slow = model(ids, mask, types).last_hidden_state
    assert (fast - slow).abs().max().item() < 1e-5


def test_padding_does_not_change_real_tokens(tiny_config):
    torch.manual_seed(0)
    model = BertModel(tiny_config).eval()
    ids, mask, types = batch(tiny_config)
    alone = model(ids[2:3, :4], mask[2:3, :4], types[2:3, :4]).last_hidden_state
    padded = model(ids, mask, types).last_hidden_state[2:3, :4]
    assert (alone - padded).abs().max().item() < 1e-5


def test_heads_shapes_and_losses(tiny_config):
    torch.manual_seed(0)
    ids, mask, types = batch(tiny_config)
    labels = torch.full_like(ids, -100)
    labels[:, 2] = ids[:, 2]
    pt = BertForPreTraining(tiny_config)
    out = pt(ids, mask, types, labels=labels, next_sentence_label=torch.tensor([0, 1, 0]))
    assert out.prediction_logits.shape == (3, 11, tiny_config.vocab_size)
    assert out.seq_relationship_logits.shape == (3, 2)
    assert torch.allclose(out.loss, out.mlm_loss + out.nsp_loss)
    # an untrained model is near chance: MLM loss ~ ln(V), NSP ~ ln 2
    assert abs(out.mlm_loss.item() - torch.log(torch.tensor(1024.0)).item()) < 0.5
    # decoder is tied to the word embeddings
    assert pt.cls.predictions.decoder.weight is pt.bert.embeddings.word_embeddings.weight
    mlm = BertForMaskedLM(tiny_config)
    assert mlm.bert.pooler is None and mlm(ids, mask, labels=labels).loss.item() > 0
    cls = BertForSequenceClassification(tiny_config.replace(id2label={0: "a", 1: "b", 2: "c"}))
    assert cls(ids, mask).logits.shape == (3, 3)
    tok = BertForTokenClassification(tiny_config)
    assert tok(ids, mask).logits.shape == (3, 11, 2)


def test_hf_parameter_names(tiny_config):
    names = set(BertForPreTraining(tiny_config).state_dict())
    for name in ("bert.embeddings.word_embeddings.weight",
                 "bert.encoder.layer.1.attention.self.query.weight",
                 "bert.encoder.layer.0.attention.output.LayerNorm.weight",
                 "bert.encoder.layer.0.intermediate.dense.weight",
                 "bert.encoder.layer.0.output.dense.bias",
                 "bert.pooler.dense.weight",
                 "cls.predictions.transform.dense.weight",
                 "cls.predictions.bias", "cls.seq_relationship.weight"):
        assert name in names, name


def test_checkpoint_roundtrip_and_head_change(tmp_path, tiny_config):
    torch.manual_seed(0)
    model = BertForPreTraining(tiny_config).eval()
    save_model(model, tmp_path / "ckpt")
    back = load_model(tmp_path / "ckpt")
    assert isinstance(back, BertForPreTraining)
    ids, mask, types = batch(tiny_config)
    a = model(ids, mask, types).prediction_logits
    b = back(ids, mask, types).prediction_logits
    assert torch.equal(a, b)
    assert back.cls.predictions.decoder.weight is back.bert.embeddings.word_embeddings.weight
    # the same checkpoint as a bare encoder, and as a new classifier
    enc = load_model(tmp_path / "ckpt", "BertModel")
    assert torch.equal(enc(ids, mask, types).last_hidden_state, model.bert(ids, mask, types).last_hidden_state)
    with pytest.raises(CheckpointError, match="classifier"):
        load_model(tmp_path / "ckpt", "BertForSequenceClassification")
    clf = load_model(tmp_path / "ckpt", "BertForSequenceClassification", allow_new_heads=True)
    assert clf.load_report.missing == ["classifier.bias", "classifier.weight"]
    assert count_parameters(model) < sum(p.numel() for p in model.state_dict().values())


def test_corrupt_and_missing_checkpoints(tmp_path, tiny_config):
    with pytest.raises(CheckpointError, match="not found"):
        load_model(tmp_path / "nope")
    save_model(build_model(tiny_config), tmp_path / "ckpt")
    (tmp_path / "ckpt" / "model.safetensors").write_bytes(b"\x00garbage" * 10)
    with pytest.raises(CheckpointError, match="safetensors"):
        load_model(tmp_path / "ckpt")
    save_model(build_model(tiny_config), tmp_path / "c2")
    BertConfig.preset("tiny", hidden_size=128).save(tmp_path / "c2" / "config.json")
    with pytest.raises(CheckpointError, match="do not fit"):
        load_model(tmp_path / "c2")
