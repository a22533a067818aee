"""A question-answering bundle exported as the README says (``--int8 --calib train.json``): its INT8 gate and
``edgebert check`` measure one metric against one budget, on questions the model did not train on, and a
check that fails gives advice that fits the graph it checked."""

from __future__ import annotations

import pytest

from edgebert.bundle import read_manifest
from edgebert.errors import ConfigError
from edgebert.qa.squad_file import builtin_questions, read_squad
from edgebert.runtime import EdgeSession
from edgebert.runtime.check import check_bundle, drift_advice
from edgebert.runtime.fidelity import Fidelity
from qa_bundles import toy_qa

GATE = 20          # held-out questions the gate and the check measure on


@pytest.fixture(scope="module")
def readme_bundle(tmp_path_factory):
    """The toy teacher exported with ``--int8 --calib train.json`` and nothing else about the gate (but its
    size: the first 20 held-out questions, to keep the test short)."""
    from edgebert.exporters import ExportConfig, export_bundle

    root = tmp_path_factory.getbasetemp()
    data = toy_qa(root)
    bundle = root / "qa_readme_bundle"
    if not (bundle / "manifest.json").is_file():
        export_bundle(ExportConfig(model_dir=data / "teacher", out_dir=bundle, int8=True, calib=data / "train.json",
                                   calib_size=60, gate_size=GATE, validation_batch_sizes=(1,),
                                   validation_seq_lens=(None,)))
    return data, bundle


def test_gate_and_check_measure_one_metric_with_one_budget_on_questions_not_trained_on(readme_bundle):
    from edgebert.bundle.task_registry import bundle_task
    from edgebert.quantization.config import Int8Config

    data, bundle = readme_bundle
    manifest = read_manifest(bundle)
    gate = manifest.models["int8"].get_extra("accuracy")
    # the gate never measures on the training file's questions (the model learnt their answers)
    assert gate["held_out"]["source"] == "built-in questions" and gate["n"] == GATE
    assert Int8Config().budget("qa") == bundle_task("qa").budget == 0.02
    assert gate["metric"] == "answer_overlap_f1" and gate["max_accuracy_loss"] == 0.02
    assert gate["loss"] == pytest.approx(1 - gate["mean"], abs=1e-6)

    report = check_bundle(bundle, max_texts=GATE)   # the built-in held-out questions, as the gate
    assert report.texts == {"source": "built-in held-out", "n": GATE}
    assert report.fidelity["metric"] == gate["metric"] and report.budget == gate["max_accuracy_loss"]
    assert report.fidelity["n"] == gate["n"]
    # the same graph on the same questions: the same answers, up to batch-padding rounding (one question)
    assert abs(report.fidelity["mean"] - gate["mean"]) <= 1 / GATE + 1e-9
    within = gate["within_budget"]
    assert report.passed == within or abs(gate["loss"] - 0.02) <= 1 / GATE
    # a gate that missed leaves fp32 the default; one that fits, INT8
    assert EdgeSession(bundle, provider="cpu").precision == ("int8" if within else "fp32")


def test_calibration_and_gate_never_share_a_question(readme_bundle):
    from edgebert.quantization.feeds import question_split

    data, _ = readme_bundle
    train = data / "train.json"
    split = question_split(train, 60, 200)
    assert [e.id for e in split.calibration] == [e.id for e in read_squad(train)[:60]]
    assert split.held_out == builtin_questions()[:200] and split.sources["held_out"] == "built-in questions"
    # the same file as --gate-data: its questions past --calib-size are training questions too, never gating
    with pytest.raises(ConfigError, match="is the --calib file: its questions are training questions"):
        question_split(train, 60, 500, gate_data=train)


def test_a_failed_check_of_the_portable_graph_gives_advice_that_fits(readme_bundle, monkeypatch):
    """The check of the README's bundle failing (forced: answers drifting to 0.958): the portable graph is
    not told to re-export with --target portable."""
    import edgebert.runtime.check as check

    _, bundle = readme_bundle
    drifted = Fidelity("answer_overlap_f1", 0.958, None, GATE, 0.042, 0.1)
    monkeypatch.setattr(check, "_measure_answers", lambda *a: (drifted, {"fp32_texts_per_s": 1.0,
                        "int8_texts_per_s": 1.0, "int8_speedup": 1.0, "threads": 1, "note": ""}))
    report = check_bundle(bundle, max_texts=GATE)
    assert not report.passed and report.chosen["target"] == "portable"
    assert "answer_overlap_f1 0.95800, loss 0.04200 > budget 0.02" in report.reason
    assert "--target portable" not in report.reason
    assert "fp32" in report.reason and "--calib" in report.reason and "--max-accuracy-loss" in report.reason
    # another target still may be replaced by the portable one; a bundle already defaulting to fp32 says so
    assert drift_advice("x86-vnni", {}, None).endswith("or re-export with --target portable")
    held = drift_advice("portable", {"within_budget": False}, {"precision": "fp32"})
    assert held.startswith("the bundle already loads fp32 by default") and "--target portable" not in held
