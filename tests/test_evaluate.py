"""Evaluation: classifier accuracy/F1 equal an example-by-example count, MLM metrics equal the full
(B, T, V) computation and pretraining's own evaluation, bundles score like their model, errors are one line."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F

from distill_helpers import assert_one_line_error, make_model_dir, run_cli, write_toy_corpus, write_toy_tsv
from edgebert.data.mlm import mlm_eval_batches
from edgebert.model import load_model
from edgebert.stages.evaluate import evaluate


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    root = tmp_path_factory.mktemp("evaluate")
    make_model_dir(root / "mlm", "BertForPreTraining", layers=2, seed=3)
    write_toy_corpus(root / "corpus.txt", paragraphs=40, seed=5)
    write_toy_tsv(root / "dev.tsv", 60, seed=2)
    write_toy_tsv(root / "train.tsv", 200, seed=6)
    # a briefly trained classifier (a random head predicts one class for everything)
    from edgebert.stages.finetune import FinetuneConfig, finetune

    finetune(FinetuneConfig.preset("tiny", model=root / "mlm", task="sst2", train_file=root / "train.tsv",
                                   out=root / "clf", epochs=2.0))
    return root


def test_eval_set_is_fixed_whatever_the_batch_size(toy):
    """Every MLM evaluation (pretraining, distillation, this command) scores the same masked tokens:
    the examples and masks of a document set depend on nothing but the documents."""
    from edgebert.data.corpus import read_corpus
    from edgebert.data.tokenizer import load_tokenizer

    docs, tok = read_corpus(toy / "corpus.txt"), load_tokenizer(toy / "mlm")
    whole = mlm_eval_batches(docs, tok, 64, 40, batch_size=40)[0]
    parts = mlm_eval_batches(docs, tok, 64, 40, batch_size=7)
    assert len(parts) == 6 and int((whole["labels"] != -100).sum()) > 20
    row = 0
    for part in parts:
        n, width = part["input_ids"].shape
        for key in ("input_ids", "labels", "token_type_ids", "attention_mask"):
            assert torch.equal(part[key], whole[key][row:row + n, :width]), key
        assert torch.equal(part["next_sentence_label"], whole["next_sentence_label"][row:row + n])
        row += n
    assert row == 40


def test_classifier_metrics_equal_an_unbatched_count(toy):
    from edgebert.data.tasks import read_task_tsv
    from edgebert.data.tokenizer import load_tokenizer

    result = evaluate(toy / "clf", "sst2", toy / "dev.tsv", batch_size=7)
    model, tok = load_model(toy / "clf"), load_tokenizer(toy / "clf")
    rows, _ = read_task_tsv(toy / "dev.tsv", "sst2")
    preds = []
    with torch.no_grad():
        for row in rows:                    # one at a time: no padding at all
            enc = tok.encode(row.text_a)
            logits = model(torch.tensor([enc.ids]), token_type_ids=torch.tensor([enc.type_ids])).logits
            preds.append(int(logits.argmax()))
    labels = [r.label for r in rows]
    accuracy = sum(p == t for p, t in zip(preds, labels)) / len(rows)
    tp = sum(p == t == 1 for p, t in zip(preds, labels))
    f1 = 2 * tp / (preds.count(1) + labels.count(1))
    assert 0 < preds.count(1) < len(rows)                 # the check below can fail
    assert result.metrics["accuracy"] == pytest.approx(accuracy, abs=1e-12)
    assert result.metrics["f1"] == pytest.approx(f1, abs=1e-12)
    assert result.num_examples == 60 and result.kind == "model"


def test_mlm_metrics_equal_the_full_logits_computation(toy):
    result = evaluate(toy / "mlm", "mlm", toy / "corpus.txt", max_seq_len=64, max_examples=40, batch_size=16)
    again = evaluate(toy / "mlm", "mlm", toy / "corpus.txt", max_seq_len=64, max_examples=40, batch_size=8)
    assert result.metrics == pytest.approx(again.metrics, rel=1e-5)       # fixed masks, any batch size
    from edgebert.data.corpus import read_corpus
    from edgebert.data.tokenizer import load_tokenizer

    model = load_model(toy / "mlm")
    batches = mlm_eval_batches(read_corpus(toy / "corpus.txt"), load_tokenizer(toy / "mlm"), 64, 40, 16)
    ce, correct, masked = 0.0, 0, 0
    with torch.no_grad():
        for b in batches:
            logits = model(b["input_ids"], b["attention_mask"], b["token_type_ids"]).prediction_logits
            flat, labels = logits.reshape(-1, logits.shape[-1]), b["labels"].reshape(-1)
            ce += float(F.cross_entropy(flat, labels, ignore_index=-100, reduction="sum"))
            keep = labels != -100
            correct += int((flat.argmax(-1)[keep] == labels[keep]).sum())
            masked += int(keep.sum())
    m = result.metrics
    assert m["masked_tokens"] == masked > 20
    assert m["mlm_loss"] == pytest.approx(ce / masked, rel=1e-5)
    assert m["mlm_accuracy"] == pytest.approx(correct / masked, abs=1e-12)
    assert m["mlm_perplexity"] == pytest.approx(math.exp(ce / masked), rel=1e-5)


def test_mlm_evaluation_matches_pretrainings_own(tmp_path, toy):
    from edgebert.stages.pretrain import PretrainConfig, pretrain

    corpus = toy / "corpus.txt"
    cfg = PretrainConfig.preset("tiny", tmp_path / "pt", corpus=(corpus,), eval_corpus=(corpus,),
                                vocab_size=200, train=dict(max_steps=4, eval_every=0, progress=False))
    logged = pretrain(cfg).eval_metrics
    ours = evaluate(tmp_path / "pt", "mlm", corpus, max_seq_len=cfg.max_seq_len,
                    max_examples=cfg.max_eval_examples).metrics
    assert ours["mlm_accuracy"] == pytest.approx(logged["mlm_accuracy"], abs=1e-9)
    assert ours["mlm_perplexity"] == pytest.approx(logged["mlm_perplexity"], rel=1e-4)


def test_cli_json_and_errors(toy, tmp_path, capsys):
    code, out, err = run_cli(capsys, "evaluate", toy / "clf", "--task", "sst2", "--data", toy / "dev.tsv", "--json")
    assert code == 0, err
    printed = json.loads(out)
    direct = evaluate(toy / "clf", "sst2", toy / "dev.tsv")
    assert printed["metrics"]["accuracy"] == pytest.approx(direct.metrics["accuracy"])
    code, out, _ = run_cli(capsys, "evaluate", toy / "mlm", "--task", "mlm", "--data", toy / "corpus.txt")
    assert code == 0 and "mlm_perplexity" in out
    code, _, err = run_cli(capsys, "evaluate", toy / "mlm", "--task", "sst2", "--data", toy / "dev.tsv")
    assert_one_line_error(code, err, "BertForPreTraining", "not a BertForSequenceClassification")
    code, _, err = run_cli(capsys, "evaluate", toy / "clf", "--task", "mlm", "--data", toy / "corpus.txt")
    assert_one_line_error(code, err, "no masked-LM head")
    code, _, err = run_cli(capsys, "evaluate", toy / "clf", "--task", "mrpc", "--data", toy / "dev.tsv")
    assert_one_line_error(code, err, "lacks column")
    code, _, err = run_cli(capsys, "evaluate", tmp_path / "none", "--task", "sst2", "--data", toy / "dev.tsv")
    assert_one_line_error(code, err, "not found")
    fake = tmp_path / "fake_bundle"
    fake.mkdir()
    (fake / "manifest.json").write_text("{}", encoding="utf-8")
    code, _, err = run_cli(capsys, "evaluate", fake, "--task", "sst2", "--data", toy / "dev.tsv")
    assert_one_line_error(code, err, "manifest")


def test_bundle_scores_like_its_model(toy, tmp_path):
    pipeline = pytest.importorskip("edgebert.exporters.pipeline")
    from edgebert.exporters.config import ExportConfig

    pipeline.export_bundle(ExportConfig(model_dir=toy / "clf", out_dir=tmp_path / "bundle"))
    from_bundle = evaluate(tmp_path / "bundle", "sst2", toy / "dev.tsv", precision="fp32")
    from_model = evaluate(toy / "clf", "sst2", toy / "dev.tsv")
    assert from_bundle.kind == "bundle" and from_bundle.details["provider"] == "cpu"
    assert from_bundle.metrics == from_model.metrics
    # the device that serves the bundle can score it: the runtime install has no torch
    assert torch_free_metrics(tmp_path / "bundle", "sst2", toy / "dev.tsv") == from_bundle.metrics


def torch_free_metrics(bundle, task: str, data) -> dict:
    """``evaluate(bundle, task, data)`` in a fresh interpreter where importing torch (or onnx) fails."""
    import subprocess
    import sys

    # a finder that refuses them, as a runtime install would (a None in sys.modules confuses scipy)
    code = ("import importlib.abc, json, sys\n"
            "class NotInstalled(importlib.abc.MetaPathFinder):\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] in ('torch', 'onnx', 'transformers'):\n"
            "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
            "sys.meta_path.insert(0, NotInstalled())\n"
            "from edgebert.stages.evaluate import evaluate\n"
            f"print(json.dumps(evaluate({str(bundle)!r}, {task!r}, {str(data)!r}, precision='fp32').metrics))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)
