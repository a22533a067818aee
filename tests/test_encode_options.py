"""``EdgeSession.encode`` as ``SentenceTransformer.encode`` for every option it names: output_value,
precision (sentence-transformers' quantize_embeddings, reimplemented in numpy), prompts (prompt_name,
the default prompt, encode_query / encode_document), max_seq_length (settable), truncate_dim,
similarity_fn_name, tokenizer; convert_to_tensor / device refused in one line. A tiny seeded
sentence-transformers model with prompts, through import-hf and export (tests/test_encode.py's helpers)."""

from __future__ import annotations

import inspect
import json

import numpy as np
import pytest

from edgebert.errors import ConfigError
from edgebert.runtime import EdgeSession
from edgebert.runtime.embedding_quantization import PRECISIONS, quantize_embeddings
from test_encode import TEXTS, export, sentence_transformer, st_model_dir

st = pytest.importorskip("sentence_transformers")
PROMPTS = {"query": "query: ", "document": "passage: ", "classification": "classify this: "}
TOL = 1e-5


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from edgebert.stages.import_hf import import_hf

    root = tmp_path_factory.mktemp("encode-options")
    src = st_model_dir(root, "st", {"pooling_mode_mean_tokens": True, "include_prompt": False}, max_seq_length=48)
    (src / "config_sentence_transformers.json").write_text(json.dumps(
        {"prompts": PROMPTS, "default_prompt_name": "classification", "similarity_fn_name": "dot"}))
    imported = import_hf(src, root / "imported")
    bundle = export(imported, root / "bundle")
    return EdgeSession(bundle, precision="fp32"), sentence_transformer(src)


def test_encode_has_sentence_transformers_defaults():
    def defaults(function):
        return {n: p.default for n, p in inspect.signature(function).parameters.items()
                if p.default is not inspect.Parameter.empty}

    ours, theirs = defaults(EdgeSession.encode), defaults(st.SentenceTransformer.encode)
    shared = set(ours) & set(theirs)
    assert {"batch_size", "normalize_embeddings", "show_progress_bar", "convert_to_numpy", "prompt", "prompt_name",
            "output_value", "precision", "convert_to_tensor", "device", "truncate_dim"} <= shared
    for name in shared:
        assert ours[name] == theirs[name], name


def test_prompts_and_default_prompt_as_sentence_transformers(models):
    ours, theirs = models
    assert ours.prompts == theirs.prompts == PROMPTS and ours.default_prompt_name == "classification"
    for call in ("encode", "encode_query", "encode_document"):
        a, b = getattr(ours, call)(TEXTS), getattr(theirs, call)(TEXTS)
        assert np.abs(a - b).max() < TOL, call
    a, b = ours.encode(TEXTS, prompt_name="query"), theirs.encode(TEXTS, prompt_name="query")
    assert np.abs(a - b).max() < TOL
    assert np.abs(a - ours.encode(TEXTS)).max() > 1e-3            # the prompt changes the vectors
    with pytest.raises(ConfigError, match="prompt_name='answer' is not one of the model's prompts"):
        ours.encode(TEXTS, prompt_name="answer")


def test_output_values_as_sentence_transformers(models):
    ours, theirs = models
    got = ours.encode(TEXTS, output_value="token_embeddings")
    want = theirs.encode(TEXTS, output_value="token_embeddings", convert_to_numpy=False)
    assert [g.shape for g in got] == [tuple(w.shape) for w in want]
    assert max(float(np.abs(g - w.numpy()).max()) for g, w in zip(got, want)) < TOL
    both = ours.encode(TEXTS, output_value=None)
    ref = theirs.encode(TEXTS, output_value=None)
    for mine, them in zip(both, ref):
        n = len(mine["input_ids"])
        assert mine["input_ids"].tolist() == them["input_ids"][:n].tolist()
        assert np.abs(mine["sentence_embedding"] - them["sentence_embedding"].numpy()).max() < TOL
        assert np.abs(mine["token_embeddings"] - them["token_embeddings"][:n].numpy()).max() < TOL
    single = ours.encode(TEXTS[0], output_value="token_embeddings")
    assert single.ndim == 2 and single.shape == got[0].shape


@pytest.mark.parametrize("precision", PRECISIONS)
def test_precision_as_sentence_transformers(models, precision):
    ours, theirs = models
    got, want = ours.encode(TEXTS * 5, precision=precision), theirs.encode(TEXTS * 5, precision=precision)
    assert got.dtype == want.dtype and got.shape == want.shape
    if precision == "float32":
        assert np.abs(got - want).max() < TOL
    else:   # the same buckets / bits, but for a value a float rounding away from an edge
        assert (got != want).mean() < 0.01, precision


def test_quantize_embeddings_equals_sentence_transformers_exactly():
    from sentence_transformers.util.quantization import quantize_embeddings as theirs

    rng = np.random.default_rng(0)
    x, calib = rng.normal(size=(20, 37)).astype(np.float32), rng.normal(size=(50, 37)).astype(np.float32)
    ranges = np.vstack([np.full(37, -1.0), np.full(37, 1.5)])
    for precision in PRECISIONS:
        for options in ({}, {"calibration_embeddings": calib}, {"ranges": ranges}):
            a, b = quantize_embeddings(x, precision, **options), theirs(x, precision, **options)
            assert a.dtype == b.dtype and np.array_equal(a, b), (precision, options)


def test_max_seq_length_truncate_dim_similarity_and_tokenizer(models):
    ours, theirs = models
    assert ours.max_seq_length == theirs.max_seq_length == 48
    ours.max_seq_length = theirs.max_seq_length = 6
    try:
        assert np.abs(ours.encode(TEXTS) - theirs.encode(TEXTS)).max() < TOL
    finally:
        ours.max_seq_length = theirs.max_seq_length = 48
    with pytest.raises(ConfigError, match="max_seq_length=100000"):
        ours.max_seq_length = 100000
    a = ours.encode(TEXTS, truncate_dim=16, normalize_embeddings=True)
    b = theirs.encode(TEXTS, truncate_dim=16, normalize_embeddings=True)
    assert a.shape == (len(TEXTS), 16) and np.abs(a - b).max() < TOL
    assert ours.similarity_fn_name == theirs.similarity_fn_name == "dot"
    vectors = ours.encode(TEXTS)
    assert np.abs(ours.similarity(vectors, vectors) - theirs.similarity(vectors, vectors).numpy()).max() < 1e-4
    for name in ("euclidean", "manhattan", "cosine"):
        ours.similarity_fn_name = theirs.similarity_fn_name = name
        assert np.abs(ours.similarity(vectors, vectors) - theirs.similarity(vectors, vectors).numpy()).max() < 1e-4
    assert ours.tokenizer.encode(TEXTS[1]).ids == theirs.tokenizer(TEXTS[1])["input_ids"]


@pytest.mark.parametrize("option, hint", [({"convert_to_tensor": True}, "torch.from_numpy"),
                                          ({"device": "cuda"}, "provider="), ({"pool": {}}, "EdgeSession per process"),
                                          ({"output_value": "pooler"}, "token_embeddings"),
                                          ({"precision": "int4"}, "ubinary")])
def test_options_that_need_torch_are_refused_in_one_line(models, option, hint):
    ours, _ = models
    with pytest.raises(ConfigError) as error:
        ours.encode(TEXTS, **option)
    assert hint in f"{error.value.message} {error.value.hint}" and "\n" not in error.value.message
