"""One measurement for the export's gate and ``edgebert check``: given no ``--data``, check measures a graph on the
texts its gate measured it on (the first N built-in held-out ones), batched alike, so a graph the export accepted
passes check on the same machine with the gate's own figure, even at the edge of its budget; the small graph
too, in the full bundle and packed alone (``pack --target int4``). Tiny seeded bundle (INT8 + small graph)."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgebert.bundle import read_manifest
from edgebert.runtime.check import check_bundle
from scaleout_fixtures import small_graph_bundle

SAME = 1e-6          # the same graph and texts on the same CPU: the same loss, up to float summation order


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    return small_graph_bundle(tmp_path_factory.getbasetemp())


def _gate(bundle: Path, key: str) -> dict:
    return read_manifest(bundle).models[key].get_extra("accuracy")


def test_check_measures_the_int8_graph_on_the_gates_texts_with_the_gates_figure(bundle):
    report = check_bundle(bundle, threads=1)
    gate = _gate(bundle, report.chosen["model"])
    assert report.passed and report.texts["n"] == gate["held_out"]["texts"] == 200
    assert report.texts["as"] == "the export gate's"
    assert abs(report.fidelity["loss"] - gate["loss"]) <= SAME, (report.fidelity, gate["loss"])
    # at the edge of the budget: a budget a hair above the gate's loss passes, a hair below fails
    assert check_bundle(bundle, threads=1, max_accuracy_loss=gate["loss"] + 2 * SAME).passed
    assert not check_bundle(bundle, threads=1, max_accuracy_loss=max(gate["loss"] - 1e-4, 0.0)).passed


def test_the_small_graph_packed_alone_passes_check_with_its_gates_figure(bundle, tmp_path):
    from edgebert.runtime.pack import pack_bundle

    gate = _gate(bundle, "int4")
    full = check_bundle(bundle, threads=1)
    assert abs(full.small["loss"] - gate["loss"]) <= SAME and full.small["n"] == gate["held_out"]["texts"]
    pack_bundle(bundle, "int4", tmp_path / "small")
    packed = check_bundle(tmp_path / "small", threads=1)
    assert packed.passed, packed.reason
    assert packed.texts["n"] == gate["held_out"]["texts"]
    assert abs(packed.fidelity["loss"] - gate["loss"]) <= SAME, (packed.fidelity, gate["loss"])
    assert check_bundle(tmp_path / "small", threads=1, max_accuracy_loss=gate["loss"] + 2 * SAME).passed


def test_data_or_a_file_gate_keeps_the_checks_own_texts(bundle, tmp_path):
    data = tmp_path / "texts.txt"
    data.write_text("\n".join(f"a short text number {i}" for i in range(30)) + "\n", encoding="utf-8")
    report = check_bundle(bundle, data, threads=1)
    assert report.texts["n"] == 30 and "as" not in report.texts
