"""Sentence-embedding students judged downstream (issue #22): the metric functions on hand-built
embeddings with known answers, the data loader on tiny files, ``edgebert evaluate --task embed`` on a
tiny seeded model and bundle, the pipeline's downstream line, and one slow test on the real MiniLM."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from distill_helpers import assert_one_line_error, run_cli
from edgebert.errors import ConfigError, DataError
from edgebert.scores.embeddings import (
    cosine_matrix,
    paraphrase_auc,
    probe_accuracy,
    retrieval_scores,
    right_document_ranks,
)
from edgebert.stages.embed_eval import (
    DATA_FILES,
    METRICS,
    DownstreamData,
    compare_downstream,
    downstream_scores,
    query_and_document,
)
from export_fixtures import SENTENCES
from runtime_fixtures import WORDS, tiny_bundle

pytest.importorskip("sklearn")


# --------------------------------------------------------------------------- the metrics, known answers
def test_a_cosine_that_separates_the_pairs_perfectly_has_auc_1_and_a_reversed_one_0():
    base = np.eye(6, 4)[[0, 1, 2, 3, 0, 1]] + 0.1                 # rows; pairs (a_i, b_i)
    same = base.copy()                                            # cosine 1
    other = np.roll(base, 1, axis=1) * np.array([1, 3, 1, 2])     # cosine < 1
    labels = np.array([1, 0, 1, 0, 1, 0])
    b = np.where(labels[:, None] == 1, same, other)
    assert paraphrase_auc(base, b, labels) == 1.0
    assert paraphrase_auc(base, b, 1 - labels) == 0.0
    # scale does not change a cosine: the same pairs, rows scaled, give the same AUC
    assert paraphrase_auc(base * 7.0, b * 0.01, labels) == 1.0
    with pytest.raises(DataError, match="every label is 1"):
        paraphrase_auc(base, b, np.ones(6, int))
    with pytest.raises(DataError, match="pair embeddings of shapes"):
        paraphrase_auc(base, b[:5], labels)


def test_auc_of_a_known_ordering():
    # cosines 1, 0, -1 (label 1, 0, 1): of the 2 x 1 (positive, negative) pairs, one is ordered right
    a = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    b = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    assert paraphrase_auc(a, b, [1, 0, 1]) == pytest.approx(0.5)


def test_a_probe_learns_separable_points_and_guesses_on_noise():
    rng = np.random.default_rng(0)
    y = np.tile([0, 1], 100)
    x = rng.normal(size=(200, 8)) * 0.3
    x[:, 2] += np.where(y == 1, 2.0, -2.0)                         # one feature separates the classes
    assert probe_accuracy(x[:150], y[:150], x[150:], y[150:]) == 1.0
    # the same points scaled by 1e-3 (standardised first): still separated
    assert probe_accuracy(x[:150] * 1e-3, y[:150], x[150:] * 1e-3, y[150:]) == 1.0
    noise = rng.normal(size=(200, 8))
    assert 0.25 < probe_accuracy(noise[:150], y[:150], noise[150:], y[150:]) < 0.75
    with pytest.raises(DataError, match="probe embeddings of width 8 and 3"):
        probe_accuracy(x, y, x[:, :3], y)


def test_retrieval_ranks_recall_and_mrr_on_a_constructed_case():
    # 12 documents along distinct directions; queries 0..9 point at their own document, query 10 more
    # at document 11 than at its own (rank 2), query 11 at every document but its own (rank 12: last)
    docs = np.eye(12)
    queries = np.eye(12)
    queries[10] = 0.9 * docs[11] + 0.5 * docs[10]
    queries[11] = 1.0 - docs[11]
    sims = cosine_matrix(queries, docs)
    ranks = right_document_ranks(sims)
    assert ranks.tolist() == [1] * 10 + [2, 12]
    scores = retrieval_scores(queries, docs)
    assert scores["recall_at_1"] == pytest.approx(10 / 12)
    assert scores["recall_at_10"] == pytest.approx(11 / 12)
    assert scores["mrr"] == pytest.approx((10 + 1 / 2 + 1 / 12) / 12)
    assert scores["n"] == 12
    # a tie with the right document counts against it: two identical documents, both rank 2
    tied = retrieval_scores(np.array([[1.0, 0.0], [1.0, 0.0]]), np.array([[1.0, 0.0], [1.0, 0.0]]))
    assert tied["recall_at_1"] == 0.0 and tied["mrr"] == pytest.approx(0.5)
    with pytest.raises(DataError, match="5 queries of width 12 for 12 documents of width 12"):
        retrieval_scores(queries[:5], docs)


# --------------------------------------------------------------------------- the data sets
def test_a_wikitext_paragraph_splits_after_its_first_sentence():
    text = ("Robert Boulter is an English film , television and theatre actor . He had a guest-starring role on "
            "the television series The Bill in 2000 . This was followed by a starring role in the play .")
    query, rest = query_and_document(text)
    assert query == "Robert Boulter is an English film , television and theatre actor ."
    assert rest.startswith("He had a guest-starring role") and rest.endswith("in the play .")
    assert query_and_document("One sentence only , with no second one to find here at all .") is None
    assert query_and_document("Too short . " + "The rest is long enough to be a document " * 3) is None
    assert query_and_document("It cost 1 @.@ 5 million . in 2004 the rest " + "word " * 30) is None   # no capital


def _sentence(i: int, positive: bool) -> str:
    good = ("good", "great", "wonderful", "charming", "beautiful", "funny", "moving", "perfect")
    bad = ("bad", "dull", "boring", "terrible", "awful", "worst", "mess", "hate")
    pick = good if positive else bad
    return f"the {WORDS[(i * 5) % 60 + 40]} was {pick[i % 8]} and {pick[(i + 3) % 8]}"


def write_tiny_data(root: Path, pairs: int = 24, train: int = 40, dev: int = 16, paragraphs: int = 12) -> Path:
    """The four files of a downstream folder, in the real files' formats (MRPC with its BOM)."""
    for rel in DATA_FILES.values():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
    rows = ["\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String"]
    for i in range(pairs):
        a = SENTENCES[i % len(SENTENCES)] + f" {WORDS[i % 50]}"
        b = a if i % 3 else SENTENCES[(i + 3) % len(SENTENCES)]
        rows.append(f"{int(bool(i % 3))}\t{i}\t{1000 + i}\t{a}\t{b}")
    (root / DATA_FILES["mrpc"]).write_text("\n".join(rows) + "\n", encoding="utf-8")
    for key, n, offset in (("sst2_train", train, 0), ("sst2_dev", dev, 7)):
        lines = ["sentence\tlabel"] + [f"{_sentence(i + offset, i % 2 == 1)} \t{i % 2}" for i in range(n)]
        (root / DATA_FILES[key]).write_text("\n".join(lines) + "\n", encoding="utf-8")
    wiki = [" = Tiny Article = ", " "]
    for i in range(paragraphs):
        first = " ".join(WORDS[(i * 11 + k) % len(WORDS)] for k in range(8)).capitalize()
        rest = " ".join(WORDS[(i * 13 + k) % len(WORDS)] for k in range(30)).capitalize()
        wiki += [f" {first} . {rest} . ", " ", " = = A heading = = ", " "]
    (root / DATA_FILES["wikitext"]).write_text("\n".join(wiki) + "\n", encoding="utf-8")
    return root


def test_the_loader_reads_the_four_files_and_caps_them(tmp_path):
    root = write_tiny_data(tmp_path / "data")
    data = DownstreamData.load(root)
    assert (len(data.pairs), len(data.probe_train), len(data.probe_dev), len(data.queries)) == (24, 40, 16, 12)
    assert data.pair_labels.tolist()[:4] == [0, 1, 1, 0] and set(data.probe_train_labels.tolist()) == {0, 1}
    assert data.queries[0].endswith(" .") and len(data.documents[0].split()) == 31
    assert data.pairs[1][0] == data.pairs[1][1] and len(data.texts()) < 2 * 24 + 40 + 16 + 24   # each text once
    small = DownstreamData.load(root, probe_examples=10, paragraphs=5, limit=8)
    assert (len(small.pairs), len(small.probe_train), len(small.probe_dev), len(small.queries)) == (8, 10, 8, 5)
    assert small.describe()["paragraphs"] == 5
    with pytest.raises(ConfigError, match="limit=1 must be an integer >= 2"):
        DownstreamData.load(root, limit=1)


def test_a_missing_file_is_one_line_naming_it(tmp_path):
    root = write_tiny_data(tmp_path / "data")
    (root / DATA_FILES["sst2_dev"]).unlink()
    with pytest.raises(DataError) as info:
        DownstreamData.load(root)
    line = info.value.one_line()
    assert "\n" not in line and line.startswith(f"{root / 'sst2' / 'dev.tsv'} not found (downstream scores need")
    assert "wikitext-2-raw/wiki.test.raw, e.g. ../shared/data" in line
    (root / DATA_FILES["mrpc"]).unlink()
    with pytest.raises(DataError, match=r"mrpc/dev.tsv not found \(and 1 more\)$"):
        DownstreamData.load(root)
    with pytest.raises(DataError, match=f"^{tmp_path / 'nowhere'} not found$"):
        DownstreamData.load(tmp_path / "nowhere")


# --------------------------------------------------------------------------- models, bundles, the CLI
@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    model_dir, bundle_dir = tiny_bundle(tmp_path_factory.getbasetemp(), "embed")
    data_dir = write_tiny_data(tmp_path_factory.mktemp("downstream"))
    return model_dir, bundle_dir, data_dir


def test_a_model_and_its_fp32_bundle_score_alike_and_the_int8_close(tiny):
    model_dir, bundle_dir, data_dir = tiny
    data = DownstreamData.load(data_dir)
    result = compare_downstream(model_dir, bundle_dir, data)
    assert set(result) >= {"teacher", "student_fp32", "student_int8", "retention", "details", "data"}
    teacher, fp32, int8 = result["teacher"], result["student_fp32"], result["student_int8"]
    for name in METRICS:
        assert 0.0 <= teacher[name] <= 1.0, name
        # the bundle is the same model: the same figures up to float noise in the ranks
        assert fp32[name] == pytest.approx(teacher[name], abs=0.02), name
        assert int8[name] == pytest.approx(teacher[name], abs=0.15), name
        assert result["retention"]["student_fp32"][name] == pytest.approx(fp32[name] / teacher[name])
    # identical MRPC pairs (2 of 3) have cosine 1: they rank above every non-paraphrase
    assert teacher["mrpc_auc"] == 1.0
    details = result["details"]
    assert details["teacher"]["kind"] == "model" and details["student_int8"]["precision"] == "int8"
    assert details["teacher"]["max_seq_len"] == details["student_fp32"]["max_seq_len"] == 128
    assert result["data"]["paragraphs"] == 12


def test_evaluate_task_embed_prints_the_figures(tiny, capsys):
    model_dir, bundle_dir, data_dir = tiny
    code, out, err = run_cli(capsys, "evaluate", str(bundle_dir), "--task", "embed", "--data", str(data_dir),
                             "--precision", "fp32")
    assert code == 0, err
    for name in METRICS:
        assert f"  {name}: " in out, name
    code, out, err = run_cli(capsys, "evaluate", str(model_dir), "--task", "embed", "--data", str(data_dir),
                             "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["kind"] == "model" and result["task"] == "embed" and set(result["metrics"]) == set(METRICS)
    assert result["details"]["paragraphs"] == 12 and result["num_examples"] == result["details"]["texts"]
    direct = downstream_scores(model_dir, DownstreamData.load(data_dir))["metrics"]
    assert result["metrics"] == pytest.approx(direct, abs=1e-9)


@pytest.mark.parametrize("case", ["missing data", "precision on a model"])
def test_evaluate_task_embed_errors_are_one_line(case, tiny, tmp_path, capsys):
    model_dir, _, data_dir = tiny
    args = {"missing data": ["--data", str(tmp_path / "none")],
            "precision on a model": ["--data", str(data_dir), "--precision", "int8"]}[case]
    code, _, err = run_cli(capsys, "evaluate", str(model_dir), "--task", "embed", *args)
    expected = {"missing data": "none not found (downstream scores need", "precision on a model": "is for bundles"}
    assert_one_line_error(code, err, expected[case])


# --------------------------------------------------------------------------- the pipeline
def test_the_pipeline_says_in_one_line_why_downstream_scores_were_skipped(tiny, tmp_path, monkeypatch):
    import edgebert.scores.embeddings as embeddings
    from edgebert.errors import MissingExtra
    from edgebert.pipeline.steps import score_downstream
    from edgebert.pipeline.summary import downstream_lines

    messages: list[str] = []
    log = lambda stage, message, **figures: messages.append(f"{stage}: {message}")  # noqa: E731
    skipped = score_downstream(None, tmp_path / "teacher", tmp_path / "bundle", log)
    assert skipped == {"skipped": "no --downstream-data given"} and not messages
    skipped = score_downstream(tmp_path / "none", tmp_path / "teacher", tmp_path / "bundle", log)
    assert "skipped" in skipped and str(tmp_path / "none") in skipped["skipped"] and not messages
    lines = downstream_lines(skipped)
    assert lines == [f"downstream scores skipped: {tmp_path / 'none'} not found"]

    def no_sklearn(module):
        raise MissingExtra("downstream embedding scores need scikit-learn", "pip install 'edgebert[train]'")

    monkeypatch.setattr(embeddings, "_sklearn", no_sklearn)           # found before the data is read
    skipped = score_downstream(tiny[2], tmp_path / "teacher", tmp_path / "bundle", log)
    assert downstream_lines(skipped) == ["downstream scores skipped: scikit-learn is not installed "
                                         "(pip install 'edgebert[train]')"] and not messages


def test_a_pipeline_run_with_downstream_data_shows_the_table(tiny, tmp_path):
    """The demo's path on the tiny encoder (as teacher) with the tiny downstream folder: the scores are
    in pipeline.json, the one-screen summary and pipeline.md."""
    from edgebert.pipeline import PipelineConfig, run_pipeline
    from edgebert.pipeline.summary import downstream_lines, summary_lines
    from export_fixtures import make_calib_text

    model_dir, _, data_dir = tiny
    corpus = make_calib_text(tmp_path / "corpus.txt", n=120)
    cfg = PipelineConfig(out=tmp_path / "run", corpus=(corpus,), corpus_format="lines", teacher=model_dir, layers=1,
                         distill_steps=2, distill_batch_size=8, distill_max_seq_len=32, distill_eval_examples=8,
                         calib_size=8, bench_seqs=(8,), bench_iters=3, bench_max_texts=4, bench_calibration_size=0,
                         threads=1, progress=False, downstream_data=data_dir)
    lines: list[str] = []
    result = run_pipeline(cfg, say=lines.append)
    down = result.summary["stages"]["downstream"]
    assert set(down) >= {"teacher", "student_fp32", "student_int8", "retention", "seconds"}
    assert down["data"]["paragraphs"] == 12 and down["details"]["student_int8"]["precision"] == "int8"
    assert down["retention"]["student_fp32"]["retrieval_mrr"] == pytest.approx(
        down["student_fp32"]["retrieval_mrr"] / down["teacher"]["retrieval_mrr"])
    assert "downstream" in result.summary["summary"]["stage_seconds"]
    assert any(line.startswith("[") and "downstream: done in" in line for line in lines)
    # the table: a header and one row per metric, teacher / student fp32 / student INT8 (retention)
    first = result.lines.index(next(line for line in result.lines if line.startswith("held out (student/teacher)")))
    table = result.lines[first:first + 1 + len(METRICS)]
    assert table == downstream_lines(down)[1:]
    for label, row in zip(("MRPC paraphrase ROC-AUC", "SST-2 probe accuracy", "retrieval recall@1",
                           "retrieval recall@10", "retrieval MRR"), table[1:]):
        assert row.startswith(label), row
    key, kept = "retrieval_mrr", down["retention"]
    assert table[-1].split() == ["retrieval", "MRR", f"{down['teacher'][key]:.3f}",
                                 f"{down['student_fp32'][key]:.3f}", f"({100 * kept['student_fp32'][key]:.0f}%)",
                                 f"{down['student_int8'][key]:.3f}", f"({100 * kept['student_int8'][key]:.0f}%)"]
    paths = (str(tmp_path), str(model_dir))
    assert max(len(line) for line in result.lines if not any(p in line for p in paths)) <= 80
    assert "| downstream | MRPC dev 24 pairs" in (result.out / "pipeline.md").read_text()
    # without the data the table is one line saying why
    skipped = {**result.summary["summary"], "downstream": {"skipped": "no --downstream-data given"}}
    lines = summary_lines(skipped, result.out)
    assert "downstream scores skipped: no --downstream-data given" in lines and len(lines) == len(result.lines) - 6


# --------------------------------------------------------------------------- the real teacher
@pytest.mark.slow
def test_minilm_downstream_figures_on_the_shared_data(minilm_dir):
    from conftest import SHARED_DATA, shared_file

    for rel in DATA_FILES.values():
        shared_file(*rel.split("/"))
    data = DownstreamData.load(SHARED_DATA, probe_examples=2000, paragraphs=100, limit=200)
    metrics = downstream_scores(minilm_dir, data)["metrics"]
    # all-MiniLM-L6-v2 is a good sentence encoder: far above chance on each
    assert metrics["mrpc_auc"] > 0.65
    assert metrics["sst2_probe_accuracy"] > 0.7
    assert metrics["retrieval_recall_at_1"] > 0.12 and metrics["retrieval_recall_at_10"] > 0.5
