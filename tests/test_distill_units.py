"""Student initialisation from a teacher, distillation loss terms, and GLUE TSV reading."""

from __future__ import annotations

import pytest
import torch

from edgebert.data.tasks import read_task_tsv
from edgebert.errors import ConfigError, DataError
from edgebert.model import (
    BertForPreTraining,
    BertForSequenceClassification,
    default_layer_map,
    make_student,
    parse_layer_map,
)
from edgebert.stages.distill.losses import attention_kl_loss, cosine_loss, hidden_mse_loss, kd_loss
from edgebert.stages.metrics import classification_metrics


def test_default_layer_maps():
    assert default_layer_map(12, 4) == [0, 4, 7, 11]
    assert default_layer_map(6, 4) == [0, 2, 3, 5]
    assert default_layer_map(4, 4) == [0, 1, 2, 3]
    assert parse_layer_map("0,4,8,11", 12, 4) == [0, 4, 8, 11]
    with pytest.raises(ConfigError, match="larger than the teacher"):
        default_layer_map(2, 4)
    with pytest.raises(ConfigError, match="out of range"):
        parse_layer_map("0,4,8,12", 12, 4)
    with pytest.raises(ConfigError, match="entries"):
        parse_layer_map("0,4", 12, 4)
    with pytest.raises(ConfigError, match="increasing"):
        parse_layer_map("4,0,8,11", 12, 4)


def test_make_student_copies_the_right_tensors(tiny_config):
    torch.manual_seed(0)
    teacher = BertForPreTraining(tiny_config.replace(num_hidden_layers=6))
    student, layers = make_student(teacher, 3, "0,3,5")
    assert layers == [0, 3, 5] and student.config.num_hidden_layers == 3
    t, s = teacher.state_dict(), student.state_dict()
    for i, j in enumerate(layers):
        for name in ("attention.self.query.weight", "output.LayerNorm.bias", "intermediate.dense.weight"):
            assert torch.equal(s[f"bert.encoder.layer.{i}.{name}"], t[f"bert.encoder.layer.{j}.{name}"])
    # a different teacher layer is really different (the check above can fail)
    assert not torch.equal(s["bert.encoder.layer.1.attention.self.query.weight"],
                           t["bert.encoder.layer.1.attention.self.query.weight"])
    for name in ("bert.embeddings.word_embeddings.weight", "bert.pooler.dense.weight",
                 "cls.predictions.transform.dense.weight", "cls.predictions.bias", "cls.seq_relationship.weight"):
        assert torch.equal(s[name], t[name]), name
    assert student.init_report == []
    assert student.cls.predictions.decoder.weight is student.bert.embeddings.word_embeddings.weight
    clf_teacher = BertForSequenceClassification(tiny_config.replace(num_hidden_layers=4, id2label={0: "a", 1: "b"}))
    clf_student, _ = make_student(clf_teacher, 2)
    assert torch.equal(clf_student.classifier.weight, clf_teacher.classifier.weight)


def test_kd_loss_zero_when_equal_positive_otherwise_and_uses_t_squared():
    torch.manual_seed(0)
    t = torch.randn(5, 7, 11)
    assert kd_loss(t, t, 2.0).item() == pytest.approx(0.0, abs=1e-6)
    s = t + 0.3 * torch.randn_like(t)
    loss2 = kd_loss(s, t, 2.0)
    assert loss2.item() > 0
    # manual KL(p_t || p_s) at T=2, times T^2 = 4
    p_t = torch.softmax(t / 2, -1)
    manual = (p_t * (torch.log_softmax(t / 2, -1) - torch.log_softmax(s / 2, -1))).sum(-1).mean() * 4
    assert loss2.item() == pytest.approx(manual.item(), rel=1e-5)
    select = torch.zeros(5, 7, dtype=torch.bool)
    select[0, 1] = True
    assert kd_loss(s, t, 1.0, select).item() == pytest.approx(
        kd_loss(s[0, 1:2], t[0, 1:2], 1.0).item(), rel=1e-6)


def test_cosine_loss_ignores_padding():
    torch.manual_seed(0)
    h = torch.randn(2, 6, 8)
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]])
    assert cosine_loss(h, h, mask).item() == pytest.approx(0.0, abs=1e-6)
    other = h.clone()
    other[0, 4:] = torch.randn(2, 8)            # only padded positions differ
    assert cosine_loss(other, h, mask).item() == pytest.approx(0.0, abs=1e-6)
    other[0, 0] = -h[0, 0]                      # a real token differs: cos = -1 -> loss 2 on 1 of 10 tokens
    assert cosine_loss(other, h, mask).item() == pytest.approx(2.0 / 10, rel=1e-5)


def test_tinybert_terms(tiny_config):
    torch.manual_seed(0)
    teacher = BertForPreTraining(tiny_config.replace(num_hidden_layers=4)).eval()
    student, layers = make_student(teacher, 2)
    student.eval()
    ids = torch.randint(5, 1000, (2, 9))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    kw = dict(output_hidden_states=True, output_attentions=True)
    t_out = teacher(ids, mask, **kw).encoder
    same = teacher(ids, mask, **kw).encoder
    assert hidden_mse_loss(same.hidden_states, t_out.hidden_states, [0, 1, 2, 3], mask).item() == 0.0
    assert attention_kl_loss(same.attentions, t_out.attentions, [0, 1, 2, 3], mask).item() == pytest.approx(0, abs=1e-6)
    s_out = student(ids, mask, **kw).encoder
    assert hidden_mse_loss(s_out.hidden_states, t_out.hidden_states, layers, mask).item() > 0
    assert attention_kl_loss(s_out.attentions, t_out.attentions, layers, mask).item() > 0


def test_embedding_agreement_figures():
    from edgebert.stages.metrics import embedding_agreement

    torch.manual_seed(0)
    teacher = torch.randn(40, 16)
    same = embedding_agreement(teacher * 3.0, teacher)                    # scale does not matter
    assert same == pytest.approx({"cosine_mean": 1.0, "cosine_min": 1.0, "texts": 40.0, "similarity_spearman": 1.0,
                                  "neighbour_agreement": 1.0, "neighbour_in_top5": 1.0})
    near = embedding_agreement(teacher + 0.3 * torch.randn(40, 16), teacher)
    far = embedding_agreement(torch.randn(40, 16), teacher)
    for key in ("cosine_mean", "similarity_spearman", "neighbour_in_top5"):
        assert 1.0 > near[key] > far[key], key
    assert abs(far["similarity_spearman"]) < 0.2 and far["neighbour_agreement"] < 0.2
    shuffled = teacher[torch.randperm(40)]                                 # same texts, another order: no agreement
    assert embedding_agreement(shuffled, teacher)["cosine_mean"] < 0.5


def test_glue_readers(tmp_path):
    p = tmp_path / "sst.tsv"
    p.write_text("sentence\tlabel\na fine film \t1\nawful \t0\n", encoding="utf-8")
    rows, spec = read_task_tsv(p, "sst2")
    assert [r.label for r in rows] == [1, 0] and rows[0].text_a == "a fine film" and not spec.is_pair
    bad = tmp_path / "bad.tsv"
    bad.write_text("sentence\tlabel\ngood\t7\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"bad.tsv:2 has label '7'"):
        read_task_tsv(bad, "sst2")
    with pytest.raises(DataError, match="lacks column"):
        read_task_tsv(p, "mrpc")
    pair = tmp_path / "pair.tsv"
    pair.write_text("sentence1\tsentence2\tlabel\na\tb\tyes\nc\td\tno\n", encoding="utf-8")
    rows, spec = read_task_tsv(pair, "tsv")
    assert spec.is_pair and spec.labels == ("no", "yes") and rows[0].label == 1
    m = classification_metrics([1, 0, 1, 1], [1, 0, 0, 1], 2)
    assert m["accuracy"] == 0.75 and m["f1"] == pytest.approx(0.8)


def test_real_glue_files():
    from conftest import shared_file

    rows, _ = read_task_tsv(shared_file("sst2", "dev.tsv"), "sst2")
    assert len(rows) == 872 and sum(r.label for r in rows) == 444
    rows, spec = read_task_tsv(shared_file("mrpc", "dev.tsv"), "mrpc")
    assert spec.is_pair and len(rows) == 408
