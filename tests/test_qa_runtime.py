"""Question answering on the device: ``EdgeSession.answer`` against transformers' question-answering pipeline
on the same weights (a tiny span model fine-tuned on the toy task, and a seeded untrained one on long
contexts with accents, read in several windows), its shapes and errors, ``edgebert answer``,
``evaluate --task squad`` on a checkpoint and on its bundle, and ``bench --data FILE.json``."""

from __future__ import annotations

import json
import random

import pytest

from conftest import question_answering_pipeline
from distill_helpers import assert_one_line_error, run_cli
from edgebert.errors import ConfigError, DataError
from edgebert.qa.squad_file import read_squad
from edgebert.runtime import EdgeSession
from qa_bundles import TOY_LENGTH, hf_pipeline, qa_bundle, toy_qa
from runtime_fixtures import WORDS, make_tiny_model_dir

ACCENTED = ["Zoë", "naïve", "Kraków", "café", "résumé", "São", "Ångström", "x-ray", "1,000", "Müller"]


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    root = tmp_path_factory.getbasetemp()
    return toy_qa(root), qa_bundle(root)


@pytest.fixture(scope="module")
def untrained(tmp_path_factory):
    """A seeded untrained span model (128 positions, the tiny runtime tokenizer) and its fp32 bundle."""
    from edgebert.exporters import ExportConfig, export_bundle

    root = tmp_path_factory.mktemp("qa_untrained")
    model = make_tiny_model_dir(root / "model", "BertForQuestionAnswering", seed=4)
    export_bundle(ExportConfig(model_dir=model, out_dir=root / "bundle", validation_batch_sizes=(1,),
                               validation_seq_lens=(7,)))
    return model, root / "bundle"


def _same(ours: list[dict], theirs: list[dict]) -> list[tuple[dict, dict]]:
    """The pairs whose answer text or offsets differ."""
    return [(a, b) for a, b in zip(ours, theirs, strict=True)
            if (a["answer"], a["start"], a["end"]) != (b["answer"], b["start"], b["end"])]


@pytest.mark.hf
def test_a_trained_span_bundle_answers_as_the_pipeline_does(toy):
    data, bundle = toy
    examples = read_squad(data / "dev.json")
    session = EdgeSession(bundle, precision="fp32")
    questions, contexts = [e.question for e in examples], [e.context for e in examples]
    ours = session.answer(questions, contexts, max_answer_len=30, max_length=32, doc_stride=6)   # several windows
    theirs = hf_pipeline(data / "teacher")(question=questions, context=contexts, max_answer_len=30, max_seq_len=32,
                                           doc_stride=6)
    assert not _same(ours, theirs)                                  # 40 of 40: the same text and offsets
    assert all(abs(a["score"] - b["score"]) <= 1e-4 * max(1.0, b["score"]) for a, b in zip(ours, theirs))
    right = sum(a["answer"] in e.answer_texts for a, e in zip(ours, examples))
    assert right >= 38                                              # the toy task is learnt
    assert all(e.context[a["start"]:a["end"]] == a["answer"] for a, e in zip(ours, examples))
    int8 = EdgeSession(bundle, precision="int8").answer(questions, contexts, max_answer_len=30, max_length=32,
                                                        doc_stride=6)
    assert sum(a["answer"] == b["answer"] for a, b in zip(int8, ours)) >= 38


@pytest.mark.hf
def test_long_contexts_with_accents_are_read_in_windows_as_the_pipeline_reads_them(untrained):
    model, bundle = untrained
    rng = random.Random(3)
    words = WORDS + ACCENTED
    contexts = ["  ".join(" ".join(rng.choice(words) for _ in range(rng.randint(8, 20))) for _ in range(rng.randint(4, 20)))
                for _ in range(30)]
    questions = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 8))) + " ?" for _ in contexts]
    session = EdgeSession(bundle)
    pipe = hf_pipeline(model)
    options = dict(max_answer_len=30, top_k=3, handle_impossible_answer=True)
    ours = session.answer(questions, contexts, doc_stride=32, max_length=128, **options)
    theirs = pipe(question=questions, context=contexts, doc_stride=32, max_seq_len=128, **options)
    windows = pipe.tokenizer(questions, contexts, truncation="only_second", max_length=128, stride=32,
                             return_overflowing_tokens=True)
    assert len(windows["input_ids"]) > 2 * len(contexts)            # several windows per context
    for a, b in zip(ours, theirs, strict=True):
        assert not _same(a, b) and len(a) == 3
        assert all(abs(x["score"] - y["score"]) <= 1e-4 * max(1.0, y["score"]) for x, y in zip(a, b))
    answers = [x for a in ours for x in a if x["answer"]]
    assert any(w in x["answer"] for x in answers for w in ACCENTED)                # accented answers, offsets kept
    assert all(contexts[i][x["start"]:x["end"]] == x["answer"] for i, a in enumerate(ours) for x in a)


def test_answer_is_shaped_as_the_pipeline_and_says_what_is_wrong(untrained):
    _, bundle = untrained
    session = EdgeSession(bundle)
    context = "the film was good and the music was wonderful , but the ending was dull ."
    one = session.answer("how was the music ?", context)
    assert set(one) == {"score", "start", "end", "answer"} and context[one["start"]:one["end"]] == one["answer"]
    assert 0 < one["score"] <= 1
    top = session.answer("how was the music ?", context, top_k=4)
    assert isinstance(top, list) and len(top) == 4 and top[0] == one
    assert [t["score"] for t in top] == sorted((t["score"] for t in top), reverse=True)
    questions = ["how was the music ?", "what was dull ?", "what was good ?"]
    batched = session.answer(questions, [context] * 3, batch_size=2)
    assert batched == session.answer(questions, context) == [session.answer(q, context) for q in questions]
    assert session.answer([], []) == []
    with_null = session.answer("how was the music ?", context, top_k=500, handle_impossible_answer=True)
    nulls = [a for a in with_null if a["answer"] == ""]
    assert len(nulls) == 1 and nulls[0]["start"] == nulls[0]["end"] == 0 and 0 < nulls[0]["score"] < 1
    for bad, message in (({"question": "", "context": context}, "question is empty"),
                         ({"question": "why ?", "context": "  "}, "context is empty"),
                         ({"question": ["a ?", "b ?"], "context": [context] * 3}, "2 questions and 3 contexts"),
                         ({"question": ["a ?", 3], "context": context}, r"question\[1\] is a int")):
        with pytest.raises(DataError, match=message):
            session.answer(**bad)
    with pytest.raises(ConfigError, match="top_k=0 must be a positive integer"):
        session.answer("why ?", context, top_k=0)
    with pytest.raises(ConfigError, match="doc_stride=100 leaves no new context per window"):
        session.answer("why ?", context, doc_stride=100, max_length=128)


def test_answer_needs_a_qa_bundle(tmp_path_factory):
    from runtime_fixtures import tiny_bundle

    _, bundle = tiny_bundle(tmp_path_factory.getbasetemp(), "embed")
    with pytest.raises(ConfigError, match="answer\\(\\) needs a 'qa' bundle; .* is a 'embed' bundle"):
        EdgeSession(bundle).answer("why ?", "because")


def test_the_answer_command(toy, tmp_path, capsys):
    data, bundle = toy
    example = read_squad(data / "dev.json")[0]
    (tmp_path / "context.txt").write_text(example.context, encoding="utf-8")
    code, out, err = run_cli(capsys, "answer", bundle, example.question, "--context", tmp_path / "context.txt",
                             "--top-k", "2")
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 3 and lines[0].startswith(repr(example.answers[0].text)) and "score" in lines[0]
    assert lines[2].startswith("(int8 on cpu: default: ")
    code, out, err = run_cli(capsys, "answer", bundle, example.question, "--context", tmp_path / "context.txt",
                             "--json", "--precision", "fp32")
    assert code == 0 and json.loads(out)["answer"] == example.answers[0].text
    code, _, err = run_cli(capsys, "answer", bundle, " ", "--context", tmp_path / "context.txt")
    assert_one_line_error(code, err, "question is empty")
    code, _, err = run_cli(capsys, "answer", bundle, "why ?", "--context", tmp_path / "missing.txt")
    assert_one_line_error(code, err, "context file", "missing.txt", "not found")


# --------------------------------------------------------------------------- evaluate and bench
def test_evaluate_squad_scores_a_checkpoint_and_its_bundle_alike(toy, capsys):
    from edgebert.stages.evaluate import evaluate

    data, bundle = toy
    model = evaluate(data / "teacher", "squad", data / "dev.json", max_seq_len=32)   # the training windows
    fp32 = evaluate(bundle, "squad", data / "dev.json", precision="fp32", max_seq_len=32)
    assert model.kind == "model" and fp32.kind == "bundle" and fp32.details["precision"] == "fp32"
    assert model.metrics == fp32.metrics and model.metrics["f1"] >= 95.0 and model.metrics["n"] == 40
    assert model.details["windows"] == fp32.details["windows"] > 40                 # long contexts: windows
    int8 = evaluate(bundle, "squad", data / "dev.json")                              # the bundle's 64 tokens
    assert int8.details["precision"] == "int8" and int8.details["max_seq_len"] == TOY_LENGTH
    assert int8.metrics["f1"] >= 90.0
    v2 = evaluate(bundle, "squad", data / "dev2.json", with_no_answer=True, precision="fp32")
    assert {"has_answer_f1", "no_answer_f1", "null_threshold"} <= set(v2.metrics) and v2.metrics["n"] == 30
    assert v2.metrics["has_answer_n"] + v2.metrics["no_answer_n"] == 30 and v2.metrics["no_answer_n"] > 0
    code, out, err = run_cli(capsys, "evaluate", bundle, "--task", "squad", "--data", data / "dev.json",
                             "--precision", "fp32")
    assert code == 0 and f"f1: {fp32.metrics['f1']:.4f}" in out, err
    code, _, err = run_cli(capsys, "evaluate", bundle, "--task", "sst2", "--data", data / "dev.json",
                           "--with-no-answer")
    assert_one_line_error(code, err, "--with-no-answer and --doc-stride are for SQuAD files")
    code, _, err = run_cli(capsys, "evaluate", data / "base", "--task", "squad", "--data", data / "dev.json")
    assert_one_line_error(code, err, "is a BertForMaskedLM, not a BertForQuestionAnswering")


def test_bench_scores_every_path_on_a_squad_file_over_its_windows(toy, tmp_path):
    from edgebert.bench import BenchConfig, measure
    from squad_helpers import write_toy_squad

    data, bundle = toy
    long = write_toy_squad(tmp_path / "long.json", 24, seed=5, words=(30, 90))       # contexts past a window
    report = measure(BenchConfig(bundle, providers=("cpu",), batches=(1,), seqs=(TOY_LENGTH,), warmup=1, iters=3,
                                 threads=1, reference=data / "teacher", data=long, max_texts=20,
                                 calibration_size=0, eval_texts=8, progress=False, cold_start=False,
                                 mix_modes=("dynamic",)))
    answers = report.answers
    assert set(answers.results) == {"torch fp32", "onnx cpu fp32", "onnx cpu int8"}
    assert answers.questions == answers.answerable == 20 and answers.max_length == TOY_LENGTH
    assert answers.results["onnx cpu fp32"].f1 == answers.results["torch fp32"].f1 >= 80.0
    assert answers.results["onnx cpu int8"].f1 >= 80.0
    assert report.length_mix.texts == answers.windows > 30 and report.length_mix.file == str(long)
    assert {r.path for r in report.length_mix.results} == set(answers.results)
    fp32 = next(p for p in report.paths if p.path == "onnx cpu fp32")
    assert fp32.accuracy.metric == "span_agreement" and fp32.accuracy.agreement == 1.0
    assert fp32.accuracy.max_abs_diff < 1e-3


@pytest.mark.slow
@pytest.mark.hf
def test_real_squad_questions_get_the_pipelines_answers(tmp_path, minilm_dir):
    """all-MiniLM-L6-v2 with a seeded span head (untrained: the decoding is what is compared), imported,
    exported, and asked 80 questions of the real dev file: the same answers as the pipeline."""
    import torch
    import transformers as tf

    from conftest import shared_file
    from edgebert.exporters import ExportConfig, export_bundle
    from edgebert.stages.import_hf import convert_hf

    tf.logging.set_verbosity_error()
    dev = shared_file("squad", "dev-v2.0-first10.json")
    torch.manual_seed(0)
    hf = tf.BertForQuestionAnswering.from_pretrained(minilm_dir).eval()
    tokenizer = tf.AutoTokenizer.from_pretrained(minilm_dir)
    hf.save_pretrained(tmp_path / "hf")
    tokenizer.save_pretrained(tmp_path / "hf")
    convert_hf(tmp_path / "hf", tmp_path / "eb")
    export_bundle(ExportConfig(model_dir=tmp_path / "eb", out_dir=tmp_path / "bundle", max_sequence_length=384,
                               validation_batch_sizes=(1,), validation_seq_lens=(7,)))
    examples = read_squad(dev)[:80]
    questions, contexts = [e.question for e in examples], [e.context for e in examples]
    ours = EdgeSession(tmp_path / "bundle", precision="fp32").answer(questions, contexts, max_answer_len=30)
    theirs = question_answering_pipeline(model=hf, tokenizer=tokenizer)(
        question=questions, context=contexts, max_answer_len=30, max_seq_len=384, doc_stride=128)
    assert not _same(ours, theirs)


def test_span_overlap_f1_counts_characters_shared_with_the_reference():
    import numpy as np

    from edgebert.runtime.fidelity import span_overlap_f1

    ref = np.array([[0, 10], [0, 10], [0, 10], [4, 4], [3, 9]])
    got = np.array([[0, 10], [5, 10], [10, 20], [4, 4], [4, 4]])
    # same span; 5 of 10 and 5 of 5 characters: 2*5/15; touching, no overlap; two empty answers; empty vs 6
    np.testing.assert_allclose(span_overlap_f1(ref, got), [1.0, 2 / 3, 0.0, 1.0, 0.0], atol=1e-12)


def test_check_measures_a_qa_bundles_int8_answers_against_fp32(toy, capsys):
    """``edgebert check`` on a qa bundle: INT8 answers vs fp32 answers (overlap F1) on a SQuAD file, the
    export gate's metric and budget (the gate measured on the same file: the same figure)."""
    root, bundle = toy
    manifest = json.loads((bundle / "manifest.json").read_text())
    gate = manifest["models"]["int8"]["accuracy"]
    assert gate["metric"] == "answer_overlap_f1" and gate["max_accuracy_loss"] == 0.02
    code, out, _ = run_cli(capsys, "check", str(bundle), "--data", str(root / "dev.json"), "--json")
    report = json.loads(out)
    assert code == 0, report["reason"]
    assert report["fidelity"]["metric"] == "answer_overlap_f1"
    assert report["fidelity"]["n"] == 40 and report["texts"]["n"] == 40
    assert report["budget"] == 0.02
    assert report["fidelity"]["mean"] >= 0.98 and abs(report["fidelity"]["mean"] - gate["mean"]) <= 1 / 40
    assert report["reason"].startswith("PASS: INT8 graph")
    # the built-in held-out questions when no --data is given
    code, out, _ = run_cli(capsys, "check", str(bundle), "--json", "--max-texts", "12")
    report = json.loads(out)
    assert report["texts"] == {"source": "built-in held-out", "n": 12} and report["fidelity"]["n"] == 12
