"""The model's own pooling and sentence-transformers' API: pooling read from a sentence-transformers
directory (modules.json, 1_Pooling/config.json, Normalize) at import-hf and at export, kept in the
manifest, the default of ``EdgeSession.embed`` / ``encode`` (a caller's choice wins); ``encode`` and
``similarity`` give what ``SentenceTransformer`` gives on the same model (tiny seeded models,
and the real all-MiniLM-L6-v2 exported as it is, about 10 s)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from edgebert.bundle import read_manifest
from edgebert.bundle.pooling import SentencePooling, read_pooling
from edgebert.errors import BundleError, ConfigError
from edgebert.runtime import EdgeSession
from runtime_fixtures import make_tiny_model_dir

TEXTS = ["the film is good", "a dull boring movie , the plot is awful and the actors are bad too", "x",
         "one of the best films of the year !"]
MODULES = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
           {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
           {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]


def st_model_dir(root: Path, name: str, pooling: dict, normalize: bool = True, seed: int = 5,
                 max_seq_length: int | None = 32) -> Path:
    """A tiny seeded BERT laid out as a sentence-transformers model: ``pooling`` is its
    1_Pooling/config.json; ``normalize`` adds the Normalize module."""
    folder = root / name
    if (folder / "modules.json").is_file():
        return folder
    make_tiny_model_dir(folder, "BertModel", seed=seed)
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "BertTokenizerFast", "do_lower_case": True, "model_max_length": 128,
        "pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]",
        "mask_token": "[MASK]"}))
    (folder / "modules.json").write_text(json.dumps(MODULES if normalize else MODULES[:2]))
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 64, **pooling}))
    if max_seq_length:
        (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": max_seq_length,
                                                                       "do_lower_case": False}))
    return folder


def export(model_dir: Path, out: Path, **options) -> Path:
    from edgebert.exporters import ExportConfig, export_bundle

    if not (out / "manifest.json").is_file():
        export_bundle(ExportConfig(model_dir=model_dir, out_dir=out, validation_batch_sizes=(1, 3),
                                   validation_seq_lens=(7, 32), **options))
    return out


def sentence_transformer(model_dir: Path):
    st = pytest.importorskip("sentence_transformers")
    return st.SentenceTransformer(str(model_dir), device="cpu")


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.getbasetemp() / "encode"


@pytest.fixture(scope="module")
def cls_model(root) -> Path:
    """CLS pooling + Normalize, as the BGE family states it (the new single ``pooling_mode`` key)."""
    return st_model_dir(root, "st_cls", {"pooling_mode": "cls"})


@pytest.fixture(scope="module")
def cls_bundle(root, cls_model) -> Path:
    return export(cls_model, root / "st_cls_bundle")


# --------------------------------------------------------------------------- reading the model's pooling
def test_pooling_is_read_from_the_installed_minilm(minilm_dir):
    assert read_pooling(minilm_dir) == SentencePooling("mean", normalize=True, include_prompt=True, max_seq_length=256,
                                                       source="sentence-transformers modules.json")


def test_pooling_keys_old_and_new_and_what_is_refused(tmp_path):
    def pooling_of(config: dict, modules=MODULES) -> SentencePooling | None:
        folder = tmp_path / f"m{len(list(tmp_path.iterdir()))}"
        (folder / "1_Pooling").mkdir(parents=True)
        (folder / "modules.json").write_text(json.dumps(modules))
        (folder / "1_Pooling" / "config.json").write_text(json.dumps(config))
        return read_pooling(folder)

    assert read_pooling(tmp_path) is None                                         # no modules.json: unstated
    assert pooling_of({"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}).mode == "cls"
    assert pooling_of({"pooling_mode": "max", "include_prompt": False}) == SentencePooling(
        "max", True, False, None, "sentence-transformers modules.json")
    assert pooling_of({}, MODULES[:2]) == SentencePooling("mean", False, True, None,
                                                          "sentence-transformers modules.json")
    with pytest.raises(ConfigError, match=r"pools by cls \+ mean; edgebert pools by one of mean, cls, max"):
        pooling_of({"pooling_mode": ["cls", "mean"]})
    with pytest.raises(ConfigError, match="pools by weightedmean"):
        pooling_of({"pooling_mode_weightedmean_tokens": True})
    dense = [*MODULES[:2], {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}]
    with pytest.raises(ConfigError, match="has a Dense module after the encoder"):
        pooling_of({"pooling_mode": "mean"}, dense)


def test_info_and_export_say_the_pooling(cls_model, cls_bundle, tmp_path, capsys):
    from distill_helpers import run_cli

    code, out, err = run_cli(capsys, "info", cls_bundle)
    assert code == 0, err
    assert "  pooling: cls + normalize (sentence-transformers modules.json); EdgeSession.embed and encode use it" in out
    code, out, err = run_cli(capsys, "export", cls_model, "--out", tmp_path / "bundle")
    assert code == 0 and "pooling: cls + normalize (sentence-transformers modules.json)" in out, err


def test_manifest_pooling_field_is_typed_and_validated(cls_bundle):
    manifest = read_manifest(cls_bundle)
    assert manifest.pooling == SentencePooling("cls", True, True, 32, "sentence-transformers modules.json")
    assert manifest.to_dict()["pooling"]["mode"] == "cls"
    broken = manifest.to_dict()
    broken["pooling"] = {"mode": "weightedmean"}
    with pytest.raises(BundleError, match="pooling must be an object whose mode is one of mean, cls, max"):
        type(manifest).from_dict(broken)
    unstated = manifest.to_dict()
    del unstated["pooling"]
    assert type(manifest).from_dict(unstated).pooling is None                        # older bundles: unstated


# --------------------------------------------------------------------------- against sentence-transformers
def test_cls_pooled_model_encodes_as_sentence_transformers_does(cls_model, cls_bundle):
    st = sentence_transformer(cls_model)
    reference = st.encode(TEXTS)
    session = EdgeSession(cls_bundle, provider="cpu")               # default precision: the bundle's fp32
    got = session.encode(TEXTS)
    assert got.shape == reference.shape == (4, 64) and got.dtype == np.float32
    assert cosines(got, reference).min() >= 0.99999 and np.abs(got - reference).max() < 1e-5
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)                  # the model's Normalize
    np.testing.assert_allclose(session.similarity(got, got), st.similarity(reference, reference).numpy(), atol=1e-5)
    # embed() pools the model's way by default; mean (what it did before) gives other vectors
    assert cosines(session.embed(TEXTS), reference).min() >= 0.99999
    assert cosines(session.embed(TEXTS, pooling="mean"), reference).min() < 0.999
    # a str gives one vector, as sentence-transformers; a prompt is put before every text
    single = session.encode(TEXTS[0])
    assert single.shape == (64,) and np.abs(single - reference[0]).max() < 1e-5
    prompted = session.encode(TEXTS, prompt="query: ")
    assert cosines(prompted, st.encode(TEXTS, prompt="query: ")).min() >= 0.99999
    listed = session.encode(TEXTS, convert_to_numpy=False)
    assert isinstance(listed, list) and len(listed) == 4 and listed[0].shape == (64,)


def test_mean_model_without_normalize_and_a_prompt_left_out_of_the_pooling(root):
    model = st_model_dir(root, "st_mean_noprompt", {"pooling_mode": "mean", "include_prompt": False}, normalize=False,
                         seed=7)
    st = sentence_transformer(model)
    session = EdgeSession(export(model, root / "st_mean_noprompt_bundle"), provider="cpu")
    assert session.pooling.mode == "mean" and not session.pooling.normalize and not session.pooling.include_prompt
    reference = st.encode(TEXTS, prompt="query: ")
    got = session.encode(TEXTS, prompt="query: ")
    assert np.abs(got - reference).max() < 1e-4 and cosines(got, reference).min() >= 0.99999
    assert abs(float(np.linalg.norm(got[0])) - 1.0) > 0.01                         # no Normalize module: raw norms
    normalized = session.encode(TEXTS, normalize_embeddings=True)
    assert np.allclose(np.linalg.norm(normalized, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(normalized, st.encode(TEXTS, normalize_embeddings=True), atol=1e-5)


def test_import_hf_keeps_the_pooling_and_export_of_the_import_states_it(root, cls_model, tmp_path):
    from edgebert.stages.import_hf import convert_hf

    report = convert_hf(cls_model, tmp_path / "imported")
    assert report.pooling is not None and report.pooling.mode == "cls" and report.pooling.normalize
    for name in ("modules.json", "1_Pooling/config.json", "sentence_bert_config.json"):
        assert (tmp_path / "imported" / name).is_file(), name
    assert read_pooling(tmp_path / "imported") == report.pooling
    st = sentence_transformer(tmp_path / "imported")            # the checkpoint still loads as one
    np.testing.assert_allclose(st.encode(TEXTS), sentence_transformer(cls_model).encode(TEXTS), atol=1e-6)
    bundle = export(tmp_path / "imported", tmp_path / "bundle")
    assert read_manifest(bundle).pooling == report.pooling


def test_a_model_that_states_nothing_pools_by_mean_and_says_so(tmp_path):
    bundle = export(make_tiny_model_dir(tmp_path / "plain", "BertModel"), tmp_path / "bundle")
    session = EdgeSession(bundle, provider="cpu")
    assert read_manifest(bundle).pooling is None and session.pooling.mode == "mean"
    assert session.describe()["pooling"]["source"] == "edgebert's default, in the bundle's modules.json"
    np.testing.assert_allclose(session.embed(TEXTS), session.embed(TEXTS, pooling="mean"), atol=0)
    with pytest.raises(ConfigError, match="pooling='max': a mode a model may state"):
        session.embed(TEXTS, pooling="max")


def test_pooler_head_ships_only_where_the_model_states_no_pooling(cls_bundle, tmp_path):
    """A sentence-transformers model's vectors come from its pooling over the token vectors: its bundle has
    no ``pooler_output`` (the head sentence-transformers never runs, 4 % of a MiniLM INT8 graph); a model
    that states nothing keeps it. Both manifests pass the reader's checks, a third output set does not."""
    import onnxruntime as ort

    from edgebert.bundle.manifest_checks import manifest_problem

    plain = export(make_tiny_model_dir(tmp_path / "plain", "BertModel"), tmp_path / "bundle")
    outputs = {}
    for name, bundle in (("st", cls_bundle), ("plain", plain)):
        manifest = read_manifest(bundle)
        graph = ort.InferenceSession(str(bundle / manifest.models["fp32"].file), providers=["CPUExecutionProvider"])
        outputs[name] = ([o.name for o in graph.get_outputs()], manifest.output_names)
        assert outputs[name][0] == outputs[name][1]
    assert outputs == {"st": (["last_hidden_state"], ["last_hidden_state"]),
                       "plain": (["last_hidden_state", "pooler_output"], ["last_hidden_state", "pooler_output"])}
    session = EdgeSession(cls_bundle, provider="cpu")
    assert session.embed(TEXTS).shape == (len(TEXTS), 64)
    value = json.loads((cls_bundle / "manifest.json").read_text())
    value["outputs"] = [{"name": "pooler_output", "dtype": "float32", "shape": ["batch", 64]}]
    assert "the manifest declares pooler_output" in manifest_problem(value)


def test_minilm_export_encodes_as_sentence_transformers_does(minilm_dir, tmp_path):
    """The real all-MiniLM-L6-v2 directory exported as it is (fp32): its pooling read from its own
    modules.json, encode == SentenceTransformer.encode (about 10 s)."""
    bundle = export(minilm_dir, tmp_path / "bundle")
    session = EdgeSession(bundle, provider="cpu")
    assert session.precision == "fp32" and session.pooling == read_pooling(minilm_dir)
    assert session.pooling.mode == "mean" and session.pooling.normalize and session.pooling.max_seq_length == 256
    texts = [*TEXTS, "A man is eating food.", "Someone is playing a guitar on the stage tonight.",
             "Zoë flew to São Paulo."]
    st = sentence_transformer(minilm_dir)
    reference = st.encode(texts)
    got = session.encode(texts)
    assert got.shape == reference.shape == (7, 384)
    assert cosines(got, reference).min() >= 0.99999
    assert cosines(session.embed(texts), reference).min() >= 0.99999
    np.testing.assert_allclose(session.similarity(got[:3], got), st.similarity(reference[:3], reference).numpy(),
                               atol=1e-5)
