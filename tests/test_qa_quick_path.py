"""The QA quick path: a fine-tuned ``...ForQuestionAnswering`` checkpoint of any of the families (here a
tiny seeded RoBERTa and DistilBERT saved by transformers) -> ``import-hf`` -> ``export --int8`` ->
``answer`` / ``check``, through the CLI, no training. The answers are the checkpoint's in transformers'
pipeline (fp32), and the INT8 bundle passes ``check`` (at the loose budget its export used: the
weights are random, a real fine-tune meets the default 0.02)."""

from __future__ import annotations

import json

import pytest

from conftest import question_answering_pipeline
from distill_helpers import run_cli
from family_fixtures import hf_dir

transformers = pytest.importorskip("transformers")
CONTEXT = "Marie Curie was born in Warsaw. She won the Nobel Prize in physics in 1903 and in chemistry in 1911."


@pytest.mark.parametrize("family", ["roberta", "distilbert"])
def test_a_qa_checkpoint_to_an_int8_bundle_without_training(tmp_path, capsys, family):
    src, hf = hf_dir(tmp_path, family, "ForQuestionAnswering")
    code, out, err = run_cli(capsys, "import-hf", src, "--out", tmp_path / "model")
    assert code == 0, err
    code, out, err = run_cli(capsys, "export", tmp_path / "model", "--out", tmp_path / "bundle", "--int8",
                             "--max-seq-len", "64", "--max-accuracy-loss", "0.1")   # random weights: a loose budget
    assert code == 0, err
    pipe = question_answering_pipeline(model=hf, tokenizer=transformers.AutoTokenizer.from_pretrained(
        str(src)), device="cpu")
    for question in ("Where was Marie Curie born?", "When did she win the prize in chemistry?"):
        want = pipe(question=question, context=CONTEXT, max_seq_len=64, doc_stride=16)
        code, out, err = run_cli(capsys, "answer", tmp_path / "bundle", question, "--context", CONTEXT,
                                 "--precision", "fp32", "--max-length", "64", "--doc-stride", "16", "--json")
        assert code == 0, err
        got = json.loads(out)
        assert (got["answer"], got["start"], got["end"]) == (want["answer"], want["start"], want["end"])
        code, out, err = run_cli(capsys, "answer", tmp_path / "bundle", question, "--context", CONTEXT,
                                 "--precision", "int8", "--max-length", "64", "--doc-stride", "16", "--json")
        assert code == 0, err
        got = json.loads(out)
        assert CONTEXT[got["start"]:got["end"]] == got["answer"]
    code, out, err = run_cli(capsys, "check", tmp_path / "bundle")
    assert code == 0, out + err
