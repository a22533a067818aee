"""The one text-file reader behind calibration, the accuracy guard and the length mix."""

from __future__ import annotations

import pytest

from edgebert.errors import DataError
from edgebert.files.textfiles import iter_texts

MRPC = "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t1\t2\tHe said \"no\".\t\"No,\" he said.\n0\t3\t4\tA\t\n"
QNLI = "index\tquestion\tsentence\tlabel\n0\tWho?\tHim.\tentailment\n"


def test_pairs_or_first_column(tmp_path):
    (tmp_path / "mrpc.tsv").write_text(MRPC, encoding="utf-8")
    assert list(iter_texts(tmp_path / "mrpc.tsv", pairs=True)) == [('He said "no".', '"No," he said.')]
    assert list(iter_texts(tmp_path / "mrpc.tsv")) == ['He said "no".', "A"]      # first text column
    (tmp_path / "qnli.tsv").write_text(QNLI, encoding="utf-8")
    assert list(iter_texts(tmp_path / "qnli.tsv", pairs=True)) == [("Who?", "Him.")]
    assert list(iter_texts(tmp_path / "qnli.tsv")) == ["Him."]                   # 'sentence' comes first


def test_wikitext_headings_skipped_and_limit_streams(tmp_path):
    wiki = tmp_path / "wiki.raw"
    wiki.write_text(" = Title = \n\n First para .\n = = Sub = = \n Second para .\n" + "x y z\n" * 10_000,
                    encoding="utf-8")
    assert list(iter_texts(wiki, limit=2)) == ["First para .", "Second para ."]


def test_errors_name_the_file_and_the_caller(tmp_path):
    with pytest.raises(DataError, match="lengths file .* not found"):
        list(iter_texts(tmp_path / "nope.txt", what="lengths file"))
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ok\n\xff\xfe\n")
    with pytest.raises(DataError, match="not UTF-8"):
        list(iter_texts(bad))
    header_only = tmp_path / "h.tsv"
    header_only.write_text("sentence\tlabel\n", encoding="utf-8")
    with pytest.raises(DataError, match="holds no text"):
        list(iter_texts(header_only))
