"""Corpus readers: plain text, WikiText raw, the built-in corpus, and the errors on bad files."""

from __future__ import annotations

import pytest

from conftest import shared_file
from edgebert.data.corpus import (
    builtin_corpus,
    detect_format,
    detokenize_wikitext,
    parse_plain,
    parse_wikitext,
    read_corpora,
    read_corpus,
)
from edgebert.errors import ConfigError, DataError

WIKI = """ 
 = Lobster = 
 
 The lobster is 60 cm long and weighs 1 @,@ 000 g . It has a state @-@ of @-@ the @-@ art shell . 
 
 = = Description = = 
 
 It grows to 0 @.@ 7 m . 
 
 = = = Claws = = = 
 
 The claws are big . 
 
 = Crab = 
 
 Crabs walk sideways . 
"""


def test_wikitext_articles_sections_and_markers():
    docs = parse_wikitext(WIKI)
    assert len(docs) == 2
    lobster = docs[0].split("\n")
    assert lobster == [
        "Lobster",
        "The lobster is 60 cm long and weighs 1,000 g . It has a state-of-the-art shell .",
        "Description",
        "It grows to 0.7 m .",
        "Claws",
        "The claws are big .",
    ]
    assert docs[1] == "Crab\nCrabs walk sideways ."
    assert detect_format(WIKI) == "wikitext"
    assert detokenize_wikitext("a 1 @,@ 5 @.@ 3 b @-@ c") == "a 1,5.3 b-c"


def test_real_wikitext_valid():
    path = shared_file("wikitext-2-raw", "wiki.valid.raw")
    docs = read_corpus(path)  # auto-detected
    assert len(docs) == 60  # article headings " = Title = " in wiki.valid.raw
    text = "\n".join(docs)
    assert "@-@" not in text and "@,@" not in text and "@.@" not in text
    assert docs[0].startswith("Homarus gammarus\nHomarus gammarus , known as the European lobster")
    assert "5 – 6 kilograms" in docs[0] and "0.7 – 2.2 kg" in docs[0]


def test_plain_text_blocks(tmp_path):
    text = "First document line one.\nline two.\n\n\n  \nSecond document.\n\nThird.\n"
    assert parse_plain(text) == ["First document line one. line two.", "Second document.", "Third."]
    path = tmp_path / "c.txt"
    path.write_text(text, encoding="utf-8")
    assert detect_format(text) == "text"
    assert read_corpus(path) == parse_plain(text)
    assert read_corpus(path, format="wikitext") == ["First document line one.\nline two.\nSecond "
                                                    "document.\nThird."]


def test_non_utf8_names_file_line_and_column(tmp_path):
    path = tmp_path / "wiki.bad"
    lines = [b"good line %d" % i for i in range(11)] + [b"ab\xffcd", b"more"]
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(DataError) as err:
        read_corpus(path)
    assert err.value.message == f"{path}:12 is not UTF-8 (byte 0xff at column 3)"


def test_missing_empty_and_bad_format(tmp_path):
    with pytest.raises(DataError, match="not found"):
        read_corpus(tmp_path / "nope.txt")
    empty = tmp_path / "empty.txt"
    empty.write_text(" \n\n  \n", encoding="utf-8")
    with pytest.raises(DataError, match="is empty"):
        read_corpus(empty)
    with pytest.raises(DataError, match="not a file"):
        read_corpus(tmp_path)
    headings_only = tmp_path / "h.raw"
    headings_only.write_text(" = = Only a section = = \n", encoding="utf-8")
    assert read_corpus(headings_only, "wikitext") == ["Only a section"]
    with pytest.raises(ConfigError, match="unknown corpus format"):
        read_corpus(empty, format="csv")


def test_builtin_corpus_is_python_docs():
    docs = builtin_corpus()
    assert len(docs) > 150
    assert sum(len(d) for d in docs) > 300_000
    assert any("assert" in d and "AssertionError" in d for d in docs)
    assert all(d.strip() for d in docs)
    assert read_corpora([]) == docs  # no files: the built-in corpus
