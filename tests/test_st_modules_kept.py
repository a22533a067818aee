"""A model's sentence-transformers modules (pooling, Normalize, token limit) are kept by every stage that
writes a model folder from it (distill, finetune; import-hf: tests/test_encode.py), so that the exported
student encodes as its teacher does; a folder sentence-transformers would refuse, or run in another
order, is refused in one line naming the file; a student deeper than its teacher is refused before any
work. Tiny seeded models, a few training steps each."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from distill_helpers import assert_one_line_error, make_model_dir, run_cli, write_toy_corpus, write_toy_tsv
from edgebert.bundle import read_manifest
from edgebert.bundle.pooling import read_pooling
from edgebert.errors import ConfigError
from edgebert.runtime import EdgeSession
from test_encode import MODULES, TEXTS, export, sentence_transformer, st_model_dir

LIMIT = 24       # the teacher's sentence_bert_config.json max_seq_length: below the 128 positions it has
LONG = " ".join(["the film is good and the plot is a mess but the actors are great"] * 6)   # > LIMIT tokens


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("st_kept")


@pytest.fixture(scope="module")
def teacher(root) -> Path:
    """A 2-layer sentence-transformers model: mean pooling + Normalize, LIMIT tokens."""
    return st_model_dir(root, "teacher", {"pooling_mode": "mean"}, normalize=True, seed=11, max_seq_length=LIMIT)


@pytest.fixture(scope="module")
def student(root, teacher) -> Path:
    from edgebert.stages.distill import DistillConfig, distill

    corpus = write_toy_corpus(root / "corpus.txt", paragraphs=40)
    cfg = DistillConfig.preset("embed", teacher, root / "student", layers=1, corpus=(corpus,), max_seq_len=32,
                               max_eval_examples=8, train=dict(max_steps=3, batch_size=8, eval_every=3,
                                                               save_every=3, log_every=1, progress=False))
    distill(cfg)
    return root / "student"


def test_distilled_student_keeps_the_teachers_pooling_normalize_and_token_limit(root, teacher, student):
    assert read_pooling(student) == read_pooling(teacher) is not None
    assert json.loads((student / "sentence_bert_config.json").read_text())["max_seq_length"] == LIMIT
    teacher_session = EdgeSession(export(teacher, root / "teacher_bundle"), provider="cpu")
    session = EdgeSession(export(student, root / "student_bundle"), provider="cpu")
    assert read_manifest(root / "student_bundle").pooling == read_manifest(root / "teacher_bundle").pooling
    vectors = session.encode(TEXTS)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)            # the Normalize
    assert session.pooling.max_seq_length == teacher_session.pooling.max_seq_length == LIMIT
    # the limit is applied: a long text encodes as its first LIMIT tokens (the student has 128 positions);
    # every word of LONG is one token of the tiny vocabulary
    assert len(session.encoder.pieces([LONG])[0]) > LIMIT
    cut = " ".join(LONG.split()[:LIMIT - 2])                                             # [CLS] ... [SEP]
    np.testing.assert_allclose(session.encode(LONG), session.encode(cut), atol=1e-6)
    assert float(np.abs(session.encode(LONG) - session.embed(LONG, normalize=True)[0]).max()) > 1e-3
    # sentence-transformers loads the student folder and gives the bundle's vectors
    reference = sentence_transformer(student).encode([*TEXTS, LONG])
    np.testing.assert_allclose(session.encode([*TEXTS, LONG]), reference, atol=1e-5)


def test_distill_overwrite_replaces_the_pooling_files_it_wrote(root, teacher, student, capsys):
    """The student folder's sentence-transformers files are distill's own outputs: --overwrite may
    replace them (another command's folder holding them is not taken for distill's)."""
    work = root / "again"
    shutil.copytree(student, work)
    code, out, err = run_cli(capsys, "distill", teacher, "--task", "embed", "--corpus", root / "corpus.txt",
                             "--out", work, "--layers", "1", "--max-steps", "2", "--max-seq-len", "32",
                             "--overwrite")
    assert code == 0, err
    assert read_pooling(work) == read_pooling(teacher)


def test_finetuned_model_keeps_the_pooling(root, teacher):
    from edgebert.stages.finetune import build_finetune_config, finetune

    train = write_toy_tsv(root / "train.tsv", 32, seed=0)
    cfg = build_finetune_config(teacher, "tsv", train, root / "finetuned", "tiny",
                                train={"max_steps": 2, "eval_every": 0, "save_every": 2})
    finetune(cfg)
    assert read_pooling(root / "finetuned") == read_pooling(teacher)
    for name in ("modules.json", "1_Pooling/config.json", "sentence_bert_config.json"):
        assert (root / "finetuned" / name).is_file(), name


# --------------------------------------------------------------------------- folders sentence-transformers refuses
def _variant(root: Path, name: str, edit) -> Path:
    folder = st_model_dir(root, name, {"pooling_mode": "cls"}, normalize=True, seed=2)
    edit(folder)
    return folder


def _modules(folder: Path, modules: list) -> None:
    (folder / "modules.json").write_text(json.dumps(modules))


def _limit(folder: Path, value) -> None:
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": value}))


OUTSIDE = "outside_pool"
REFUSED = {
    "missing_pooling_folder": (lambda f: shutil.rmtree(f / "1_Pooling"),
                               r"modules.json names the Pooling folder .1_Pooling., but .*1_Pooling/config.json is missing"),
    "pooling_outside": (lambda f: _modules(f, [MODULES[0], {**MODULES[1], "path": f"../{OUTSIDE}"}, MODULES[2]]),
                        r"names '\.\./outside_pool' as the Pooling folder; it must be a folder inside"),
    "pooling_absolute": (lambda f: _modules(f, [MODULES[0], {**MODULES[1], "path": str(f.parent / OUTSIDE)},
                                                MODULES[2]]), r"as the Pooling folder; it must be a folder inside"),
    "pooling_is_the_model_folder": (lambda f: _modules(f, [MODULES[0], {**MODULES[1], "path": ""}, MODULES[2]]),
                                    r"names '' as the Pooling folder"),
    "no_transformer": (lambda f: _modules(f, MODULES[1:]),
                       r"modules.json lists Pooling -> Normalize; edgebert reproduces Transformer -> Pooling"),
    "normalize_first": (lambda f: _modules(f, [MODULES[0], MODULES[2], MODULES[1]]),
                        r"lists Transformer -> Normalize -> Pooling; edgebert reproduces"),
    "transformer_elsewhere": (lambda f: _modules(f, [{**MODULES[0], "path": "0_Transformer"}, *MODULES[1:]]),
                              r"puts the Transformer in '0_Transformer', not the model folder itself"),
    "limit_negative": (lambda f: _limit(f, -5), r"sentence_bert_config.json: max_seq_length -5 is not a positive"),
    "limit_text": (lambda f: _limit(f, "abc"), r"sentence_bert_config.json: max_seq_length 'abc' is not a positive"),
    "limit_float": (lambda f: _limit(f, 16.5), r"max_seq_length 16.5 is not a positive"),
    "limit_bool": (lambda f: _limit(f, True), r"max_seq_length True is not a positive"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_folders_sentence_transformers_refuses_are_refused_in_one_line(root, case, capsys):
    outside = root / OUTSIDE
    outside.mkdir(exist_ok=True)
    (outside / "config.json").write_text(json.dumps({"word_embedding_dimension": 64, "pooling_mode": "mean"}))
    edit, message = REFUSED[case]
    folder = _variant(root, case, edit)
    with pytest.raises(ConfigError, match=message):
        read_pooling(folder)
    code, _, err = run_cli(capsys, "export", folder, "--out", root / f"{case}_bundle")
    assert_one_line_error(code, err, str(folder))
    assert not (root / f"{case}_bundle").exists()


def test_what_sentence_transformers_runs_alike_is_still_read(root):
    """A null limit is unstated (sentence-transformers falls back to the tokenizer's); a Normalize twice
    is one normalization; the older Pooling layout is read as before."""
    assert read_pooling(_variant(root, "limit_null", lambda f: _limit(f, None))).max_seq_length is None
    twice = _variant(root, "normalize_twice", lambda f: _modules(f, [*MODULES, {**MODULES[2], "idx": 3, "name": "3"}]))
    assert read_pooling(twice).normalize and read_pooling(twice).mode == "cls"


# --------------------------------------------------------------------------- a student deeper than its teacher
@pytest.fixture(scope="module")
def deep(root) -> Path:
    make_model_dir(root / "six", "BertModel", layers=6, max_position=128)
    make_model_dir(root / "qa2", "BertForQuestionAnswering", layers=2, max_position=128)
    write_toy_corpus(root / "deep_corpus.txt", paragraphs=20)
    (root / "squad.json").write_text(json.dumps({"version": "1.1", "data": []}))
    return root


DEEPER = {   # (teacher, config fields, CLI options, the message)
    "closest_7_of_6": ("six", dict(task="embed", layer_map="closest", layers=7),
                       ["--task", "embed", "--layer-map", "closest", "--layers", "7"],
                       "--layers 7 is larger than the teacher's depth (6 layers); --layer-map closest picks"),
    "squad_3_of_2": ("qa2", dict(task="squad", layers=3), ["--task", "squad", "--layers", "3"],
                     "--layers 3 is larger than the teacher's depth (2 layers); --layer-map closest picks"),
    "map_past_the_teacher": ("six", dict(task="embed", layers=2, layer_map="0,6"),
                             ["--task", "embed", "--layers", "2", "--layer-map", "0,6"],
                             "--layer-map entry 6 is out of range for a 6-layer teacher"),
}


@pytest.mark.parametrize("case", sorted(DEEPER))
def test_student_deeper_than_the_teacher_is_refused_before_any_work(deep, case, capsys, tmp_path):
    from edgebert.stages.distill import build_distill_config, distill

    teacher, fields, options, message = DEEPER[case]
    data = {"train_file": deep / "squad.json"} if fields["task"] == "squad" else {"corpus": (deep / "deep_corpus.txt",)}
    cfg = build_distill_config(deep / teacher, tmp_path / "t", **fields, **data)
    with pytest.raises(ConfigError, match=re.escape(message)):
        distill(cfg)
    assert not (tmp_path / "t").exists()
    data_options = ["--train", data["train_file"]] if "train_file" in data else ["--corpus", *data["corpus"]]
    code, _, err = run_cli(capsys, "distill", deep / teacher, *options, *data_options, "--out", tmp_path / "s")
    assert_one_line_error(code, err, message, "(use ")
    assert not (tmp_path / "s").exists()


@pytest.mark.slow
def test_distilled_minilm_student_encodes_unit_vectors_at_256_tokens(minilm_dir, tmp_path, capsys):
    """The issue's case: all-MiniLM-L6-v2 (mean + Normalize, 256 tokens) -> a 2-layer student by
    ``edgebert distill``, exported: its EdgeSession pools and limits as the teacher does (about 40 s)."""
    corpus = write_toy_corpus(tmp_path / "corpus.txt", paragraphs=40)
    code, _, err = run_cli(capsys, "distill", minilm_dir, "--task", "embed", "--layers", "2", "--corpus", corpus,
                           "--max-steps", "2", "--max-seq-len", "32", "--out", tmp_path / "student")
    assert code == 0, err
    session = EdgeSession(export(tmp_path / "student", tmp_path / "bundle"), provider="cpu")
    assert session.pooling == read_pooling(minilm_dir)
    assert (session.pooling.mode, session.pooling.normalize, session.pooling.max_seq_length) == ("mean", True, 256)
    vectors = session.encode([*TEXTS, LONG * 4])
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    reference = sentence_transformer(tmp_path / "student")
    assert reference.max_seq_length == 256
    np.testing.assert_allclose(vectors, reference.encode([*TEXTS, LONG * 4]), atol=1e-5)
