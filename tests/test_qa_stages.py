"""Question answering through the stages: the span head against transformers' BertForQuestionAnswering
(both directions through checkpoints, bitwise), ``finetune --task squad`` on a toy SQuAD file -> a
checkpoint transformers loads bitwise, and ``distill --task squad`` (the span KD, a student that keeps
the toy task)."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from distill_helpers import assert_one_line_error, make_model_dir, run_cli
from edgebert.errors import CheckpointError, ConfigError
from edgebert.model import BertForQuestionAnswering, load_model, save_model
from edgebert.model.bert import MASK_VALUE
from edgebert.stages.import_hf import convert_hf
from squad_helpers import write_toy_squad


@pytest.fixture
def transformers_quiet():
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    return transformers


def padded_batch(cfg, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, cfg.vocab_size, (3, 14), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    mask[2, 4:] = 0
    types = torch.zeros_like(ids)
    types[:, 7:] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def same_weights(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.hf
def test_span_head_round_trips_through_transformers_bitwise(tmp_path, tiny_config, transformers_quiet):
    tf = transformers_quiet
    torch.manual_seed(5)
    model = BertForQuestionAnswering(tiny_config).eval()
    save_model(model, tmp_path / "eb")
    hf, info = tf.BertForQuestionAnswering.from_pretrained(tmp_path / "eb", output_loading_info=True)
    assert not (info["missing_keys"] or info["unexpected_keys"] or info["mismatched_keys"]), info
    batch = padded_batch(tiny_config)
    positions = {"start_positions": torch.tensor([1, 3, 0]), "end_positions": torch.tensor([2, 30, 0])}
    with torch.no_grad():
        ours, theirs = model(**batch, **positions), hf.eval()(**batch, **positions)
    assert torch.equal(ours.start_logits, theirs.start_logits) and torch.equal(ours.end_logits, theirs.end_logits)
    assert float(ours.loss) == float(theirs.loss) and float(ours.loss) > 0        # position 30 clamped, ignored
    assert ours.span_logits.shape == (3, 2, 14)

    # back: transformers' save_pretrained -> import-hf, weights and outputs unchanged
    hf.save_pretrained(tmp_path / "hf")
    report = convert_hf(tmp_path / "hf", tmp_path / "back")
    assert report.architecture == "BertForQuestionAnswering" and report.max_abs_diff == 0.0
    assert set(report.dropped) <= {"bert.embeddings.position_ids"}
    back = load_model(report.out_dir)
    assert type(back) is BertForQuestionAnswering and back.config.id2label is None
    assert same_weights(load_file(str(report.out_dir / "model.safetensors")), load_file(str(tmp_path / "eb" / "model.safetensors")))
    with torch.no_grad():
        assert torch.equal(back(**batch).start_logits, theirs.start_logits)


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """A tiny span model fine-tuned on the toy SQuAD task (the teacher), and its data."""
    from edgebert.stages.finetune import FinetuneConfig, finetune

    root = tmp_path_factory.mktemp("qa_stages")
    make_model_dir(root / "base", "BertForMaskedLM", layers=2)
    write_toy_squad(root / "train.json", 300, seed=0, words=(6, 30))
    write_toy_squad(root / "dev.json", 60, seed=1, words=(6, 30), golds=2)
    result = finetune(FinetuneConfig.preset("tiny", model=root / "base", task="squad", train_file=root / "train.json",
                                            dev_file=root / "dev.json", out=root / "teacher", epochs=3.0,
                                            doc_stride=8))
    return root, result


def test_finetune_squad_learns_the_toy_task_and_keeps_the_best_checkpoint(toy):
    root, result = toy
    assert result.num_train_examples > 300                            # several windows for the long contexts
    assert result.best_metrics["f1"] >= 90.0 and result.best_metrics["n"] == 60
    assert result.best_metrics["exact_match"] <= result.best_metrics["f1"]
    best = json.loads((root / "teacher" / "best_checkpoint.json").read_text())
    assert best["metric"] == "f1" and best["value"] == result.best_metrics["f1"]
    model = load_model(root / "teacher")
    assert type(model) is BertForQuestionAnswering and model.config.id2label is None
    lines = [json.loads(x) for x in (root / "teacher" / "metrics.jsonl").read_text().splitlines()]
    evals = [x for x in lines if "eval_f1" in x]
    assert len(evals) == 3 and max(x["eval_f1"] for x in evals) == pytest.approx(result.best_metrics["f1"])


@pytest.mark.hf
def test_a_finetuned_span_checkpoint_loads_in_transformers_bitwise(tmp_path, toy, transformers_quiet, capsys):
    tf = transformers_quiet
    root, _ = toy
    code, out, err = run_cli(capsys, "finetune", root / "base", "--task", "squad", "--train", root / "train.json",
                             "--dev", root / "dev.json", "--out", tmp_path / "qa", "--preset", "tiny",
                             "--max-steps", "3", "--doc-stride", "8", "--max-train-examples", "40")
    assert code == 0, err
    assert "best dev (step 3): " in out and "exact_match" in out and "f1" in out
    ours = load_model(tmp_path / "qa")
    hf, info = tf.BertForQuestionAnswering.from_pretrained(tmp_path / "qa", output_loading_info=True)
    assert not (info["missing_keys"] or info["unexpected_keys"] or info["mismatched_keys"]), info
    assert same_weights({k: v for k, v in hf.state_dict().items() if not k.endswith("position_ids")},
                        dict(ours.state_dict()))
    batch = padded_batch(ours.config)
    with torch.no_grad():
        a, b = ours(**batch), hf.eval()(**batch)
    assert torch.equal(a.start_logits, b.start_logits) and torch.equal(a.end_logits, b.end_logits)


def test_squad_errors_are_one_line(tmp_path, toy, capsys):
    root, _ = toy
    bad = json.loads((root / "train.json").read_text())
    bad["data"][0]["paragraphs"][2]["qas"][0]["answers"][0]["answer_start"] += 2
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    code, _, err = run_cli(capsys, "finetune", root / "base", "--task", "squad", "--train", tmp_path / "bad.json",
                           "--out", tmp_path / "x", "--preset", "tiny")
    assert_one_line_error(code, err, str(tmp_path / "bad.json"), "question q0-2", "answer_start")
    code, _, err = run_cli(capsys, "finetune", root / "base", "--task", "sst2", "--train", root / "train.json",
                           "--out", tmp_path / "y", "--doc-stride", "8")
    assert_one_line_error(code, err, "--doc-stride is for SQuAD files")
    code, _, err = run_cli(capsys, "finetune", root / "base", "--task", "squad", "--train", root / "train.json",
                           "--out", tmp_path / "z", "--preset", "tiny", "--doc-stride", "13")
    assert_one_line_error(code, err, "doc_stride=13 leaves no new context per window")


# --------------------------------------------------------------------------- distillation
def _task(root, layers: int, **fields):
    from edgebert.data.task_data import load_task_data
    from edgebert.data.tokenizer import load_tokenizer
    from edgebert.stages.distill import DistillConfig, TaskDistillationTask, build_student, load_teacher

    cfg = DistillConfig.preset("squad", root / "teacher", root / "unused", train_file=root / "train.json",
                               layers=layers, max_seq_len=32, doc_stride=8, **{"layer_map": None, **fields})
    teacher = load_teacher(cfg.teacher, "squad")
    student, layer_map = build_student(teacher, cfg)
    tok = load_tokenizer(cfg.teacher)
    data = load_task_data("squad", root / "train.json", None, tok, 32, doc_stride=8)
    task = TaskDistillationTask(student, teacher, tok, data, cfg, layer_map)
    task.to_device(torch.device("cpu"))
    return task, task.make_batch(list(range(16)), list(range(16)))


def test_span_kd_is_zero_for_the_teacher_itself_and_the_kl_of_start_and_end(toy):
    root, _ = toy
    task, batch = _task(root, layers=2, alpha_ce=0.0)                 # 2 of 2 layers: the student is the teacher
    lengths = batch["attention_mask"].sum(1)
    assert isinstance(task.logit_cache, list) and task.logit_cache[0].shape[0] == 2
    cached = batch["teacher_logits"]
    assert cached.shape == (16, 2, batch["input_ids"].shape[1])
    assert (cached[1, :, lengths[1]:] == MASK_VALUE).all() and (cached[1, :, :lengths[1]] > MASK_VALUE).all()
    loss, metrics = task.loss(task.model, batch)
    assert float(loss.detach()) == pytest.approx(0.0, abs=1e-6) and float(metrics["teacher_agreement"]) == 1.0

    student, batch = _task(root, layers=1)
    loss, metrics = student.loss(student.model, batch)
    with torch.no_grad():
        out = student.model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    pad = batch["attention_mask"] == 0
    s = torch.stack([out.start_logits.masked_fill(pad, MASK_VALUE), out.end_logits.masked_fill(pad, MASK_VALUE)], 1)
    t = batch["teacher_logits"]
    kd = sum(torch.nn.functional.kl_div(torch.log_softmax(s[:, k] / 2, -1), torch.log_softmax(t[:, k] / 2, -1),
                                        reduction="batchmean", log_target=True) for k in (0, 1)) / 2 * 4
    ce = (torch.nn.functional.cross_entropy(s[:, 0], batch["start_positions"])
          + torch.nn.functional.cross_entropy(s[:, 1], batch["end_positions"])) / 2
    assert float(metrics["loss_kd"]) == pytest.approx(float(kd), rel=1e-5)
    assert float(metrics["loss_ce"]) == pytest.approx(float(ce), rel=1e-5)
    assert float(loss.detach()) == pytest.approx(float(kd + ce), rel=1e-5) and float(kd) > 1e-3
    # with a hidden-state term the teacher runs every step (no cache) and gives the same KD (to float
    # noise: the cache was computed in other batches, padded to other widths)
    hidden, batch = _task(root, layers=1, alpha_hidden=1.0, alpha_cos=1.0)
    assert hidden.logit_cache is None and "teacher_logits" not in batch
    _, metrics = hidden.loss(hidden.model, batch)
    assert float(metrics["loss_kd"]) == pytest.approx(float(kd), rel=1e-3)
    assert float(metrics["loss_hidden"]) > 0 and float(metrics["loss_cos"]) > 0


def test_squad_distillation_keeps_the_toy_task(tmp_path, toy):
    from edgebert.stages.distill import DistillConfig, distill
    from edgebert.stages.distill.config import build_distill_config

    root, teacher = toy
    picked = build_distill_config(root / "teacher", tmp_path / "x", train_file=root / "train.json", doc_stride=8,
                                  max_seq_len=32)
    assert picked.task == "squad" and picked.is_span_task and picked.alpha_kd == picked.alpha_ce == 1.0
    result = distill(DistillConfig.preset(
        "squad", root / "teacher", tmp_path / "student", train_file=root / "train.json", dev_file=root / "dev.json",
        layers=1, epochs=3.0, max_seq_len=32, doc_stride=8, train=dict(lr=3e-3, batch_size=8, progress=False)))
    assert result.best_metrics["f1"] >= 0.9 * teacher.best_metrics["f1"]
    assert result.eval_metrics["teacher_f1"] == pytest.approx(teacher.best_metrics["f1"])
    assert "teacher_exact_match" in result.eval_metrics
    student = load_model(tmp_path / "student")
    assert type(student) is BertForQuestionAnswering and student.config.num_hidden_layers == 1
    # the recipe's --layer-map closest: both 1-of-2 choices measured, the nearer one kept and recorded
    choice = json.loads((tmp_path / "student" / "distill_config.json").read_text())["layer_choice"]
    assert [t["layer_map"] for t in choice["tried"]] == [[0], [1]] and choice["examples"] == 128
    assert choice["layer_map"] == result.layer_map == min(choice["tried"], key=lambda t: t["distance"])["layer_map"]


def test_distill_squad_refuses_a_teacher_without_a_span_head(tmp_path, toy):
    from edgebert.stages.distill import DistillConfig, distill

    root, _ = toy
    with pytest.raises(CheckpointError, match="is a BertForMaskedLM, not a fine-tuned span"):
        distill(DistillConfig.preset("squad", root / "base", tmp_path / "s", train_file=root / "train.json",
                                     max_seq_len=32, doc_stride=8))
    with pytest.raises(ConfigError, match="--doc-stride is for SQuAD files"):
        DistillConfig.preset("ner", root / "base", tmp_path / "s", train_file=root / "train.json", doc_stride=8)


def test_squad_recipes_default_and_run_qa(tmp_path):
    """``--task squad`` takes the ``squad`` recipe (run_qa + a third epoch + 10% warmup); ``run-qa`` is
    transformers' example as it is (2 epochs, no warmup); the student recipe runs 6 epochs at 2e-4 from the
    teacher layers closest to the teacher."""
    from edgebert.stages.distill import build_distill_config
    from edgebert.stages.finetune import build_finetune_config

    train = tmp_path / "train.json"
    default = build_finetune_config(tmp_path, "squad", train, tmp_path / "o")
    run_qa = build_finetune_config(tmp_path, "squad", train, tmp_path / "o", preset="run-qa")
    assert (default.epochs, default.train.warmup_ratio, default.train.lr, default.max_seq_len) == (3.0, 0.1, 1e-4, 384)
    assert (run_qa.epochs, run_qa.train.warmup_ratio, run_qa.train.lr, run_qa.train.batch_size) == (2.0, 0.0, 1e-4, 16)
    student = build_distill_config(tmp_path, tmp_path / "s", task="squad", train_file=train)
    assert (student.epochs, student.train.lr, student.alpha_kd, student.alpha_ce) == (6.0, 2e-4, 1.0, 1.0)
    assert student.layer_map == "closest"

