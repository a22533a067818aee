"""``EdgeSession.tag`` on token-cls bundles: export, offsets into the original text, windows over long
texts, and the same entities as Hugging Face's token-classification pipeline on the PyTorch model."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import shared_file
from edgebert.errors import ConfigError
from edgebert.runtime.tagging import join_words, merge_windows, window_spans, word_tags
from runtime_fixtures import make_tiny_model_dir

LABELS = {0: "O", 1: "B-LOC", 2: "I-LOC", 3: "B-MISC", 4: "I-MISC", 5: "B-ORG", 6: "I-ORG", 7: "B-PER",
          8: "I-PER"}
LIGHT = dict(validation_batch_sizes=(1, 3), validation_seq_lens=(7, 32))


def _token_model(out_dir: Path, *, context_free: bool = False, vocab_size: int | None = None,
                 scale: float = 40.0, seed: int = 0) -> Path:
    """A tiny seeded BertForTokenClassification with decisive logits (classifier weights x ``scale``).
    ``context_free``: attention outputs and position embeddings zeroed, so a token's logits depend on
    its id alone (windowing cannot change them)."""
    import torch

    from edgebert.model import load_model, save_model

    extra = {"vocab_size": vocab_size} if vocab_size else {}
    make_tiny_model_dir(out_dir, "BertForTokenClassification", seed=seed, id2label=LABELS, **extra)
    model = load_model(out_dir)
    with torch.no_grad():
        model.classifier.weight.mul_(scale)
        if context_free:
            model.bert.embeddings.position_embeddings.weight.zero_()
            for layer in model.bert.encoder.layer:
                layer.attention.output.dense.weight.zero_()
                layer.attention.output.dense.bias.zero_()
    save_model(model, out_dir)
    return out_dir


def _export(model_dir: Path, bundle_dir: Path, int8: bool = False) -> Path:
    from edgebert.exporters import ExportConfig, export_bundle

    export_bundle(ExportConfig(model_dir=model_dir, out_dir=bundle_dir, int8=int8, **LIGHT))
    return bundle_dir


@pytest.fixture(scope="module")
def ner_bundle(tmp_path_factory) -> tuple[Path, Path]:
    """(model_dir, bundle_dir): tiny token classifier, fp32 + INT8, task from the architecture."""
    root = tmp_path_factory.mktemp("ner")
    model_dir = _token_model(root / "model")
    return model_dir, _export(model_dir, root / "bundle", int8=True)


@pytest.fixture(scope="module")
def context_free_bundle(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ner_cf")
    return _export(_token_model(root / "model", context_free=True), root / "bundle")


# --------------------------------------------------------------------------- export
def test_token_cls_export_is_validated_with_its_label_map(ner_bundle):
    import json

    manifest = json.loads((ner_bundle[1] / "manifest.json").read_text())
    assert manifest["task"] == "token-cls" and manifest["source"]["architecture"] == "BertForTokenClassification"
    assert manifest["labels"] == {str(k): v for k, v in LABELS.items()}
    assert manifest["outputs"] == [{"name": "logits", "dtype": "float32", "shape": ["batch", "sequence", 9]}]
    fp32 = manifest["models"]["fp32"]
    assert fp32["fused_ops"]["Attention"] == 2 and fp32["fused_ops"]["EmbedLayerNormalization"] == 1
    val = fp32["validation"]
    shapes = {(c["batch"], c["sequence"]) for c in val["cases"]}
    assert shapes == {(1, 7), (1, 32), (3, 7), (3, 32)}          # none is the traced (2, 16)
    assert val["max_abs_diff"] <= 1e-4 and val["per_output"]["logits"] <= 1e-4
    int8 = manifest["models"]["int8"]
    assert int8["accuracy"]["metric"] == "token_label_agreement"
    assert int8["accuracy"]["max_accuracy_loss"] == 0.005 and int8["accuracy"]["loss"] <= 0.005
    assert int8["accuracy"]["tokens"] > 1000                   # counted per real token, not per text


def test_check_understands_token_cls(ner_bundle, tmp_path):
    from distill_helpers import write_toy_ner
    from edgebert.runtime.check import check_bundle

    report = check_bundle(ner_bundle[1])
    assert report.passed, report.reason
    assert report.fidelity["metric"] == "token_label_agreement" and report.fidelity["tokens"] > 1000
    conll = write_toy_ner(tmp_path / "toy.txt", 40, seed=5)
    on_conll = check_bundle(ner_bundle[1], conll)
    assert on_conll.texts["n"] == 40 and on_conll.entities["sentences"] == 40
    for name in ("fp32", "int8"):
        assert 0.0 <= on_conll.entities[name]["f1"] <= 1.0
    assert any(line.startswith("entity F1 vs the gold tags of 40 sentences") for line in on_conll.lines())


def test_int8_gate_metric_counts_real_tokens_only():
    """token-cls fidelity: label agreement over the tokens between [CLS] and [SEP] (padding out), with
    the total variation of the per-token softmax as its continuous companion."""
    from edgebert.runtime.fidelity import DEFAULT_BUDGETS, FidelityTracker

    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])          # 3 + 1 real tokens
    ref = np.zeros((2, 5, 3))
    ref[..., 0] = 5.0                                            # label 0 everywhere
    got = ref.copy()
    got[0, 2] = [0.0, 5.0, 0.0]                                  # one real token flips
    got[1, 4] = [0.0, 0.0, 9.0]                                  # padding: not counted
    got[0, 0] = got[0, 4] = got[1, 2] = [0.0, 9.0, 0.0]           # [CLS] and [SEP]: not counted
    tracker = FidelityTracker("token-cls")
    tracker.add_outputs(ref, got, mask)
    result = tracker.result().as_dict()
    assert result["metric"] == "token_label_agreement" and result["tokens"] == 4 and result["n"] == 2
    assert result["mean"] == pytest.approx(0.75) and result["loss"] == pytest.approx(0.25)
    p, q = np.exp(5.0) / (np.exp(5.0) + 2.0), 1.0 / (np.exp(5.0) + 2.0)   # softmax of (5, 0, 0)
    assert result["distance"] == pytest.approx((p - q) / 4, rel=1e-3)     # TV of the flipped token, / 4 tokens
    assert DEFAULT_BUDGETS["token-cls"] == 0.005


def test_bench_measures_token_label_agreement_over_a_conll_length_mix(ner_bundle, tmp_path):
    """``edgebert bench`` on a token-cls bundle against its PyTorch model: per-token label agreement over
    the real tokens, the length mix replayed from a CoNLL file (one text per sentence)."""
    from distill_helpers import write_toy_ner
    from edgebert.bench import BenchConfig, run_bench

    model_dir, bundle_dir = ner_bundle
    conll = write_toy_ner(tmp_path / "toy.txt", 12, seed=7)
    data = run_bench(BenchConfig(bundle_dir, providers=("cpu",), precisions=("fp32", "int8"), batches=(1,),
                                 seqs=(8,), lengths_from=conll, mix_modes=("dynamic",), reference=model_dir, threads=1, warmup=1, iters=3, calibration_size=32,
                                 eval_texts=6, progress=False))
    assert data["reference"]["same_model"] and data["reference"]["comparable"]
    acc = {p["path"]: p["accuracy"] for p in data["paths"] if p["available"] and not p["reference"]}
    fp32, int8 = acc["onnx cpu fp32"], acc["onnx cpu int8"]
    assert fp32["metric"] == "token_label_agreement" and fp32["token_label_agreement"] == 1.0
    assert fp32["max_abs_diff"] <= 1e-3 and fp32["prob_max_abs_diff"] <= 1e-4
    assert fp32["inputs"] > 6                      # tokens, not texts: each toy sentence has several
    assert int8["token_label_agreement"] >= 0.9 and int8["max_abs_diff"] > 1e-6
    assert data["length_mix"]["texts"] == 12
    assert {r["mode"] for r in data["length_mix"]["results"]} == {"dynamic"}       # --mix-modes dynamic
    assert len(data["length_mix"]["results"]) == 3                                 # torch, fp32, int8 at batch 1
    assert data["entities"] is None                                                # no --data


def test_bench_data_errors_come_before_any_measurement(ner_bundle, tmp_path):
    from distill_helpers import write_toy_ner
    from edgebert.bench import BenchConfig, run_bench

    model_dir, bundle_dir = ner_bundle
    quick = dict(providers=("cpu",), batches=(1,), seqs=(8,), threads=1, progress=False,
                 report_dir=tmp_path / "report")
    text = tmp_path / "plain.txt"
    text.write_text("Anna lives in Oslo .\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="is not a CoNLL file"):
        run_bench(BenchConfig(bundle_dir, data=text, **quick))
    embed_dir = _export(make_tiny_model_dir(tmp_path / "m"), tmp_path / "b")
    with pytest.raises(ConfigError, match="--data scores entity F1 of a token-cls bundle"):
        run_bench(BenchConfig(embed_dir, data=write_toy_ner(tmp_path / "t.txt", 3, seed=1), **quick))
    with pytest.raises(ConfigError, match="unknown length-mix mode 'static'"):
        BenchConfig(bundle_dir, mix_modes=("dynamic", "static"))
    assert not (tmp_path / "report").exists()


# --------------------------------------------------------------------------- windows
def test_window_spans_cover_the_text_with_the_overlap():
    assert window_spans(5, 8, 2) == [(0, 5)]
    spans = window_spans(20, 8, 2)
    assert spans == [(0, 8), (6, 14), (12, 20)]
    assert window_spans(21, 8, 3) == [(0, 8), (5, 13), (10, 18), (13, 21)]   # the last one ends at n
    with pytest.raises(ConfigError, match="stride=8"):
        window_spans(20, 8, 8)


def test_merge_takes_each_token_from_its_most_central_window():
    spans = [(0, 8), (6, 14)]
    scores = [np.full((8, 1), 1.0), np.full((8, 1), 2.0)]
    merged = merge_windows(14, spans, scores)[:, 0]
    # tokens 6 and 7 are in both: 6 has 1 token after it in window 0... and 0 before it in window 1
    assert merged.tolist() == [1.0] * 7 + [2.0] * 7


def test_long_text_gives_the_entities_of_its_pieces(context_free_bundle):
    """With a model whose token logits depend on the token alone, tagging a text longer than the
    model's input (windows) must give exactly the entities of tagging it whole, and those of its short
    pieces shifted to their place in the text."""
    from edgebert.runtime import EdgeSession

    pieces = ["The film's director, Zoë   Smith, was in Paris.", "a dull mess of a movie !",
              "Two actors were great;  the music was not.", "Why did they make it ?"] * 2
    text = " ".join(pieces)
    short = EdgeSession(context_free_bundle, precision="fp32", max_length=16)
    whole = EdgeSession(context_free_bundle, precision="fp32", max_length=128)
    assert len(short.encoder.pieces([text])[0]) > 3 * short.encoder.content_length     # several windows
    assert len(whole.encoder.pieces([text])[0]) <= whole.encoder.content_length         # one window
    for aggregation in ("none", "simple", "first"):
        got = short.tag(text, aggregation, ignore_labels=())
        want = whole.tag(text, aggregation, ignore_labels=())
        assert [{k: v for k, v in e.items() if k != "score"} for e in got] == \
               [{k: v for k, v in e.items() if k != "score"} for e in want], aggregation
        assert np.allclose([e["score"] for e in got], [e["score"] for e in want], atol=1e-5)
    # the long text tagged token by token = its pieces tagged alone, offsets shifted
    by_piece, at = [], 0
    for piece, entities in zip(pieces, short.tag(pieces, "none", ignore_labels=())):
        by_piece += [(e["entity"], e["word"], e["start"] + at, e["end"] + at) for e in entities]
        at += len(piece) + 1
    assert [(e["entity"], e["word"], e["start"], e["end"]) for e in short.tag(text, "none", ignore_labels=())] \
        == by_piece


# --------------------------------------------------------------------------- offsets and the API
def test_offsets_point_into_the_original_text(ner_bundle):
    """Punctuation, accents, capitals and repeated spaces: each entity's [start, end) is the text as
    written, and the tokens it holds are that text normalised (lower-cased, accents stripped)."""
    import unicodedata

    from edgebert.runtime import EdgeSession

    session = EdgeSession(ner_bundle[1], precision="fp32")
    text = "Zoë   SMITH's  café, in Zürich...\tisn't (really) near São-Paulo !"
    tokens = session.tag(text, "none", ignore_labels=())
    norm = lambda s: "".join(c for c in unicodedata.normalize("NFD", s.lower()) if not unicodedata.combining(c))  # noqa: E731
    assert tokens, "every token is reported with ignore_labels=()"
    for e in tokens:
        assert norm(text[e["start"]:e["end"]]) == e["word"].removeprefix("##") or e["word"] == text[e["start"]:e["end"]]
        assert not text[e["start"]:e["end"]].isspace()
    assert "".join(text[e["start"]:e["end"]] for e in tokens) == "".join(text.split())   # every character once
    for aggregation in ("simple", "first"):
        for e in session.tag(text, aggregation, ignore_labels=()):
            span = text[e["start"]:e["end"]]
            assert span.strip() == span and span
            # a group may start inside a word ("simple"): its first token keeps the "##" (as in transformers)
            assert norm(span).replace(" ", "").replace("\t", "") == e["word"].replace(" ", "").removeprefix("##")


def test_tag_api(ner_bundle, tmp_path):
    from edgebert.runtime import EdgeSession

    session = EdgeSession(ner_bundle[1], precision="int8")
    one = session.tag("Anna lives in Oslo.", "simple")
    assert isinstance(one, list) and all({"entity_group", "score", "word", "start", "end"} <= set(e) for e in one)
    many = session.tag(["Anna lives in Oslo.", "", "and Bob ?"], "simple")
    assert len(many) == 3 and many[0] == one and many[1] == []
    assert session.tag([]) == []
    assert all(e["entity_group"] != "O" for e in one)
    with pytest.raises(ConfigError, match="unknown aggregation 'max'"):
        session.tag("a", "max")
    embed_dir = _export(make_tiny_model_dir(tmp_path / "m"), tmp_path / "b")
    with pytest.raises(ConfigError, match=r"tag\(\) needs a 'token-cls' bundle"):
        EdgeSession(embed_dir, precision="fp32").tag("a")


def test_word_tags_from_entities():
    text, spans = join_words(["Peter", "Blackburn", "visited", "U.S.", "troops"])
    assert text == "Peter Blackburn visited U.S. troops" and spans[3] == (24, 28)
    none = [{"entity": "B-PER", "start": 0, "end": 5}, {"entity": "I-PER", "start": 6, "end": 15},
            {"entity": "B-LOC", "start": 24, "end": 25}, {"entity": "I-LOC", "start": 26, "end": 27}]
    assert word_tags(none, spans) == ["B-PER", "I-PER", "O", "B-LOC", "O"]    # a word's first token decides
    grouped = [{"entity_group": "PER", "start": 0, "end": 15}, {"entity_group": "MISC", "start": 24, "end": 35}]
    assert word_tags(grouped, spans) == ["B-PER", "I-PER", "O", "B-MISC", "I-MISC"]


def test_runtime_tags_without_torch_onnx_or_seqeval(ner_bundle):
    blocked = ("torch", "onnx", "seqeval", "sklearn", "transformers")
    code = (
        "import sys\n"
        f"for name in {blocked!r}:\n"
        "    sys.modules[name] = None   # importing it now raises ImportError\n"
        "from edgebert.runtime import EdgeSession\n"
        f"s = EdgeSession({str(ner_bundle[1])!r}, precision='int8')\n"
        "print(len(s.tag(['Anna lives in Oslo .', 'x'], 'first', ignore_labels=())))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "2"


# --------------------------------------------------------------------------- against Hugging Face
@pytest.mark.hf
def test_entities_equal_the_transformers_pipeline_on_real_sentences(tmp_path, minilm_dir):
    """A token classifier with all-MiniLM-L6-v2's tokenizer (real WordPiece sub-tokens), exported to
    ONNX: ``EdgeSession.tag`` must give the entities, words, offsets and scores of transformers'
    ``TokenClassificationPipeline`` on the PyTorch model, on real CoNLL-2003 test sentences (cased, with
    punctuation) and a few written ones (accents, repeated spaces, an [UNK])."""
    transformers = pytest.importorskip("transformers")
    from edgebert.data.tokenizer import load_tokenizer, save_tokenizer
    from edgebert.files.textfiles import read_conll
    from edgebert.runtime import EdgeSession

    sentences = read_conll(shared_file("conll2003", "test.txt"))[:60]
    texts = [join_words(s.words)[0] for s in sentences] + [
        "Angela Merkel met Emmanuel Macron in Paris on Tuesday.",
        "Zoë   Saldaña flew from São Paulo to Zürich  —  via New York ☃ .",
        "The U.S. Federal Reserve's chair, Jerome Powell, spoke at Davos."]
    model_dir = _token_model(tmp_path / "model", vocab_size=30522, scale=200.0, seed=3)
    save_tokenizer(load_tokenizer(minilm_dir), model_dir, model_max_length=128)
    session = EdgeSession(_export(model_dir, tmp_path / "bundle"), precision="fp32")
    model = transformers.AutoModelForTokenClassification.from_pretrained(model_dir).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    compared = 0
    for aggregation in ("none", "simple", "first"):
        for ignore in (["O"], []):
            pipe = transformers.pipeline("token-classification", model=model, tokenizer=tokenizer,
                                         aggregation_strategy=aggregation, ignore_labels=ignore, device="cpu")
            want = pipe(texts)
            got = session.tag(texts, aggregation, ignore_labels=ignore)
            for text, w, g in zip(texts, want, got):
                key = "entity" if aggregation == "none" else "entity_group"
                assert [(e[key], e["word"], e["start"], e["end"]) for e in g] == \
                       [(e[key], e["word"], int(e["start"]), int(e["end"])) for e in w], (aggregation, text)
                assert np.allclose([e["score"] for e in g], [float(e["score"]) for e in w], atol=1e-4)
                if aggregation == "none":
                    assert [e["index"] for e in g] == [int(e["index"]) for e in w]
                compared += len(g)
    assert compared > 2000


@pytest.mark.slow
@pytest.mark.hf
def test_a_trained_ner_model_tags_real_sentences_as_pytorch_does(tmp_path, minilm_dir):
    """A real token classifier (all-MiniLM-L6-v2 fine-tuned 150 steps on CoNLL-2003 train: its entities
    come in B-/I- runs of several sub-tokens with unsure edges, unlike a random model's) exported to
    ONNX: on 300 real test sentences ``EdgeSession.tag`` (fp32) must give transformers' pipeline
    entities on the PyTorch checkpoint, and ``evaluate`` the bundle the checkpoint's entity F1."""
    import torch

    transformers = pytest.importorskip("transformers")
    from edgebert.files.textfiles import read_conll
    from edgebert.runtime import EdgeSession
    from edgebert.stages.evaluate import evaluate
    from edgebert.stages.finetune import FinetuneConfig, finetune

    torch.set_num_threads(2)
    train, test = shared_file("conll2003", "train.txt"), shared_file("conll2003", "test.txt")
    finetune(FinetuneConfig.preset("ner", model=minilm_dir, task="ner", train_file=train, out=tmp_path / "model",
                                   epochs=None, max_train_examples=4800, train=dict(max_steps=150, progress=False)))
    session = EdgeSession(_export(tmp_path / "model", tmp_path / "bundle"), precision="fp32")
    model = transformers.AutoModelForTokenClassification.from_pretrained(tmp_path / "model").eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "model")
    texts = [join_words(s.words)[0] for s in read_conll(test)[:300]]
    # the pipeline silently cuts a text at the tokenizer's 128 tokens; tag() reads all of it (one window
    # up to the bundle's length, then overlapping windows)
    long = {t for t in texts if len(tokenizer(t)["input_ids"]) > tokenizer.model_max_length}
    entities, past_the_cut = 0, 0
    for aggregation in ("simple", "first", "none"):
        pipe = transformers.pipeline("token-classification", model=model, tokenizer=tokenizer,
                                     aggregation_strategy=aggregation, device="cpu")
        key = "entity" if aggregation == "none" else "entity_group"
        for text, want, got in zip(texts, pipe(texts), session.tag(texts, aggregation)):
            if text in long:
                past_the_cut += max(e["end"] for e in got) > max(int(e["end"]) for e in want)
                continue
            assert [(e[key], e["word"], e["start"], e["end"]) for e in got] == \
                   [(e[key], e["word"], int(e["start"]), int(e["end"])) for e in want], (aggregation, text)
            assert np.allclose([e["score"] for e in got], [float(e["score"]) for e in want], atol=1e-4)
            entities += len(got)
    assert entities > 1500                              # a trained model finds entities in most sentences
    assert len(long) >= 1 and past_the_cut == 3 * len(long)   # entities found after the pipeline's cut
    checkpoint = evaluate(tmp_path / "model", "ner", test, max_examples=300).metrics["f1"]
    bundle = evaluate(tmp_path / "bundle", "ner", test, max_examples=300, precision="fp32").metrics["f1"]
    assert checkpoint > 0.5 and bundle == pytest.approx(checkpoint, abs=1e-9)
