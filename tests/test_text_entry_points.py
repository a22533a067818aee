"""Every text entry point of the runtime (answer, tag, classify, fill_mask, embed, encode, tokenize) and
the ``answer`` command check their texts in one place (``runtime.text.check_text``): a lone surrogate, or
a byte that is not UTF-8 (Python keeps it as a lone surrogate, e.g. in command-line arguments), is a
``DataError`` naming the argument, never the tokenizer's raw ``TypeError``. Tiny seeded fp32 bundles."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from distill_helpers import assert_one_line_error, run_cli
from edgebert.errors import DataError
from edgebert.runtime import EdgeSession
from runtime_fixtures import make_tiny_model_dir

SURROGATE = "the film \ud83d is good"                    # half of a UTF-16 pair
NOT_UTF8 = os.fsdecode(b"the film \xff is good")        # what sys.argv holds for the byte 0xff


@pytest.fixture(scope="module")
def bundles(tmp_path_factory) -> dict[str, Path]:
    from edgebert.exporters import ExportConfig, export_bundle

    root = tmp_path_factory.mktemp("text_entry")
    out = {}
    for task, architecture in (("qa", "BertForQuestionAnswering"), ("token-cls", "BertForTokenClassification"),
                               ("cls", "BertForSequenceClassification"), ("mlm", "BertForMaskedLM"),
                               ("embed", "BertModel")):
        model = make_tiny_model_dir(root / f"{task}_model", architecture, seed=4)
        export_bundle(ExportConfig(model_dir=model, out_dir=root / task, task=task, validation_batch_sizes=(1,),
                                   validation_seq_lens=(7,)))
        out[task] = root / task
    return out


CALLS = {   # (bundle, call with the bad text, the argument named)
    "answer_question": ("qa", lambda s, bad: s.answer(bad, "the film is good"), "question"),
    "answer_context": ("qa", lambda s, bad: s.answer("is it good ?", bad), "context"),
    "answer_listed_question": ("qa", lambda s, bad: s.answer(["is it ?", bad], "the film is good"), r"question\[1\]"),
    "tag": ("token-cls", lambda s, bad: s.tag(["a film", bad]), r"texts\[1\]"),
    "classify_pair": ("cls", lambda s, bad: s.classify([("a film", bad)]), r"texts\[0\]"),
    "fill_mask": ("mlm", lambda s, bad: s.fill_mask(bad + " [MASK]"), "text"),
    "encode": ("embed", lambda s, bad: s.encode(bad), "sentences"),
    "embed": ("embed", lambda s, bad: s.embed([bad]), r"texts\[0\]"),
}


@pytest.mark.parametrize("bad, why", [(SURROGATE, r"\(a lone surrogate\)"),
                                      (NOT_UTF8, r"\(a lone surrogate; the byte 0xff, which is not UTF-8\)")],
                         ids=["surrogate", "not_utf8"])
@pytest.mark.parametrize("call", sorted(CALLS))
def test_invalid_text_is_a_data_error_naming_the_argument(bundles, call, bad, why):
    task, run, name = CALLS[call]
    session = EdgeSession(bundles[task], provider="cpu")
    with pytest.raises(DataError, match=rf"^{name} holds an invalid character '\\ud[0-9a-f]+' at position 9 {why}$"):
        run(session, bad)


def test_the_answer_command_says_which_byte_is_not_utf8(bundles, tmp_path, capsys):
    (tmp_path / "context.txt").write_text("the film is good", encoding="utf-8")
    code, _, err = run_cli(capsys, "answer", bundles["qa"], NOT_UTF8, "--context", tmp_path / "context.txt")
    assert_one_line_error(code, err, "question holds an invalid character '\\udcff' at position 9 (a lone surrogate; "
                                     "the byte 0xff, which is not UTF-8)", "pass UTF-8 text")
