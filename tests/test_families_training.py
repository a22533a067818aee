"""finetune and distill of DistilBERT and RoBERTa: a tiny masked-LM checkpoint (import-hf of a seeded
transformers model) fine-tuned into a sequence classifier, then distilled into a 1-layer student of its
own family; both written under the family's names, read back by transformers with edgebert's logits."""

from __future__ import annotations

import json

import pytest
import torch

from distill_helpers import write_toy_tsv
from edgebert.model import load_model
from edgebert.stages.distill import DistillConfig, distill
from edgebert.stages.finetune import FinetuneConfig, finetune
from edgebert.stages.import_hf import convert_hf, output_tensors, probe_batch
from family_fixtures import CLASS_PREFIX, hf_dir

transformers = pytest.importorskip("transformers")


def same_logits_in_transformers(folder, family: str) -> float:
    ours = load_model(folder)
    batch = probe_batch(ours.config, batch=3, seq=10)
    batch["input_ids"][batch["attention_mask"] == 0] = ours.config.pad_token_id
    theirs = getattr(transformers, CLASS_PREFIX[family] + "ForSequenceClassification").from_pretrained(str(folder))
    with torch.no_grad():
        want = theirs.eval()(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    return float((output_tensors(ours, batch)["logits"] - want).abs().max())


@pytest.mark.parametrize("family", ["distilbert", "roberta", "xlm-roberta"])
def test_finetune_and_distill_a_family_checkpoint(tmp_path, family):
    src, _ = hf_dir(tmp_path, family, "ForMaskedLM")
    base = convert_hf(src, tmp_path / "base").out_dir
    train, dev = write_toy_tsv(tmp_path / "train.tsv", 64, seed=0), write_toy_tsv(tmp_path / "dev.tsv", 32, seed=1)
    tuned = tmp_path / "tuned"
    finetune(FinetuneConfig.preset("tiny", model=base, task="sst2", train_file=train, dev_file=dev, out=tuned,
                                   epochs=1.0))
    config = json.loads((tuned / "config.json").read_text())
    assert config["model_type"] == family
    assert config["architectures"] == [CLASS_PREFIX[family] + "ForSequenceClassification"]
    assert same_logits_in_transformers(tuned, family) < 1e-5
    student = tmp_path / "student"
    distill(DistillConfig.preset("task", tuned, student, train_file=train, dev_file=dev, layers=1, epochs=1.0))
    config = json.loads((student / "config.json").read_text())
    layers = config["n_layers"] if family == "distilbert" else config["num_hidden_layers"]
    assert (config["model_type"], layers) == (family, 1)
    assert same_logits_in_transformers(student, family) < 1e-5


@pytest.mark.parametrize("family", ["distilbert", "roberta", "xlm-roberta"])
def test_token_and_span_heads_and_mlm_distillation_of_each_family(tmp_path, family):
    """A masked-LM checkpoint of each family: MLM distillation into a 1-layer student of its own kind
    (DistilBERT's recipe), and fine-tuning to a token classifier (CoNLL) and a span model (SQuAD), each
    written under the family's names and read back by transformers with edgebert's outputs."""
    from distill_helpers import write_toy_corpus, write_toy_ner
    from squad_helpers import write_toy_squad

    src, _ = hf_dir(tmp_path, family, "ForMaskedLM")
    base = convert_hf(src, tmp_path / "base").out_dir
    mlm_student = tmp_path / "mlm-student"
    corpus = write_toy_corpus(tmp_path / "corpus.txt", paragraphs=24)
    distill(DistillConfig.preset("tiny", base, mlm_student, corpus=[corpus], layers=1))
    config = json.loads((mlm_student / "config.json").read_text())
    assert config["model_type"] == family and config["architectures"] == [CLASS_PREFIX[family] + "ForMaskedLM"]
    heads = {"ner": ("ForTokenClassification", write_toy_ner(tmp_path / "ner.txt", 48, seed=0),
                     write_toy_ner(tmp_path / "ner-dev.txt", 16, seed=1)),
             "squad": ("ForQuestionAnswering", write_toy_squad(tmp_path / "squad.json", 24, seed=0),
                       write_toy_squad(tmp_path / "squad-dev.json", 8, seed=1))}
    for task, (head, train, dev) in heads.items():
        tuned = tmp_path / task
        finetune(FinetuneConfig.preset("tiny", model=base, task=task, train_file=train, dev_file=dev, out=tuned,
                                       epochs=1.0, max_seq_len=48))
        config = json.loads((tuned / "config.json").read_text())
        assert (config["model_type"], config["architectures"]) == (family, [CLASS_PREFIX[family] + head])
        ours = load_model(tuned)
        batch = probe_batch(ours.config, batch=2, seq=12)
        batch["input_ids"][batch["attention_mask"] == 0] = ours.config.pad_token_id
        theirs = getattr(transformers, CLASS_PREFIX[family] + head).from_pretrained(str(tuned)).eval()
        with torch.no_grad():
            want = theirs(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        got = output_tensors(ours, batch)
        names = ("logits",) if task == "ner" else ("start_logits", "end_logits")
        assert max(float((got[n] - getattr(want, n)).abs().max()) for n in names) < 1e-5, (family, task)
