"""Training a reranker: the question-sentence pairs and their hard negatives, the dev groups, MRR@10 / NDCG@10
(torchmetrics) on known orders, and ``finetune`` -> ``distill`` -> ``export`` with ``--task rerank`` on a tiny seeded
model (the built-in questions as a SQuAD file), the student a CrossEncoder that exports as a reranker."""

from __future__ import annotations

import json

import numpy as np
import pytest

from edgebert.data.rerank_data import dev_groups, training_pairs
from edgebert.qa.rank_groups import RankGroup, builtin_rank_groups, rank_groups, sentences
from edgebert.qa.squad_file import BUILTIN_QUESTIONS, read_squad
from runtime_fixtures import make_tiny_model_dir

torch = pytest.importorskip("torch")
pytest.importorskip("torchmetrics")


def _bag_of_words(texts: list[str]) -> np.ndarray:
    """A deterministic stand-in retriever: hashed word counts, unit length."""
    out = np.zeros((len(texts), 64))
    for i, t in enumerate(texts):
        for w in t.lower().split():
            out[i, hash(w) % 64] += 1
    return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


def test_sentences_keep_abbreviations_and_numbers_whole():
    text = "The U.S. Army paid 3.5 dollars. Then it left! Did it? \"Yes.\" It did"
    assert [text[a:b] for a, b in sentences(text)] == ["The U.S. Army paid 3.5 dollars.", "Then it left!", "Did it?",
                                                     "\"Yes.\"", "It did"]


def test_groups_mark_the_sentence_holding_the_answer():
    groups = builtin_rank_groups(40)
    assert len(groups) == 40 and all(len(g.passages) == 20 for g in groups)
    examples = {e.id: e for e in read_squad(BUILTIN_QUESTIONS)}
    for g in groups:
        answer = examples[g.id].answers[0].text
        assert [i for i, p in enumerate(g.passages) if answer in p][:1] == sorted(g.relevant)[:1], g.query


def test_training_pairs_hold_one_positive_and_the_retrievers_hard_negatives():
    examples = read_squad(BUILTIN_QUESTIONS)
    pairs, labels, stats = training_pairs(examples, _bag_of_words, article_negatives=2, hard_negatives=2)
    assert stats["positives"] == int(labels.sum()) == stats["questions"] > 400
    assert len(pairs) == len(labels) <= 5 * stats["questions"]
    first = [p for (q, p), y in zip(pairs, labels) if q == pairs[0][0]]
    assert len(first) == 5 and labels[0] == 1 and labels[1:5].sum() == 0
    assert len(set(first)) == 5                                # the positive is never its own negative


def test_mrr_and_ndcg_are_torchmetrics_on_known_orders():
    from edgebert.stages.rerank_metrics import ranking_figures

    groups = [RankGroup("q1", ("a", "b", "c"), frozenset({2})), RankGroup("q2", ("a", "b"), frozenset({0})),
              RankGroup("q3", tuple("abcdefghijkl"), frozenset({11})), RankGroup("q4", ("a",), frozenset())]
    scores = [np.array([-3.0, -1.0, -2.0]),   # relevant ranked 2nd: 1/2 (negative logits count as scores)
              np.array([5.0, 5.0]),           # a tie: document order, relevant first: 1
              np.arange(12.0),                # relevant ranked 1st of 12: 1
              np.array([0.3])]                # no relevant passage: 0
    figures = ranking_figures(groups, scores)
    assert figures["mrr@10"] == pytest.approx((0.5 + 1 + 1 + 0) / 4)
    assert figures["ndcg@10"] == pytest.approx((1 / np.log2(3) + 1 + 1 + 0) / 4)
    scores[2] = -np.arange(12.0)                      # relevant ranked 12th: past the cut, 0
    assert ranking_figures(groups, scores)["mrr@10"] == pytest.approx((0.5 + 1 + 0 + 0) / 4)


def test_finetune_distill_export_a_reranker(tmp_path):
    from edgebert.exporters import ExportConfig, export_bundle
    from edgebert.runtime import EdgeSession
    from edgebert.stages.distill import build_distill_config, distill
    from edgebert.stages.finetune import build_finetune_config, finetune

    start = make_tiny_model_dir(tmp_path / "start", "BertModel", seed=2)
    data = BUILTIN_QUESTIONS
    cfg = build_finetune_config(start, "rerank", data, tmp_path / "teacher", "tiny", dev_file=data,
                                max_train_examples=60, max_eval_examples=20, epochs=1.0, max_seq_len=64)
    result = finetune(cfg)
    assert result.labels == ("LABEL_0",) and result.num_train_examples >= 60 * 3
    assert set(result.best_metrics) >= {"paragraph_mrr@10", "retrieved_mrr@10", "mrr@10", "ndcg@10"}
    assert 0.0 < result.best_metrics["mrr@10"] <= 1.0
    settings = json.loads((tmp_path / "teacher" / "config_sentence_transformers.json").read_text())
    assert (settings["model_type"], settings["activation_fn"]) == ("CrossEncoder", "torch.nn.modules.activation.Sigmoid")
    record = json.loads((tmp_path / "teacher" / "finetune_config.json").read_text())
    assert record["retriever"] == str(start)                   # what the student trains and is judged with

    student = distill(build_distill_config(tmp_path / "teacher", tmp_path / "student", "rerank", task="rerank",
                                           train_file=data, dev_file=data, layers=1, max_train_examples=60,
                                           max_eval_examples=20, epochs=1.0, max_seq_len=64,
                                           train={"batch_size": 16, "progress": False}))
    assert "mrr@10" in student.best_metrics and "teacher_mrr@10" in student.eval_metrics
    bundle = tmp_path / "bundle"
    export_bundle(ExportConfig(model_dir=tmp_path / "student", out_dir=bundle, validation_batch_sizes=(1, 3),
                               validation_seq_lens=(7, 32)))
    session = EdgeSession(bundle)
    assert (session.task, session.activation, session.cross_encoder_max_length) == ("rerank", "sigmoid", 64)
    ranked = session.rank("where do the seeds ferment?", ["in boxes under leaves", "the museum opens at nine"])
    assert sorted(r["corpus_id"] for r in ranked) == [0, 1] and all(0 < r["score"] < 1 for r in ranked)


def test_dev_groups_without_a_retriever_rank_paragraphs_only():
    groups = dev_groups(read_squad(BUILTIN_QUESTIONS), None, 10)
    assert list(groups) == ["paragraph"] and len(groups["paragraph"]) == 10
    assert groups["paragraph"] == rank_groups(read_squad(BUILTIN_QUESTIONS))[:10] or \
        {g.id for g in groups["paragraph"]} <= {g.id for g in rank_groups(read_squad(BUILTIN_QUESTIONS))}
