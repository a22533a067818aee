"""SQuAD EM / F1 (the official normalisation, in plain Python: equal to torchmetrics' SQuAD metric, and
working without it) on hand-made answers, and SQuAD 2.0 scoring: the null threshold chosen on the file, the HasAns / NoAns split."""

from __future__ import annotations

import random
import sys

import numpy as np
import pytest

from edgebert.errors import DataError
from edgebert.qa.squad_file import SquadAnswer, SquadExample
from edgebert.scores.squad import best_threshold, question_scores, squad_scores, squad_v2_scores


def example(qid: str, *golds: str) -> SquadExample:
    context = " ".join(golds) or "nothing here"
    answers, at = [], 0
    for g in golds:
        answers.append(SquadAnswer(g, context.index(g, at)))
    return SquadExample(qid, "why ?", context, tuple(answers), is_impossible=not golds)


@pytest.mark.parametrize("answer, golds, em, f1", [
    ("The Eiffel Tower!", ["eiffel tower"], 100.0, 100.0),        # case, punctuation, articles
    ("an  eiffel   tower", ["the Eiffel Tower"], 100.0, 100.0),     # whitespace
    ("the cat sat", ["a cat sat on"], 0.0, 80.0),                  # P 2/2, R 2/3
    ("cat", ["dog", "the cat", "cat food"], 100.0, 100.0),         # best over the golds
    ("cat food bowl", ["dog", "cat food"], 0.0, 80.0),
    ("", ["dog"], 0.0, 0.0),
    ("", [], 100.0, 100.0),                                          # no answer, rightly
    ("the", [], 100.0, 100.0),                                       # normalises to nothing, as officially
    ("dog", [], 0.0, 0.0),
])
def test_question_scores_use_the_official_normalisation(answer, golds, em, f1):
    assert question_scores(answer, golds) == (pytest.approx(em), pytest.approx(f1))


def test_squad_scores_count_the_answerable_questions_only():
    examples = [example("a", "Paris"), example("b", "red car", "a red car"), example("c"), example("d", "1976")]
    answers = {"a": "paris.", "b": "car", "c": "anything", "d": "in 1976 or so"}
    scores = squad_scores(examples, answers)
    # a: EM 100; b: F1 2/3 (P 1, R 1/2); d: F1 2*(1/4) / (1 + 1/4) = 0.4
    assert scores == {"exact_match": pytest.approx(100 / 3), "f1": pytest.approx((100 + 200 / 3 + 40) / 3), "n": 3.0}
    with pytest.raises(DataError, match="no predicted answer for question d"):
        squad_scores(examples, {"a": "x", "b": "y"})
    with pytest.raises(DataError, match="none of the questions has an answer"):
        squad_scores([example("c")], answers)


def official_best(scores: dict, na_probs: dict, has_ans: dict, preds: dict) -> float:
    """The official SQuAD 2.0 evaluation script's ``find_best_thresh`` (its best score, in percent)."""
    num_no_ans = sum(1 for k in has_ans if not has_ans[k])
    cur = best = num_no_ans
    for qid in sorted(na_probs, key=lambda k: na_probs[k]):
        diff = scores[qid] if has_ans[qid] else (-1 if preds[qid] else 0)
        cur += diff
        best = max(best, cur)
    return 100.0 * best / len(scores)


def test_the_null_threshold_is_chosen_as_the_official_script_does():
    rng = random.Random(0)
    examples, answers, margins = [], {}, {}
    for i in range(60):
        answerable = rng.random() < 0.5
        examples.append(example(f"q{i}", "alpha beta gamma") if answerable else example(f"q{i}"))
        answers[f"q{i}"] = rng.choice(["alpha beta gamma", "beta", "delta", "alpha beta"])
        margins[f"q{i}"] = rng.uniform(-4, 1) if answerable else rng.uniform(-1, 4)   # overlapping
    scores = squad_v2_scores(examples, answers, margins)
    f1 = {e.id: question_scores(answers[e.id], e.answer_texts)[1] / 100 for e in examples}
    exact = {e.id: question_scores(answers[e.id], e.answer_texts)[0] / 100 for e in examples}
    has = {e.id: e.has_answer for e in examples}
    assert scores["f1"] == pytest.approx(official_best(f1, margins, has, answers))
    assert scores["best_exact_match"] == pytest.approx(official_best(exact, margins, has, answers))
    # the figures at the chosen threshold, recomputed by hand; the split adds up
    t = scores["null_threshold"]
    null = {e.id: margins[e.id] > t for e in examples}
    by_hand = [(100.0 if not e.has_answer else 0.0) if null[e.id] else 100 * f1[e.id] for e in examples]
    assert scores["f1"] == pytest.approx(np.mean(by_hand))
    n_has, n_no = scores["has_answer_n"], scores["no_answer_n"]
    assert n_has + n_no == scores["n"] == 60 and 15 < n_has < 45
    assert scores["f1"] == pytest.approx((scores["has_answer_f1"] * n_has + scores["no_answer_f1"] * n_no) / 60)
    assert scores["no_answer_f1"] == scores["no_answer_exact_match"] == pytest.approx(
        100 * np.mean([null[e.id] or answers[e.id] == "" for e in examples if not e.has_answer]))
    assert 0 < scores["has_answer_f1"] < 100 and min(margins.values()) < t < max(margins.values())


def test_best_threshold_edge_cases():
    # answering everything is best: the threshold is the largest margin
    assert best_threshold(np.array([1.0, 2.0]), np.array([100.0, 100.0]), np.array([0.0, 0.0])) == (2.0, 200.0)
    # answering nothing is best: a threshold below every margin
    assert best_threshold(np.array([1.0, 2.0]), np.array([0.0, 0.0]), np.array([100.0, 100.0])) == (0.0, 200.0)
    # tied margins are answered together: one good, one bad at 1.0 -> answer neither (100 > 50 + 0)
    t, total = best_threshold(np.array([1.0, 1.0, 3.0]), np.array([50.0, 0.0, 0.0]), np.array([0.0, 100.0, 100.0]))
    assert (t, total) == (0.0, 200.0)


def test_scores_need_neither_torchmetrics_nor_torch(monkeypatch):
    """A bundle is scored in the runtime install: no torch, no torchmetrics."""
    for name in ("torch", "torchmetrics", "torchmetrics.functional", "torchmetrics.functional.text"):
        monkeypatch.setitem(sys.modules, name, None)
    assert question_scores("The Cat!", ["a cat", "dog"]) == (100.0, 100.0)
    assert question_scores("", []) == (100.0, 100.0) and question_scores("x", []) == (0.0, 0.0)


def test_scores_equal_torchmetrics_squad_on_random_answers():
    squad = pytest.importorskip("torchmetrics.functional.text").squad
    rng = random.Random(0)
    words = ["the", "a", "An", "cat", "Cat.", "dog", "", "1976", "(1976)", "New York", "york,", "--", "É", "the the"]
    for _ in range(2000):
        answer = " ".join(rng.choice(words) for _ in range(rng.randint(0, 4)))
        gold = [" ".join(rng.choice(words) for _ in range(rng.randint(0, 4))) for _ in range(rng.randint(1, 3))]
        theirs = squad({"prediction_text": answer, "id": "q"},
                       {"answers": {"answer_start": [0] * len(gold), "text": gold}, "id": "q"})
        em, f1 = question_scores(answer, gold)
        assert em == pytest.approx(float(theirs["exact_match"]), abs=1e-4), (answer, gold)
        assert f1 == pytest.approx(float(theirs["f1"]), abs=1e-4), (answer, gold)
