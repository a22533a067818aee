"""Distillation: the full loss vanishes when student == teacher, resume reproduces the curve, task
distillation keeps a separable toy task, and bad teachers / layer settings are one-line CLI errors."""

from __future__ import annotations

import json

import pytest
import torch

from distill_helpers import assert_one_line_error, make_model_dir, run_cli, write_toy_corpus, write_toy_tsv
from edgebert.errors import CheckpointError, ConfigError
from edgebert.model import load_model
from edgebert.stages.distill import (
    DistillConfig,
    MlmDistillationTask,
    TaskDistillationTask,
    build_student,
    distill,
    load_teacher,
)


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    root = tmp_path_factory.mktemp("distill")
    make_model_dir(root / "teacher", "BertForPreTraining", layers=2)
    make_model_dir(root / "encoder_only", "BertModel", layers=2)
    write_toy_corpus(root / "corpus.txt")
    write_toy_tsv(root / "train.tsv", 200, seed=0)
    write_toy_tsv(root / "dev.tsv", 100, seed=1)
    return root


def _mlm_loss(root, layers: int, **alphas) -> float:
    from edgebert.data.corpus import read_corpus
    from edgebert.data.mlm import create_examples, tokenize_documents
    from edgebert.data.tokenizer import SpecialIds, load_tokenizer

    cfg = DistillConfig.preset("tiny", root / "teacher", root / "unused", layers=layers, **alphas)
    teacher = load_teacher(cfg.teacher, "mlm")
    student, layer_map = build_student(teacher, cfg)
    tok = load_tokenizer(cfg.teacher)
    examples = create_examples(tokenize_documents(read_corpus(root / "corpus.txt"), tok, 13),
                               SpecialIds.of(tok), 32, seed=0)
    task = MlmDistillationTask(student, teacher, tok, examples, [], cfg, layer_map)
    batch = task.make_batch(list(range(16)), list(range(16)))
    assert (batch["attention_mask"] == 0).any()          # padding is present in the batch
    loss, metrics = task.loss(task.model, batch)
    return float(loss.detach()), {k: float(v) for k, v in metrics.items()}


def test_full_mlm_distillation_loss_is_zero_iff_student_equals_teacher(toy):
    alphas = dict(alpha_kd=5.0, alpha_mlm=0.0, alpha_cos=1.0, alpha_hidden=1.0, alpha_attn=1.0)
    same, terms = _mlm_loss(toy, layers=2, **alphas)     # 2 of 2 layers: the student is the teacher
    assert set(terms) >= {"loss_kd", "loss_cos", "loss_hidden", "loss_attn"}
    assert same == pytest.approx(0.0, abs=1e-5)
    assert terms["teacher_agreement"] == 1.0
    smaller, terms = _mlm_loss(toy, layers=1, **alphas)
    assert smaller > 1e-4 and smaller > 100 * abs(same)
    assert all(terms[k] > 0 for k in ("loss_kd", "loss_cos", "loss_hidden", "loss_attn"))
    with_mlm, terms = _mlm_loss(toy, layers=2, alpha_kd=5.0, alpha_mlm=2.0, alpha_cos=1.0)
    assert with_mlm == pytest.approx(2.0 * terms["loss_mlm"], rel=1e-4) and with_mlm > 1.0


def test_task_distillation_loss_is_zero_when_student_equals_teacher(tmp_path):
    from edgebert.model import save_model

    make_model_dir(tmp_path / "clf", "BertForSequenceClassification", layers=2,
                   id2label={0: "negative", 1: "positive"})
    clf = load_model(tmp_path / "clf")
    with torch.no_grad():
        clf.classifier.weight.mul_(100.0)                # logits of a few units, as a trained head's
    save_model(clf, tmp_path / "clf")
    write_toy_tsv(tmp_path / "train.tsv", 40)
    from edgebert.data.task_data import load_task_data
    from edgebert.data.tokenizer import load_tokenizer

    tok = load_tokenizer(tmp_path / "clf")
    data = load_task_data("sst2", tmp_path / "train.tsv", None, tok, 32)
    losses = {}
    for layers, cache in ((2, True), (2, False), (1, True)):
        cfg = DistillConfig.preset("task", tmp_path / "clf", tmp_path / "o", train_file=tmp_path / "train.tsv",
                                   layers=layers, alpha_kd=1.0, alpha_cos=1.0 if not cache else 0.0,
                                   alpha_hidden=0.0 if cache else 1.0, cache_teacher_logits=cache)
        teacher = load_teacher(cfg.teacher, "sst2")
        student, layer_map = build_student(teacher, cfg)
        task = TaskDistillationTask(student, teacher, tok, data, cfg, layer_map)
        task.to_device(torch.device("cpu"))
        assert (task.logit_cache is not None) == cache
        loss, _ = task.loss(task.model, task.make_batch(list(range(16)), list(range(16))))
        losses[(layers, cache)] = float(loss.detach())
    # hard labels only (the no-distillation baseline): no teacher pass, the loss is the CE
    cfg = DistillConfig.preset("task", tmp_path / "clf", tmp_path / "o", train_file=tmp_path / "train.tsv",
                               layers=1, alpha_kd=0.0, alpha_ce=1.0)
    teacher = load_teacher(cfg.teacher, "sst2")
    student, layer_map = build_student(teacher, cfg)
    task = TaskDistillationTask(student, teacher, tok, data, cfg, layer_map)
    task.to_device(torch.device("cpu"))
    assert not task.needs_teacher and task.logit_cache is None
    batch = task.make_batch(list(range(16)), list(range(16)))
    loss, metrics = task.loss(task.model, batch)
    expected = torch.nn.functional.cross_entropy(
        student(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).logits, batch["labels"])
    assert float(loss.detach()) == pytest.approx(float(expected.detach()), rel=1e-5)
    assert losses[(2, True)] == pytest.approx(0.0, abs=1e-6)
    assert losses[(2, False)] == pytest.approx(0.0, abs=1e-5)
    assert losses[(1, True)] > 1e-4 and losses[(1, True)] > 1000 * losses[(2, True)]


def test_resume_reproduces_the_loss_curve(tmp_path, toy):
    make_model_dir(tmp_path / "teacher", "BertForPreTraining", layers=2, dropout=0.1)  # dropout: RNG must resume
    common = dict(corpus=(toy / "corpus.txt",), train=dict(max_steps=8, eval_every=4, save_every=4))
    full = distill(DistillConfig.preset("tiny", tmp_path / "teacher", tmp_path / "full", **common))
    halves_cfg = DistillConfig.preset("tiny", tmp_path / "teacher", tmp_path / "halves", **common)
    first = distill(halves_cfg, stop_at_step=4)
    assert first.steps == 4
    second = distill(halves_cfg.replace(resume=True))
    assert (second.resumed_from, second.steps) == (4, 8)
    rows = lambda d: [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]  # noqa: E731
    a, b = rows(tmp_path / "full"), rows(tmp_path / "halves")
    assert [r["step"] for r in a] == [r["step"] for r in b] == list(range(1, 9))
    for ra, rb in zip(a, b):
        for key in ("loss", "loss_kd", "loss_mlm", "loss_cos", "grad_norm", "lr"):
            assert ra[key] == pytest.approx(rb[key], rel=1e-5, abs=1e-7), (ra["step"], key)
    assert a[-1]["eval_mlm_loss"] == pytest.approx(b[-1]["eval_mlm_loss"], rel=1e-5)
    wa, wb = load_model(tmp_path / "full").state_dict(), load_model(tmp_path / "halves").state_dict()
    assert all(torch.allclose(wa[k], wb[k], atol=1e-6) for k in wa)
    assert full.eval_metrics["mlm_loss"] == pytest.approx(second.eval_metrics["mlm_loss"], rel=1e-5)


def test_task_distillation_keeps_the_toy_task(tmp_path, toy):
    from edgebert.stages.finetune import FinetuneConfig, finetune

    teacher = finetune(FinetuneConfig.preset("tiny", model=toy / "teacher", task="sst2",
                                             train_file=toy / "train.tsv", dev_file=toy / "dev.tsv",
                                             out=tmp_path / "teacher_clf"))
    assert teacher.best_metrics["accuracy"] > 0.9
    result = distill(DistillConfig.preset(
        "task", tmp_path / "teacher_clf", tmp_path / "student", task="sst2", train_file=toy / "train.tsv",
        dev_file=toy / "dev.tsv", layers=1, epochs=3.0, max_seq_len=32,
        train=dict(lr=3e-3, batch_size=8, progress=False)))
    assert result.layer_map == [1] and result.teacher_layers == 2
    assert result.best_metrics["accuracy"] > 0.9
    assert result.eval_metrics["teacher_accuracy"] == pytest.approx(teacher.best_metrics["accuracy"])
    cfg = json.loads((tmp_path / "student" / "config.json").read_text())
    assert cfg["num_hidden_layers"] == 1 and cfg["id2label"] == {"0": "negative", "1": "positive"}
    assert json.loads((tmp_path / "student" / "distill_config.json").read_text())["layer_map"] == [1]
    # a narrower task student (issue #50): sliced from the teacher, it learns the logits and keeps the task
    narrow = distill(DistillConfig.preset(
        "task", tmp_path / "teacher_clf", tmp_path / "narrow", task="sst2", train_file=toy / "train.tsv",
        dev_file=toy / "dev.tsv", layers=1, hidden=32, epochs=3.0, max_seq_len=32,
        train=dict(lr=3e-3, batch_size=8, progress=False)))
    assert narrow.best_metrics["accuracy"] > 0.9
    cfg = json.loads((tmp_path / "narrow" / "config.json").read_text())
    assert (cfg["hidden_size"], cfg["num_attention_heads"], cfg["intermediate_size"]) == (32, 2, 64)


def test_cli_mlm_distillation_prints_and_saves_the_layer_map(tmp_path, toy, capsys):
    code, out, err = run_cli(capsys, "distill", toy / "teacher", "--corpus", toy / "corpus.txt",
                             "--out", tmp_path / "s", "--preset", "tiny", "--layers", "1", "--max-steps", "4")
    assert code == 0, err
    assert "teacher layers [1]" in out and "student saved" in out
    saved = json.loads((tmp_path / "s" / "distill_config.json").read_text())
    assert saved["layer_map"] == [1] and saved["teacher_layers"] == 2
    student, teacher = load_model(tmp_path / "s"), load_model(toy / "teacher")
    assert type(student).__name__ == "BertForPreTraining" and student.config.num_hidden_layers == 1
    # trained: the copied layer moved; not trained by MLM distillation: the pooler and NSP head
    assert not torch.equal(student.bert.encoder.layer[0].attention.self.query.weight,
                           teacher.bert.encoder.layer[1].attention.self.query.weight)
    assert torch.equal(student.bert.pooler.dense.weight, teacher.bert.pooler.dense.weight)
    assert len((tmp_path / "s" / "metrics.jsonl").read_text().splitlines()) == 4


def test_a_short_run_of_the_default_recipe_just_works(tmp_path, toy, capsys):
    """`edgebert distill TEACHER --corpus FILE --out DIR --layers 4 --max-steps 5`: warmup is a fraction of
    the run, so the 1000-step default recipe runs 5 steps; an explicit warmup longer than the run is refused."""
    make_model_dir(tmp_path / "teacher", "BertForPreTraining", layers=6, max_position=128)
    code, _, err = run_cli(capsys, "distill", tmp_path / "teacher", "--corpus", toy / "corpus.txt",
                           "--out", tmp_path / "s", "--layers", "4", "--max-steps", "5")
    assert code == 0, err
    saved = json.loads((tmp_path / "s" / "distill_config.json").read_text())
    assert saved["layer_map"] == [0, 2, 3, 5] and saved["alpha_mlm"] == 2.0           # the distilbert recipe
    assert (saved["train"]["max_steps"], saved["train"]["warmup_ratio"], saved["train"]["warmup_steps"]) == (5, 0.05, None)
    last = json.loads((tmp_path / "s" / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["step"] == 5 and last["lr"] == pytest.approx(5e-4 / 5)   # round(0.05 * 5) = 0 warmup steps
    code, _, err = run_cli(capsys, "distill", tmp_path / "teacher", "--corpus", toy / "corpus.txt",
                           "--out", tmp_path / "t", "--layers", "4", "--max-steps", "5", "--warmup-steps", "10")
    assert_one_line_error(code, err, "warmup_steps=10 must be smaller than max_steps=5")
    assert not (tmp_path / "t").exists()


def test_random_init_mlm_only_baseline_copies_nothing_and_skips_the_teacher(toy):
    cfg = DistillConfig.preset("tiny", toy / "teacher", toy / "unused", student_init="random", layers=1,
                               alpha_kd=0.0, alpha_cos=0.0, alpha_mlm=1.0)
    teacher = load_teacher(cfg.teacher, "mlm")
    student, layer_map = build_student(teacher, cfg)
    assert not torch.equal(student.bert.embeddings.word_embeddings.weight,
                           teacher.bert.embeddings.word_embeddings.weight)
    from edgebert.data.corpus import read_corpus
    from edgebert.data.mlm import create_examples, tokenize_documents
    from edgebert.data.tokenizer import SpecialIds, load_tokenizer

    tok = load_tokenizer(cfg.teacher)
    examples = create_examples(tokenize_documents(read_corpus(toy / "corpus.txt"), tok, 13), SpecialIds.of(tok), 32)
    task = MlmDistillationTask(student, None, tok, examples, [], cfg, layer_map)   # no teacher to run
    assert not task.needs_teacher
    batch = task.make_batch(list(range(8)), list(range(8)))
    loss, metrics = task.loss(task.model, batch)
    logits = student(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).prediction_logits
    expected = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch["labels"].reshape(-1))
    assert float(loss.detach()) == pytest.approx(float(expected.detach()), rel=1e-5)


def test_config_validation(toy):
    make = lambda **kw: DistillConfig(teacher="t", out="o", **kw)  # noqa: E731
    with pytest.raises(ConfigError, match="every loss weight is 0"):
        make(alpha_kd=0, alpha_mlm=0, alpha_cos=0)
    with pytest.raises(ConfigError, match="alpha-cos"):
        make(alpha_cos=-1)
    with pytest.raises(ConfigError, match="temperature"):
        make(temperature=0)
    with pytest.raises(ConfigError, match="2 entries"):
        make(layers=4, layer_map="0,5")
    with pytest.raises(ConfigError, match="alpha-mlm applies"):
        make(task="sst2", train_file="x.tsv")
    with pytest.raises(ConfigError, match="needs --train"):
        make(task="sst2", alpha_mlm=0)
    assert make(layer_map="0, 2,3,5").layer_map == (0, 2, 3, 5)
    with pytest.raises(CheckpointError, match="without a masked-LM head"):
        load_teacher(toy / "encoder_only", "mlm")


def test_cli_errors_are_one_line(tmp_path, toy, capsys):
    base = ("--corpus", toy / "corpus.txt", "--preset", "tiny", "--max-steps", "2")
    code, _, err = run_cli(capsys, "distill", tmp_path / "missing", "--out", tmp_path / "a", *base)
    assert_one_line_error(code, err, "teacher directory", "not found")
    code, _, err = run_cli(capsys, "distill", toy / "teacher", "--out", tmp_path / "b", *base, "--layers", "5")
    assert_one_line_error(code, err, "--layers 5", "teacher's depth (2 layers)")
    code, _, err = run_cli(capsys, "distill", toy / "teacher", "--out", tmp_path / "c", *base,
                           "--layers", "2", "--layer-map", "0,7")
    assert_one_line_error(code, err, "entry 7 is out of range")
    code, _, err = run_cli(capsys, "distill", toy / "encoder_only", "--out", tmp_path / "d", *base)
    assert_one_line_error(code, err, "masked-LM head")
    code, _, err = run_cli(capsys, "distill", toy / "teacher", "--out", tmp_path / "e", "--task", "sst2",
                           "--train", toy / "train.tsv")
    assert_one_line_error(code, err, "not a fine-tuned sequence classifier")
    code, _, err = run_cli(capsys, "distill", toy / "teacher", "--out", tmp_path / "f", *base,
                           "--layer-map", "a,b")
    assert_one_line_error(code, err, "comma-separated")
    assert not any((tmp_path / name).exists() for name in "abcdef")


def test_closest_layer_map_in_a_text_mode_is_measured_recorded_and_kept_on_resume(tmp_path, toy):
    make_model_dir(tmp_path / "teacher", "BertForPreTraining", layers=2)
    cfg = DistillConfig.preset("tiny", tmp_path / "teacher", tmp_path / "s", corpus=(toy / "corpus.txt",),
                               layer_map="closest", train=dict(max_steps=4, eval_every=2, save_every=2))
    first = distill(cfg, stop_at_step=2)
    choice = json.loads((tmp_path / "s" / "distill_config.json").read_text())["layer_choice"]
    assert choice["measure"] == "1 - cos of the last hidden states" and 0 < choice["examples"] <= 128
    assert [t["layer_map"] for t in choice["tried"]] == [[0], [1]]
    assert first.layer_map == choice["layer_map"] == min(choice["tried"], key=lambda t: t["distance"])["layer_map"]
    second = distill(cfg.replace(resume=True))
    assert (second.resumed_from, second.steps, second.layer_map) == (2, 4, first.layer_map)
