"""NER through the stages: per-token distillation (the loss, a run that keeps the toy task), and the CLI
path fine-tune -> distill -> export -> evaluate of a checkpoint and of its bundle."""

from __future__ import annotations

import json

import pytest
import torch

from distill_helpers import assert_one_line_error, make_model_dir, run_cli, write_toy_ner
from edgebert.errors import ConfigError
from edgebert.model import IGNORE_INDEX
from edgebert.stages.distill import DistillConfig, TaskDistillationTask, build_student, distill, load_teacher
from edgebert.stages.distill.config import build_distill_config


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """A tiny token classifier fine-tuned on toy NER (the teacher), and its data."""
    from edgebert.stages.finetune import FinetuneConfig, finetune

    root = tmp_path_factory.mktemp("ner_stages")
    make_model_dir(root / "base", "BertForMaskedLM", layers=2)
    write_toy_ner(root / "train.txt", 200, seed=0)
    write_toy_ner(root / "dev.txt", 60, seed=1, columns=4)       # the original 4-column layout
    result = finetune(FinetuneConfig.preset("tiny", model=root / "base", task="ner", train_file=root / "train.txt",
                                            dev_file=root / "dev.txt", out=root / "teacher", epochs=4.0))
    assert result.best_metrics["f1"] > 0.75
    return root, result


def _task(root, layers: int, **fields) -> tuple[TaskDistillationTask, dict]:
    from edgebert.data.task_data import load_task_data
    from edgebert.data.tokenizer import load_tokenizer

    cfg = DistillConfig.preset("ner", root / "teacher", root / "unused", train_file=root / "train.txt",
                               layers=layers, **fields)
    teacher = load_teacher(cfg.teacher, "ner")
    student, layer_map = build_student(teacher, cfg)
    tok = load_tokenizer(cfg.teacher)
    data = load_task_data("ner", root / "train.txt", None, tok, 32,
                          labels=[teacher.config.id2label[i] for i in range(teacher.config.num_labels)])
    task = TaskDistillationTask(student, teacher, tok, data, cfg, layer_map)
    task.to_device(torch.device("cpu"))
    return task, task.make_batch(list(range(16)), list(range(16)))


def test_token_kd_is_zero_for_the_teacher_itself_and_covers_real_sub_tokens(toy):
    root, _ = toy
    task, batch = _task(root, layers=2, alpha_ce=0.0)           # 2 of 2 layers: the student is the teacher
    assert isinstance(task.logit_cache, list) and task.logit_cache[0].shape[-1] == 5
    assert batch["teacher_logits"].shape == (*batch["input_ids"].shape, 5)
    loss, metrics = task.loss(task.model, batch)
    assert float(loss) == pytest.approx(0.0, abs=1e-6) and float(metrics["teacher_agreement"]) == 1.0
    real = task.real_tokens(batch["input_ids"])
    assert int(real.sum()) == int(batch["attention_mask"].sum()) - 2 * len(batch["input_ids"])   # no [CLS]/[SEP]
    assert int((batch["labels"] != IGNORE_INDEX).sum()) < int(real.sum())     # KD sees more than the first pieces

    student, batch = _task(root, layers=1)
    loss, metrics = student.loss(student.model, batch)
    logits = student.model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).logits
    t = batch["teacher_logits"]
    keep = student.real_tokens(batch["input_ids"])
    kd = torch.nn.functional.kl_div(torch.log_softmax(logits[keep] / 2, -1), torch.log_softmax(t[keep] / 2, -1),
                                    reduction="batchmean", log_target=True) * 4
    ce = torch.nn.functional.cross_entropy(logits.reshape(-1, 5), batch["labels"].reshape(-1))
    assert float(metrics["loss_kd"]) == pytest.approx(float(kd), rel=1e-5)
    assert float(metrics["loss_ce"]) == pytest.approx(float(ce), rel=1e-5)
    assert float(loss) == pytest.approx(float(kd + ce), rel=1e-5)
    assert float(kd) > 0.01


def test_ner_distillation_keeps_the_toy_task(tmp_path, toy):
    root, teacher = toy
    picked = build_distill_config(root / "teacher", tmp_path / "x", train_file=root / "train.txt")
    assert picked.task == "ner" and picked.is_token_task                          # from the architecture
    result = distill(DistillConfig.preset(
        "ner", root / "teacher", tmp_path / "student", train_file=root / "train.txt", dev_file=root / "dev.txt",
        layers=1, epochs=4.0, max_seq_len=32, train=dict(lr=3e-3, batch_size=8, progress=False)))
    assert result.layer_map == [1] and result.teacher_layers == 2
    assert result.eval_metrics["teacher_f1"] == pytest.approx(teacher.best_metrics["f1"])
    assert result.best_metrics["f1"] > 0.75
    best = json.loads((tmp_path / "student" / "best_checkpoint.json").read_text())
    assert best["metric"] == "f1"
    cfg = json.loads((tmp_path / "student" / "config.json").read_text())
    assert cfg["architectures"] == ["BertForTokenClassification"] and cfg["num_hidden_layers"] == 1
    assert cfg["id2label"] == {"0": "O", "1": "B-LOC", "2": "I-LOC", "3": "B-PER", "4": "I-PER"}
    assert result.eval_metrics["n"] == 60                       # the whole dev file by default


def test_task_distillation_evaluates_max_eval_examples(tmp_path, toy):
    """``--max-eval-examples`` caps the dev set of task distillation too (it was ignored there); the
    text modes keep their default of 2000 held-out examples."""
    root, _ = toy
    cfg = DistillConfig.preset("ner", root / "teacher", tmp_path / "student", train_file=root / "train.txt",
                               dev_file=root / "dev.txt", layers=1, max_eval_examples=17, max_seq_len=32,
                               train=dict(max_steps=2, batch_size=8, progress=False))
    assert cfg.eval_limit == 17
    result = distill(cfg.replace(epochs=None))
    assert result.eval_metrics["n"] == 17 and result.best_metrics["n"] == 17
    assert DistillConfig.preset("distilbert", "t", "o").eval_limit == 2000
    assert DistillConfig.preset("ner", "t", "o", train_file="x").eval_limit is None
    with pytest.raises(ConfigError, match="max_eval_examples and eval_batch_size must be >= 1"):
        DistillConfig.preset("ner", "t", "o", train_file="x", max_eval_examples=0)


def test_config_and_teacher_errors(toy):
    root, _ = toy
    with pytest.raises(ConfigError, match="--tag-column is for CoNLL files"):
        DistillConfig.preset("task", "t", "o", train_file="x.tsv", tag_column=3)
    with pytest.raises(ConfigError, match="needs --train"):
        DistillConfig.preset("ner", "t", "o")
    from edgebert.errors import CheckpointError

    with pytest.raises(CheckpointError, match="not a fine-tuned token classifier"):
        load_teacher(root / "base", "ner")


def test_cli_finetune_export_evaluate_checkpoint_and_bundle(tmp_path, toy, capsys):
    """The user's path: evaluate the checkpoint and its INT8 bundle on a 4-column file; the bundle runs
    through EdgeSession.tag and scores (nearly) what PyTorch scores."""
    root, _ = toy
    code, out, err = run_cli(capsys, "evaluate", root / "teacher", "--task", "ner", "--data", root / "dev.txt",
                             "--json")
    assert code == 0, err
    model = json.loads(out)
    assert model["kind"] == "model" and set(model["details"]["per_type"]) == {"LOC", "PER"}
    code, _, err = run_cli(capsys, "export", root / "teacher", "--out", tmp_path / "bundle", "--int8")
    assert code == 0, err
    manifest = json.loads((tmp_path / "bundle" / "manifest.json").read_text())
    assert manifest["task"] == "token-cls" and manifest["labels"]["1"] == "B-LOC"
    for precision in ("fp32", "int8"):
        code, out, err = run_cli(capsys, "evaluate", tmp_path / "bundle", "--task", "ner", "--data",
                                 root / "dev.txt", "--precision", precision, "--json")
        assert code == 0, err
        bundle = json.loads(out)
        assert bundle["details"]["through"] == "EdgeSession.tag(aggregation='none')"
        if precision == "fp32":   # same words, same first sub-tokens, float noise only
            assert bundle["metrics"]["f1"] == pytest.approx(model["metrics"]["f1"], abs=1e-9)
        else:
            assert abs(bundle["metrics"]["f1"] - model["metrics"]["f1"]) < 0.05
    code, out, err = run_cli(capsys, "evaluate", root / "teacher", "--task", "ner", "--data", root / "dev.txt")
    assert code == 0 and "PER: precision" in out
    code, _, err = run_cli(capsys, "evaluate", root / "teacher", "--task", "ner", "--data", root / "dev.txt",
                           "--tag-column", "3")
    assert_one_line_error(code, err, "has tag 'I-NP', expected one of")
    code, _, err = run_cli(capsys, "finetune", root / "base", "--task", "conll", "--train", root / "train.txt",
                           "--out", tmp_path / "x")
    assert_one_line_error(code, err, "unknown task 'conll'", "ner")


def test_bench_scores_entity_f1_of_every_path_on_conll_data(tmp_path, toy):
    """``edgebert bench --data dev.txt`` on the toy teacher's bundle: every path, the PyTorch reference
    included, tags the sentences as an app would and is scored by seqeval; the fp32 graph and PyTorch
    score what ``edgebert evaluate`` gives the checkpoint, INT8 close to it."""
    from edgebert.bench import BenchConfig, run_bench
    from edgebert.exporters import ExportConfig, export_bundle
    from edgebert.stages.evaluate import evaluate

    root, _ = toy
    bundle = tmp_path / "bundle"
    export_bundle(ExportConfig(model_dir=root / "teacher", out_dir=bundle, int8=True,
                               validation_batch_sizes=(1, 3), validation_seq_lens=(7, 32)))
    report = run_bench(BenchConfig(bundle, providers=("cpu",), precisions=("fp32", "int8"), batches=(1,),
                                   seqs=(16,), data=root / "dev.txt", reference=root / "teacher", threads=1,
                                   warmup=1, iters=3, calibration_size=32, eval_texts=8, progress=False,
                                   report_dir=tmp_path / "report"))
    ents = report["entities"]
    assert ents["sentences"] == 60 and ents["file"] == str(root / "dev.txt")
    scores = ents["results"]
    assert set(scores) == {"torch fp32", "onnx cpu fp32", "onnx cpu int8"}
    checkpoint = evaluate(root / "teacher", "ner", root / "dev.txt").metrics["f1"]
    assert checkpoint > 0.75
    assert scores["torch fp32"]["f1"] == pytest.approx(checkpoint, abs=1e-5)
    assert scores["onnx cpu fp32"]["f1"] == pytest.approx(checkpoint, abs=1e-5)
    assert abs(scores["onnx cpu int8"]["f1"] - checkpoint) < 0.05
    assert set(scores["onnx cpu int8"]["f1_per_type"]) == {"LOC", "PER"}
    md = (tmp_path / "report" / "report.md").read_text()
    assert "## Entity F1 on" in md and f"| onnx cpu fp32 | {scores['onnx cpu fp32']['f1']:.4f} |" in md
    # edgebert evaluate scores the bundle without PyTorch (a runtime install + seqeval), as bench did
    from test_evaluate import torch_free_metrics

    assert torch_free_metrics(bundle, "ner", root / "dev.txt")["f1"] == pytest.approx(checkpoint, abs=1e-5)
