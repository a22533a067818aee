"""Context edits (edgebert.qa.augment): variants of SQuAD questions whose gold answers stay valid."""

from __future__ import annotations

import json

import pytest

from edgebert.errors import ConfigError
from edgebert.qa.augment import context_edits, sentence_spans
from edgebert.qa.squad_file import SquadAnswer, SquadExample, read_squad
from conftest import shared_file

PARAGRAPHS = [
    "The river rises in the hills. It runs 120 km to the sea. Mills were built on it in 1820. \"Old Mill\" still stands.",
    "The town grew around the mills. Its market opened in 1845. A railway reached it in 1860.",
    "Cats sleep a lot.",
]


def _example(qid, title, context, answer, question="q?"):
    return SquadExample(qid, question, context, (SquadAnswer(answer, context.index(answer)),), title=title)


def _examples():
    river, town, other = PARAGRAPHS
    return [_example("a", "River", river, "120 km"), _example("b", "River", river, "1820"),
            _example("c", "River", town, "1845"), _example("d", "Cats", other, "Cats sleep a lot"),
            SquadExample("e", "q?", river, (), is_impossible=True, title="River")]


def test_sentence_spans_cover_the_sentences_and_only_them():
    text = PARAGRAPHS[0]
    spans = sentence_spans(text)
    assert [text[s:e] for s, e in spans] == ["The river rises in the hills.", "It runs 120 km to the sea.",
                                              "Mills were built on it in 1820.", "\"Old Mill\" still stands."]
    assert sentence_spans("One sentence without an end") == [(0, 27)]
    assert sentence_spans("Dr. who? e.g. this one.") == [(0, 23)]       # no capital after: no cut


def test_context_edits_keep_every_answer_and_change_the_context():
    examples = _examples()
    variants = context_edits(examples, 3, seed=0)
    by_id = {e.id: e for e in examples}
    # 3 copies of each answerable question; "d" (one sentence, all of it the answer, alone in its article)
    # has no edit and "e" has no answer
    assert sorted({v.id.split("#")[0] for v in variants}) == ["a", "b", "c"]
    assert len(variants) == 9 and {v.id for v in variants} >= {"a#edit0", "a#edit1", "a#edit2"}
    kinds = set()
    for v in variants:
        original = by_id[v.id.split("#")[0]]
        assert v.context != original.context and v.question == original.question and v.title == original.title
        assert [a.text for a in v.answers] == [a.text for a in original.answers]
        for a in v.answers:
            assert v.context[a.start:a.end] == a.text
        sentences = {original.context[s:e] for s, e in sentence_spans(original.context)}
        new = {v.context[s:e] for s, e in sentence_spans(v.context)}
        if len(v.context) < len(original.context):       # a drop: one sentence gone, none with the answer
            kinds.add("drop")
            assert len(sentences - new) == 1 and not any(a.text in (sentences - new).pop() for a in v.answers)
        else:                                            # an insert: one sentence from the same article
            kinds.add("insert")
            added = (new - sentences).pop()
            donors = {p for e in examples if e.title == original.title for p in [e.context] if p != original.context}
            assert len(new - sentences) == 1 and any(added in d for d in donors)
    assert kinds == {"drop", "insert"}
    assert context_edits(examples, 3, seed=0) == variants                # seeded
    assert context_edits(examples, 3, seed=1) != variants
    assert context_edits(examples, 0) == []


def test_context_edits_on_the_real_training_file():
    path = shared_file("squad", "train-v1.1-first11.json")
    examples = read_squad(path)
    variants = context_edits(examples, 1, seed=0)
    assert len(variants) == len(examples) == 3807                      # every question has an edit
    for v, e in zip(variants, examples):
        assert v.id == e.id + "#edit0" and v.context != e.context
        assert all(v.context[a.start:a.end] == a.text for a in v.answers)
    drops = sum(len(v.context) < len(e.context) for v, e in zip(variants, examples))
    assert 0.35 < drops / len(variants) < 0.65


def test_distill_config_takes_context_edits_for_squad_only(tmp_path):
    from edgebert.stages.distill import DistillConfig

    (tmp_path / "t.json").write_text(json.dumps({"data": []}))
    cfg = DistillConfig.preset("squad", tmp_path, tmp_path / "s", train_file=tmp_path / "t.json", context_edits=1)
    assert cfg.context_edits == 1 and cfg.to_dict()["context_edits"] == 1
    with pytest.raises(ConfigError, match="--context-edits is for SQuAD files"):
        DistillConfig.preset("ner", tmp_path, tmp_path / "s", train_file=tmp_path / "t.json", context_edits=1)
    with pytest.raises(ConfigError, match="must be an integer from 0 to 8"):
        DistillConfig.preset("squad", tmp_path, tmp_path / "s", train_file=tmp_path / "t.json", context_edits=-1)
