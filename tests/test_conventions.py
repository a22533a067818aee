"""The runtime's defaults say what they chose: the precision a session loads when none is named (the best
graph the bundle has for this host, said in describe()), and the vector of a text with no tokens (the
zero vector, documented)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from edgebert.bundle import Manifest, read_manifest
from edgebert.errors import BundleError, ConfigError
from edgebert.runtime import EdgeSession
from edgebert.runtime.hostcpu import detect_host
from edgebert.runtime.precision import choose_precision
from runtime_fixtures import make_tiny_model_dir, tiny_bundle


@pytest.fixture(scope="module")
def int8_bundle(tmp_path_factory):
    return tiny_bundle(tmp_path_factory.getbasetemp(), "embed")[1]


@pytest.fixture(scope="module")
def fp32_only(tmp_path_factory):
    """A bundle exported without --int8."""
    from edgebert.exporters import ExportConfig, export_bundle

    root = tmp_path_factory.mktemp("fp32_only")
    bundle = root / "bundle"
    export_bundle(ExportConfig(model_dir=make_tiny_model_dir(root / "model"), out_dir=bundle,
                               validation_batch_sizes=(1,), validation_seq_lens=(7,)))
    return bundle


# --------------------------------------------------------------------------- default precision
def test_a_bundle_exported_without_int8_opens_with_the_defaults(fp32_only):
    session = EdgeSession(fp32_only)
    info = session.describe()
    assert session.precision == info["precision"] == "fp32" and session.model_key == "fp32"
    assert info["precision_reason"] == "default: the bundle has no INT8 graph (it has: fp32)"
    assert session.embed("the film").shape == (1, 64)
    with pytest.raises(BundleError, match=r"the bundle has no INT8 model \(it has: fp32\)"):
        EdgeSession(fp32_only, provider="cpu", precision="int8")            # an explicit choice stays an error
    with pytest.raises(ConfigError, match="unknown precision 'int2'"):
        EdgeSession(fp32_only, precision="int2")
    with pytest.raises(BundleError, match=r"the bundle has no int4 model for cpu \(it has: fp32\)"):
        EdgeSession(fp32_only, provider="cpu", precision="int4")          # the small graph: only when exported


def test_the_default_is_int8_where_the_bundle_has_a_graph_exact_here(int8_bundle):
    session = EdgeSession(int8_bundle, provider="cpu")
    assert session.precision == "int8" and session.model_key == "int8"
    assert session.describe()["precision_reason"].startswith("default: the best graph here (")
    assert EdgeSession(int8_bundle, provider="cpu", precision="fp32").precision == "fp32"


def test_the_default_falls_back_to_fp32_where_no_int8_graph_is_exact(int8_bundle):
    """A host whose U8S8 kernel saturates, unfixable, and a bundle whose only INT8 graph needs exact
    products: the default is fp32, with the reason; asking for int8 there stays an error."""
    value = read_manifest(int8_bundle).to_dict()
    value["models"]["int8"]["requires"] = {**value["models"]["int8"]["requires"], "u8s8_exact": True}
    manifest = Manifest.from_dict(value)
    host = dataclasses.replace(detect_host(), arch="x86_64", kind="x86-avx2", u8s8="saturating", precise_fix=False)
    chosen = choose_precision(None, manifest, host)
    assert chosen.precision == "fp32"
    assert chosen.reason.startswith("default: no INT8 graph of the bundle runs exactly here (the bundle's INT8 graphs")
    assert choose_precision("int8", manifest, host).precision == "int8"       # the session then refuses it
    exact = dataclasses.replace(host, kind="x86-vnni", u8s8="exact")
    assert choose_precision(None, manifest, exact).precision == "int8"


# --------------------------------------------------------------------------- a text with no tokens
def test_a_text_with_no_tokens_gets_the_zero_vector(fp32_only):
    session = EdgeSession(fp32_only)
    vectors = session.embed(["", "the film", "   ", "\t\n"])
    norms = np.linalg.norm(vectors, axis=1)
    assert norms[0] == norms[2] == norms[3] == 0.0 and abs(norms[1] - 1.0) < 1e-5
    assert np.array_equal(session.encode(""), np.zeros(64, np.float32))
    sims = session.similarity(vectors, vectors)
    assert sims.shape == (4, 4) and sims[0, 1] == 0.0 and abs(sims[1, 1] - 1.0) < 1e-5
    # a prompt does not give an empty text a meaning
    assert np.linalg.norm(session.encode(["", "film"], prompt="query: "), axis=1)[0] == 0.0


def test_encode_shapes_and_argument_errors(fp32_only):
    session = EdgeSession(fp32_only)
    assert session.encode([]).shape == (0, 64) and session.encode(["a", "b"], batch_size=1).shape == (2, 64)
    assert session.get_sentence_embedding_dimension() == 64
    np.testing.assert_allclose(session.encode(["the film", "a movie"], batch_size=1),
                               session.encode(["the film", "a movie"], batch_size=32), atol=1e-6)
    with pytest.raises(ConfigError, match="batch_size=0 must be a positive integer"):
        session.encode(["a"], batch_size=0)
    from edgebert.errors import DataError

    with pytest.raises(DataError, match=r"sentences\[1\] is None"):
        session.encode(["a", None])
    with pytest.raises(DataError, match="a has vectors of 64, b of 3"):
        session.similarity(np.ones(64), np.ones((2, 3)))
