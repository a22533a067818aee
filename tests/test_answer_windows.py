"""``EdgeSession.answer`` refuses the windows transformers' question-answering pipeline refuses: a window whose
question leaves no more context tokens than the stride (8 or 12 tokens: each window held a word piece or two,
answers such as "riv" scored above 1). On the toy span model of ``qa_bundles``: for every window length and
question, the pipeline refuses exactly where ``answer`` does, in one line; the bundle's own window still
answers as before."""

from __future__ import annotations

import pytest

from distill_helpers import assert_one_line_error, run_cli
from edgebert.errors import ConfigError
from edgebert.qa.squad_file import read_squad
from edgebert.runtime import EdgeSession
from qa_bundles import hf_pipeline, qa_bundle, toy_qa

pytestmark = pytest.mark.hf


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    root = tmp_path_factory.getbasetemp()
    data, bundle = toy_qa(root), qa_bundle(root)
    return read_squad(data / "dev.json")[:3], EdgeSession(bundle, precision="fp32"), data / "teacher", bundle


def _pipeline_refuses(pipe, question: str, context: str, length: int) -> bool:
    try:
        pipe(question=question, context=context, max_seq_len=length)
    except BaseException as exc:      # its tokenizer's refusal is a Rust panic (a BaseException) or a ValueError
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        return True
    return False


def test_answer_refuses_the_windows_the_pipeline_refuses(toy):
    examples, session, teacher, _ = toy
    pipe = hf_pipeline(teacher)                        # skips on transformers 5, which has no such pipeline
    refused = []
    for length in range(8, 41, 2):
        for e in examples:
            try:
                got = session.answer(e.question, e.context, max_length=length)
                ours = False
            except ConfigError as exc:
                assert f"max_length={length} leaves" in exc.message and "pipeline refuses such windows" in exc.message
                ours = True
            assert ours == _pipeline_refuses(pipe, e.question, e.context, length), (length, e.question)
            if not ours:
                assert e.context[got["start"]:got["end"]] == got["answer"]
            refused.append(ours)
    assert any(refused) and not all(refused)                    # both kinds are seen
    for length in (8, 12):
        with pytest.raises(ConfigError, match=f"max_length={length} leaves"):
            session.answer(examples[0].question, examples[0].context, max_length=length)


def test_the_bundles_own_window_answers_and_the_cli_says_one_line(toy, tmp_path, capsys):
    examples, session, _, bundle = toy
    answers = session.answer([e.question for e in examples], [e.context for e in examples])
    assert sum(a["answer"] in e.answer_texts for a, e in zip(answers, examples)) == len(examples)
    (tmp_path / "context.txt").write_text(examples[0].context, encoding="utf-8")
    code, _, err = run_cli(capsys, "answer", bundle, examples[0].question, "--context", tmp_path / "context.txt",
                           "--max-length", "8")
    assert_one_line_error(code, err, "max_length=8 leaves", "pipeline refuses such windows")
