"""Fine-tuning: learns a trivially separable toy task, keeps the best checkpoint, batches by length,
handles sentence pairs and token tags, and turns bad input into one-line CLI errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from distill_helpers import assert_one_line_error, make_model_dir, run_cli, toy_tokenizer, write_toy_ner, write_toy_tsv
from edgebert.data.task_data import collate, encode_examples
from edgebert.data.tasks import read_task_tsv
from edgebert.errors import ConfigError
from edgebert.stages.classification import BestCheckpoint
from edgebert.stages.finetune import FinetuneConfig, finetune
from edgebert.training import LengthGroupedBatches


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    root = tmp_path_factory.mktemp("finetune")
    make_model_dir(root / "base", "BertForPreTraining")
    write_toy_tsv(root / "train.tsv", 200, seed=0)
    write_toy_tsv(root / "dev.tsv", 100, seed=1)
    return root


def _evals(out_dir, key="eval_accuracy"):
    rows = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if key in r]


def test_finetune_learns_separable_toy_task_and_keeps_best(toy):
    out = toy / "ft"
    result = finetune(FinetuneConfig.preset("tiny", model=toy / "base", task="sst2",
                                            train_file=toy / "train.tsv", dev_file=toy / "dev.tsv", out=out))
    assert result.best_metrics["accuracy"] > 0.9
    evals = _evals(out)
    assert [e["step"] for e in evals] == [25, 50, 75]          # one evaluation per epoch (200 / 8)
    assert all("eval_f1" in e for e in evals)
    best = json.loads((out / "best_checkpoint.json").read_text())
    assert best["value"] == max(e["eval_accuracy"] for e in evals) == result.best_metrics["accuracy"]
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["BertForSequenceClassification"]
    assert cfg["id2label"] == {"0": "negative", "1": "positive"}
    # the saved model scores what was logged for the best step
    from edgebert.stages.evaluate import evaluate

    scored = evaluate(out, "sst2", toy / "dev.tsv")
    assert scored.metrics["accuracy"] == pytest.approx(best["value"], abs=1e-9)


def test_best_checkpoint_writes_the_best_not_the_last(tmp_path, tiny_config):
    from edgebert.model import BertForSequenceClassification, load_model

    torch.manual_seed(0)
    model = BertForSequenceClassification(tiny_config.replace(id2label={0: "a", 1: "b"}))
    keeper = BestCheckpoint("accuracy")
    assert keeper.update(model, {"accuracy": 0.8}, step=10)
    good = model.classifier.weight.detach().clone()
    with torch.no_grad():
        model.classifier.weight.add_(1.0)
    assert not keeper.update(model, {"accuracy": 0.7}, step=20)
    keeper.save(model, tmp_path)
    saved = load_model(tmp_path)
    assert torch.equal(saved.classifier.weight, good)
    assert not torch.equal(saved.classifier.weight, model.classifier.weight)
    assert json.loads((tmp_path / "best_checkpoint.json").read_text())["step"] == 10


def test_length_grouped_batches_pad_less_and_are_deterministic():
    rng = np.random.default_rng(0)
    lengths = rng.integers(3, 60, size=640)
    grouped = LengthGroupedBatches(lengths, 32, seed=3, group_size=5)
    widths = []
    seen = []
    for _ in range(20):                       # one epoch
        idx, keys = grouped.next_batch()
        widths.append(lengths[idx].max() - lengths[idx].min())
        seen.extend(idx)
    assert sorted(seen) == list(range(640))   # every example once per epoch
    plain = np.random.default_rng(1).permutation(640).reshape(20, 32)
    assert np.mean(widths) < 0.5 * np.mean([lengths[b].max() - lengths[b].min() for b in plain])
    fresh = LengthGroupedBatches(lengths, 32, seed=3, group_size=5)
    first_three = [fresh.next_batch()[0] for _ in range(3)]
    again = LengthGroupedBatches(lengths, 32, seed=3, group_size=5)
    again.load_state_dict({"position": 64, "num_examples": 640})  # resume before batch 3
    assert again.next_batch()[0] == first_three[2]
    other_epoch = LengthGroupedBatches(lengths, 32, seed=3, group_size=5)
    other_epoch.load_state_dict({"position": 640, "num_examples": 640})
    assert other_epoch.next_batch()[0] != first_three[0]


def test_pair_task_gets_segment_ids_and_dynamic_padding(tmp_path):
    path = write_toy_tsv(tmp_path / "pairs.tsv", 20, pair=True)
    rows, spec = read_task_tsv(path, "tsv")
    assert spec.is_pair and spec.labels == ("0", "1")
    data = encode_examples(rows, toy_tokenizer(), max_seq_len=16)
    assert max(data.lengths) <= 16 and data.truncated > 0
    batch = collate(data, [0, 1, 2], pad_id=0)
    width = max(data.lengths[:3])
    assert batch["input_ids"].shape == (3, width)
    for r in range(3):
        n = int(data.lengths[r])
        types = batch["token_type_ids"][r, :n]
        assert types[0] == 0 and types[-1] == 1 and int(batch["attention_mask"][r].sum()) == n
        assert (batch["input_ids"][r, n:] == 0).all()


def test_token_classification_path_learns(tmp_path):
    """ner: labels from the data (O first, then B-/I- per type) saved as id2label/label2id, the best
    checkpoint kept by dev entity F1, and ``evaluate`` scoring it with the same figure."""
    make_model_dir(tmp_path / "base", "BertForMaskedLM")
    write_toy_ner(tmp_path / "train.txt", 150, seed=0)
    write_toy_ner(tmp_path / "dev.txt", 50, seed=1)
    result = finetune(FinetuneConfig.preset("tiny", model=tmp_path / "base", task="ner",
                                            train_file=tmp_path / "train.txt",
                                            dev_file=tmp_path / "dev.txt", out=tmp_path / "ner"))
    assert result.labels == ("O", "B-LOC", "I-LOC", "B-PER", "I-PER")
    assert result.best_metrics["f1"] > 0.75      # untrained: ~0 entities right
    best = json.loads((tmp_path / "ner" / "best_checkpoint.json").read_text())
    assert best["metric"] == "f1" and best["value"] == pytest.approx(result.best_metrics["f1"])
    cfg = json.loads((tmp_path / "ner" / "config.json").read_text())
    assert cfg["architectures"] == ["BertForTokenClassification"]
    assert cfg["id2label"] == {str(i): t for i, t in enumerate(result.labels)}
    assert cfg["label2id"] == {t: i for i, t in enumerate(result.labels)}
    from edgebert.stages.evaluate import evaluate

    scored = evaluate(tmp_path / "ner", "ner", tmp_path / "dev.txt")
    assert scored.metrics["f1"] == pytest.approx(result.best_metrics["f1"], abs=1e-9)
    assert scored.num_examples == 50 and set(scored.details["per_type"]) == {"LOC", "PER"}
    assert scored.metrics["words"] == sum(len(b.splitlines()) for b in
                                          (tmp_path / "dev.txt").read_text().strip().split("\n\n"))


def test_config_validation():
    with pytest.raises(ConfigError, match="unknown task"):
        FinetuneConfig(model="m", task="qqp", train_file="t", out="o")
    with pytest.raises(ConfigError, match="lr"):
        FinetuneConfig.preset("glue", model="m", task="sst2", train_file="t", out="o", train=dict(lr=0))
    with pytest.raises(ConfigError, match="grad_accum"):
        FinetuneConfig.preset("glue", model="m", task="sst2", train_file="t", out="o",
                              train=dict(batch_size=6, grad_accum=4))
    cfg = FinetuneConfig.preset("glue", model="m", task="sst2", train_file="t", dev_file="d", out="o")
    train = cfg.train_config(1000)        # 32 steps per epoch, 3 epochs
    assert (train.max_steps, train.resolved_warmup_steps(), train.eval_every) == (96, 6, 32)


def test_cli_errors_are_one_line(toy, tmp_path, capsys):
    base, good = toy / "base", toy / "train.tsv"
    code, _, err = run_cli(capsys, "finetune", tmp_path / "nope", "--task", "sst2", "--train", good,
                           "--out", tmp_path / "o1")
    assert_one_line_error(code, err, "not found")
    wrong_cols = tmp_path / "cols.tsv"
    wrong_cols.write_text("text\tlabel\nfine film\t1\n", encoding="utf-8")
    code, _, err = run_cli(capsys, "finetune", base, "--task", "sst2", "--train", wrong_cols,
                           "--out", tmp_path / "o2")
    assert_one_line_error(code, err, "cols.tsv:1", "sentence")
    wrong_label = tmp_path / "labels.tsv"
    wrong_label.write_text("sentence\tlabel\nfine film\t1\nbad film\tneg\n", encoding="utf-8")
    code, _, err = run_cli(capsys, "finetune", base, "--task", "sst2", "--train", good, "--dev", wrong_label,
                           "--out", tmp_path / "o3")
    assert_one_line_error(code, err, "labels.tsv:3", "'neg'")
    short_row = tmp_path / "short.tsv"
    short_row.write_text("sentence\tlabel\nfine film\n", encoding="utf-8")
    code, _, err = run_cli(capsys, "finetune", base, "--task", "sst2", "--train", short_row,
                           "--out", tmp_path / "o4")
    assert_one_line_error(code, err, "short.tsv:2")
    code, _, err = run_cli(capsys, "finetune", base, "--task", "qqp", "--train", good, "--out", tmp_path / "o5")
    assert_one_line_error(code, err, "unknown task")
    assert not (tmp_path / "o2").exists() and not (tmp_path / "o3").exists()
