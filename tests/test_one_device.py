"""The bundle that fits the device: one file per distinct graph, one-device bundles (``edgebert pack``)
checked without the fp32 graph, sessions that hash and load only what they use, and the ``.ort`` format."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from edgebert.errors import BundleError
from edgebert.exporters import ExportConfig, export_bundle
from edgebert.runtime import EdgeSession
from edgebert.runtime.check import check_bundle
from edgebert.runtime.hostcpu import detect_host
from runtime_fixtures import make_tiny_model_dir as make_model_dir

TARGETS = ("portable", "x86-vnni", "arm64")
HOST = detect_host()       # CPU kind: on an x86 CPU without VNNI, 8-bit .ort graphs are refused (int8_choice rule 3)


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("one_device")


@pytest.fixture(scope="module")
def fleet(work) -> Path:
    """A tiny embed bundle exported for three targets (x86-vnni and arm64 quantize to the same bytes)."""
    model_dir = make_model_dir(work / "model", "BertModel", seed=21, initializer_range=0.3)
    return export_bundle(ExportConfig(model_dir=model_dir, out_dir=work / "fleet", int8=True, int8_targets=TARGETS,
                                      max_accuracy_loss=0.5, validation_batch_sizes=(1,),
                                      validation_seq_lens=(7,))).bundle_dir


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _copy(bundle: Path, to: Path) -> Path:
    shutil.copytree(bundle, to)
    return to


# --------------------------------------------------------------------------- one file per distinct graph
def _files(bundle: Path) -> dict[str, str]:
    return {k: m["file"] for k, m in json.loads((bundle / "manifest.json").read_text())["models"].items()}


def test_equal_graphs_share_one_file_and_every_target_opens(fleet):
    manifest = json.loads((fleet / "manifest.json").read_text())
    files = _files(fleet)
    graphs = sorted(p for p in fleet.rglob("*.onnx"))
    digests = [_sha(p) for p in graphs]
    assert len(set(digests)) == len(digests) == 3          # fp32, portable, and one for x86-vnni + arm64
    assert files["int8-arm64"] == files["int8-x86-vnni"] != files["int8"]
    assert manifest["models"]["int8-arm64"]["same_graph_as"] == ["int8-x86-vnni"]
    for target in TARGETS:
        session = EdgeSession(fleet, "cpu", int8_target=target)
        assert session.int8_choice.target == target
        assert session.embed(["a charming film"]).shape == (1, 64)
    assert check_bundle(fleet, int8_target="arm64", max_texts=24).passed


def test_an_archive_stores_no_byte_twice(fleet, tmp_path):
    import tarfile

    from edgebert.runtime.archive import write_archive

    out = tmp_path / "fleet.tar.gz"
    write_archive(fleet, out)
    with tarfile.open(out) as tar:
        digests = [hashlib.sha256(tar.extractfile(m).read()).hexdigest() for m in tar.getmembers() if m.isfile()]
    assert len(digests) == len(set(digests))
    graphs = {m["file"] for m in json.loads((fleet / "manifest.json").read_text())["models"].values()}
    assert len(graphs) == 3 and len(digests) >= 3


def test_an_old_bundle_with_one_file_per_target_still_opens(fleet, tmp_path):
    old = _copy(fleet, tmp_path / "old")
    manifest = json.loads((old / "manifest.json").read_text())
    shared = manifest["models"]["int8-x86-vnni"]["file"]
    own = str(Path(shared).with_name("model.int8-arm64-own.onnx"))
    shutil.copyfile(old / shared, old / own)
    manifest["models"]["int8-arm64"]["file"] = own
    for key in ("int8-arm64", "int8-x86-vnni"):
        manifest["models"][key].pop("same_graph_as")
    manifest["files"][own] = _sha(old / own)
    (old / "manifest.json").write_text(json.dumps(manifest))
    session = EdgeSession(old, "cpu", int8_target="arm64")
    assert session.model_file == old / own
    assert check_bundle(old, int8_target="arm64", max_texts=24).passed


# --------------------------------------------------------------------------- what a session reads
def test_a_session_hashes_only_the_files_it_loads(fleet, tmp_path, monkeypatch):
    """A corrupted graph the session does not load costs it nothing; the session that loads it, and
    `edgebert check`, refuse it."""
    import edgebert.files.stamps as reader  # what a session hashes with (a stamp stands for nothing yet)

    bundle = _copy(fleet, tmp_path / "b")
    files = _files(bundle)
    fp32 = bundle / files["fp32"]
    data = bytearray(fp32.read_bytes())
    data[-10] ^= 0xFF                                      # inside the last initializer's bytes
    fp32.write_bytes(bytes(data))
    hashed = []
    real = reader.sha256_file
    monkeypatch.setattr(reader, "sha256_file", lambda p, *a: hashed.append(Path(p).relative_to(bundle).as_posix())
                        or real(p, *a))
    session = EdgeSession(bundle, "cpu", "int8", int8_target="portable")
    assert session.embed(["a charming film"]).shape == (1, 64)
    manifest = json.loads((bundle / "manifest.json").read_text())
    # the files whose contents decide the pooling, where the manifest states none (bundle_pooling: modules.json ...)
    pooling = [] if manifest.get("pooling") else [n for n in ("modules.json", "1_Pooling/config.json",
                                                              "sentence_bert_config.json") if n in manifest["files"]]
    assert sorted(hashed) == sorted([manifest["tokenizer"]["file"], files["int8"], "manifest.json", *pooling])
    assert files["fp32"] not in hashed                                   # the corrupted graph it does not load
    with pytest.raises(BundleError, match="does not match its manifest hash"):
        EdgeSession(bundle, "cpu", "fp32")
    report = check_bundle(bundle, max_texts=8)
    assert not report.passed and "bundle files do not match the manifest" in report.reason
    assert files["fp32"] in report.reason


def test_the_runtime_imports_no_heavy_module(fleet):
    """`import edgebert.runtime` + a session + a result, in a fresh interpreter: no torch, no onnx python
    package, no transformers; nor the stdlib modules only archives, OpenVINO graphs and version reports
    need (each costs every start memory and time)."""
    import subprocess
    import sys

    code = ("import sys\nfrom edgebert.runtime import EdgeSession\n"
            f"EdgeSession({str(fleet)!r}).embed(['a charming film'])\n"
            "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'onnx', 'transformers', "
            "'sentence_transformers', 'optimum', 'openvino', 'scipy', 'pandas'})\nprint('heavy:', heavy)\n"
            "lazy = sorted(set(sys.modules) & {'tarfile', 'zipfile', 'importlib.metadata', 'xml.etree.ElementTree'})\n"
            "print('lazy:', lazy)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-2:] == ["heavy: []", "lazy: []"]


# --------------------------------------------------------------------------- one-device bundles
def test_a_packed_bundle_holds_one_graph_and_checks_without_fp32(fleet, tmp_path, capsys):
    import tarfile

    from distill_helpers import run_cli

    out = tmp_path / "arm64.tar.gz"
    code, stdout, err = run_cli(capsys, "pack", fleet, "--target", "arm64", "--out", out)
    assert code == 0, err
    files = _files(fleet)
    with tarfile.open(out) as tar:
        names = {Path(m.name).relative_to("arm64").as_posix() for m in tar.getmembers() if m.isfile()}
    assert files["int8-arm64"] in names and "fp32_reference.npz" in names
    assert not names & {files["fp32"], files["int8"]}         # the fp32 graph and the portable one stay behind
    session = EdgeSession(out)
    manifest = json.loads((session.bundle_dir / "manifest.json").read_text())
    assert list(manifest["models"]) == ["int8-arm64"] and manifest["packed"]["target"] == "arm64"
    assert all(set(how) <= {"int8-arm64"} for how in manifest.get("loaders", {}).values() if isinstance(how, dict))
    left = {e["file"]: e for e in manifest["packed"]["left_out"]}
    assert set(left) == {files["fp32"], files["int8"]} and "fp32 graph" in left[files["fp32"]]["reason"]
    assert left[files["fp32"]]["bytes"] == (fleet / files["fp32"]).stat().st_size
    packed = check_bundle(session.bundle_dir, max_texts=40)
    full = check_bundle(fleet, int8_target="arm64", max_texts=40)
    assert packed.passed, packed.reason
    assert packed.fidelity["n"] == full.fidelity["n"] == 40
    assert abs(packed.fidelity["mean"] - full.fidelity["mean"]) < 1e-5    # same metric, same texts, same batches
    assert abs(packed.fidelity["min"] - full.fidelity["min"]) < 1e-5
    code, stdout, _ = run_cli(capsys, "check", out, "--max-texts", "40")
    assert code == 0 and stdout.strip().splitlines()[-1].startswith("PASS:")


def test_a_tampered_reference_fails_check(fleet, tmp_path):
    import numpy as np

    from edgebert.runtime.pack import pack_bundle

    folder = tmp_path / "portable"
    pack_bundle(fleet, "portable", folder)
    assert check_bundle(folder, max_texts=16).passed
    reference = folder / "fp32_reference.npz"
    with np.load(reference) as data:
        emb = data["emb"]
    np.savez_compressed(reference, emb=-emb)                          # every vector turned around
    report = check_bundle(folder, max_texts=16)
    assert not report.passed and "fp32_reference.npz does not match its manifest hash" in report.reason
    manifest = json.loads((folder / "manifest.json").read_text())     # and with its hash made to match
    manifest["files"]["fp32_reference.npz"] = _sha(reference)
    manifest.get("sizes", {})["fp32_reference.npz"] = reference.stat().st_size
    (folder / "manifest.json").write_text(json.dumps(manifest))
    report = check_bundle(folder, max_texts=16)
    assert not report.passed and "drifts from fp32" in report.reason and report.fidelity["mean"] < -0.9


def test_packing_an_unknown_target_names_the_targets(fleet, tmp_path, capsys):
    from distill_helpers import assert_one_line_error, run_cli

    code, _, err = run_cli(capsys, "pack", fleet, "--target", "x86", "--out", tmp_path / "x.tar.gz")
    assert_one_line_error(code, err, "no INT8 graph for target 'x86'", "its targets: portable, x86-vnni, arm64")
    assert not (tmp_path / "x.tar.gz").exists()
    mine = tmp_path / "notes.tar.gz"
    mine.write_text("mine")
    code, _, err = run_cli(capsys, "pack", fleet, "--target", "arm64", "--out", mine, "--overwrite")
    assert_one_line_error(code, err, "was not written by `edgebert pack`")
    assert mine.read_text() == "mine"
    folder = tmp_path / "mine"
    (folder / "sub").mkdir(parents=True)
    (folder / "notes.txt").write_text("mine")
    code, _, err = run_cli(capsys, "pack", fleet, "--target", "arm64", "--out", folder, "--overwrite")
    assert_one_line_error(code, err, "not written by `edgebert pack`")
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt", "sub"]
    code, _, err = run_cli(capsys, "pack", fleet, "--target", "arm64", "--out", fleet / "inside")
    assert_one_line_error(code, err, "is inside the bundle")


# --------------------------------------------------------------------------- the .ort format
TEXTS = ["a charming film", "too long and not funny", "the story of a man and a woman who loved the music " * 3]
ORT_ATOL = 1e-5            # same kernels, the same optimizations saved instead of applied at load


def test_export_ort_format_graphs_give_the_onnx_outputs(fleet, tmp_path):
    import numpy as np

    bundle = export_bundle(ExportConfig(model_dir=fleet.parent / "model", out_dir=tmp_path / "ort", int8=True,
                                        int8_targets=("portable", "x86-vnni"), max_accuracy_loss=0.5,
                                        ort_format=True, validation_batch_sizes=(1,),
                                        validation_seq_lens=(7,))).bundle_dir
    manifest = json.loads((bundle / "manifest.json").read_text())
    config = (bundle / manifest["ort_format"]["required_operators"]).read_text()
    assert "com.microsoft;1;" in config and "QAttention" in config and "/tmp" not in config
    assert "refused on x86 CPUs without VNNI" in manifest["models"]["int8-x86-vnni"]["ort"]["runs_on"]
    assert "runs_on" not in manifest["models"]["int8"]["ort"]           # 7-bit weights: exact on every CPU
    for key in ("fp32", "int8", "int8-x86-vnni"):
        ort_file = manifest["models"][key]["ort"]["file"]
        assert ort_file.endswith(".ort") and ort_file in manifest["files"] and (bundle / ort_file).is_file()
        precision, target = ("fp32", None) if key == "fp32" else ("int8", manifest["models"][key]["target"])
        onnx = EdgeSession(bundle, "cpu", precision, int8_target=target)
        if key == "int8-x86-vnni" and HOST.saturates:
            # CPU kind: 8-bit weights in a saved .ort graph cannot be converted at load (int8_choice rule 3)
            with pytest.raises(BundleError, match=r"\.ort form keeps 8-bit weights"):
                EdgeSession(bundle, "cpu", precision, int8_target=target, graph_format="ort")
            continue
        ort = EdgeSession(bundle, "cpu", precision, int8_target=target, graph_format="ort")
        assert ort.model_file.suffix == ".ort" and onnx.model_file.suffix == ".onnx"
        rows = onnx.tokenize(TEXTS)
        from edgebert.runtime import pad_batch

        feeds = pad_batch(rows, onnx.pad_id)
        a, b = onnx.run(feeds)["last_hidden_state"], ort.run(feeds)["last_hidden_state"]
        assert a.shape == b.shape == (3, feeds["input_ids"].shape[1], 64)
        assert np.abs(a - b).max() <= ORT_ATOL, (key, float(np.abs(a - b).max()))
        assert np.abs(onnx.embed(TEXTS) - ort.embed(TEXTS)).max() <= ORT_ATOL
    with pytest.raises(BundleError, match="has no .ort form"):
        EdgeSession(fleet, "cpu", "fp32", graph_format="ort")


def test_pack_ort_format_ships_the_ort_graph_alone_and_checks(fleet, tmp_path):
    import numpy as np

    from edgebert.runtime.pack import pack_bundle

    out = tmp_path / "arm64-mobile"
    result = pack_bundle(fleet, "arm64", out, ort_format=True)
    manifest = json.loads((out / "manifest.json").read_text())
    entry = manifest["models"]["int8-arm64"]
    assert entry["file"].endswith(".ort") and entry["onnx_file"] == _files(fleet)["int8-arm64"]
    assert not list(out.rglob("*.onnx")) and (out / "required_operators.config").is_file()
    assert entry["onnx_file"] in {e["file"] for e in result.left_out}
    if HOST.saturates:
        # CPU kind: the arm64 graph's 8-bit weights, saved in .ort form, would saturate this x86 CPU's kernel
        # (int8_choice rule 3): the session and check refuse it, saying what loads instead
        with pytest.raises(BundleError, match=r"\.ort form keeps 8-bit weights") as refused:
            EdgeSession(out)
        assert "--target portable --ort-format" in refused.value.one_line()
        checked = check_bundle(out, max_texts=24)
        assert not checked.passed and ".ort form keeps 8-bit weights" in checked.reason, checked.reason
        return
    packed = EdgeSession(out)
    full = EdgeSession(fleet, "cpu", int8_target="arm64")
    assert packed.model_file.suffix == ".ort"
    assert np.abs(packed.embed(TEXTS) - full.embed(TEXTS)).max() <= ORT_ATOL
    assert check_bundle(out, max_texts=24).passed


def test_pack_of_an_ort_format_bundle_ships_one_form_of_the_graph(fleet, tmp_path):
    """A bundle exported with --ort-format holds each graph twice (.onnx and .ort); a device loads one, so the
    default pack ships the .onnx and names the .ort (and the operator list of the .ort graphs) as left out."""
    import numpy as np

    from edgebert.runtime.pack import pack_bundle

    bundle = export_bundle(ExportConfig(model_dir=fleet.parent / "model", out_dir=tmp_path / "ort", int8=True,
                                        int8_targets=("portable",), max_accuracy_loss=0.5, ort_format=True,
                                        validation_batch_sizes=(1,), validation_seq_lens=(7,))).bundle_dir
    full = json.loads((bundle / "manifest.json").read_text())
    ort_file = full["models"]["int8"]["ort"]["file"]
    result = pack_bundle(bundle, "portable", tmp_path / "onnx-only")
    packed = json.loads((tmp_path / "onnx-only" / "manifest.json").read_text())
    assert not list((tmp_path / "onnx-only").rglob("*.ort")) and "ort_format" not in packed
    assert "ort" not in packed["models"]["int8"] and packed["models"]["int8"]["file"].endswith(".onnx")
    gone = {e["file"]: e for e in result.left_out}
    assert gone[ort_file]["bytes"] == (bundle / ort_file).stat().st_size and "`pack --ort-format`" in gone[ort_file][
        "reason"] and "required_operators.config" in gone
    graphs = sum((tmp_path / "onnx-only" / n).stat().st_size for n in packed["files"] if n.endswith((".onnx", ".ort")))
    assert graphs == (bundle / full["models"]["int8"]["file"]).stat().st_size           # one graph, once
    with pytest.raises(BundleError, match="has no .ort form"):
        EdgeSession(tmp_path / "onnx-only", graph_format="ort")
    one = EdgeSession(tmp_path / "onnx-only")
    assert np.abs(one.embed(TEXTS) - EdgeSession(bundle, "cpu", "int8").embed(TEXTS)).max() <= ORT_ATOL
    assert check_bundle(tmp_path / "onnx-only", max_texts=24).passed
    pack_bundle(bundle, "portable", tmp_path / "ort-only", ort_format=True)            # the other form, alone
    assert [p.suffix for p in (tmp_path / "ort-only").rglob("*.onnx")] == []
    assert len(list((tmp_path / "ort-only").rglob("*.ort"))) == 1


@pytest.mark.parametrize("task, architecture", [("cls", "BertForSequenceClassification"), ("mlm", "BertForMaskedLM"),
                                                ("token-cls", "BertForTokenClassification"),
                                                ("qa", "BertForQuestionAnswering")])
def test_a_packed_bundle_of_each_task_checks_as_the_full_one(tmp_path, task, architecture):
    """The stored reference per task (labels, per-token labels, top tokens, answer spans) gives the figures
    the live fp32 graph gives."""
    from edgebert.runtime.pack import pack_bundle

    labels = {i: tag for i, tag in enumerate(["O", "B-PER", "I-PER", "B-LOC", "I-LOC"])}
    model_dir = make_model_dir(tmp_path / "model", architecture, seed=3,
                               **({"id2label": labels} if task == "token-cls" else {}))
    bundle = export_bundle(ExportConfig(model_dir=model_dir, out_dir=tmp_path / "full", task=task, int8=True,
                                        max_accuracy_loss=0.5, validation_batch_sizes=(1,),
                                        validation_seq_lens=(7,))).bundle_dir
    pack_bundle(bundle, "portable", tmp_path / "packed")
    full, packed = check_bundle(bundle, max_texts=50), check_bundle(tmp_path / "packed", max_texts=50)
    assert packed.passed, packed.reason
    assert packed.fidelity["metric"] == full.fidelity["metric"]
    assert packed.fidelity["n"] == full.fidelity["n"] == 50
    assert packed.fidelity.get("tokens") == full.fidelity.get("tokens")
    assert abs(packed.fidelity["mean"] - full.fidelity["mean"]) < 1e-9
    assert abs(packed.fidelity["distance"] - full.fidelity["distance"]) < 1e-3


@pytest.mark.slow
def test_a_packed_ort_bundle_checks_on_emulated_arm64(fleet, tmp_path):
    """The mobile form end to end: the arm64 bundle packed with its .ort graph alone, checked by `edgebert
    check` on an emulated aarch64 (QEMU, -cpu max) against the stored fp32 outputs. Uses the aarch64 runtime
    install tests/test_arm64_emulated.py makes (skips without it)."""
    import os
    import subprocess

    from conftest import REPO
    from edgebert.runtime.pack import pack_bundle

    tool = REPO.parent / "shared" / "tools" / "arm64-python"
    sites = sorted(p.parent for p in (REPO / ".venv").glob("arm64-site-*/.complete"))
    if not tool.is_file() or not sites:
        pytest.skip("no aarch64 runtime install here (run tests/test_arm64_emulated.py first)")
    out = tmp_path / "arm64.tar.gz"
    pack_bundle(fleet, "arm64", out, ort_format=True)
    env = {**os.environ, "PYTHONPATH": f"{sites[-1]}{os.pathsep}{REPO}", "EDGEBERT_CACHE": str(tmp_path / "cache")}
    done = subprocess.run([str(tool), "-m", "edgebert.cli", "check", str(out), "--max-texts", "40"], env=env,
                          capture_output=True, text=True, timeout=1200)
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-2000:]
    assert lines[1].startswith("host: arm64") and ".ort" in done.stdout
    assert lines[-1].startswith("PASS: INT8 graph 'arm64' follows fp32 on this arm64 CPU")


def test_a_bundle_exported_before_references_gets_one_when_packed(fleet, tmp_path):
    from edgebert.runtime.pack import pack_bundle

    old = _copy(fleet, tmp_path / "old")
    manifest = json.loads((old / "manifest.json").read_text())
    reference = manifest.pop("fp32_reference")["file"]
    (old / reference).unlink()
    manifest["files"].pop(reference)
    manifest.get("sizes", {}).pop(reference, None)
    (old / "manifest.json").write_text(json.dumps(manifest))
    result = pack_bundle(old, "x86-vnni", tmp_path / "vnni")
    assert result.reference == "pack"
    packed = json.loads((tmp_path / "vnni" / "manifest.json").read_text())
    assert packed["fp32_reference"]["written_by"] == "pack" and reference in packed["files"]
    report = check_bundle(tmp_path / "vnni", max_texts=30)
    full = check_bundle(fleet, int8_target="x86-vnni", max_texts=30)
    assert report.passed and abs(report.fidelity["mean"] - full.fidelity["mean"]) < 1e-6
    assert "stored at pack" in report.lines()[-2]
