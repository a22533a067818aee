"""One bundle, one set of vectors: ``SentenceTransformer(bundle, backend="onnx")`` and ``EdgeSession(bundle)``
read the same files and give the same vectors: the pooling and Normalize a model that states none gets at
export (the bundle's modules.json), a bundle without those files (laid out before they were written), the
prompts (sentence-transformers' default empty ``query`` / ``document`` prompts, ``encode_document``'s order).
Tiny seeded models, fp32 bundles."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from edgebert.bundle import read_manifest
from edgebert.errors import BundleError
from edgebert.runtime import EdgeSession
from runtime_fixtures import make_tiny_model_dir
from test_encode import TEXTS, export, st_model_dir

st = pytest.importorskip("sentence_transformers")
CPU_ONLY = {"provider": "CPUExecutionProvider"}
TOL = 1e-5
ST_FILES = ("modules.json", "1_Pooling/config.json", "sentence_bert_config.json")


HAS_OPTIMUM = importlib.util.find_spec("optimum") is not None


def _on_bundle(bundle: Path):
    """sentence-transformers opening the bundle itself: its ONNX backend, as the manifest's loaders note says,
    where Optimum can be installed (sentence-transformers 5, make test-optimum); beside sentence-transformers 6,
    where it cannot, its SentenceTransformer built from the bundle's files on the graph (edgebert.st_onnx)."""
    if HAS_OPTIMUM:
        return st.SentenceTransformer(str(bundle), device="cpu", backend="onnx", model_kwargs=CPU_ONLY)
    from edgebert.st_onnx import EdgeSentenceTransformer

    return EdgeSentenceTransformer(bundle, precision="fp32")


@pytest.fixture(scope="module")
def plain_bundle(tmp_path_factory) -> Path:
    """A model that states no pooling (no sentence-transformers files), exported."""
    root = tmp_path_factory.mktemp("dropin")
    return export(make_tiny_model_dir(root / "plain", "BertModel", seed=3), root / "plain_bundle")


def test_a_model_stating_no_pooling_encodes_as_its_bundle_tells_sentence_transformers(plain_bundle):
    reference = _on_bundle(plain_bundle).encode(TEXTS)
    session = EdgeSession(plain_bundle, provider="cpu")
    got = session.encode(TEXTS)
    assert read_manifest(plain_bundle).pooling is None                   # the model states none ...
    assert (session.pooling.mode, session.pooling.normalize) == ("mean", True)   # ... its bundle's files do
    assert session.describe()["pooling"]["source"] == "edgebert's default, in the bundle's modules.json"
    np.testing.assert_allclose(np.linalg.norm(reference, axis=1), 1.0, atol=1e-5)
    assert got.shape == reference.shape and np.abs(got - reference).max() < TOL
    assert np.abs(session.embed(TEXTS) - got).max() < TOL                # embed: the same default
    assert session.max_seq_length == _on_bundle(plain_bundle).max_seq_length


def test_a_bundle_without_the_sentence_transformers_files_pools_as_sentence_transformers_does(plain_bundle,
                                                                                               tmp_path):
    """A bundle from before the files were written: sentence-transformers pools such a folder by mean
    without Normalize, and so does the session."""
    from edgebert.files.hashing import sha256_file

    old = tmp_path / "old"
    shutil.copytree(plain_bundle, old)
    manifest = json.loads((old / "manifest.json").read_text())
    for name in ST_FILES:
        (old / name).unlink()
        manifest["files"].pop(name)
        manifest.get("sizes", {}).pop(name, None)
    (old / "manifest.json").write_text(json.dumps(manifest))
    assert all(sha256_file(old / n) == h for n, h in manifest["files"].items())
    # sentence-transformers' ONNX backend on the folder; without Optimum, its PyTorch model on the source
    # folder, which has no sentence-transformers files either (EdgeSentenceTransformer needs modules.json)
    source = plain_bundle.parent / "plain"
    reference = (_on_bundle(old) if HAS_OPTIMUM else st.SentenceTransformer(str(source), device="cpu")).encode(TEXTS)
    session = EdgeSession(old, provider="cpu")
    got = session.encode(TEXTS)
    assert (session.pooling.mode, session.pooling.normalize) == ("mean", False)
    assert np.abs(np.linalg.norm(reference, axis=1) - 1.0).min() > 0.01       # raw mean vectors
    assert np.abs(got - reference).max() < TOL


def test_the_pooling_files_are_hash_checked_before_the_session_follows_them(plain_bundle, tmp_path):
    edited = tmp_path / "edited"
    shutil.copytree(plain_bundle, edited)
    modules = json.loads((edited / "modules.json").read_text())
    (edited / "modules.json").write_text(json.dumps(modules[:2]))            # Normalize removed
    with pytest.raises(BundleError, match="modules.json does not match its manifest hash"):
        EdgeSession(edited, provider="cpu").encode(TEXTS)


# --------------------------------------------------------------------------- prompts
@pytest.fixture(scope="module")
def prompted_bundle(tmp_path_factory) -> Path:
    """(model, bundle): a sentence-transformers model whose prompts are ``query`` and ``passage`` (no
    ``document``) and whose embeddings are cut to 16 dimensions (``truncate_dim``)."""
    root = tmp_path_factory.mktemp("dropin-prompts")
    src = st_model_dir(root, "st", {"pooling_mode": "mean"}, seed=11)
    (src / "config_sentence_transformers.json").write_text(json.dumps(
        {"prompts": {"query": "query: ", "passage": "passage: "}, "default_prompt_name": None, "truncate_dim": 16}))
    return src, export(src, root / "bundle")


def test_encode_document_takes_sentence_transformers_empty_document_prompt(prompted_bundle):
    theirs, ours = _on_bundle(prompted_bundle[1]), EdgeSession(prompted_bundle[1], provider="cpu")
    assert ours.prompts == theirs.prompts == {"query": "query: ", "document": "", "passage": "passage: "}
    document = ours.encode_document(TEXTS)
    assert np.abs(document - theirs.encode_document(TEXTS)).max() < TOL
    assert np.abs(document - ours.encode(TEXTS)).max() < TOL                   # the empty document prompt
    assert np.abs(document - ours.encode(TEXTS, prompt_name="passage")).max() > 1e-3
    assert np.abs(ours.encode_query(TEXTS) - theirs.encode_query(TEXTS)).max() < TOL
    assert np.abs(ours.encode(TEXTS, prompt_name="document") - theirs.encode(TEXTS, prompt_name="document")).max() < TOL


def test_a_model_without_prompts_has_sentence_transformers_empty_ones(plain_bundle):
    theirs, ours = _on_bundle(plain_bundle), EdgeSession(plain_bundle, provider="cpu")
    assert ours.prompts == theirs.prompts == {"query": "", "document": ""}
    for call in ("encode_query", "encode_document"):
        assert np.abs(getattr(ours, call)(TEXTS) - getattr(theirs, call)(TEXTS)).max() < TOL, call


def test_the_models_truncate_dim_cuts_encode_as_sentence_transformers_does(prompted_bundle):
    model, bundle = prompted_bundle
    ours = EdgeSession(bundle, provider="cpu")
    for theirs in (st.SentenceTransformer(str(model), device="cpu"), _on_bundle(bundle)):   # the model, its bundle
        assert ours.truncate_dim == theirs.truncate_dim == 16
        assert ours.get_sentence_embedding_dimension() == ours.get_embedding_dimension() == 16
        assert theirs.get_embedding_dimension() == 16
        got, want = ours.encode(TEXTS), theirs.encode(TEXTS)
        assert got.shape == want.shape == (len(TEXTS), 16) and np.abs(got - want).max() < TOL
        full = ours.encode(TEXTS, truncate_dim=64)                        # the caller's choice wins
        assert full.shape == theirs.encode(TEXTS, truncate_dim=64).shape == (len(TEXTS), 64)


def test_default_prompt_name_may_name_sentence_transformers_own_prompts():
    from edgebert.bundle.st_settings import check_settings
    from edgebert.errors import ConfigError

    assert check_settings({"prompts": {"passage": "p: "}, "default_prompt_name": "document"}, "x")[
        "default_prompt_name"] == "document"
    with pytest.raises(ConfigError, match="default_prompt_name 'answer' is not one of its prompts"):
        check_settings({"prompts": {"passage": "p: "}, "default_prompt_name": "answer"}, "x")
    with pytest.raises(ConfigError, match="truncate_dim 0 is not a positive whole number"):
        check_settings({"truncate_dim": 0}, "x")
