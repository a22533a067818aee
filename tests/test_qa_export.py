"""Export of the span and multiple-choice heads: a QA graph's start_logits / end_logits (batch, sequence)
with dynamic axes, fused as every head is, validated at unseen padded shapes; its INT8 gate on the answers
to questions not trained on (--gate-data, or the built-in questions), and what a bundle whose gate
missed does (says so, keeps fp32 its default); the multiple-choice graph's (batch, choices, sequence)
input, equal to transformers to 1e-5, with INT8 gated by choice agreement."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from edgebert.bundle import Manifest, read_manifest
from edgebert.errors import DataError
from edgebert.qa.squad_file import read_squad
from edgebert.runtime import EdgeSession
from edgebert.runtime.hostcpu import detect_host
from edgebert.runtime.precision import choose_precision
from qa_bundles import TOY_LENGTH, qa_bundle, toy_qa
from runtime_fixtures import make_tiny_model_dir


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    root = tmp_path_factory.getbasetemp()
    return toy_qa(root), qa_bundle(root)


def _padded(rng, vocab: int, shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    """Seeded inputs of ``shape`` (last axis: tokens), every row right-padded to its own length."""
    ids = rng.integers(5, vocab, shape).astype(np.int64)
    lengths = rng.integers(shape[-1] // 3, shape[-1] + 1, shape[:-1])
    mask = (np.arange(shape[-1]) < lengths[..., None]).astype(np.int64)
    types = (np.arange(shape[-1]) >= shape[-1] // 2).astype(np.int64) * mask
    return {"input_ids": ids * mask, "attention_mask": mask, "token_type_ids": types}


def test_a_span_model_exports_start_and_end_logits_fused_and_validated(toy):
    data, bundle = toy
    manifest = read_manifest(bundle)
    assert manifest.task == "qa" and manifest.output_names == ["start_logits", "end_logits"]
    assert [o.shape for o in manifest.outputs] == [("batch", "sequence")] * 2
    assert all(i.shape == ("batch", "sequence") for i in manifest.inputs)
    fp32 = manifest.models["fp32"]
    assert fp32.get_extra("fused_ops") == {"EmbedLayerNormalization": 1, "Attention": 2, "SkipLayerNormalization": 4,
                                           "BiasGelu": 2, "MatMul": 7}                  # the other heads' counts
    validation = fp32.get_extra("validation")
    assert set(validation["per_output"]) == {"start_logits", "end_logits"} and validation["max_abs_diff"] < 1e-4
    assert [c["sequence"] for c in validation["cases"]] == [7, TOY_LENGTH, 7, TOY_LENGTH]
    assert validation["padded_positions_max_abs_diff"] >= 0          # padding exercised, reported apart

    from edgebert.model import load_model

    model = load_model(data / "teacher").eval()
    session = EdgeSession(bundle, precision="fp32")
    feeds = _padded(np.random.default_rng(0), manifest.config.vocab_size, (5, 23))      # never traced
    out = session.run(feeds)
    with torch.no_grad():
        ref = model(*(torch.from_numpy(feeds[k]) for k in ("input_ids", "attention_mask", "token_type_ids")))
    real = feeds["attention_mask"].astype(bool)
    for name in ("start_logits", "end_logits"):
        assert out[name].shape == (5, 23)
        assert np.abs(out[name] - getattr(ref, name).numpy())[real].max() < 1e-4


def test_qa_int8_is_gated_on_answers_to_questions_not_trained_on(toy):
    data, bundle = toy
    entry = read_manifest(bundle).models["int8"]
    accuracy = entry.get_extra("accuracy")
    assert accuracy["metric"] == "answer_overlap_f1" and accuracy["max_accuracy_loss"] == 0.02
    assert accuracy["held_out"] == {"source": str((data / "dev.json").resolve()), "questions": 40, "windows": 40}
    assert accuracy["fp32_f1"] >= 95.0 and accuracy["within_budget"] is True        # gold F1: information
    assert accuracy["loss"] == pytest.approx(1 - accuracy["mean"], abs=1e-6)
    assert accuracy["loss"] <= 0.02 and accuracy["n"] == 40
    calibration = entry.quantization["calibration"]
    assert calibration["calibration"]["questions"] == 60 and calibration["max_length"] == TOY_LENGTH
    assert read_manifest(bundle).get_extra("default_precision") is None
    assert EdgeSession(bundle, provider="cpu").precision == "int8"


def test_question_splits(tmp_path):
    from edgebert.files.textfiles import builtin_texts
    from edgebert.qa.squad_file import builtin_questions
    from edgebert.quantization.feeds import question_split
    from squad_helpers import write_toy_squad

    builtin = builtin_questions()
    assert len(builtin) == 439 and all(e.has_answer and e.context[e.answers[0].start:].startswith(e.answers[0].text)
                                      for e in builtin)
    # about the held-out paragraphs, one question of each first
    assert {e.context for e in builtin} <= set(builtin_texts("held-out")) and len({e.id for e in builtin}) == 439
    assert len({e.context for e in builtin[:176]}) == 176 == len({e.context for e in builtin})
    split = question_split(None, 10, 200)
    assert split.held_out == builtin[:200] and len(split.calibration) == 10 and split.sources["held_out"] == "built-in questions"
    assert question_split(None, 10, None).held_out == builtin        # the default: every built-in question gates
    assert split.calibration[0].question and split.calibration[0].context      # pairs of calibration lines
    squad = write_toy_squad(tmp_path / "calib.json", 60, seed=3)
    split = question_split(squad, 20, 200)          # the rest of a training file never gates: the built-in ones
    assert len(split.calibration) == 20 and split.held_out == builtin[:200]
    # --gate-data: questions the model did not train on gate; --calib's first calib_size all calibrate
    unseen = write_toy_squad(tmp_path / "unseen.json", 50, seed=4, unanswerable=0.3)
    split = question_split(squad, 20, 30, unseen)
    assert [e.id for e in split.calibration] == [e.id for e in question_split(squad, 20, 30).calibration]
    answerable = [e for e in read_squad(unseen) if e.has_answer]
    assert len(answerable) > 30 and split.held_out == answerable[:30]
    assert split.sources == {"calibration": str(squad.resolve()), "held_out": str(unseen.resolve())}
    assert "answerable questions of unseen.json that are not in the calibration file gate" in split.note
    none = tmp_path / "none.json"
    none.write_text(json.dumps({"version": "v2.0", "data": [{"title": "t", "paragraphs": [{"context": "c", "qas": [
        {"id": "x", "question": "q?", "answers": [], "is_impossible": True}]}]}]}))
    with pytest.raises(DataError, match=r"none\.json has no answerable questions$"):
        question_split(squad, 20, 30, none)
    from edgebert.quantization.config import Int8Config
    assert Int8Config(gate_data=str(unseen)).gate_data == unseen
    for bad in (tmp_path / "missing.json", tmp_path / "calib.txt"):
        bad.parent.mkdir(exist_ok=True)
        if bad.suffix == ".txt":
            bad.write_text("a line\n")
        with pytest.raises(DataError, match="is not a SQuAD JSON file that exists"):
            Int8Config(gate_data=bad)


def test_a_training_files_questions_never_gate(tmp_path):
    """--calib train.json --gate-data train.json gated on train.json's questions after --calib-size (issue
    49): the --calib file itself is refused, a copy of it leaves nothing to gate, and a gate file holding
    some of its questions gates on the others and says how many it left out."""
    from edgebert.errors import ConfigError
    from edgebert.quantization.config import Int8Config
    from edgebert.quantization.feeds import question_split
    from squad_helpers import toy_squad, write_toy_squad

    train = write_toy_squad(tmp_path / "train.json", 60, seed=3)
    (tmp_path / "sub").mkdir()
    for same in (train, tmp_path / "sub" / ".." / "train.json"):
        with pytest.raises(ConfigError, match=r"--gate-data .*train\.json is the --calib file: its questions are "
                                              r"training questions, which never gate$") as refused:
            question_split(train, 20, 500, gate_data=same)
        assert "pass a SQuAD file of questions the model did not train on" in refused.value.one_line()
        with pytest.raises(ConfigError, match="is the --calib file"):      # refused before the export runs
            Int8Config(calib=train, gate_data=same)
    copy = tmp_path / "copy.json"
    copy.write_bytes(train.read_bytes())
    with pytest.raises(DataError, match=r"copy\.json has no answerable questions that are not in the calibration "
                                        r"file .*train\.json"):
        question_split(train, 20, 500, gate_data=copy)

    mixed = toy_squad(30, seed=4)
    trained = read_squad(train)
    mixed["data"][0]["paragraphs"] += [{"context": e.context, "qas": [{"id": f"t{i}", "question": e.question,
                                        "answers": [{"text": e.answers[0].text, "answer_start": e.answers[0].start}]}]}
                                       for i, e in enumerate(trained[40:50])]       # past --calib-size: trained on
    (tmp_path / "mixed.json").write_text(json.dumps(mixed), encoding="utf-8")
    split = question_split(train, 20, 500, gate_data=tmp_path / "mixed.json")
    keys = {(e.question, e.context) for e in trained}
    assert len(split.held_out) == 30 and not keys & {(e.question, e.context) for e in split.held_out}
    assert split.left_out == 10 and "(10 of its questions are in train.json and never gate)" in split.note


def test_a_qa_gate_that_misses_keeps_the_graph_flagged_and_fp32_the_default(toy):
    """The search keeps at most ``max_excluded`` nodes float; a miss beyond that is not an error for a span
    head: the entry says within_budget false and the bundle's default becomes fp32."""
    from edgebert.exporters.int8 import default_precision
    from edgebert.quantization.accuracy import quantize_with_guard
    from edgebert.quantization.span_gate import SpanFidelity

    class Quantizer:
        def __init__(self):
            self.excluded = ()

        def candidates(self):
            return [f"n{i}" for i in range(8)]

        def quantize(self, out_path, exclude=(), only=None):
            self.excluded = tuple(exclude) if only is None else tuple(c for c in self.candidates() if c != only)
            return out_path

    quantizer = Quantizer()

    class Probe:
        metric = "answer_overlap_f1"

        def measure(self, path, max_sentences=None):       # each node costs 0.004 of answer overlap
            lost = 0.004 * (8 - len(quantizer.excluded))
            return SpanFidelity(1.0 - lost, 64, lost)

    guard = quantize_with_guard(quantizer, "unused.onnx", Probe(), 0.005, max_excluded=2, allow_miss=True)
    assert guard.within_budget is False and len(guard.excluded) == 2 and guard.accuracy.loss == pytest.approx(0.024)
    fit = quantize_with_guard(quantizer, "unused.onnx", Probe(), 0.005, allow_miss=True)
    assert fit.within_budget is True and len(fit.excluded) == 7                    # 0.004 left: fits
    assert fit.as_dict(0.005)["within_budget"] is True and "within_budget" not in Probe().measure("x").as_dict()

    _, bundle = toy
    value = read_manifest(bundle).to_dict()
    value["models"]["int8"]["accuracy"].update(guard.as_dict(0.005))
    held = default_precision(value["models"])
    assert held["default_precision"]["precision"] == "fp32"
    assert "int8 loses 0.024 (> 0.005, answer_overlap_f1)" in held["default_precision"]["reason"]
    manifest = Manifest.from_dict({**value, **held})
    host = dataclasses.replace(detect_host(), arch="x86_64", kind="x86-vnni", u8s8="exact")
    chosen = choose_precision(None, manifest, host)
    assert chosen.precision == "fp32" and chosen.reason.startswith("default: the INT8 accuracy gate missed its budget")
    assert choose_precision("int8", manifest, host).precision == "int8"          # still loadable by name
    assert default_precision(read_manifest(bundle).to_dict()["models"]) == {}


def test_a_target_over_its_budget_is_passed_over_while_another_passed(toy):
    """A bundle whose x86-vnni graph missed its budget and whose portable graph passed runs INT8 with the
    portable graph on a VNNI CPU (not fp32, not the graph over budget); only when every CPU INT8 graph
    missed is fp32 the default."""
    import copy

    from edgebert.exporters.int8 import default_precision
    from edgebert.runtime.int8_choice import choose_int8

    _, bundle = toy
    value = read_manifest(bundle).to_dict()
    vnni = copy.deepcopy(value["models"]["int8"])
    vnni.update(target="x86-vnni", requires={**(vnni.get("requires") or {}), "u8s8_exact": True})
    vnni["accuracy"].update(within_budget=False, loss=0.03, max_accuracy_loss=0.005, metric="answer_overlap_f1")
    value["models"]["int8"]["accuracy"]["within_budget"] = True
    value["models"]["int8-x86-vnni"] = vnni
    assert default_precision(value["models"]) == {}
    manifest = Manifest.from_dict(value)
    host = dataclasses.replace(detect_host(), arch="x86_64", kind="x86-vnni", u8s8="exact")
    chosen = choose_int8(manifest, host)
    assert chosen.key == "int8" and "passed over: x86-vnni (over its accuracy budget" in chosen.reason
    assert choose_precision(None, manifest, host).precision == "int8"
    assert choose_int8(manifest, host, "x86-vnni").key == "int8-x86-vnni"          # still loadable by target
    value["models"]["int8"]["accuracy"]["within_budget"] = False
    assert default_precision(value["models"])["default_precision"]["precision"] == "fp32"
    assert choose_int8(Manifest.from_dict(value), host).key == "int8-x86-vnni"      # none passed: as before


# --------------------------------------------------------------------------- multiple choice
@pytest.mark.hf
def test_multiple_choice_exports_choices_equal_to_transformers(tmp_path):
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    from edgebert.exporters import ExportConfig, export_bundle

    model_dir = make_tiny_model_dir(tmp_path / "model", "BertForMultipleChoice", seed=6)
    result = export_bundle(ExportConfig(model_dir=model_dir, out_dir=tmp_path / "bundle", int8=True, calib_size=64,
                                        gate_size=64, validation_batch_sizes=(1, 3), validation_seq_lens=(7, 32)))
    manifest = result.manifest
    assert manifest.task == "multiple-choice" and manifest.output_names == ["logits"]
    assert manifest.outputs[0].shape == ("batch", "choices")
    assert all(i.shape == ("batch", "choices", "sequence") for i in manifest.inputs)
    fp32 = manifest.models["fp32"]
    assert fp32.get_extra("fused_ops")["Attention"] == 2 and fp32.get_extra("fused_ops")["EmbedLayerNormalization"] == 1
    assert [list(np.shape(c["lengths"])) for c in fp32.get_extra("validation")["cases"]] == [[1, 2], [1, 4], [3, 2], [3, 4]]

    hf = transformers.BertForMultipleChoice.from_pretrained(model_dir).eval()
    from edgebert.quantization.accuracy import cpu_session

    session = cpu_session(tmp_path / "bundle" / fp32.file)
    rng = np.random.default_rng(1)
    for shape in ((2, 3, 19), (1, 5, 40), (4, 2, 9)):                          # choices and lengths never traced
        feeds = _padded(rng, manifest.config.vocab_size, shape)
        ours = session.run(["logits"], feeds)[0]
        with torch.no_grad():
            theirs = hf(**{k: torch.from_numpy(v) for k, v in feeds.items()}).logits.numpy()
        assert ours.shape == shape[:2] and np.abs(ours - theirs).max() <= 1e-5
        assert float(np.std(theirs)) > 1e-4                                    # distinct scores per choice
    accuracy = manifest.models["int8"].get_extra("accuracy")
    assert accuracy["metric"] == "label_agreement" and accuracy["n"] == 16        # 64 texts, 4 choices each
    assert accuracy["loss"] <= accuracy["max_accuracy_loss"] == 0.01
    assert manifest.models["int8"].get_extra("batch_invariance")["max_1_minus_cos"] < 1e-3


def test_gate_data_is_for_question_answering_exports_only(tmp_path):
    from edgebert.errors import ConfigError
    from edgebert.exporters import ExportConfig, export_bundle
    from squad_helpers import write_toy_squad

    model = make_tiny_model_dir(tmp_path / "m")
    gate = write_toy_squad(tmp_path / "gate.json", 40, seed=5)
    with pytest.raises(ConfigError, match="--gate-data is for question-answering exports"):
        export_bundle(ExportConfig(model_dir=model, out_dir=tmp_path / "b", int8=True, gate_data=gate))
    assert not (tmp_path / "b").exists()                      # nothing half-written
