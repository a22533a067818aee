"""SQuAD data: the JSON reader and its one-line errors, the token windows (character offsets of accented
answers, several overlapping windows, question truncation, the same windows as transformers' fast
tokenizer) and the torch-free post-processing from start/end logits to answer text."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import numpy as np
import pytest

from distill_helpers import FILLERS, toy_tokenizer
from edgebert.errors import ConfigError, DataError
from edgebert.qa.spans import predict_spans, window_spans
from edgebert.qa.squad_file import SquadAnswer, SquadExample, read_squad
from edgebert.qa.windows import NOT_CONTEXT, SquadWindows, answer_tokens, check_window, squad_windows
from squad_helpers import toy_squad, write_toy_squad


# --------------------------------------------------------------------------- the reader
def test_reads_squad_1_1_and_2_0(tmp_path):
    v1 = read_squad(write_toy_squad(tmp_path / "v1.json", 12, seed=0, golds=3))
    assert len(v1) == 12 and all(e.has_answer and not e.is_impossible for e in v1)
    e = v1[0]
    assert len(e.answers) == 3 and e.context[e.answers[0].start:e.answers[0].end] == e.answers[0].text
    assert e.title == "toy 0" and e.id == "q0-0"

    data = toy_squad(40, seed=1, unanswerable=0.5)
    qa = next(p["qas"][0] for a in data["data"] for p in a["paragraphs"] if p["qas"][0]["is_impossible"])
    context = next(p["context"] for a in data["data"] for p in a["paragraphs"] if p["qas"][0] is qa)
    qa["plausible_answers"] = [{"text": context.split()[1], "answer_start": len(context.split()[0]) + 1}]
    (tmp_path / "v2.json").write_text(json.dumps(data), encoding="utf-8")
    v2 = read_squad(tmp_path / "v2.json")
    impossible = [e for e in v2 if e.is_impossible]
    assert 10 < len(impossible) < 30 and all(not e.has_answer and e.answer_texts == [] for e in impossible)
    marked = next(e for e in v2 if e.id == qa["id"])
    assert marked.plausible_answers == (SquadAnswer(context.split()[1], len(context.split()[0]) + 1),)


def _qa(data: dict) -> dict:
    return data["data"][0]["paragraphs"][0]["qas"][0]


def _break_start(data):
    _qa(data)["answers"][0]["answer_start"] += 1


def _break_text_type(data):
    _qa(data)["answers"][0]["text"] = 7


def _impossible_with_answers(data):
    _qa(data)["is_impossible"] = True


def _duplicate(data):
    data["data"][0]["paragraphs"][1]["qas"][0]["id"] = "q0-0"


def _no_answers(data):
    _qa(data)["answers"] = []


@pytest.mark.parametrize("breakage, fragments", [
    (_break_start, ["question q0-0", "answer_start", "is not at"]),
    (lambda d: _qa(d).pop("question"), ["question q0-0", "no 'question' field"]),
    (lambda d: _qa(d).pop("answers"), ["question q0-0", "no 'answers' field"]),
    (lambda d: _qa(d).pop("id"), ["data[0].paragraphs[0].qas[0]", "no 'id' field"]),
    (lambda d: d["data"][0]["paragraphs"][0].pop("context"), ["data[0].paragraphs[0]", "no 'context' field"]),
    (lambda d: d.pop("data"), ["the file has no 'data' field"]),
    (_break_text_type, ["question q0-0", "'text' of type int, not str"]),
    (_impossible_with_answers, ["question q0-0", "is_impossible but has answers"]),
    (_no_answers, ["question q0-0", "no answers and is not marked is_impossible"]),
    (_duplicate, ["question q0-0 appears twice"]),
], ids=["answer-start", "question", "answers", "id", "context", "data", "text-type", "impossible", "no-answers",
        "duplicate"])
def test_reader_errors_name_the_file_and_the_question(tmp_path, breakage, fragments):
    data = toy_squad(8, seed=0)
    breakage(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(DataError) as info:
        read_squad(path)
    line = info.value.one_line()
    assert "\n" not in line and str(path) in line
    for fragment in fragments:
        assert fragment in line


def test_malformed_json_and_missing_file(tmp_path):
    path = tmp_path / "cut.json"
    path.write_text(json.dumps(toy_squad(3))[:-7], encoding="utf-8")
    with pytest.raises(DataError, match=r"cut\.json is not valid JSON \(line 1, column \d+"):
        read_squad(path)
    with pytest.raises(DataError, match="SQuAD file .*nowhere.json not found"):
        read_squad(tmp_path / "nowhere.json")


# --------------------------------------------------------------------------- windows
def accent_tokenizer(tmp_path):
    from edgebert.data.tokenizer import load_vocab_tokenizer

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "what", "is", "the", "name", "of", "le", "cafe",
             "creme", "a", "zurich", "in", "?", ".", ",", "##s", "naive", "best"]
    (tmp_path / "vocab.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    return load_vocab_tokenizer(tmp_path / "vocab.txt", lowercase=True)


@pytest.mark.parametrize("creme", ["Crème", "Cre\u0300me"], ids=["composed", "decomposed"])
def test_answers_with_accents_map_back_through_the_offsets(tmp_path, creme):
    tok = accent_tokenizer(tmp_path)
    context = f"Le Café {creme}, à Zürich, is the best."
    start = context.index(creme)
    example = SquadExample("acc", "What is the name of the café?", context, (SquadAnswer(creme, start),))
    windows = squad_windows([example], tok, 64, 16)
    assert len(windows) == 1
    ids, offsets = windows.input_ids[0], windows.offsets[0]
    s, e = windows.start_positions[0], windows.end_positions[0]
    assert s == e and tok.id_to_token(int(ids[s])) == "creme"
    assert context[offsets[s, 0]:offsets[e, 1]] == creme                    # the accented original text
    context_tokens = [tok.id_to_token(int(i)) for i in ids[windows.context_mask(0)]]
    assert context_tokens == ["le", "cafe", "creme", ",", "a", "zurich", ",", "is", "the", "best", "."]
    zurich = offsets[windows.context_mask(0)][5]
    assert context[zurich[0]:zurich[1]] == "Zürich"
    assert (offsets[~windows.context_mask(0)] == NOT_CONTEXT).all()


def long_example(words: int = 120, seed: int = 3) -> SquadExample:
    rng = random.Random(seed)
    tokens = [rng.choice(FILLERS) for _ in range(words)]
    tokens[words // 2] = "superb"
    context = " ".join(tokens)
    start = context.index(" superb ") + 1
    return SquadExample("long", "what was the film like ?", context, (SquadAnswer("superb", start),))


def test_a_long_context_gives_overlapping_windows_labelled_where_they_hold_the_answer():
    tok = toy_tokenizer()
    example = long_example()
    windows = squad_windows([example, long_example(10, seed=4)], tok, max_seq_len=24, doc_stride=6)
    mine = np.flatnonzero(windows.example_index == 0)
    assert len(mine) >= 8 and (windows.example_index[mine[-1] + 1:] == 1).all()
    question = windows.input_ids[mine[0]][:windows.token_type_ids[mine[0]].argmax()]
    answered = 0
    for k, w in enumerate(mine):
        assert len(windows.input_ids[w]) <= 24
        assert (windows.input_ids[w][:len(question)] == question).all()          # the whole question each time
        s, e = windows.start_positions[w], windows.end_positions[w]
        if s:
            answered += 1
            assert example.context[windows.offsets[w][s, 0]:windows.offsets[w][e, 1]] == "superb"
        else:
            assert e == 0
            spans = windows.offsets[w][windows.context_mask(w)]
            assert not (spans[0, 0] <= example.answers[0].start and spans[-1, 1] >= example.answers[0].end)
        if k:
            before = windows.offsets[mine[k - 1]][windows.context_mask(mine[k - 1])]
            now = windows.offsets[w][windows.context_mask(w)]
            assert (before[-6:] == now[:6]).all() and now[6, 0] > before[-1, 0]   # 6 tokens shared, then new ones
    assert 1 <= answered <= 3
    first, last = (windows.offsets[w][windows.context_mask(w)] for w in (mine[0], mine[-1]))
    assert first[0, 0] == 0 and last[-1, 1] == len(example.context)              # the whole context is seen


def test_long_questions_are_cut_to_the_query_budget():
    tok = toy_tokenizer()
    question = " ".join(["what", "was", "the", "film", "like"] * 8)           # 40 tokens
    example = SquadExample("q", question, "the film was superb and long", (SquadAnswer("superb", 13),))
    windows = squad_windows([example], tok, max_seq_len=32, doc_stride=4)     # budget: 16 question tokens
    assert windows.truncated_questions == 1
    assert int((windows.token_type_ids[0] == 0).sum()) == 16 + 2               # [CLS] 16 tokens [SEP]
    assert example.context[windows.offsets[0][windows.start_positions[0], 0]:
                           windows.offsets[0][windows.end_positions[0], 1]] == "superb"
    assert len(squad_windows([example], tok, 32, 4, max_query_len=6).input_ids[0]) == 6 + 3 + 6


def test_window_settings_that_cannot_move_forward_are_refused():
    with pytest.raises(ConfigError, match="doc_stride=317 leaves no new context per window: a 384-token window "
                                          "holds 317 context tokens after a 64-token question"):
        check_window(384, 317)
    check_window(384, 316)
    with pytest.raises(ConfigError, match="a 32-token window holds 13 context tokens after a 16-token question"):
        check_window(32, 13)
    with pytest.raises(ConfigError, match="max_seq_len=0 must be a positive integer"):
        check_window(0, 128)
    with pytest.raises(DataError, match="question e has an empty context"):
        squad_windows([SquadExample("e", "what ?", "  ")], toy_tokenizer())


@pytest.mark.hf
def test_windows_match_transformers_fast_tokenizer_and_run_qa_labels(tmp_path):
    transformers = pytest.importorskip("transformers")
    from edgebert.data.tokenizer import save_tokenizer

    tok = toy_tokenizer()
    save_tokenizer(tok, tmp_path / "tok")
    hf = transformers.BertTokenizerFast.from_pretrained(tmp_path / "tok")
    examples = [long_example(), long_example(40, seed=5), long_example(9, seed=6)]
    windows = squad_windows(examples, tok, max_seq_len=24, doc_stride=6)
    enc = hf([e.question for e in examples], [e.context for e in examples], truncation="only_second",
             max_length=24, stride=6, return_overflowing_tokens=True, return_offsets_mapping=True)
    assert len(enc["input_ids"]) == len(windows) and list(enc["overflow_to_sample_mapping"]) == list(windows.example_index)
    for w in range(len(windows)):
        assert enc["input_ids"][w] == windows.input_ids[w].tolist()
        assert enc["token_type_ids"][w] == windows.token_type_ids[w].tolist()
        context = [s == 1 for s in enc.sequence_ids(w)]
        assert [tuple(o) for o, c in zip(enc["offset_mapping"][w], context) if c] == \
               [tuple(o) for o in windows.offsets[w][windows.context_mask(w)].tolist()]


def test_answer_tokens_on_hand_made_offsets():
    offsets = np.array([[-1, -1], [-1, -1], [-1, -1], [0, 3], [4, 7], [7, 10], [11, 15], [-1, -1]])
    assert answer_tokens(offsets, SquadAnswer("def", 4)) == (4, 4)
    assert answer_tokens(offsets, SquadAnswer("defg", 4)) == (4, 5)    # ends inside token 5 ("ghi" of 7..10)
    assert answer_tokens(offsets, SquadAnswer("ghi jk", 7)) == (5, 6)
    assert answer_tokens(offsets, SquadAnswer("jklmn", 11)) == (0, 0)   # runs past the window's context
    assert answer_tokens(offsets, None) == (0, 0)


# --------------------------------------------------------------------------- post-processing
def hand_made_windows() -> tuple[list[SquadExample], SquadWindows]:
    """One example, "alpha beta gamma delta epsilon", over two windows of 8 tokens (2 question tokens)."""
    context = "alpha beta gamma delta epsilon"
    example = SquadExample("x", "q q", context, (SquadAnswer("gamma", 11),))
    spans = [(0, 5), (6, 10), (11, 16), (17, 22), (23, 30)]
    o1 = np.array([[-1, -1]] * 4 + [list(s) for s in spans[:3]] + [[-1, -1]], dtype=np.int32)
    o2 = np.array([[-1, -1]] * 4 + [list(s) for s in spans[2:]] + [[-1, -1]], dtype=np.int32)
    ids = [np.arange(8, dtype=np.int32)] * 2
    windows = SquadWindows(ids, [np.zeros(8, np.int8)] * 2, [o1, o2], np.array([0, 0]), np.zeros(2, np.int64),
                           np.zeros(2, np.int64))
    return [example], windows


def test_spans_never_come_from_the_question_specials_or_padding_and_win_across_windows():
    examples, windows = hand_made_windows()
    s1 = np.array([1.0, 9.0, 9.0, 9.0, 2.0, 0.0, 0.0, 9.0, 9.0, 9.0])      # highest: question/[SEP]/padding
    e1 = np.array([1.5, 9.0, 9.0, 9.0, 0.0, 3.0, 0.5, 9.0, 9.0, 9.0])
    s2 = np.array([0.5, 0.0, 0.0, 0.0, 0.0, 4.0, 1.0, 0.0])
    e2 = np.array([0.2, 0.0, 0.0, 0.0, 0.0, 0.0, 3.5, 0.0])
    (p,) = predict_spans(examples, windows, [s1, s2], [e1, e2])
    assert (p.text, p.start, p.end, p.score) == ("delta epsilon", 17, 30, 7.5)   # window 2: tokens 5..6
    assert p.null_score == pytest.approx(0.7)                                    # min over windows of [CLS]+[CLS]
    assert p.null_margin == pytest.approx(0.7 - 7.5) and p.answer(0.0) == "delta epsilon"
    assert p.answer(-7.0) == "" and p.answer() == "delta epsilon"
    scores = [c.score for c in p.n_best]
    assert scores == sorted(scores, reverse=True) and len(scores) == 12        # 6 spans in each window
    assert sum(c.probability for c in p.n_best) == pytest.approx(1.0)
    assert all(c.text == examples[0].context[c.start:c.end] for c in p.n_best)
    assert {(c.start, c.end) for c in p.n_best} >= {(0, 10), (6, 16), (11, 22)}   # spans inside each window
    # max_answer_len counts tokens; an end before the start is never a span
    (short,) = predict_spans(examples, windows, [s1, s2], [e1, e2], max_answer_len=1)
    assert all(len(c.text.split()) == 1 for c in short.n_best) and (short.text, short.score) == ("epsilon", 4.5)
    assert window_spans(np.array([0, 0, 0, 0, 0, 5.0, 0, 0]), np.array([0, 0, 0, 0, 5.0, 0, 0, 0]), windows.offsets[1],
                        n_best=1) == []


def test_post_processing_and_scores_import_no_torch():
    code = ("import sys, edgebert.qa.spans, edgebert.qa.answers, edgebert.scores.squad, edgebert.qa.windows; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_window_spans_take_the_true_top_tokens_of_a_long_window():
    """The n-best start and end tokens are the highest logits (checked against Python's sort), also at 384 tokens,
    where numpy's default SIMD argsort went wrong under the AVX2 emulator."""
    rng = np.random.default_rng(3)
    start, end = rng.standard_normal(384), rng.standard_normal(384)
    offsets = np.stack([np.arange(384), np.arange(384) + 1], 1)     # every token context
    spans = window_spans(start, end, offsets)
    top = lambda x: sorted(range(len(x)), key=lambda i: (x[i], i), reverse=True)[:20]  # noqa: E731
    firsts = list(dict.fromkeys(a for _, a, _ in spans))
    assert set(firsts) <= set(top(start)) and {b for _, _, b in spans} <= set(top(end))
    best = max(spans)
    want = max((start[a] + end[b], a, b) for a in top(start) for b in top(end) if 0 <= b - a < 30)
    assert best[1:] == want[1:] and abs(best[0] - want[0]) < 1e-12
