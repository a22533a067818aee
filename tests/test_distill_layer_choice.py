"""``--layer-map closest`` (edgebert.stages.distill.layer_choice): the measured choice of teacher layers."""

from __future__ import annotations

import pytest
import torch

from edgebert.errors import ConfigError
from edgebert.model import build_model
from edgebert.model.bert import MASK_VALUE
from edgebert.stages.distill import layer_choice
from edgebert.stages.distill.layer_choice import closest_layer_map, hidden_distance, task_distance


def _teacher(tiny_config, architecture: str, identity: tuple[int, ...]):
    """A 4-layer seeded teacher whose layers in ``identity`` do nothing (both output projections zero:
    post-LN of the residual alone, which is already layer-normed with weight 1 and bias 0)."""
    torch.manual_seed(0)
    cfg = tiny_config.replace(num_hidden_layers=4, id2label={0: "a", 1: "b", 2: "c"})
    model = build_model(cfg, architecture).eval()
    with torch.no_grad():               # heads with logits of a few units (not ~0 as at init)
        for name, p in model.named_parameters():
            if name.startswith(("classifier.", "qa_outputs.")) and name.endswith("weight"):
                p.mul_(50.0)
    for i in identity:
        layer = getattr(model, "bert", model).encoder.layer[i]
        for linear in (layer.attention.output.dense, layer.output.dense):
            torch.nn.init.zeros_(linear.weight)
            torch.nn.init.zeros_(linear.bias)
    return model


def _batches(vocab: int, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for width in (9, 14):
        ids = torch.randint(5, vocab, (6, width), generator=g)
        mask = torch.ones_like(ids)
        mask[0, width - 3:] = 0                                            # some padding
        out.append({"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)})
    return out


@pytest.mark.parametrize("architecture, measure", [
    ("BertForSequenceClassification", task_distance("sequence", 2.0)),
    ("BertForTokenClassification", task_distance("token", 2.0)),
    ("BertModel", hidden_distance()),
])
def test_the_layers_that_do_the_work_are_chosen(tiny_config, architecture, measure, monkeypatch):
    teacher = _teacher(tiny_config, architecture, identity=(1, 3))
    batches = _batches(tiny_config.vocab_size)
    choice = closest_layer_map(teacher, 2, batches, measure)
    # layers 1 and 3 are identities: [0, 2] computes the teacher's function exactly; the evenly spaced
    # [0, 3] does not
    assert choice.layer_map == [0, 2] and len(choice.tried) == 6 and choice.examples == 12
    others = [d for m, d in choice.tried if m != [0, 2]]
    assert abs(choice.distance_of([0, 2])) < 1e-6 and min(others) > 1e-5
    assert choice.as_dict()["tried"][1] == {"layer_map": [0, 2], "distance": round(choice.distance_of([0, 2]), 6)}
    assert not teacher.training
    # over EXHAUSTIVE choices: layers are dropped one at a time (4 + 3 students), same answer here
    monkeypatch.setattr(layer_choice, "EXHAUSTIVE", 1)
    greedy = closest_layer_map(teacher, 2, batches, measure)
    assert greedy.layer_map == [0, 2] and len(greedy.tried) == 4 + 3


def test_span_distance_ignores_padding_and_is_zero_for_the_teacher(tiny_config):
    from edgebert.model import make_student

    teacher = _teacher(tiny_config, "BertForQuestionAnswering", identity=(2,))
    batches = _batches(tiny_config.vocab_size)
    name, (outputs, distance) = task_distance("span", 2.0)
    same, _ = make_student(teacher, 3, [0, 1, 3])
    with torch.no_grad():
        for b in batches:
            t = outputs(teacher, b)
            assert t.shape == (6, 2, b["input_ids"].shape[1]) and (t[0, :, -3:] == MASK_VALUE).all()
            assert float(distance(outputs(same.eval(), b), t, b)) == pytest.approx(0.0, abs=1e-6)
    assert closest_layer_map(teacher, 3, batches, (name, (outputs, distance))).layer_map == [0, 1, 3]


def test_closest_is_a_config_value_with_a_teacher_init_only(tmp_path):
    from edgebert.stages.distill import DistillConfig

    cfg = DistillConfig.preset("task", tmp_path, tmp_path / "s", train_file=tmp_path / "t.tsv", layer_map="closest")
    assert cfg.layer_map == "closest" and cfg.to_dict()["layer_map"] == "closest"
    assert DistillConfig.preset("task", tmp_path, tmp_path / "s", train_file=tmp_path / "t.tsv",
                                layer_map=" closest ").layer_map == "closest"
    with pytest.raises(ConfigError, match="closest picks teacher layers"):
        DistillConfig.preset("task", tmp_path, tmp_path / "s", train_file=tmp_path / "t.tsv", layer_map="closest",
                             student_init="random")
    with pytest.raises(ConfigError, match="is not a comma-separated list") as bad:
        DistillConfig.preset("task", tmp_path, tmp_path / "s", train_file=tmp_path / "t.tsv", layer_map="nearest")
    assert "--layer-map closest" in bad.value.hint
