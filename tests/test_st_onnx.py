"""``EdgeSentenceTransformer(bundle)``: sentence-transformers' own ``SentenceTransformer`` (5 or 6) running the
bundle's ONNX graph with no Optimum, against sentence-transformers' PyTorch vectors of the model the bundle
was exported from: encode and its options, prompts, ``encode_query`` / ``encode_document``, similarity;
the INT8 graph as ``EdgeSession`` runs it. Tiny seeded models; MiniLM in the slow test."""

from __future__ import annotations

import json

import numpy as np
import pytest

from edgebert.errors import ConfigError
from edgebert.runtime import EdgeSession
from test_encode import TEXTS, cosines, export, st_model_dir

st = pytest.importorskip("sentence_transformers")
pytest.importorskip("transformers")
from edgebert.st_onnx import EdgeSentenceTransformer  # noqa: E402

PROMPTS = {"query": "query: ", "document": "passage: ", "classification": "classify this: "}
TOL = 1e-5


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """(the PyTorch SentenceTransformer, its bundle) of a tiny seeded model with prompts, a prompt-excluding
    mean pooling, Normalize, a 48-token limit and a dot-product similarity."""
    from edgebert.stages.import_hf import import_hf

    root = tmp_path_factory.mktemp("st-onnx")
    src = st_model_dir(root, "st", {"pooling_mode_mean_tokens": True, "include_prompt": False}, max_seq_length=48)
    (src / "config_sentence_transformers.json").write_text(json.dumps(
        {"prompts": PROMPTS, "default_prompt_name": "classification", "similarity_fn_name": "dot"}))
    bundle = export(import_hf(src, root / "imported"), root / "bundle", int8=True)
    return st.SentenceTransformer(str(src), device="cpu"), bundle


LONG = " ".join(["word"] * 120)                       # cut at the model's 48 tokens by both


def test_encode_and_its_options_match_sentence_transformers_on_the_fp32_graph(models):
    torch_model, bundle = models
    model = EdgeSentenceTransformer(bundle, precision="fp32")
    assert isinstance(model, st.SentenceTransformer) and type(model).__name__ == "EdgeSentenceTransformer"
    assert model.max_seq_length == torch_model.max_seq_length == 48
    assert model.prompts == torch_model.prompts and model.default_prompt_name == "classification"
    assert model.similarity_fn_name == torch_model.similarity_fn_name == "dot"
    texts = [*TEXTS, LONG]
    for kwargs in ({}, {"prompt_name": "query"}, {"prompt": "custom: "}, {"normalize_embeddings": True},
                   {"batch_size": 2}, {"precision": "int8"}, {"precision": "ubinary"}, {"truncate_dim": 16}):
        ours, theirs = model.encode(texts, **kwargs), torch_model.encode(texts, **kwargs)
        assert ours.shape == theirs.shape and ours.dtype == theirs.dtype, kwargs
        if ours.dtype == np.float32:
            assert float(np.abs(ours - theirs).max()) < TOL, kwargs
            assert float(cosines(ours, theirs).min()) >= 0.99999, kwargs
        else:                                                  # quantized: the same codes
            assert np.abs(ours.astype(int) - theirs.astype(int)).max() <= 1, kwargs
    for method in ("encode_query", "encode_document"):
        ours, theirs = getattr(model, method)(texts), getattr(torch_model, method)(texts)
        assert float(np.abs(ours - theirs).max()) < TOL, method
    tokens = model.encode(texts[:2], output_value="token_embeddings")
    want = torch_model.encode(texts[:2], output_value="token_embeddings")
    assert [t.shape for t in tokens] == [t.shape for t in want]
    assert max(float((a - b).abs().max()) for a, b in zip(tokens, want)) < TOL
    tensor = model.encode(texts, convert_to_tensor=True)
    vectors = torch_model.encode(texts, convert_to_tensor=True)
    assert float((model.similarity(tensor, tensor) - torch_model.similarity(vectors, vectors)).abs().max()) < 1e-4


def test_the_int8_graph_gives_edgesessions_int8_vectors(models):
    torch_model, bundle = models
    model = EdgeSentenceTransformer(bundle, precision="int8")
    session = EdgeSession(bundle, precision="int8")
    ours = model.encode(TEXTS, prompt_name="document")
    assert float(np.abs(ours - session.encode(TEXTS, prompt_name="document")).max()) < TOL
    reference = torch_model.encode(TEXTS, prompt_name="document")
    assert 0.98 < float(cosines(ours, reference).min()) < 0.999999        # the INT8 graph, not the fp32 one


def test_what_it_cannot_open_is_refused_in_one_line(models, tmp_path):
    _, bundle = models
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="no modules.json"):
        EdgeSentenceTransformer(tmp_path / "empty")
    with pytest.raises(ConfigError, match="leave `backend` out"):
        EdgeSentenceTransformer(bundle, backend="onnx")
    with pytest.raises(ConfigError, match="computes with onnxruntime"):
        EdgeSentenceTransformer(bundle, device="cuda")
    with pytest.raises(ConfigError, match="no PyTorch weights"):
        EdgeSentenceTransformer(bundle, precision="fp32").save(str(tmp_path / "saved"))


@pytest.mark.slow
def test_minilm_bundle_gives_sentence_transformers_own_vectors(minilm_dir, tmp_path):
    """all-MiniLM-L6-v2 exported here: fp32 graph cosine >= 0.99999 against sentence-transformers' PyTorch
    vectors on the same folder; the INT8 graph's mean cosine printed (run with -s)."""
    from edgebert.files.textfiles import builtin_texts

    bundle = export(minilm_dir, tmp_path / "minilm", int8=True)
    texts = builtin_texts("held-out")[:64]
    reference = st.SentenceTransformer(str(minilm_dir), device="cpu").encode(texts)
    fp32 = EdgeSentenceTransformer(bundle, precision="fp32").encode(texts)
    int8 = EdgeSentenceTransformer(bundle, precision="int8").encode(texts)
    fp32_cos, int8_cos = cosines(fp32, reference), cosines(int8, reference)
    print(f"\nMiniLM, sentence-transformers {st.__version__}: fp32 cosine min {fp32_cos.min():.6f}, "
          f"INT8 mean {int8_cos.mean():.5f} min {int8_cos.min():.5f}")
    assert float(fp32_cos.min()) >= 0.99999
    assert float(int8_cos.mean()) >= 0.99
