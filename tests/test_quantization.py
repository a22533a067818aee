"""INT8 and FP16: calibration text streaming, static QDQ S8S8 structure, the accuracy gate's node
exclusion, accuracy metrics per task on held-out text. Tiny seeded models."""

from __future__ import annotations

import types
from pathlib import Path

import numpy as np
import onnx
import pytest

from edgebert.bundle import model_path
from edgebert.errors import DataError, ValidationError
from edgebert.exporters import ExportConfig, export_bundle
from edgebert.quantization import (
    TARGETS,
    AccuracyProbe,
    DynamicInt8Quantizer,
    Int8Config,
    TextBatches,
    iter_sentences,
    op_type_counts,
    prepared_tokenizer,
    quantize_with_guard,
)
from edgebert.runtime.fidelity import Fidelity
from export_fixtures import make_calib_text, make_model_dir

LAYERS = 2


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("quant")


@pytest.fixture(scope="module")
def calib(work) -> Path:
    return make_calib_text(work / "calib.txt", n=40)


@pytest.fixture(scope="module")
def fp32_bundle(work) -> Path:
    # initializer_range 0.3: activations wide enough that INT8 error is measurable per node
    model_dir = make_model_dir(work / "model", "BertModel", seed=7, initializer_range=0.3)
    return export_bundle(ExportConfig(model_dir=model_dir, out_dir=work / "fp32", validation_batch_sizes=(1, 3),
                                      validation_seq_lens=(7, 64))).bundle_dir


# --------------------------------------------------------------------------- calibration text
def test_iter_sentences_reads_tsv_wikitext_and_plain_text(tmp_path):
    tsv = tmp_path / "dev.tsv"
    tsv.write_text("sentence\tlabel\nit 's a charming film . \t1\n\t0\na dull mess\t0\n", encoding="utf-8")
    assert list(iter_sentences(tsv)) == ["it 's a charming film .", "a dull mess"]
    wiki = tmp_path / "wiki.valid.raw"
    wiki.write_text(" \n = Valkyria Chronicles = \n \n Senjō no Valkyria is a game .\n = = Plot = = \n"
                    " The story follows .\n", encoding="utf-8")
    assert list(iter_sentences(wiki)) == ["Senjō no Valkyria is a game .", "The story follows ."]
    plain = make_calib_text(tmp_path / "plain.txt", n=30)
    assert len(list(iter_sentences(plain))) == 30
    assert len(list(iter_sentences(plain, limit=7))) == 7


def test_iter_sentences_streams_and_rejects_bad_files(tmp_path):
    big = tmp_path / "big.txt"
    big.write_text("word\n" * 100_000, encoding="utf-8")
    stream = iter_sentences(big, limit=3)
    assert next(stream) == "word"                  # a generator: nothing read past what is asked
    no_column = tmp_path / "x.tsv"
    no_column.write_text("quality\tlabel\n1\t0\n", encoding="utf-8")
    with pytest.raises(DataError, match="no text column"):
        list(iter_sentences(no_column))
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n", encoding="utf-8")
    with pytest.raises(DataError, match="holds no text"):
        list(iter_sentences(empty))
    with pytest.raises(DataError, match="not found"):
        list(iter_sentences(tmp_path / "missing.txt"))


def test_text_batches_pad_right_and_cap_the_count(fp32_bundle, calib):
    tok = prepared_tokenizer(fp32_bundle / "tokenizer.json", max_length=12)
    batches = TextBatches(calib, tok, limit=25, batch_size=8, max_length=12)
    sizes = [b["input_ids"].shape[0] for b in batches]
    assert sizes == [8, 8, 8, 1] and batches.count() == 25
    first = next(iter(batches))
    mask = first["attention_mask"]
    assert first["input_ids"].shape[1] <= 12 and first["input_ids"][:, 0].tolist() == [2] * 8   # [CLS]
    assert (np.diff(mask, axis=1) <= 0).all()          # right padding: 1...1 0...0
    assert (first["input_ids"][mask == 0] == 0).all()
    fixed = next(iter(TextBatches(calib, tok, 4, 4, 12, pad_to=12)))
    assert fixed["input_ids"].shape == (4, 12)


# --------------------------------------------------------------------------- static QDQ
def test_static_int8_is_symmetric_s8s8_qdq_on_standard_ops(work, calib):
    model_dir = make_model_dir(work / "static_model", "BertModel", seed=11)
    manifest = export_bundle(ExportConfig(model_dir=model_dir, out_dir=work / "static", int8=True,
                                          int8_mode="static", calib=calib, calib_size=32,
                                          validation_batch_sizes=(1, 3), validation_seq_lens=(7, 64))).manifest
    model = onnx.load(str(model_path(work / "static", "int8", key="int8-trt")))   # static QDQ: TensorRT's INT8 graph
    assert set(manifest["models"]) == {"fp32", "fp32-trt", "int8-trt"}        # and no CPU INT8 graph
    counts = op_type_counts(model)
    weight_matmuls = 6 * LAYERS + 1                            # Q, K, V, out, FFN1, FFN2 per layer + pooler
    assert counts["DequantizeLinear"] >= 2 * weight_matmuls     # weight DQ + activation DQ
    assert counts["QuantizeLinear"] >= LAYERS * 4
    assert all(n.domain in ("", "ai.onnx") for n in model.graph.node)   # no ORT contrib ops: TensorRT reads it
    inits = {i.name: i for i in model.graph.initializer}
    zero_points = [inits[n.input[2]] for n in model.graph.node
                   if n.op_type in ("QuantizeLinear", "DequantizeLinear") and len(n.input) > 2]
    activation_zps = [inits[n.input[2]] for n in model.graph.node if n.op_type == "QuantizeLinear"]
    assert activation_zps and all(z.data_type == onnx.TensorProto.INT8 for z in activation_zps)
    assert len(zero_points) > len(activation_zps)                                   # weights too
    assert all(z.data_type == onnx.TensorProto.INT8 for z in zero_points)          # S8S8, no U8, no int32 bias
    assert all(not onnx.numpy_helper.to_array(z).any() for z in zero_points)     # symmetric
    q = manifest["models"]["int8-trt"]["quantization"]
    assert q["format"] == "QDQ" and q["graph"] == "standard-ops" and q["symmetric"] is True
    assert q["candidate_nodes"] == weight_matmuls and q["calibration"]["calibration"]["texts"] == 32
    assert manifest["models"]["int8-trt"]["accuracy"]["mean"] > 0.99


# --------------------------------------------------------------------------- accuracy guard
def test_guard_keeps_the_most_sensitive_nodes_float_until_the_budget_is_met(fp32_bundle, calib, tmp_path):
    fused = model_path(fp32_bundle)
    tok = prepared_tokenizer(fp32_bundle / "tokenizer.json", 64)
    probe = AccuracyProbe("embed", fused, TextBatches(calib, tok, 40, 16, 64))
    # per-tensor weights and per-call scales: INT8 error large enough to rank single nodes
    quantizer = DynamicInt8Quantizer(fused, TARGETS["portable"].replace(per_channel=False, reduce_range=False,
                                                                        activation_scales="per-call", outlier_ratio=0))
    unguarded = quantize_with_guard(quantizer, tmp_path / "all.onnx", probe, None)
    assert unguarded.excluded == [] and unguarded.accuracy.loss > 0
    budget = unguarded.accuracy.loss / 3
    guarded = quantize_with_guard(quantizer, tmp_path / "guarded.onnx", probe, budget, sensitivity_size=40)
    assert guarded.accuracy.loss <= budget < guarded.before.loss
    assert 1 <= len(guarded.excluded) < len(quantizer.candidates())
    ranked = [r["node"] for r in guarded.sensitivity]
    assert guarded.excluded == ranked[: len(guarded.excluded)]          # most sensitive first
    assert sorted(ranked) == sorted(quantizer.candidates())
    graph = onnx.load(str(tmp_path / "guarded.onnx")).graph
    float_nodes = {n.name for n in graph.node if n.op_type in ("MatMul", "Attention")}
    assert set(guarded.excluded) <= float_nodes                          # really kept float
    assert guarded.as_dict(budget)["max_accuracy_loss"] == budget


def test_guard_raises_a_typed_error_when_the_budget_cannot_be_met(tmp_path):
    calls = []
    quantizer = types.SimpleNamespace(candidates=lambda: ["a", "b"],
                                      quantize=lambda out, exclude=(), only=None: calls.append((tuple(exclude), only)))
    probe = types.SimpleNamespace(metric="cosine",
                                  measure=lambda path, n=None: Fidelity("cosine", 0.8, 0.5, 10, 0.2, 0.2))
    with pytest.raises(ValidationError) as err:
        quantize_with_guard(quantizer, tmp_path / "q.onnx", probe, 0.01)
    assert err.value.figures == {"loss": 0.2, "max_accuracy_loss": 0.01, "excluded": 2}
    assert (("a", "b"), None) in calls                     # it did try with every node kept float


@pytest.mark.parametrize("task,arch,metric", [("cls", "BertForSequenceClassification", "label_agreement"),
                                              ("mlm", "BertForMaskedLM", "top1_agreement")])
def test_accuracy_metrics_per_task(work, task, arch, metric):
    model_dir = make_model_dir(work / f"{task}_m", arch, seed=5)
    calib = make_calib_text(work / f"{task}_calib.txt", n=80)
    manifest = export_bundle(ExportConfig(model_dir=model_dir, out_dir=work / f"{task}_b", int8=True, calib=calib,
                                          calib_size=24, gate_size=40, max_accuracy_loss=0.5,
                                          validation_batch_sizes=(1,), validation_seq_lens=(7,))).manifest
    acc = manifest["models"]["int8"]["accuracy"]
    assert acc["metric"] == metric and acc["n"] == 40 and acc["max_accuracy_loss"] == 0.5
    assert acc["held_out"]["skip"] == 24 and acc["held_out"]["texts"] == 40     # never the calibration lines
    # the loss is derived from the rounded mean, so the two agree exactly on every CPU
    assert 0.5 <= acc["mean"] <= 1.0 and acc["loss"] == pytest.approx(1 - acc["mean"], abs=1e-12)
    assert 0.0 <= acc["distance"] < 0.5                          # continuous companion of the loss
    if task == "mlm":
        assert acc["tokens"] > 24                                   # every real token counts
    counts = manifest["models"]["int8"]["quantization"]["op_counts"]
    assert counts["QAttention"] == LAYERS


def test_int8_config_validation(tmp_path):
    from edgebert.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown INT8 target 'avx9'"):
        Int8Config(targets=("portable", "avx9"))
    with pytest.raises(ConfigError, match="static QDQ INT8 is one graph"):
        Int8Config(mode="static", targets=("x86-vnni",))
    with pytest.raises(DataError, match="not found"):
        Int8Config(calib=tmp_path / "nope.txt")
    with pytest.raises(ConfigError, match=r"must be in \[0, 1\)"):
        Int8Config(max_accuracy_loss=1.5)
    assert Int8Config.preset("tensorrt").resolved_op_types == ("MatMul", "Gemm")   # no --calib needed any more
    recipes, _ = Int8Config(targets="portable,x86-vnni,portable", outlier_ratio=0).recipes()
    assert [r.target for r in recipes] == ["portable", "x86-vnni"]                  # order kept, duplicates dropped
    assert recipes[0].op_types == ("MatMul", "Attention") and all(r.outlier_ratio == 0 for r in recipes)
    assert Int8Config().budget("embed") == 0.005 and Int8Config(max_accuracy_loss=0.02).budget("cls") == 0.02


def test_guard_search_finds_the_shortest_sufficient_prefix(tmp_path):
    """Stub quantizer: node i alone costs (8 - i) / 100; loss with k nodes float = 0.1 - 0.01 k."""
    nodes = [f"n{i}" for i in range(8)]
    state = {}

    def quantize(out, exclude=(), only=None):
        state.update(exclude=list(exclude), only=only)

    def measure(path, n=None):
        if state["only"] is not None:
            d = (8 - nodes.index(state["only"])) / 100
        else:
            d = 0.1 - 0.01 * len(state["exclude"])
        return Fidelity("cosine", 1 - d, None, 10, d, d)

    quantizer = types.SimpleNamespace(candidates=lambda: list(nodes), quantize=quantize)
    probe = types.SimpleNamespace(metric="cosine", measure=measure)
    result = quantize_with_guard(quantizer, tmp_path / "q.onnx", probe, 0.045)
    assert result.excluded == nodes[:6]                      # k=5 gives 0.05 > 0.045, k=6 gives 0.04
    assert state["exclude"] == nodes[:6]                     # the written file is the fitting one
    assert result.accuracy.loss == pytest.approx(0.04) and result.before.loss == pytest.approx(0.1)
    assert [r["node"] for r in result.sensitivity] == nodes
    assert len(result.search) <= 4                          # guess + bisection, not one by one


# --------------------------------------------------------------------------- boundaries
def test_quantization_never_imports_exporters():
    """The exporter asks quantization for graphs and validates them itself; nothing calls back."""
    import ast

    root = Path(__file__).resolve().parents[1] / "quantization"
    for path in sorted(root.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        assert not [m for m in names if m.startswith(("exporters", "edgebert.exporters"))], path.name


def test_fp16_structure_check_rejects_a_graph_left_in_fp32(fp32_bundle, tmp_path):
    from edgebert.quantization import Fp16Config, make_fp16

    fused = model_path(fp32_bundle)
    facts = make_fp16(fused, tmp_path / "ok.onnx")
    assert facts["ok"] and facts["fp16_weight_matrices"] == facts["weight_matrices"] >= 4 * LAYERS
    blocked = Fp16Config(op_block_list=("MatMul", "Gemm", "Attention"))      # every weight op stays fp32
    with pytest.raises(ValidationError, match="fp16: 0 of") as err:
        make_fp16(fused, tmp_path / "blocked.onnx", blocked)
    assert err.value.figures["stage"] == "fp16" and err.value.figures["weight_matrices"] >= 4 * LAYERS
