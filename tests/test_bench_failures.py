"""What ``edgebert bench`` refuses or reports as a failure (issue #20, defects 7 and 9): outputs that are not
numbers are a FAILED path, never a difference of 0; a ``--data`` file that ``edgebert evaluate`` rejects is
rejected by bench with the same one-line error, before anything is written."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import numpy as np
import pytest

from distill_helpers import assert_one_line_error, write_toy_ner
from edgebert.bench import BenchConfig, run_bench
from edgebert.bench.paths import Run
from edgebert.bench.report import _accuracy_cells
from edgebert.bench.rows import Accuracy
from edgebert.cli import main
from edgebert.runtime.fidelity import FidelityTracker
from runtime_fixtures import make_tiny_model_dir, tiny_bundle

NER_LABELS = {0: "O", 1: "B-LOC", 2: "I-LOC", 3: "B-PER", 4: "I-PER"}


def _nan_scale_bundle(src, dst):
    """A copy of bundle ``src`` whose INT8 graph has the weight scales of one MatMulIntegerToFloat set to NaN
    (its hash rewritten in the manifest, so the bundle still verifies)."""
    import onnx
    from onnx import numpy_helper

    from edgebert.bundle import read_manifest, sha256_file

    shutil.copytree(src, dst)
    manifest = read_manifest(dst)
    path = dst / manifest.models["int8"].file
    model = onnx.load(path)
    used = {name for node in model.graph.node if node.op_type == "MatMulIntegerToFloat" for name in node.input}
    # per-channel weight scales are stored float16, read through a Cast (quantization.storage)
    used |= {n.input[0] for n in model.graph.node if n.op_type == "Cast" and n.output[0] in used}
    scale = next(i for i in model.graph.initializer if i.name in used and "_scale" in i.name and i.dims)
    scale.CopyFrom(numpy_helper.from_array(np.full_like(numpy_helper.to_array(scale), np.nan), scale.name))
    onnx.save(model, path)
    fixed = manifest.with_files({**manifest.files, manifest.models["int8"].file: sha256_file(path)})
    (dst / "manifest.json").write_text(fixed.to_json(), encoding="utf-8")
    return dst


def test_nan_int8_scale_is_a_failed_path_never_a_zero_difference(tmp_path_factory, tmp_path):
    model_dir, bundle_dir = tiny_bundle(tmp_path_factory.getbasetemp(), "embed")
    broken = _nan_scale_bundle(bundle_dir, tmp_path / "broken")
    out = tmp_path / "report"
    data = run_bench(BenchConfig(broken, providers=("cpu",), precisions=("fp32", "int8"), batches=(1,), seqs=(8,),
                                 reference=model_dir, threads=1, warmup=0, iters=3, calibration_size=0,
                                 eval_texts=4, report_dir=out, progress=False))
    paths = {p["path"]: p for p in data["paths"]}
    int8 = paths["onnx cpu int8"]
    assert int8["available"] and "NaN" in int8["failed"], int8
    assert int8["accuracy"] is None or int8["accuracy"]["max_abs_diff"] is None
    assert {"provider": "cpu", "precision": "int8", "reason": int8["failed"]} in data["unavailable"]
    assert not [r for r in data["results"] if r["path"] == "onnx cpu int8"]          # no figures for it
    assert paths["onnx cpu fp32"]["accuracy"]["cosine_min"] > 0.9999                 # the fp32 graph is fine
    md = (out / "report.md").read_text()
    row = next(line for line in md.splitlines() if line.startswith("| onnx cpu int8 |"))
    assert "FAIL" in row and "0.00e+00" not in row, row
    assert "| cpu | int8: FAILED |" in md
    lines = [json.loads(line) for line in (out / "bench.jsonl").read_text().splitlines()]
    assert lines and all(r["path"] != "onnx cpu int8" for r in lines)


@pytest.mark.parametrize("task", ["embed", "cls"])
def test_non_finite_outputs_are_counted_and_never_shown_as_zero(task):
    """The tracker bench and check share: NaN outputs make NaN differences (``max(0.0, nan)`` is 0.0, the
    old defect) and a count of the texts they hit; the bench row then shows FAIL, no figure."""
    rng = np.random.default_rng(0)
    mask = np.ones((3, 5), np.int64)
    if task == "embed":
        ref = {"last_hidden_state": rng.standard_normal((3, 5, 4)), "pooler_output": rng.standard_normal((3, 4))}
    else:
        ref = {"logits": rng.standard_normal((3, 2))}
    got = {k: v.copy() for k, v in ref.items()}
    next(iter(got.values()))[1] = np.nan                         # the second text's outputs are NaN
    tracker = FidelityTracker(task)
    tracker.add_runs(ref, got, mask)
    fidelity = tracker.result()
    assert fidelity.non_finite == 1 and np.isnan(fidelity.max_abs_diff)
    acc = Accuracy.from_fidelity(fidelity).to_dict()
    assert acc["non_finite"] == 1 and acc["max_abs_diff"] is None and acc["inputs"] == 3
    assert _accuracy_cells(Accuracy.from_dict(acc)) == ("FAIL: non-finite outputs for 1 texts", "non-finite")
    # finite outputs: no count in the JSON, real differences
    clean = FidelityTracker(task)
    clean.add_runs(ref, {k: v + 1e-3 for k, v in ref.items()}, mask)
    figures = Accuracy.from_fidelity(clean.result()).to_dict()
    assert "non_finite" not in figures and figures["max_abs_diff"] == pytest.approx(1e-3)


def test_a_path_with_nan_outputs_fails_its_output_check():
    """A PyTorch path (no EdgeSession to refuse NaN) whose outputs are NaN is FAILED by the bench itself."""
    feeds = [{"input_ids": np.ones((2, 4), np.int64), "attention_mask": np.ones((2, 4), np.int64)}]
    ref = [{"logits": np.zeros((2, 3))}]
    run = SimpleNamespace(task="cls", eval_feeds=feeds, ref_outputs=ref)
    accuracy, failed = Run.outputs_check(run, lambda f: {"logits": np.full((2, 3), np.nan)})
    assert failed == "non-finite outputs (NaN or infinity) for 2 of 2 evaluation texts"
    assert accuracy.non_finite == 2 and accuracy.agreement is None
    run.ref_outputs = None                                     # no reference: still checked
    assert Run.outputs_check(run, lambda f: {"logits": np.full((2, 3), np.inf)})[1].startswith("non-finite")
    assert Run.outputs_check(run, lambda f: {"logits": np.zeros((2, 3))}) == (None, None)


# --------------------------------------------------------------------------- --data: one reader, one validation
@pytest.fixture(scope="module")
def ner_bundle(tmp_path_factory):
    from edgebert.exporters import ExportConfig, export_bundle

    root = tmp_path_factory.mktemp("bench_ner")
    model_dir = make_tiny_model_dir(root / "model", "BertForTokenClassification", id2label=NER_LABELS)
    export_bundle(ExportConfig(model_dir=model_dir, out_dir=root / "bundle", validation_batch_sizes=(1,),
                               validation_seq_lens=(7,)))
    return root / "bundle"


def _bad_conll(path, bad_line: str, after: int):
    """A valid toy CoNLL file with ``bad_line`` as its ``after``-th word line (returns the file and its line
    number)."""
    write_toy_ner(path, 12, seed=3)
    lines = path.read_text(encoding="utf-8").splitlines()
    at = [i for i, line in enumerate(lines) if line.strip()][after]
    lines.insert(at, bad_line)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, at + 1


@pytest.mark.parametrize("bad_line,message", [("Oslo B-", "has tag 'B-', which is not an IOB tag"),
                                              ("Paris B-MISC", "has tag 'B-MISC', expected one of")])
def test_bench_data_is_read_and_checked_as_evaluate_reads_it(ner_bundle, tmp_path, capsys, bad_line, message):
    data, line = _bad_conll(tmp_path / "dev.txt", bad_line, after=30)     # past the 20 lines is_conll sniffs
    code = main(["evaluate", str(ner_bundle), "--task", "ner", "--data", str(data)])
    evaluate_err = capsys.readouterr().err
    assert_one_line_error(code, evaluate_err, f"{data}:{line} {message}")
    report = tmp_path / "report"
    code = main(["bench", str(ner_bundle), "--data", str(data), "--providers", "cpu", "--precisions", "fp32",
                 "--batch", "1", "--seq", "8", "--iters", "3", "--report", str(report)])
    bench_err = capsys.readouterr().err
    assert code == 2 and bench_err == evaluate_err                      # the same one line, exit 2
    assert not report.exists()                                          # nothing written


def test_bench_data_that_is_not_conll_at_all_says_so_with_the_readers_reason(ner_bundle, tmp_path):
    from edgebert.errors import ConfigError

    data, line = _bad_conll(tmp_path / "dev.txt", "Oslo B-", after=2)   # inside the sniffed lines
    with pytest.raises(ConfigError, match=rf"is not a CoNLL file .*: {data}:{line} has tag 'B-', which is not"):
        run_bench(BenchConfig(ner_bundle, data=data, providers=("cpu",), batches=(1,), seqs=(8,), progress=False,
                              report_dir=tmp_path / "report"))
    assert not (tmp_path / "report").exists()
