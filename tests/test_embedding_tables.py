"""INT8 embedding tables (quantization.embedding_tables): every CPU INT8 target stores the word and
position tables int8 with per-row scales, looks rows up per token, computes exactly what the dequantized
table would, records it in the manifest and summary, and the accuracy gate can keep a table fp32.
Tiny seeded models."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgebert.exporters import ExportConfig, export_bundle
from edgebert.quantization import (
    TARGETS,
    AccuracyProbe,
    DynamicInt8Quantizer,
    TextBatches,
    prepared_tokenizer,
    quantize_with_guard,
)
from edgebert.quantization.embedding_tables import GATE_KEPT, RECIPE_OFF, quantize_rows, quantize_tables, table_plan
from export_fixtures import make_calib_text, make_model_dir

WORD, POSITION = "model.embeddings.word_embeddings.weight", "model.embeddings.position_embeddings.weight"
CPU_TARGETS = ("portable", "x86-avx2", "x86-vnni", "arm64")


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("tables")


@pytest.fixture(scope="module")
def calib(work) -> Path:
    return make_calib_text(work / "calib.txt", n=40)


@pytest.fixture(scope="module")
def bundle(work, calib):
    model_dir = make_model_dir(work / "model", "BertModel", seed=3)
    result = export_bundle(ExportConfig(model_dir=model_dir, out_dir=work / "bundle", int8=True, calib=calib,
                                        calib_size=20, gate_size=20, int8_targets=CPU_TARGETS,
                                        validation_batch_sizes=(1, 3), validation_seq_lens=(7, 64)))
    return result


def _file(result, key: str) -> Path:
    return result.bundle_dir / result.manifest["models"][key]["file"]


def _inits(path: Path) -> dict[str, np.ndarray]:
    return {i.name: numpy_helper.to_array(i) for i in onnx.load(str(path)).graph.initializer}


def test_every_cpu_target_stores_word_and_position_tables_int8_and_says_so(bundle):
    fp32 = _inits(_file(bundle, "fp32"))
    vocab, hidden = fp32[WORD].shape
    positions = fp32[POSITION].shape[0]
    keys = [k for k, e in bundle.manifest["models"].items() if e["precision"] == "int8"]
    assert {bundle.manifest["models"][k]["target"] for k in keys} == set(CPU_TARGETS)
    for key in keys:
        inits = _inits(_file(bundle, key))
        assert inits[f"{WORD}_int8"].dtype == np.int8 and inits[f"{WORD}_int8"].shape == (vocab, hidden)
        assert inits[f"{WORD}_row_scale"].dtype == np.float16 and inits[f"{WORD}_row_scale"].shape == (vocab, 1)
        assert inits[f"{POSITION}_int8"].dtype == np.int8 and inits[f"{POSITION}_int8"].shape == (positions, hidden)
        assert WORD not in inits and POSITION not in inits                          # no fp32 copy left
        assert not [n for n, a in inits.items() if a.dtype == np.float32 and a.shape in {(vocab, hidden),
                                                                                           (positions, hidden)}]
        tables = bundle.manifest["models"][key]["quantization"]["embedding_tables"]
        assert tables["word_embeddings"]["dtype"] == "int8"
        assert tables["word_embeddings"]["bytes"] == vocab * hidden + 2 * vocab
        assert tables["word_embeddings"]["fp32_bytes"] == 4 * vocab * hidden
        assert tables["position_embeddings"]["dtype"] == "int8"
        assert tables["token_type_embeddings"]["dtype"] == "float32"
        assert "too small" in tables["token_type_embeddings"]["why"]
        # accuracy measured with the int8 tables in place, within the gate's budget
        acc = bundle.manifest["models"][key]["accuracy"]
        assert acc["loss"] <= acc["max_accuracy_loss"] and acc["min"] > 0.99
    lines = [line for line in bundle.summary_lines() if line.startswith("int8 ")]
    assert len(lines) == len(keys)
    assert all("embedding tables int8 per row: word_embeddings, position_embeddings" in line for line in lines)


def test_lookup_reads_rows_per_token_never_the_whole_table(bundle):
    graph = onnx.load(str(_file(bundle, "int8"))).graph
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    assert not [n for n in graph.node if n.op_type == "DequantizeLinear"]
    word_readers = readers[f"{WORD}_int8"]
    assert [n.op_type for n in word_readers] == ["Gather"]                   # rows picked by the token ids
    assert word_readers[0].input[1] == "input_ids_int32"
    assert [n.op_type for n in readers[f"{WORD}_row_scale"]] == ["Gather"]
    assert [n.op_type for n in readers[f"{POSITION}_int8"]] in (["Gather"], ["Slice"])   # ids, or rows 0..S-1
    # the Casts to float read the picked rows, never a table
    tables = {f"{WORD}_int8", f"{POSITION}_int8"}
    assert all(n.input[0] not in tables for n in graph.node if n.op_type in ("Cast", "Mul"))
    eln = next(n for n in graph.node if n.op_type == "EmbedLayerNormalization")
    assert not {eln.input[2], eln.input[3]} & {i.name for i in graph.initializer}    # fed per call


def test_graph_shrinks_by_three_quarters_of_the_table_bytes(bundle, tmp_path):
    fused = _file(bundle, "fp32")
    recipe = TARGETS["x86-vnni"].replace(activation_scales="per-call", outlier_ratio=0)
    with_tables = DynamicInt8Quantizer(fused, recipe)
    without = DynamicInt8Quantizer(fused, recipe.replace(embedding_tables=False))
    small, large = with_tables.quantize(tmp_path / "int8.onnx"), without.quantize(tmp_path / "fp32tables.onnx")
    fp32 = _inits(fused)
    table_bytes = fp32[WORD].nbytes + fp32[POSITION].nbytes
    scale_bytes = 4 * (fp32[WORD].shape[0] + fp32[POSITION].shape[0])
    saved = os.path.getsize(large) - os.path.getsize(small)
    # 3/4 of the tables, less the row scales and the lookup nodes (~20 nodes, ~4 KB of names)
    assert 0.75 * table_bytes - scale_bytes - 8192 <= saved <= 0.75 * table_bytes - scale_bytes
    assert without.describe()["embedding_tables"]["word_embeddings"] == {
        "dtype": "float32", "rows": fp32[WORD].shape[0], "hidden": fp32[WORD].shape[1],
        "bytes": fp32[WORD].nbytes, "why": RECIPE_OFF}
    assert without.tables == [] and len(with_tables.tables) == 2


def _with_position_ids(fused: Path, out: Path) -> Path:
    """The fused graph with explicit position ids 0..S-1 ([1, S]) fed to EmbedLayerNormalization, as the
    optimizer leaves them for some traces."""
    model = onnx.load(str(fused))
    graph = model.graph
    eln = next(n for n in graph.node if n.op_type == "EmbedLayerNormalization")
    ids = eln.input[0]
    graph.initializer.extend([numpy_helper.from_array(np.array([1], np.int64), "pos/seq_dim"),
                              numpy_helper.from_array(np.array(0, np.int32), "pos/zero"),
                              numpy_helper.from_array(np.array(1, np.int32), "pos/one"),
                              numpy_helper.from_array(np.array([0], np.int64), "pos/axis0")])
    made = [helper.make_node("Shape", [ids], ["pos/shape"]),
            helper.make_node("Gather", ["pos/shape", "pos/seq_dim"], ["pos/len64"], axis=0),
            helper.make_node("Squeeze", ["pos/len64", "pos/axis0"], ["pos/len64s"]),
            helper.make_node("Cast", ["pos/len64s"], ["pos/len"], to=TensorProto.INT32),
            helper.make_node("Range", ["pos/zero", "pos/len", "pos/one"], ["pos/range"]),
            helper.make_node("Unsqueeze", ["pos/range", "pos/axis0"], ["pos/ids"])]
    while len(eln.input) < 9:
        eln.input.append("")
    eln.input[8] = "pos/ids"
    at = list(graph.node).index(eln)
    for i, node in enumerate(made):
        graph.node.insert(at + i, node)
    onnx.save(model, str(out))
    return out


def _feeds(batch: int, seq: int, vocab: int, rng) -> dict[str, np.ndarray]:
    ids = rng.integers(1, vocab, (batch, seq)).astype(np.int64)
    mask = np.ones_like(ids)
    for row in range(1, batch):                                      # right padding, uneven lengths
        mask[row, int(rng.integers(1, seq + 1)):] = 0
    ids[mask == 0] = 0
    types = np.zeros_like(ids)
    types[:, seq // 2:] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


@pytest.mark.parametrize("position_ids", [False, True])
def test_int8_lookup_computes_exactly_what_the_dequantized_table_does(bundle, tmp_path, position_ids):
    source = _file(bundle, "fp32")
    if position_ids:
        source = _with_position_ids(source, tmp_path / "posids.onnx")
    tables, kept = table_plan(source)
    assert [t.slot for t in tables] == ["word_embeddings", "position_embeddings"] and list(kept) == [
        "token_type_embeddings"]
    quantize_tables(source, tmp_path / "int8.onnx", [t.candidate for t in tables])
    reference = onnx.load(str(source))                  # the fp32 graph with the dequantized tables in place
    for init in reference.graph.initializer:
        if init.name in (WORD, POSITION):
            q, scale = quantize_rows(numpy_helper.to_array(init))
            init.CopyFrom(numpy_helper.from_array(q.astype(np.float32) * scale, init.name))
    onnx.save(reference, str(tmp_path / "reference.onnx"))
    ours, ref = (ort.InferenceSession(str(tmp_path / f), providers=["CPUExecutionProvider"])
                 for f in ("int8.onnx", "reference.onnx"))
    assert [o.name for o in ours.get_outputs()] == [o.name for o in ref.get_outputs()]
    rng = np.random.default_rng(0)
    vocab = tables[0].rows
    for batch, seq in ((1, 7), (3, 64), (8, 128), (2, 1)):
        feeds = _feeds(batch, seq, vocab, rng)
        for a, b in zip(ours.run(None, feeds), ref.run(None, feeds)):
            assert a.shape == b.shape and a.shape[0] == batch
            assert np.abs(a - b).max() <= 1e-6
    # and the int8 rows are within half a step of the fp32 table
    fp32 = _inits(source)[WORD]
    q, scale = quantize_rows(fp32)
    assert scale.dtype == np.float16                 # stored as float16, exactly the scale the rows used
    scale = scale.astype(np.float32)
    assert np.all(np.abs(q * scale - fp32) <= scale / 2 + 1e-7)
    assert np.abs(q).max() == 127 and np.all(np.abs(fp32).max(axis=1, keepdims=True) <= 127 * scale)  # none clips


def test_gate_keeps_a_sensitive_table_fp32_and_says_why(bundle, calib, tmp_path):
    # one huge element per word row: per-row int8 then keeps ~3 bits for the others, the table becomes
    # the graph's most sensitive candidate
    model = onnx.load(str(_file(bundle, "fp32")))
    for init in model.graph.initializer:
        if init.name == WORD:
            table = numpy_helper.to_array(init).copy()
            table[:, 0] = 40 * np.abs(table).max(axis=1)
            init.CopyFrom(numpy_helper.from_array(table, WORD))
    planted = tmp_path / "planted.onnx"
    onnx.save(model, str(planted))
    tok = prepared_tokenizer(bundle.bundle_dir / "tokenizer.json", 64)
    probe = AccuracyProbe("embed", planted, TextBatches(calib, tok, 40, 16, 64))
    quantizer = DynamicInt8Quantizer(planted, TARGETS["x86-vnni"].replace(activation_scales="per-call",
                                                                          outlier_ratio=0))
    word = next(c for c in quantizer.tables if c.endswith("/word_embeddings"))
    everything = probe.measure(quantizer.quantize(tmp_path / "all.onnx")).loss
    no_table = probe.measure(quantizer.quantize(tmp_path / "no_table.onnx", exclude=[word])).loss
    assert no_table < everything / 2                                  # the table is the error
    budget = (everything + no_table) / 2
    guarded = quantize_with_guard(quantizer, tmp_path / "guarded.onnx", probe, budget, sensitivity_size=40)
    assert guarded.sensitivity[0]["node"] == word and guarded.excluded == [word]
    assert guarded.accuracy.loss <= budget
    tables = quantizer.describe()["embedding_tables"]
    assert tables["word_embeddings"]["dtype"] == "float32" and tables["word_embeddings"]["why"] == GATE_KEPT
    assert tables["position_embeddings"]["dtype"] == "int8"
    inits = _inits(tmp_path / "guarded.onnx")
    assert inits[WORD].dtype == np.float32 and f"{WORD}_int8" not in inits
