"""Narrower students (issue #50): the width settings, the sliced initialisation, the projected loss terms,
and a distilled student saved as a plain BERT of the narrow width (no projection weights)."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open

from distill_helpers import make_model_dir, run_cli, write_toy_corpus
from edgebert.errors import ConfigError
from edgebert.model import BertModel, build_model, count_parameters, load_model, make_student
from edgebert.model.narrow import narrow_model
from edgebert.stages.distill import DistillConfig, build_distill_config, build_student, distill, load_teacher
from edgebert.stages.distill.losses import ModelOutputs, attention_kl_loss, distillation_loss
from edgebert.stages.distill.projection import HiddenProjection
from edgebert.stages.distill.width import student_width
from edgebert.training import TrainConfig


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    root = tmp_path_factory.mktemp("narrow")
    make_model_dir(root / "encoder", "BertModel", layers=2)          # hidden 64, 4 heads of 16, FFN 128
    make_model_dir(root / "teacher", "BertForPreTraining", layers=2)
    write_toy_corpus(root / "corpus.txt")
    return root


def _cfg(toy, tmp_path, **kw):
    fields = dict(task="embed", corpus=(toy / "corpus.txt",), layers=2, alpha_kd=0.0, alpha_mlm=0.0, hidden=32,
                  max_seq_len=32, max_eval_examples=16, eval_batch_size=8)
    fields.update(kw)
    return DistillConfig(teacher=toy / "encoder", out=tmp_path / "student", **fields)


def test_width_settings_are_validated_with_clear_messages(toy, tmp_path):
    teacher = load_teacher(toy / "encoder", "embed").config
    assert student_width(_cfg(toy, tmp_path), teacher) == (32, 2, 64)      # head size 16 kept, FFN ratio 2 kept
    assert student_width(_cfg(toy, tmp_path, heads=4, intermediate=48), teacher) == (32, 4, 48)
    assert student_width(_cfg(toy, tmp_path, hidden=None), teacher) == (64, 4, 128)
    with pytest.raises(ConfigError, match="not divisible by --heads 3"):
        _cfg(toy, tmp_path, heads=3)
    with pytest.raises(ConfigError, match="size a narrower student"):
        _cfg(toy, tmp_path, hidden=None, heads=2)
    with pytest.raises(ConfigError, match="positive integer"):
        _cfg(toy, tmp_path, hidden=0)
    with pytest.raises(ConfigError, match="learns the teacher's logits only"):
        DistillConfig(teacher=toy / "encoder", out=tmp_path / "s", task="sst2", train_file=tmp_path / "t.tsv",
                      hidden=32, alpha_mlm=0.0, alpha_cos=1.0)
    assert DistillConfig(teacher=toy / "encoder", out=tmp_path / "s", task="sst2", train_file=tmp_path / "t.tsv",
                         hidden=32, alpha_mlm=0.0, alpha_cos=0.0).hidden == 32
    with pytest.raises(ConfigError, match="closest"):
        _cfg(toy, tmp_path, layer_map="closest")
    with pytest.raises(ConfigError, match="wider than the teacher's hidden size 64"):
        student_width(_cfg(toy, tmp_path, hidden=96, heads=6), teacher)
    with pytest.raises(ConfigError, match="not a multiple of the teacher's head size 16"):
        student_width(_cfg(toy, tmp_path, hidden=40), teacher)
    with pytest.raises(ConfigError, match="heads of 32 dims, wider than the teacher's 16"):
        student_width(_cfg(toy, tmp_path, hidden=32, heads=1), teacher)
    with pytest.raises(ConfigError, match="wider than the teacher's 128"):
        student_width(_cfg(toy, tmp_path, intermediate=256), teacher)
    preset = build_distill_config(toy / "encoder", tmp_path / "p", "embed-narrow")
    assert (preset.hidden, preset.task, preset.freeze_word_embeddings) == (256, "embed", False)


def test_the_narrow_student_is_sliced_from_the_teacher_and_half_the_bytes(tiny_config):
    torch.manual_seed(0)
    cfg = tiny_config.replace(hidden_size=64, num_attention_heads=4, intermediate_size=128, vocab_size=200,
                              max_position_embeddings=64, num_hidden_layers=2)
    teacher = build_model(cfg, "BertForPreTraining")
    wide, _ = make_student(teacher, 2)
    narrow = narrow_model(wide, 32, 2, 64)
    # every weight matrix halves on each hidden/FFN/attention side: (64x64 -> 32x32) a quarter, tables a half
    v, p, t = cfg.vocab_size, cfg.max_position_embeddings, cfg.type_vocab_size
    def size(h, i):      # embeddings + LN, 2 layers, pooler, MLM transform + LN + bias, NSP
        layer = 4 * (h * h + h) + 2 * h + (h * i + i) + (i * h + h) + 2 * h
        return (v + p + t) * h + 2 * h + 2 * layer + (h * h + h) + (h * h + h) + 2 * h + v + (2 * h + 2)
    assert count_parameters(wide) == size(64, 128)
    assert count_parameters(narrow) == size(32, 64) == 28106 and size(64, 128) == 92874
    assert count_parameters(narrow) / count_parameters(wide) == pytest.approx(0.3026, abs=1e-4)
    s, w = narrow.state_dict(), wide.state_dict()
    assert torch.equal(s["bert.embeddings.word_embeddings.weight"], w["bert.embeddings.word_embeddings.weight"][:, :32])
    assert torch.equal(s["bert.embeddings.position_embeddings.weight"],            # 64 positions all kept
                       w["bert.embeddings.position_embeddings.weight"][:, :32])
    # Q keeps heads 0 and 1 whole (rows 0..31 of 4 heads x 16); the FFN its first 64 units
    assert torch.equal(s["bert.encoder.layer.1.attention.self.query.weight"],
                       w["bert.encoder.layer.1.attention.self.query.weight"][:32, :32])
    assert torch.equal(s["bert.encoder.layer.0.output.dense.weight"], w["bert.encoder.layer.0.output.dense.weight"][:32, :64])
    assert torch.equal(s["bert.encoder.layer.0.attention.output.LayerNorm.weight"],
                       w["bert.encoder.layer.0.attention.output.LayerNorm.weight"][:32])
    assert torch.equal(s["cls.predictions.bias"], w["cls.predictions.bias"])
    assert narrow.cls.predictions.decoder.weight is narrow.bert.embeddings.word_embeddings.weight
    # narrower heads than the teacher's (2 heads of 8): each head keeps its first 8 dims
    thin = narrow_model(wide, 32, 4, 64)
    q = wide.state_dict()["bert.encoder.layer.0.attention.self.query.weight"]
    assert torch.equal(thin.state_dict()["bert.encoder.layer.0.attention.self.query.weight"],
                       torch.cat([q[h * 16:h * 16 + 8, :32] for h in range(4)]))


def test_projected_losses_reach_the_projection_and_the_kept_heads():
    torch.manual_seed(0)
    mask = torch.ones(2, 5, dtype=torch.long)
    mask[1, 3:] = 0
    teacher = ModelOutputs(None, torch.randn(2, 5, 8), tuple(torch.randn(2, 5, 8) for _ in range(3)),
                           tuple(torch.softmax(torch.randn(2, 4, 5, 5), -1) for _ in range(2)))
    # a student of width 4 with 2 heads whose hidden states are the teacher's first 4 dims and whose heads
    # are the teacher's first two: every projected term is 0 at the identity-on-kept-dims projection ...
    proj = HiddenProjection(4, 8)
    wide = teacher.hidden_states
    student = ModelOutputs(None, teacher.last_hidden_state[..., :4], tuple(h[..., :4] for h in wide),
                           tuple(a[:, :2] for a in teacher.attentions))
    assert attention_kl_loss(student.attentions, teacher.attentions, [0, 1], mask).item() == pytest.approx(0, abs=1e-6)
    cfg = DistillConfig(teacher="t", out="o", task="embed", alpha_kd=0, alpha_mlm=0, alpha_cos=1.0, alpha_pool=1.0,
                        alpha_hidden=1.0, alpha_attn=1.0, alpha_sim=1.0, hidden=4)
    total, terms = distillation_loss(cfg, student, teacher, mask, None, [0, 1], projection=proj)
    assert set(terms) == {"loss_cos", "loss_pool", "loss_sim", "loss_hidden", "loss_attn"}
    assert terms["loss_attn"].item() == pytest.approx(0, abs=1e-6)
    # ... except where the dropped dims count (cos, hidden): so the projection gets a gradient
    assert terms["loss_hidden"].item() > 0.1 and terms["loss_cos"].item() > 0.1
    total.backward()
    assert proj.proj.weight.grad is not None and proj.proj.weight.grad.abs().sum() > 0
    # a perfect projection of a student that is a linear image of the teacher: cos and hidden are 0
    exact = HiddenProjection(8, 8)
    full = ModelOutputs(None, teacher.last_hidden_state, wide, teacher.attentions)
    _, terms = distillation_loss(cfg, full, teacher, mask, None, [0, 1], projection=exact)
    assert max(v.item() for v in terms.values()) == pytest.approx(0, abs=1e-5)


def test_a_narrow_student_learns_through_its_projection_and_saves_without_it(toy, tmp_path):
    cfg = _cfg(toy, tmp_path, alpha_hidden=1.0, alpha_attn=1.0, alpha_cos=1.0,
               train=TrainConfig(max_steps=40, batch_size=8, lr=2e-3, warmup_ratio=0.0, log_every=1,
                                 eval_every=40, save_every=40, progress=False))
    teacher = load_teacher(cfg.teacher, "embed")
    student, layer_map = build_student(teacher, cfg)
    assert (student.config.hidden_size, student.config.num_attention_heads, student.config.intermediate_size) == (32, 2, 64)
    result = distill(cfg)
    log = [json.loads(line) for line in (cfg.out / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in log if "loss" in r]
    assert len(losses) == 40
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < 0.8 * first, (first, last)
    assert result.student_parameters < 0.5 * result.teacher_parameters
    # the saved student: a plain BertModel of width 32, no projection tensor in its weights
    with safe_open(cfg.out / "model.safetensors", "pt") as f:
        keys = set(f.keys())
    assert not any("proj" in k for k in keys)
    saved = load_model(cfg.out)
    assert isinstance(saved, BertModel) and saved.config.hidden_size == 32
    assert saved.state_dict()["embeddings.word_embeddings.weight"].shape == (teacher.config.vocab_size, 32)
    assert saved.state_dict()["encoder.layer.1.intermediate.dense.weight"].shape == (64, 32)
    assert keys == set(build_model(saved.config, "BertModel").state_dict())
    ids = torch.tensor([[2, 10, 11, 12, 3]])
    assert saved(ids, torch.ones_like(ids)).last_hidden_state.shape == (1, 5, 32)
    # the projection trained (it is in the resume state, not the model files): no longer [I; 0]
    state = torch.load(next(cfg.out.rglob("training_state.pt")), weights_only=False)
    weight = state["model"]["projection.proj.weight"]
    assert weight.shape == (64, 32)
    start = torch.zeros(64, 32)
    start[:32] = torch.eye(32)
    assert (weight - start).abs().max() > 1e-3
    # and it exports like any student: fused fp32 + INT8 (the exporter validates both against PyTorch)
    from edgebert.exporters import ExportConfig, export_bundle
    from edgebert.runtime import EdgeSession

    export_bundle(ExportConfig(model_dir=cfg.out, out_dir=tmp_path / "bundle", task="embed", int8=True,
                               validation_batch_sizes=(1, 3), validation_seq_lens=(7, 32)))
    fp32 = EdgeSession(tmp_path / "bundle", provider="cpu", precision="fp32", threads=1)
    int8 = EdgeSession(tmp_path / "bundle", provider="cpu", precision="int8", threads=1)
    texts = ["the film was good", "a bad movie that nobody liked at all"]
    assert fp32.hidden_size == 32 and fp32.embed(texts).shape == (2, 32)
    assert (fp32.embed(texts) * int8.embed(texts)).sum(axis=1).min() > 0.95        # cosine of unit vectors


def test_cli_hidden_reaches_the_config(toy, tmp_path, capsys, monkeypatch):
    seen = {}

    def fake_distill(cfg, console=None):
        seen["cfg"] = cfg
        raise SystemExit(0)

    monkeypatch.setattr("edgebert.stages.distill.distill", fake_distill)
    with pytest.raises(SystemExit):
        run_cli(capsys, "distill", toy / "encoder", "--out", tmp_path / "s", "--task", "embed",
                "--hidden", "32", "--heads", "4", "--intermediate", "48")
    cfg = seen["cfg"]
    assert (cfg.hidden, cfg.heads, cfg.intermediate) == (32, 4, 48)


def test_mlm_distillation_of_a_narrow_student_runs_and_saves_its_mlm_head(toy, tmp_path):
    cfg = DistillConfig(teacher=toy / "teacher", out=tmp_path / "mlm", task="mlm", corpus=(toy / "corpus.txt",),
                        layers=1, hidden=32, alpha_hidden=1.0, max_seq_len=32, max_eval_examples=16,
                        eval_batch_size=8, train=TrainConfig(max_steps=4, batch_size=8, lr=1e-3, warmup_ratio=0.0,
                                                             log_every=1, eval_every=4, save_every=4, progress=False))
    result = distill(cfg)
    assert result.steps == 4 and set(result.train_metrics) >= {"loss_kd", "loss_mlm", "loss_cos", "loss_hidden"}
    saved = load_model(cfg.out)
    assert type(saved).__name__ == "BertForPreTraining" and saved.config.hidden_size == 32
    assert saved.cls.predictions.decoder.weight.shape == (saved.config.vocab_size, 32)
    # evaluated through the saved kind of model: better than a uniform guess over the vocabulary
    assert 1 < result.eval_metrics["mlm_perplexity"] < saved.config.vocab_size
