"""The multiple-choice head (transformers' BertForMultipleChoice names): (batch, choices, sequence) in,
(batch, choices) scores out, equal to transformers to 1e-5 both ways through checkpoints. Untrained: no
multiple-choice data is at hand."""

from __future__ import annotations

import pytest
import torch

from edgebert.model import BertForMultipleChoice, build_model, load_model, save_model
from edgebert.stages.import_hf import convert_hf


@pytest.fixture
def transformers_quiet():
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    return transformers


def choices_batch(cfg, batch: int = 2, choices: int = 4, seq: int = 12, seed: int = 0) -> dict[str, torch.Tensor]:
    """A seeded (batch, choices, seq) batch: a shared first segment, a per-choice second one, padding."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, cfg.vocab_size, (batch, choices, seq), generator=g)
    ids[:, :, :5] = ids[:, :1, :5]                                  # the same question for every choice
    mask = torch.ones_like(ids)
    mask[0, 1, 8:] = 0
    mask[1, 3, 6:] = 0
    types = torch.zeros_like(ids)
    types[:, :, 5:] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def test_scores_every_choice_as_its_own_sequence(tiny_config):
    torch.manual_seed(0)
    model = build_model(tiny_config, "BertForMultipleChoice").eval()
    batch = choices_batch(tiny_config)
    with torch.no_grad():
        out = model(**batch, labels=torch.tensor([1, 3]))
        one = model(**{k: v[1:, 2:3] for k, v in batch.items()})
    assert out.logits.shape == (2, 4) and one.logits.shape == (1, 1)
    assert abs(float(one.logits[0, 0]) - float(out.logits[1, 2])) < 1e-5           # choices do not interact
    assert float(out.loss) == pytest.approx(float(torch.nn.functional.cross_entropy(out.logits, torch.tensor([1, 3]))))
    assert out.encoder.last_hidden_state.shape == (8, 12, tiny_config.hidden_size)


@pytest.mark.hf
def test_multiple_choice_matches_transformers_both_ways(tmp_path, tiny_config, transformers_quiet):
    tf = transformers_quiet
    torch.manual_seed(1)
    model = BertForMultipleChoice(tiny_config).eval()
    save_model(model, tmp_path / "eb")
    hf, info = tf.BertForMultipleChoice.from_pretrained(tmp_path / "eb", output_loading_info=True)
    assert not (info["missing_keys"] or info["unexpected_keys"] or info["mismatched_keys"]), info
    batch, labels = choices_batch(tiny_config), torch.tensor([2, 0])
    with torch.no_grad():
        ours, theirs = model(**batch, labels=labels), hf.eval()(**batch, labels=labels)
    assert float((ours.logits - theirs.logits).abs().max()) <= 1e-5
    assert float(ours.logits.std()) > 1e-3                                          # real, distinct scores
    assert float(ours.loss) == pytest.approx(float(theirs.loss), abs=1e-5)

    torch.manual_seed(2)
    source = tf.BertForMultipleChoice(tf.BertConfig(vocab_size=1024, hidden_size=64, num_hidden_layers=2,
                                                    num_attention_heads=4, intermediate_size=128,
                                                    max_position_embeddings=128)).eval()
    source.save_pretrained(tmp_path / "hf")
    report = convert_hf(tmp_path / "hf", tmp_path / "back")
    assert report.architecture == "BertForMultipleChoice" and report.max_abs_diff == 0.0
    back = load_model(report.out_dir)
    assert type(back) is BertForMultipleChoice
    with torch.no_grad():
        assert float((back(**batch).logits - source(**batch).logits).abs().max()) <= 1e-5
