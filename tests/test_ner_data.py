"""NER data and scoring: the CoNLL reader (2 and 4 columns, --tag-column), first-sub-token label
alignment, and entity-level scores by seqeval on hand-built examples with known counts."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import shared_file
from distill_helpers import write_toy_ner
from edgebert.data.task_data import encode_tagged
from edgebert.data.tasks import read_tagged, tag_order
from edgebert.errors import DataError
from edgebert.files.textfiles import is_conll, iter_texts, read_conll
from edgebert.model import IGNORE_INDEX
from edgebert.scores.entities import entity_report, entity_scores

FOUR_COLUMNS = """-DOCSTART- -X- -X- O

EU NNP B-NP B-ORG
rejects VBZ B-VP O
German JJ B-NP B-MISC
call NN I-NP O

Peter NNP B-NP B-PER
Blackburn NNP I-NP I-PER
"""


# --------------------------------------------------------------------------- the reader
def test_two_and_four_column_files_read_alike(tmp_path):
    four = tmp_path / "four.txt"
    four.write_text(FOUR_COLUMNS, encoding="utf-8")
    two = tmp_path / "two.txt"
    two.write_text("\n".join(" ".join((ln.split()[0], ln.split()[-1])) if ln.strip() else ""
                             for ln in FOUR_COLUMNS.splitlines()[2:]) + "\n", encoding="utf-8")
    tabs = tmp_path / "tabs.txt"
    tabs.write_text(two.read_text().replace(" ", "\t"), encoding="utf-8")
    expected = [(("EU", "rejects", "German", "call"), ("B-ORG", "O", "B-MISC", "O")),
                (("Peter", "Blackburn"), ("B-PER", "I-PER"))]
    for path in (four, two, tabs):
        assert [(s.words, s.tags) for s in read_conll(path)] == expected, path
    assert read_conll(four)[1].line == 8 and read_conll(four)[1].tag_lines == (8, 9)
    # --tag-column picks another column (here the chunk tags, column 3)
    assert read_conll(four, tag_column=3)[0].tags == ("B-NP", "B-VP", "B-NP", "I-NP")
    sentences, labels = read_tagged(four)
    assert labels == ("O", "B-MISC", "B-ORG", "B-PER", "I-PER")
    assert [s.tags for s in sentences] == [(2, 0, 1, 0), (3, 4)]


def test_reader_errors_name_file_and_line(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("EU B-ORG\nrejects\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"bad.txt:2 has 1 column"):
        read_conll(bad)
    pos = tmp_path / "pos.txt"
    pos.write_text("EU NNP\nrejects VBZ\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"pos.txt:1 has tag 'NNP', which is not an IOB tag") as info:
        read_tagged(pos)
    assert "--tag-column" in info.value.hint
    with pytest.raises(DataError, match="must be 2 or more"):
        read_conll(pos, tag_column=1)
    dev = tmp_path / "dev.txt"
    dev.write_text("Oslo B-LOC\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"dev.txt:1 has tag 'B-LOC', expected one of \['O', 'B-PER'\]"):
        read_tagged(dev, labels=("O", "B-PER"))


def test_conll_files_are_recognised_as_text_sources(tmp_path):
    ner = write_toy_ner(tmp_path / "ner.txt", 5, seed=3)
    plain = tmp_path / "plain.txt"
    plain.write_text("a plain sentence here\nand another one\n", encoding="utf-8")
    assert is_conll(ner) and not is_conll(plain)
    sentences = read_conll(ner)
    assert list(iter_texts(ner)) == [" ".join(s.words) for s in sentences]   # one text per sentence
    assert tag_order({"I-PER", "O", "B-PER", "B-LOC"}) == ("O", "B-LOC", "B-PER", "I-PER")


def test_shared_conll_counts_match_the_published_statistics():
    path = shared_file("conll2003", "test.txt")
    sentences, labels = read_tagged(path)
    assert len(sentences) == 3453 and sum(len(s.words) for s in sentences) == 46435
    assert labels == ("O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER")


# --------------------------------------------------------------------------- label alignment
def test_first_sub_token_carries_the_label(tmp_path):
    """Words the toy vocabulary splits into several pieces: only the first piece is labelled; the
    other pieces, [CLS], [SEP] and what truncation cut off are IGNORE_INDEX; word_labels keep every word."""
    from edgebert.data.tasks import TaggedSentence
    from edgebert.data.tokenizer import load_tokenizer
    from runtime_fixtures import make_tiny_tokenizer

    tok = load_tokenizer(make_tiny_tokenizer(tmp_path / "tokenizer.json"))
    words = ("the", "zanzibarian", "film", "xylophonist", "was", "good")
    tags = (0, 1, 0, 2, 0, 0)
    pieces = [tok.encode(w, add_special_tokens=False).tokens for w in words]
    assert len(pieces[1]) > 1 and len(pieces[3]) > 1        # really split into sub-tokens
    data = encode_tagged([TaggedSentence(words, tags)], tok, max_seq_len=64)
    expected = [IGNORE_INDEX]                                  # [CLS]
    for piece, tag in zip(pieces, tags):
        expected += [tag] + [IGNORE_INDEX] * (len(piece) - 1)
    expected += [IGNORE_INDEX]                                 # [SEP]
    assert data.token_labels[0].tolist() == expected
    assert data.word_labels[0].tolist() == list(tags)
    short = encode_tagged([TaggedSentence(words, tags)], tok, max_seq_len=8)
    assert short.truncated == 1 and short.word_labels[0].tolist() == list(tags)
    assert int((short.token_labels[0] != IGNORE_INDEX).sum()) < len(words)


# --------------------------------------------------------------------------- entity scores
def test_entity_scores_on_known_counts():
    """gold: PER, LOC, ORG, PER (4 entities); predicted: PER right, LOC with the wrong span, ORG right,
    a MISC that is not there, the last PER missed: 2 of 4 found, 2 of 4 predicted right."""
    gold = [["B-PER", "I-PER", "O", "B-LOC", "I-LOC"], ["B-ORG", "O", "B-PER"]]
    pred = [["B-PER", "I-PER", "O", "B-LOC", "O"], ["B-ORG", "B-MISC", "O"]]
    s = entity_scores(gold, pred)
    assert s["precision"] == pytest.approx(2 / 4) and s["recall"] == pytest.approx(2 / 4)
    assert s["f1"] == pytest.approx(0.5) and s["entities"] == 4 and s["words"] == 8
    assert s["accuracy"] == pytest.approx(5 / 8)
    assert s["f1_ORG"] == pytest.approx(1.0) and s["f1_LOC"] == 0.0 and s["f1_MISC"] == 0.0
    assert s["f1_PER"] == pytest.approx(2 * 0.5 * 1.0 / 1.5)     # precision 1, recall 1/2
    report = entity_report(gold, pred)
    assert report["types"]["PER"]["entities"] == 2 and report["types"]["MISC"]["entities"] == 0
    # IOB1 (I- starts an entity after O) scores as IOB2: conlleval's reading
    iob1 = [["I-PER", "I-PER", "O", "I-LOC", "I-LOC"], ["I-ORG", "O", "I-PER"]]
    assert entity_scores(iob1, pred)["f1"] == pytest.approx(0.5)
    with pytest.raises(DataError, match="sentence 1: 2 predicted tags for 3 words"):
        entity_scores(gold, [pred[0], pred[1][:2]])


def test_words_cut_by_truncation_are_scored_as_missed(tmp_path):
    from edgebert.data.task_data import EncodedDataset
    from edgebert.stages.metrics import word_tags

    data = EncodedDataset([np.zeros(4, np.int32)], [np.zeros(4, np.int8)], np.full(1, -1),
                          [np.zeros(4, np.int64)], 1, [np.asarray([1, 0, 1, 2])])
    gold, pred = word_tags([np.asarray([1, 0])], data, ("O", "B-PER", "I-PER"))
    assert gold == [["B-PER", "O", "B-PER", "I-PER"]] and pred == [["B-PER", "O", "O", "O"]]
