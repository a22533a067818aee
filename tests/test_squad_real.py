"""SQuAD on the real data (../shared/data/squad, all-MiniLM-L6-v2's tokenizer and weights), slow: the
windows and labels of both files equal transformers' fast tokenizer + ``run_qa``'s labelling, and a
short fine-tune from MiniLM learns (dev F1 well above the untrained head's)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from conftest import shared_file
from edgebert.data.tokenizer import load_tokenizer
from edgebert.qa.squad_file import read_squad
from edgebert.qa.windows import squad_windows

pytestmark = pytest.mark.slow

TRAIN, DEV = ("squad", "train-v1.1-first11.json"), ("squad", "dev-v2.0-first10.json")


def run_qa_labels(enc, examples, sample_mapping, cls_id) -> tuple[list[int], list[int]]:
    """transformers' examples/pytorch/question-answering/run_qa.py ``prepare_train_features`` labelling."""
    starts, ends = [], []
    for i, offsets in enumerate(enc["offset_mapping"]):
        cls_index = enc["input_ids"][i].index(cls_id)
        seq = enc.sequence_ids(i)
        example = examples[sample_mapping[i]]
        if not example.answers:
            starts.append(cls_index), ends.append(cls_index)
            continue
        start_char, end_char = example.answers[0].start, example.answers[0].end
        first = seq.index(1)
        last = len(seq) - 1 - seq[::-1].index(1)
        if not (offsets[first][0] <= start_char and offsets[last][1] >= end_char):
            starts.append(cls_index), ends.append(cls_index)
            continue
        while first < len(offsets) and offsets[first][0] <= start_char:
            first += 1
        starts.append(first - 1)
        while offsets[last][1] >= end_char:
            last -= 1
        ends.append(last + 1)
    return starts, ends


@pytest.mark.hf
@pytest.mark.parametrize("parts", [TRAIN, DEV], ids=["train-v1.1", "dev-v2.0"])
def test_real_windows_and_labels_equal_transformers_run_qa(minilm_dir, parts):
    transformers = pytest.importorskip("transformers")
    examples = read_squad(shared_file(*parts))
    windows = squad_windows(examples, load_tokenizer(minilm_dir))
    hf = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    enc = hf([e.question.lstrip() for e in examples], [e.context for e in examples], truncation="only_second",
             max_length=384, stride=128, return_overflowing_tokens=True, return_offsets_mapping=True)
    mapping = enc["overflow_to_sample_mapping"]
    assert len(windows) == len(enc["input_ids"]) > len(examples) and list(windows.example_index) == list(mapping)
    assert all(windows.input_ids[w].tolist() == enc["input_ids"][w] for w in range(len(windows)))
    assert all(windows.token_type_ids[w].tolist() == enc["token_type_ids"][w] for w in range(len(windows)))
    starts, ends = run_qa_labels(enc, examples, mapping, hf.cls_token_id)
    assert windows.start_positions.tolist() == starts and windows.end_positions.tolist() == ends
    labelled = int((windows.start_positions > 0).sum())
    print(f"{parts[1]}: {len(examples)} questions, {len(windows)} windows, {labelled} holding their answer")


def test_a_short_finetune_from_minilm_learns_squad(tmp_path, minilm_dir):
    from edgebert.model import load_model
    from edgebert.stages.finetune import build_finetune_config, finetune
    from edgebert.stages.import_hf import import_hf
    from edgebert.stages.metrics import squad_metrics

    train, dev = shared_file(*TRAIN), shared_file(*DEV)
    base = import_hf(minilm_dir, tmp_path / "minilm")
    cfg = build_finetune_config(base, "squad", train, tmp_path / "qa", dev_file=dev, max_train_examples=480,
                                max_eval_examples=100, max_seq_len=256,
                                train=dict(max_steps=30, lr=2e-4, log_every=5, progress=False))
    result = finetune(cfg)
    tok = load_tokenizer(base)
    examples = [e for e in read_squad(dev) if e.has_answer][:100]
    torch.manual_seed(cfg.train.seed)
    untrained = load_model(base, "BertForQuestionAnswering", allow_new_heads=True)
    before = squad_metrics(untrained, squad_windows(examples, tok, 256), examples)
    after = result.best_metrics
    print(f"MiniLM + span head, 30 steps of 16 windows: dev EM {after['exact_match']:.1f} F1 {after['f1']:.1f} "
          f"(untrained: EM {before['exact_match']:.1f} F1 {before['f1']:.1f}) in {result.wall_s:.0f} s")
    assert after["n"] == before["n"] == 100
    assert after["f1"] > before["f1"] + 5.0 and after["exact_match"] > before["exact_match"]
    losses = [json.loads(x)["loss"] for x in (tmp_path / "qa" / "metrics.jsonl").read_text().splitlines()]
    assert losses[-1] < losses[0] - 1.0 and np.isfinite(losses).all()
