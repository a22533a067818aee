"""An exported bundle is a Hugging Face model folder: sentence-transformers (backend="onnx") and Optimum's
ORTModelFor... open it as it is and give EdgeSession's outputs (fp32 to 1e-5; the INT8 file to the same
graph's outputs, and within the export gate's budget of fp32). Tiny seeded bundles; MiniLM in the slow test.
An old bundle (graphs at the root, no Hugging Face files) still opens in EdgeSession."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from edgebert.bundle import read_manifest
from edgebert.files.textfiles import builtin_texts
from edgebert.runtime import EdgeSession
from hf_loader_bundles import NER_LABELS, QUESTION, TEXTS, int8_budget, loader_bundles

FP32_TOL = 1e-5
SAME_GRAPH_TOL = 1e-4       # the INT8 file in another onnxruntime session: the same kernels, any order of sums
ORT_CLASSES = {"embed": "ORTModelForFeatureExtraction", "cls": "ORTModelForSequenceClassification",
               "token-cls": "ORTModelForTokenClassification", "qa": "ORTModelForQuestionAnswering"}
CPU_ONLY = {"provider": "CPUExecutionProvider"}     # onnxruntime-gpu would try TensorRT first and print why not


@pytest.fixture(scope="module")
def bundles(tmp_path_factory) -> dict[str, Path]:
    return loader_bundles(tmp_path_factory.getbasetemp())


def _session(bundle: Path, precision: str) -> EdgeSession:
    return EdgeSession(bundle, provider="cpu", precision=precision, threads=1)


def _cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = a.reshape(len(a), -1), b.reshape(len(b), -1)
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


# --------------------------------------------------------------------------- the folder itself
def test_bundle_is_a_hugging_face_model_folder(bundles):
    from transformers import AutoConfig, AutoTokenizer

    for task, bundle in bundles.items():
        if task not in ("embed", "cls", "token-cls", "qa"):
            continue                                        # the multi-target bundle: its files are checked below
        manifest = read_manifest(bundle)
        assert {m.file for m in manifest.models.values()} <= {"onnx/model.onnx", "onnx/model_quantized.onnx"}
        config = AutoConfig.from_pretrained(bundle)
        assert config.architectures == [{"embed": "BertModel", "cls": "BertForSequenceClassification",
                                         "token-cls": "BertForTokenClassification",
                                         "qa": "BertForQuestionAnswering"}[task]]
        if task == "token-cls":
            assert config.id2label == NER_LABELS
        tok = json.loads((bundle / "tokenizer.json").read_text())
        assert tok["padding"] is None and tok["truncation"] is None      # no stored padding to 128
        hf = AutoTokenizer.from_pretrained(bundle)
        assert hf.model_max_length == manifest.max_length and hf.cls_token == "[CLS]"
        session = _session(bundle, "fp32")
        assert [list(e.ids) for e in session.tokenize(TEXTS)] == hf(TEXTS)["input_ids"]
        has_modules = (bundle / "modules.json").is_file()
        assert has_modules == (task == "embed")
    st_config = json.loads((bundles["embed"] / "sentence_bert_config.json").read_text())
    assert st_config["max_seq_length"] == read_manifest(bundles["embed"]).max_length


def test_loaders_note_names_each_graphs_file_and_webgpus_graph():
    """Which file each loader takes and how (the manifest's ``loaders``); WebGPU lacks the fused Attention's raw
    mask (onnxruntime-web: "Mask not supported"; no WebGPU adapter here to run it), so it is sent to the
    standard-ops graph where the bundle has one."""
    from edgebert.exporters.hf_folder import loaders_note

    models = {"fp32": {"file": "onnx/model.onnx", "precision": "fp32", "providers": ["cpu"]},
              "int8": {"file": "onnx/model_quantized.onnx", "precision": "int8", "providers": ["cpu"]},
              "int8-x86-vnni": {"file": "onnx/model_qint8_x86-vnni.onnx", "precision": "int8", "providers": ["cpu"]},
              "fp32-trt": {"file": "onnx/model.trt.onnx", "precision": "fp32", "providers": ["tensorrt"]},
              "fp32-cuda": {"file": "onnx/model.cuda.onnx", "precision": "fp32", "providers": ["cuda"]},
              "int4": {"file": "onnx/model_q4.onnx", "precision": "int4", "providers": ["cpu"]}}
    note = loaders_note("embed", models)
    assert note["transformers.js"] == {"fp32": {"dtype": "fp32"}, "int8": {"dtype": "q8"}, "int4": {"dtype": "q4"},
                                       "int8-x86-vnni": {"dtype": "fp32", "model_file_name": "model_qint8_x86-vnni"},
                                       "fp32-trt": {"dtype": "fp32", "model_file_name": "model.trt"}}
    assert set(note["optimum"]) == {"fp32", "int8", "int8-x86-vnni", "fp32-trt"}       # no CUDA-only graph
    assert note["sentence-transformers"]["int8-x86-vnni"] == {"backend": "onnx", "model_kwargs": {
        "file_name": "model_qint8_x86-vnni.onnx"}}
    assert "onnx/model.trt.onnx" in note["webgpu"] and "Mask not supported" in note["webgpu"]
    assert "--tensorrt" in loaders_note("cls", {k: models[k] for k in ("fp32", "int8")})["webgpu"]
    assert loaders_note("cls", models)["sentence-transformers"] == {}


# --------------------------------------------------------------------------- sentence-transformers
@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_sentence_transformers_onnx_backend_gives_edgesessions_vectors(bundles, precision):
    st = pytest.importorskip("sentence_transformers")
    bundle = bundles["embed"]
    kwargs = read_manifest(bundle).get_extra("loaders")["sentence-transformers"][precision]
    if importlib.util.find_spec("optimum") is not None:           # sentence-transformers' own ONNX backend
        model = st.SentenceTransformer(str(bundle), device="cpu", backend=kwargs["backend"],
                                       model_kwargs={**kwargs.get("model_kwargs", {}), **CPU_ONLY})
        graph = Path(model[0].auto_model.model_path)
    else:       # sentence-transformers 6 (its ONNX backend needs Optimum, which needs transformers 4): edgebert's
        from edgebert.st_onnx import EdgeSentenceTransformer

        model = EdgeSentenceTransformer(bundle, precision=precision)
        graph = model[0].model.session.model_file
    assert graph.name == Path(read_manifest(bundle).models[precision].file).name
    got = model.encode(TEXTS)
    want = _session(bundle, precision).embed(TEXTS)
    diff = float(np.abs(got - want).max())
    assert diff <= (FP32_TOL if precision == "fp32" else SAME_GRAPH_TOL), diff
    if precision == "int8":
        metric, budget = int8_budget(bundle)
        loss = float(1 - _cosine(got, _session(bundle, "fp32").embed(TEXTS)).mean())
        assert "cosine" in metric and loss <= budget, (loss, budget)


# --------------------------------------------------------------------------- Optimum
def _inputs(task: str):
    return ([QUESTION[0]], [QUESTION[1]]) if task == "qa" else (TEXTS,)


@pytest.mark.parametrize("precision", ["fp32", "int8"])
@pytest.mark.parametrize("task", list(ORT_CLASSES))
def test_optimum_ortmodel_gives_edgesessions_outputs(bundles, task, precision):
    onnxruntime_optimum = pytest.importorskip("optimum.onnxruntime")
    from transformers import AutoTokenizer

    bundle = bundles[task]
    where = read_manifest(bundle).get_extra("loaders")["optimum"][precision]
    model = getattr(onnxruntime_optimum, ORT_CLASSES[task]).from_pretrained(bundle, **where, **CPU_ONLY)
    enc = AutoTokenizer.from_pretrained(bundle)(*_inputs(task), padding=True, return_tensors="np")
    session = _session(bundle, precision)
    want = session.run({k: enc[k] for k in session.input_names})
    got = model(**enc)
    given = [n for n in want if getattr(got, n, None) is not None]     # Optimum gives no pooler_output
    assert given[0] == session.output_names[0] and len(given) == (2 if task == "qa" else 1)
    for name in given:
        diff = float(np.abs(np.asarray(getattr(got, name)) - want[name]).max())
        assert diff <= (FP32_TOL if precision == "fp32" else SAME_GRAPH_TOL), (name, diff)
    if precision == "int8" and task != "qa":     # the QA gate is answer F1: checked in the transformers.js test
        fp32 = _session(bundle, "fp32").run({k: enc[k] for k in session.input_names})
        metric, budget = int8_budget(bundle)
        name = session.output_names[0]
        mask = enc["attention_mask"].astype(bool)
        if task == "embed":
            loss = float(1 - _cosine(np.asarray(getattr(got, name))[mask], fp32[name][mask]).mean())
        else:
            picked = np.asarray(getattr(got, name)).argmax(-1)
            ref = fp32[name].argmax(-1)
            loss = float(1 - (picked == ref)[mask if task == "token-cls" else slice(None)].mean())
        assert loss <= budget, (metric, loss, budget)


# --------------------------------------------------------------------------- old bundles
def test_a_bundle_laid_out_the_old_way_still_opens(bundles, tmp_path):
    """Graphs at the root under their old names, no Hugging Face files: EdgeSession reads the manifest's names."""
    from edgebert.files.hashing import sha256_file

    old = tmp_path / "old"
    shutil.copytree(bundles["embed"], old)
    manifest = json.loads((old / "manifest.json").read_text())
    for key, name in (("fp32", "model.onnx"), ("int8", "model.int8.onnx")):
        (old / manifest["models"][key]["file"]).rename(old / name)
        manifest["models"][key]["file"] = name
    shutil.rmtree(old / "onnx")
    for name in ("tokenizer_config.json", "special_tokens_map.json", "modules.json", "sentence_bert_config.json"):
        (old / name).unlink()
    shutil.rmtree(old / "1_Pooling")
    manifest.pop("loaders")
    manifest.pop("sizes", None)
    manifest["files"] = {n: sha256_file(old / n) for n in ("model.onnx", "model.int8.onnx", "tokenizer.json",
                                                            "config.json")}
    (old / "manifest.json").write_text(json.dumps(manifest))
    for precision in ("fp32", "int8"):
        got = EdgeSession(old, provider="cpu", precision=precision, threads=1)
        assert got.model_file == old / {"fp32": "model.onnx", "int8": "model.int8.onnx"}[precision]
        assert np.array_equal(got.embed(TEXTS), _session(bundles["embed"], precision).embed(TEXTS))


# --------------------------------------------------------------------------- the real model
@pytest.mark.slow
def test_minilm_bundle_in_sentence_transformers_and_optimum(minilm_dir, tmp_path):
    st = pytest.importorskip("sentence_transformers")
    from edgebert.exporters import ExportConfig, export_bundle

    bundle = export_bundle(ExportConfig(model_dir=minilm_dir, out_dir=tmp_path / "minilm", int8=True)).bundle_dir
    texts = ["A man is playing a guitar.", "The new movie is awesome, I loved every minute of it.",
             "Stocks fell sharply on Monday after the central bank raised interest rates.", "hello"]
    # the budget is a mean over the gate's texts: 64 held-out ones (4 texts cannot rank a loss of 0.005,
    # quantization.calibration.MIN_GATE_TEXTS)
    gate_texts = builtin_texts("held-out")[:64]
    fp32 = _session(bundle, "fp32").embed(texts + gate_texts)
    for precision, extra in (("fp32", {}), ("int8", {"file_name": "model_quantized.onnx"})):
        if importlib.util.find_spec("optimum") is not None:
            model = st.SentenceTransformer(str(bundle), device="cpu", backend="onnx",
                                           model_kwargs={**extra, **CPU_ONLY})
        else:                           # sentence-transformers 6: no ONNX backend without Optimum (edgebert.st_onnx)
            from edgebert.st_onnx import EdgeSentenceTransformer

            model = EdgeSentenceTransformer(bundle, precision=precision)
        got = model.encode(texts + gate_texts)
        want = _session(bundle, precision).embed(texts + gate_texts)
        assert float(np.abs(got - want).max()) <= (FP32_TOL if precision == "fp32" else SAME_GRAPH_TOL)
        if precision == "int8":
            assert float(1 - _cosine(got[len(texts):], fp32[len(texts):]).mean()) <= int8_budget(bundle)[1]
    fp32 = fp32[:len(texts)]
    reference = st.SentenceTransformer(str(minilm_dir), device="cpu").encode(texts)
    assert float(_cosine(fp32, reference).min()) > 0.99999


# --------------------------------------------------------------------------- other families
@pytest.mark.parametrize("family", ["distilbert", "roberta"])
def test_other_families_open_in_optimum_with_their_own_tokenizer(family, tmp_path):
    """A DistilBERT / RoBERTa bundle names its family's tokenizer class and special tokens: transformers'
    AutoTokenizer gives EdgeSession's ids (on either transformers major) and Optimum EdgeSession's vectors."""
    from transformers import AutoTokenizer

    from edgebert.exporters import ExportConfig, export_bundle
    from edgebert.stages.import_hf import convert_hf
    from family_fixtures import hf_dir

    src, _ = hf_dir(tmp_path, family, "Model")
    checkpoint = convert_hf(src, tmp_path / "checkpoint").out_dir
    bundle = export_bundle(ExportConfig(model_dir=checkpoint, out_dir=tmp_path / "bundle", validation_batch_sizes=(1,),
                                        validation_seq_lens=(7,))).bundle_dir
    config = json.loads((bundle / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == {"distilbert": "DistilBertTokenizer", "roberta": "RobertaTokenizer"}[family]
    texts = ["Marie Curie won the Nobel Prize in Paris.", "Hello world"]
    tok = AutoTokenizer.from_pretrained(bundle)
    session = _session(bundle, "fp32")
    assert [list(e.ids) for e in session.tokenize(texts)] == tok(texts)["input_ids"]
    onnxruntime_optimum = pytest.importorskip("optimum.onnxruntime")     # [optimum]: transformers 4.x only
    enc = tok(texts, padding=True, return_tensors="np")
    model = onnxruntime_optimum.ORTModelForFeatureExtraction.from_pretrained(bundle, subfolder="onnx",
                                                                          file_name="model.onnx", **CPU_ONLY)
    feeds = {k: enc[k] if k in enc else np.zeros_like(enc["input_ids"]) for k in session.input_names}
    want = session.run(feeds)["last_hidden_state"]
    got = model(**{k: v for k, v in enc.items()}).last_hidden_state
    assert float(np.abs(np.asarray(got) - want).max()) <= FP32_TOL
