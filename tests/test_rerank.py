"""Cross-encoders: a folder saved by sentence-transformers' own ``CrossEncoder`` (1 label with Sigmoid or Identity,
3 labels) imported, exported (fp32 + INT8) and run by ``EdgeSession.predict`` / ``rank`` against
``CrossEncoder.predict`` / ``rank`` on the same folder; the ranking metric against scikit-learn's NDCG; the rerank
gate's figures. Tiny seeded models."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from conftest import SENTENCE_TRANSFORMERS_MAJOR
from edgebert.errors import ConfigError, DataError
from edgebert.runtime import EdgeSession
from edgebert.runtime.fidelity import FidelityTracker, ndcg_at, reference_gains
from runtime_fixtures import make_tiny_model_dir

st = pytest.importorskip("sentence_transformers")
torch = pytest.importorskip("torch")
TOL = 1e-5

QUERY = "who directed the film ?"
DOCS = ["the director made the film in one year .", "a dull boring movie , the plot is awful",
        "x", "the actors were good and the music was great too . " * 12,     # cut at the model's 48 tokens
        "who made it ? the director did .", "the director made the film in one year ."]   # a tie with the first
PAIRS = [(QUERY, d) for d in DOCS] + [("a", "b"), ("the best film of the year", "it is the worst")]


def cross_encoder_dir(root, name: str, num_labels: int, activation, seed: int = 3):
    """A tiny seeded BERT classifier saved by sentence-transformers' ``CrossEncoder.save`` (its own files)."""
    folder = root / f"{name}-src"
    make_tiny_model_dir(folder, "BertForSequenceClassification", seed=seed,
                        id2label={i: f"LABEL_{i}" for i in range(num_labels)}, max_position_embeddings=64)
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "BertTokenizerFast", "do_lower_case": True, "model_max_length": 48,
        "pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]",
        "mask_token": "[MASK]"}))
    with torch.no_grad():                            # logits of a few units: orders and sigmoids that mean something
        model = st.CrossEncoder(str(folder), device="cpu", activation_fn=activation)
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    out = root / name
    model.save(str(out))
    return out, st.CrossEncoder(str(out), device="cpu")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """name -> (sentence-transformers' CrossEncoder of the saved folder, its bundle)."""
    from edgebert.exporters import ExportConfig, export_bundle
    from edgebert.stages.import_hf import import_hf

    root = tmp_path_factory.mktemp("rerank")
    made = {}
    for name, labels, activation in (("sigmoid", 1, None), ("identity", 1, torch.nn.Identity()),
                                     ("three", 3, None)):
        folder, model = cross_encoder_dir(root, name, labels, activation)
        imported = import_hf(folder, root / f"{name}-imported")
        bundle = root / f"{name}-bundle"
        small = {"int4": True, "int4_algorithm": "rtn", "int4_max_accuracy_loss": 0.5} if name == "sigmoid" else {}
        export_bundle(ExportConfig(model_dir=imported, out_dir=bundle, int8=labels == 1, validation_batch_sizes=(1, 3),
                                   validation_seq_lens=(7, 40), **small))
        made[name] = (model, bundle)
    return made


def test_the_bundle_says_its_task_and_activation(models):
    for name, task, activation in (("sigmoid", "rerank", "sigmoid"), ("identity", "rerank", "identity"),
                                   ("three", "cls", "identity")):
        _, bundle = models[name]
        manifest = json.loads((bundle / "manifest.json").read_text())
        assert manifest["task"] == task, name
        assert manifest["cross_encoder"]["activation"] == activation, name
        settings = json.loads((bundle / "config_sentence_transformers.json").read_text())
        assert settings["model_type"] == "CrossEncoder"
        config = json.loads((bundle / "config.json").read_text())
        assert config["sentence_transformers"]["activation_fn"] == settings["activation_fn"]
        assert EdgeSession(bundle, precision="fp32").activation == activation


@pytest.mark.parametrize("name", ["sigmoid", "identity", "three"])
def test_predict_matches_sentence_transformers(models, name):
    model, bundle = models[name]
    session = EdgeSession(bundle, precision="fp32")
    for kwargs in ({}, {"batch_size": 2}, {"apply_softmax": True}, {"activation_fn": torch.nn.Identity()},
                   {"activation_fn": torch.nn.Sigmoid()}):
        if kwargs.get("apply_softmax") and name != "three" and SENTENCE_TRANSFORMERS_MAJOR < 6:
            continue        # 5.x softmaxes one label's (N, 1) scores into 1.0 each; 6 (the pinned one) leaves them
        ours, theirs = session.predict(PAIRS, **kwargs), model.predict(PAIRS, **kwargs)
        assert ours.shape == theirs.shape and ours.dtype == theirs.dtype == np.float32, (name, kwargs)
        assert float(np.abs(ours - theirs).max()) < TOL, (name, kwargs)
    one, want = session.predict(PAIRS[0]), model.predict(PAIRS[0])
    assert np.shape(one) == np.shape(want) and float(np.abs(one - want).max()) < TOL
    rows = session.predict(PAIRS[:2], convert_to_numpy=False)
    assert isinstance(rows, list) and len(rows) == 2
    assert session.predict([]).shape == model.predict([]).shape == (0,)


@pytest.mark.parametrize("name", ["sigmoid", "identity"])
def test_rank_matches_sentence_transformers(models, name):
    model, bundle = models[name]
    session = EdgeSession(bundle, precision="fp32")
    for kwargs in ({}, {"top_k": 3}, {"return_documents": True}, {"top_k": 0}):
        ours, theirs = session.rank(QUERY, DOCS, **kwargs), model.rank(QUERY, DOCS, **kwargs)
        assert [r["corpus_id"] for r in ours] == [r["corpus_id"] for r in theirs], kwargs
        assert [sorted(r) for r in ours] == [sorted(r) for r in theirs], kwargs
        assert max((abs(a["score"] - b["score"]) for a, b in zip(ours, theirs)), default=0) < TOL, kwargs
    tied = [r["corpus_id"] for r in session.rank(QUERY, DOCS) if r["corpus_id"] in (0, 5)]
    assert tied == [0, 5]                                # equal scores in document order
    assert session.rank(QUERY, []) == model.rank(QUERY, []) == []


def test_the_int8_graph_keeps_the_order(models):
    model, bundle = models["sigmoid"]
    manifest = json.loads((bundle / "manifest.json").read_text())
    gate = manifest["models"]["int8"]["accuracy"]
    assert gate["metric"] == "ranking" and gate["n"] == 100 and gate["pairs"] == 2000
    assert gate["loss"] <= manifest["models"]["int8"]["accuracy"]["max_accuracy_loss"] == 0.005
    assert 0.9 <= gate["top1_agreement"] <= 1.0
    int8 = EdgeSession(bundle, precision="int8").predict(PAIRS)
    assert 1e-6 < float(np.abs(int8 - model.predict(PAIRS)).max()) < 0.05      # the INT8 graph, close


def test_what_a_reranker_refuses(models):
    _, bundle = models["sigmoid"]
    _, three = models["three"]
    session = EdgeSession(bundle, precision="fp32")
    with pytest.raises(ConfigError, match="needs a model of one label"):
        EdgeSession(three, precision="fp32").rank(QUERY, DOCS)
    with pytest.raises(DataError, match="not a \\(text, text\\) pair"):
        session.predict([("a", "b"), ("only one",)])
    with pytest.raises(ConfigError, match="does not take prompt"):
        session.predict(PAIRS, prompt="query: ")
    with pytest.raises(ConfigError, match="not one edgebert computes"):
        session.predict(PAIRS, activation_fn="softplus")
    with pytest.raises(ConfigError, match="needs a .cls. bundle"):
        session.classify(["a text"])                      # a softmax over one label would say 1.0 for all
    with pytest.raises(DataError, match="list of texts"):
        session.rank(QUERY, "one passage")


def test_an_activation_edgebert_cannot_compute_is_refused_at_import(models, tmp_path):
    from edgebert.stages.import_hf import import_hf

    model, _ = models["sigmoid"]
    folder = tmp_path / "softplus"
    model.save(str(folder))
    settings = json.loads((folder / "config_sentence_transformers.json").read_text())
    (folder / "config_sentence_transformers.json").write_text(json.dumps({**settings,
                                                                          "activation_fn": "torch.nn.Softplus"}))
    with pytest.raises(ConfigError, match="Softplus.*not one edgebert computes"):
        import_hf(folder, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_older_releases_activation_in_config_json_is_read(models, tmp_path):
    """sentence-transformers 4 / 5 keep it in config.json's sentence_transformers, before 4 in
    sbert_ce_default_activation_function: either is imported as the 6 file states it."""
    from edgebert.bundle.cross_encoder import read_cross_encoder

    model, _ = models["identity"]
    for key, value in (("sentence_transformers", {"activation_fn": "torch.nn.modules.linear.Identity"}),
                       ("sbert_ce_default_activation_function", "torch.nn.modules.linear.Identity")):
        folder = tmp_path / key
        model.save(str(folder))
        (folder / "config_sentence_transformers.json").unlink()
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, key: value}))
        assert read_cross_encoder(folder, 1)["activation"] == "identity", key
    plain = tmp_path / "plain"
    model.save(str(plain))
    (plain / "config_sentence_transformers.json").unlink()
    assert read_cross_encoder(plain, 1) is None           # a plain classifier: exported as cls


# --------------------------------------------------------------------------- the ranking metric
def test_ranking_metric_is_scikit_learns_ndcg_at_10():
    from sklearn.metrics import ndcg_score

    rng = np.random.default_rng(0)
    for size in (3, 10, 20, 40):
        for _ in range(20):
            ref, got = rng.normal(size=size), rng.normal(size=size)
            gains = reference_gains(ref)
            assert sorted(gains[gains > 0], reverse=True)[:3] == [2.0 ** 10 - 1, 2.0 ** 9 - 1, 2.0 ** 8 - 1][:min(3, size)]
            assert abs(ndcg_at(gains, got) - ndcg_score(gains[None], got[None], k=10)) < 1e-12
            assert ndcg_at(gains, ref) == pytest.approx(1.0)


def test_the_tracker_counts_queries_and_top1():
    tracker = FidelityTracker("rerank")
    ref = np.arange(20, dtype=np.float64)[::-1]
    swapped = ref.copy()
    swapped[[0, 1]] = swapped[[1, 0]]
    for got in (ref, swapped, ref, ref):
        tracker.add({"scores": ref}, {"scores": got}, 20)
    result = tracker.result()
    assert (result.n, result.pairs, result.top1) == (4, 80, 0.75)
    assert result.loss == pytest.approx(0.12025079 / 4, abs=1e-6)


# --------------------------------------------------------------------------- sentence-transformers' own ONNX backend
@pytest.mark.skipif(importlib.util.find_spec("optimum") is None,
                    reason="CrossEncoder(backend='onnx') needs Optimum, which installs beside sentence-transformers 5 "
                           "(make test-optimum runs this)")
@pytest.mark.parametrize("name", ["sigmoid", "identity"])
def test_the_bundle_opens_in_sentence_transformers_onnx_backend(models, name):
    """``CrossEncoder(bundle, backend="onnx")`` reads the bundle's own files: the fp32 graph gives the PyTorch
    model's scores, the INT8 graph (the file the manifest's loaders name) EdgeSession's INT8 scores."""
    model, bundle = models[name]
    manifest = json.loads((bundle / "manifest.json").read_text())
    loaders = manifest["loaders"]["sentence-transformers"]
    for key, reference in (("fp32", model.predict(PAIRS)),
                           ("int8", EdgeSession(bundle, precision="int8").predict(PAIRS))):
        kwargs = {**loaders[key].get("model_kwargs", {}), "provider": "CPUExecutionProvider"}
        onnx = st.CrossEncoder(str(bundle), device="cpu", backend="onnx", model_kwargs=kwargs)
        assert float(np.abs(onnx.predict(PAIRS) - reference).max()) < TOL, key
        assert [r["corpus_id"] for r in onnx.rank(QUERY, DOCS)] == [r["corpus_id"] for r in
                                                                   EdgeSession(bundle, precision=key).rank(QUERY, DOCS)]


@pytest.mark.parametrize("family", ["distilbert", "roberta", "xlm-roberta"])
def test_other_families_cross_encoders_score_as_sentence_transformers(family, tmp_path):
    """A one-label DistilBERT / RoBERTa / XLM-R classifier saved by ``CrossEncoder.save`` (Identity: raw logits)
    is imported as a reranker and scores every pair as sentence-transformers does."""
    import transformers

    from edgebert.exporters import ExportConfig, export_bundle
    from edgebert.stages.import_hf import import_hf
    from family_fixtures import CLASS_PREFIX, hf_config, save_tokenizer

    config = hf_config(family, "ForSequenceClassification")
    config.num_labels, config.id2label, config.label2id = 1, {0: "LABEL_0"}, {"LABEL_0": 0}
    torch.manual_seed(1)
    model = getattr(transformers, CLASS_PREFIX[family] + "ForSequenceClassification")(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    src = tmp_path / "hf"
    model.save_pretrained(str(src))
    save_tokenizer(family, src)
    st.CrossEncoder(str(src), device="cpu", activation_fn=torch.nn.Identity()).save(str(tmp_path / "ce"))
    theirs = st.CrossEncoder(str(tmp_path / "ce"), device="cpu")
    bundle = tmp_path / "bundle"
    export_bundle(ExportConfig(model_dir=import_hf(tmp_path / "ce", tmp_path / "imported"), out_dir=bundle,
                               validation_batch_sizes=(1, 3), validation_seq_lens=(7, 32)))
    session = EdgeSession(bundle, precision="fp32")
    assert (session.task, session.activation) == ("rerank", "identity")
    pairs = [("Where does Zoë live?", "She lives in Zürich."), ("who wrote the book?", "The film was bad."),
             ("Hello world", "The quick brown fox jumps over the lazy dog.")]
    assert float(np.abs(session.predict(pairs) - theirs.predict(pairs)).max()) < TOL
    assert [r["corpus_id"] for r in session.rank(*pairs[0][:1], [p for _, p in pairs])] == \
        [r["corpus_id"] for r in theirs.rank(pairs[0][0], [p for _, p in pairs])]


def test_transformers_js_scores_the_bundle_as_edgesession(models):
    """transformers.js in Node (AutoTokenizer with text_pair + AutoModelForSequenceClassification, as its reranking
    examples run a cross-encoder) on the bundle as it is: the fp32 graph's logits to 1e-5, the INT8 graph's ("q8")
    to 1e-4 of EdgeSession's. Pairs within the model's 48 tokens: transformers.js cuts a longer pair's tail (its
    last [SEP] with it), where sentence-transformers and EdgeSession cut the longer text first."""
    from web_tools import need_node, run_node

    need_node()
    model, bundle = models["identity"]             # Identity: predict() gives the raw logits
    pairs = [p for p in PAIRS if len(p[1]) < 100]
    jobs = [{"task": "cross-encoder", "model": bundle.name, "dtype": dtype,
             "inputs": [{"query": q, "passage": p} for q, p in pairs]} for dtype in ("fp32", "q8")]
    work = bundle.parent / "js"
    work.mkdir(exist_ok=True)
    out = run_node("node_pipeline.mjs", {"root": str(bundle.parent), "jobs": jobs}, work)
    for result, precision, tol in zip(out, ("fp32", "int8"), (TOL, 1e-4)):
        got = np.asarray(result["outputs"], dtype=np.float32)[:, 0]
        want = EdgeSession(bundle, precision=precision).predict(pairs)
        assert len(got) == len(pairs) == 7 and float(np.abs(got - want).max()) < tol, precision


def test_check_and_a_packed_bundle_measure_the_gates_queries(models, tmp_path):
    """``check`` re-measures the INT8 graph on the gate's 100 query groups, to the export's figure; a bundle packed
    without its fp32 graph is checked against the fp32 scores stored with it, to the same figure."""
    from edgebert.runtime.check import check_bundle
    from edgebert.runtime.pack import pack_bundle

    _, bundle = models["sigmoid"]
    gate = json.loads((bundle / "manifest.json").read_text())["models"]["int8"]["accuracy"]
    full = check_bundle(bundle)
    assert full.passed and full.fidelity["metric"] == "ranking" and full.fidelity["n"] == 100
    assert full.small["metric"] == "ranking" and full.small["n"] == 100       # the small graph, ordered alike
    assert abs(full.fidelity["mean"] - gate["mean"]) <= 1e-3          # the runtime's session, not the gate's: near-ties
    pack_bundle(bundle, "portable", tmp_path / "packed")
    packed = check_bundle(tmp_path / "packed")
    assert packed.passed and packed.texts.get("reference") and packed.fidelity["n"] == 100
    # the tiny model's scores sit close together: another session's float order swaps a near-tie or two
    assert abs(packed.fidelity["mean"] - full.fidelity["mean"]) <= 1e-3
