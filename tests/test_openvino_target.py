"""``export --target openvino``: an OpenVINO INT8 graph inside the bundle, gated like the onnxruntime
targets, loaded by ``EdgeSession`` / ``edgebert check`` when asked for (by default only on CPU kinds where it
was measured faster: none yet); without openvino the bundle's onnxruntime graph runs."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

pytest.importorskip("openvino")
pytest.importorskip("nncf")

from edgebert.bundle import read_manifest
from edgebert.errors import BundleError, ConfigError
from edgebert.exporters import ExportConfig, export_bundle
from edgebert.quantization.config import Int8Config
from edgebert.runtime import EdgeSession
from edgebert.runtime.check import check_bundle
from edgebert.runtime.hostcpu import HostCpu, detect_host
from edgebert.runtime.int8_choice import choose_openvino
from export_fixtures import make_model_dir

TEXTS = ["a charming film", "too long and not funny", "the plot is awful and the actors are worse",
         "one of the best films of the year", "bad ."]


@pytest.fixture(scope="module")
def ov_bundle(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("openvino")
    model_dir = make_model_dir(work / "model", "BertModel", seed=21, initializer_range=0.3)
    return export_bundle(ExportConfig(model_dir=model_dir, out_dir=work / "bundle", int8=True,
                                      int8_targets=("portable", "openvino"), max_accuracy_loss=0.5,
                                      validation_batch_sizes=(1, 3), validation_seq_lens=(7, 32))).bundle_dir


def _other_kind_host() -> HostCpu:
    kind = "x86-avx2" if detect_host().kind != "x86-avx2" else "x86-vnni"
    flags = {"x86-avx2": {"avx2": True}, "x86-vnni": {"avx2": True, "avx512f": True, "avx512_vnni": True}}[kind]
    return HostCpu("x86_64", flags, kind, "exact", None)


def test_the_bundle_holds_a_gated_openvino_graph_beside_the_onnxruntime_one(ov_bundle):
    manifest = json.loads((ov_bundle / "manifest.json").read_text())
    entry = manifest["models"]["int8-openvino"]
    assert manifest["models"]["int8"]["target"] == "portable" and "engine" not in manifest["models"]["int8"]
    assert (entry["engine"], entry["providers"], entry["target"]) == ("openvino", ["openvino"], "openvino")
    assert {entry["file"], entry["weights"]} <= set(manifest["files"])      # the .bin is hashed too
    assert entry["requires"]["measured_on"] == detect_host().kind
    quant = entry["quantization"]
    # the two FFN down-projections (2 layers) get INT8 weights only; the other weight MatMuls static INT8
    assert len(quant["weight_only_int8"]) == 2 and all("output" in n for n in quant["weight_only_int8"])
    assert quant["op_counts"]["FakeQuantize"] >= 8 and quant["quantized_nodes"] == quant["candidate_nodes"] == 10
    accuracy = entry["accuracy"]
    print("openvino gate", accuracy["mean"], accuracy["min"])
    assert accuracy["n"] == 200
    if detect_host().kind == "x86-vnni":    # measured 0.99939 / 0.99719 (Zen 4 EPYC)
        assert accuracy["mean"] >= 0.995 and accuracy["min"] >= 0.99
    else:       # OpenVINO's INT8 kernels are less exact without VNNI (AVX2, emulated: 0.99274): why it is not
        assert accuracy["mean"] >= 0.99 and accuracy["min"] >= 0.95      # picked there by default
    assert entry["batch_invariance"]["max_1_minus_cos"] <= 1e-6        # per-tensor static + per-token dynamic scales
    assert entry["validation"]["max_abs_diff"] < 2.0 and entry["validation"]["provider"] == "OpenVINO CPU"
    xml = (ov_bundle / entry["file"]).read_text()
    assert '<DYNAMIC_QUANTIZATION_GROUP_SIZE value="32" />' in xml.split("<runtime_options>")[1]


def test_session_picks_the_openvino_graph_by_default_only_where_it_was_measured_faster(ov_bundle, monkeypatch):
    # measured no faster than the x86-vnni onnxruntime graph on a Zen 4 EPYC and an AMX Xeon: on no kind by default
    default = EdgeSession(ov_bundle, provider="cpu")
    assert (default.model_key, default.engine) == ("int8", "onnxruntime")
    note = next(n for n in default.provider_notes if "not picked by default" in n)
    assert "int8_target='openvino'" in note
    if detect_host().kind == "x86-vnni":
        assert "no faster than the x86-vnni onnxruntime graph" in note      # the reason, without figures
        assert not re.search(r"\d\.\d|\bms\b|texts/s", note)     # figures live in benchmarks/results
    # a kind listed as faster gets it by default, when the export measured it on that kind
    import edgebert.runtime.int8_choice as int8_choice

    monkeypatch.setattr(int8_choice, "OPENVINO_DEFAULT_ON", (detect_host().kind,))
    listed = EdgeSession(ov_bundle, provider="cpu")
    assert (listed.model_key, listed.engine, listed.provider) == ("int8-openvino", "openvino", "cpu")
    assert any("OpenVINO INT8 graph chosen" in n for n in listed.provider_notes)


def test_session_runs_the_openvino_graph_when_asked(ov_bundle):
    session = EdgeSession(ov_bundle, provider="cpu", threads=2, int8_target="openvino")
    assert (session.model_key, session.engine, session.provider, session.precision) == (
        "int8-openvino", "openvino", "cpu", "int8")
    assert session._session.config["DYNAMIC_QUANTIZATION_GROUP_SIZE"] == "32"
    assert session._session.config["INFERENCE_NUM_THREADS"] == "2"
    assert any("OpenVINO INT8 graph chosen: asked for" in n for n in session.provider_notes)
    fp32 = EdgeSession(ov_bundle, provider="cpu", precision="fp32")
    ours, ref = session.embed(TEXTS), fp32.embed(TEXTS)
    assert ours.shape == ref.shape == (len(TEXTS), session.hidden_size)
    worst = float((ours * ref).sum(1).min())
    print("openvino vs fp32, worst of the texts", worst)
    assert worst >= (0.99 if detect_host().kind == "x86-vnni" else 0.95)     # see the gate's figures above
    # one text alone and inside a padded batch: the same vector
    alone = session.embed(TEXTS[:1], batch_size=1)
    assert float((alone[0] * ours[0]).sum()) >= 1 - 1e-6
    # the onnxruntime graph of the same bundle, asked for by target
    assert EdgeSession(ov_bundle, int8_target="portable").engine == "onnxruntime"


def test_without_openvino_or_on_another_cpu_kind_the_onnxruntime_graph_runs(ov_bundle, monkeypatch):
    manifest = read_manifest(ov_bundle)
    choice, why = choose_openvino(manifest, _other_kind_host())
    assert choice is None and "int8_target='openvino'" in why
    # never by default on an AVX2 CPU (OpenVINO's INT8 measured slower than onnxruntime's there) ...
    avx2 = HostCpu("x86_64", {"avx2": True}, "x86-avx2", "saturating", True)
    assert choose_openvino(manifest, avx2)[0] is None and "ran slower than onnxruntime's" in choose_openvino(manifest, avx2)[1]
    # ... nor, on a kind listed as faster, when the export measured it on another kind
    import edgebert.runtime.int8_choice as int8_choice

    vnni = HostCpu("x86_64", {"avx2": True, "avx512f": True, "avx512_vnni": True}, "x86-vnni", "exact", None)
    monkeypatch.setattr(int8_choice, "OPENVINO_DEFAULT_ON", ("x86-vnni",))
    measured_on = manifest.models["int8-openvino"].requires["measured_on"]
    choice, why = choose_openvino(manifest, vnni)
    assert (choice is None and "measured on a" in why) if measured_on != "x86-vnni" else choice is not None
    choice, _ = choose_openvino(manifest, _other_kind_host(), "openvino")   # asked for: loads anywhere
    assert choice is not None and choice.key == "int8-openvino"
    assert choose_openvino(manifest, detect_host(), "x86-vnni") == (None, "")

    from edgebert.runtime import openvino_graph  # int8_choice loads it only for a bundle with an OpenVINO graph

    monkeypatch.setattr(openvino_graph, "openvino_version", lambda: None)
    session = EdgeSession(ov_bundle, provider="cpu")
    assert (session.model_key, session.engine) == ("int8", "onnxruntime")
    assert any("openvino is not installed" in n for n in session.provider_notes)
    with pytest.raises(BundleError, match="needs the openvino package"):
        EdgeSession(ov_bundle, int8_target="openvino")


def test_check_measures_the_openvino_graph_here(ov_bundle):
    report = check_bundle(ov_bundle, max_texts=64, int8_target="openvino")
    assert report.passed, report.reason
    assert report.chosen["model"] == "int8-openvino" and "'openvino'" in report.reason
    assert check_bundle(ov_bundle, max_texts=8).chosen["model"] == EdgeSession(ov_bundle).model_key
    # measured 0.9994 natively (VNNI), 0.99277 as an AVX2 CPU (emulated): see the gate's figures above
    assert report.fidelity["n"] == 64 and report.fidelity["mean"] >= (0.995 if detect_host().kind == "x86-vnni" else 0.99)
    assert [g["target"] for g in report.graphs] == ["portable", "openvino"]
    # the OpenVINO line says what a default session does here (the same rule, not a second one)
    picked = EdgeSession(ov_bundle).engine == "openvino"
    assert (report.graphs[1]["here"] == "picked here by default") is picked


def test_a_changed_or_missing_weights_file_is_refused(ov_bundle, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(ov_bundle, copy)
    weights = copy / "model.int8-openvino.bin"
    data = bytearray(weights.read_bytes())
    data[100] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(BundleError, match="does not match its manifest hash"):
        EdgeSession(copy, int8_target="openvino")
    assert EdgeSession(copy, int8_target="portable").engine == "onnxruntime"   # a session hashes only what it loads
    assert "model.int8-openvino.bin does not match" in check_bundle(copy, max_texts=4).reason
    weights.unlink()
    with pytest.raises(BundleError, match="model.int8-openvino.bin is missing"):
        EdgeSession(copy, verify=False, int8_target="openvino")


def test_target_openvino_always_ships_an_onnxruntime_graph_and_needs_its_packages(monkeypatch):
    assert Int8Config(targets=("openvino",)).targets == ("portable", "openvino")
    assert Int8Config(targets="x86-vnni,openvino").openvino
    assert [r.target for r in Int8Config(targets="x86-vnni,openvino").recipes()[0]] == ["x86-vnni"]
    with pytest.raises(ConfigError, match="static QDQ"):
        Int8Config(mode="static", targets=("portable", "openvino"))

    import importlib.util

    from edgebert.quantization.openvino_int8 import require_openvino

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "nncf" else real(name, *a))
    with pytest.raises(ConfigError, match="needs nncf"):
        require_openvino()
    with pytest.raises(ConfigError, match="needs nncf"):      # at construction, before any graph is made
        Int8Config(targets=("portable", "openvino"))


def test_cli_export_without_nncf_is_one_line_and_writes_nothing(tmp_path, monkeypatch, capsys):
    import importlib.util

    from distill_helpers import run_cli

    model_dir = make_model_dir(tmp_path / "model", "BertModel", seed=3)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "nncf" else real(name, *a))
    code, out, err = run_cli(capsys, "export", str(model_dir), "--out", str(tmp_path / "b"), "--int8",
                             "--target", "openvino")
    assert code == 2 and not (tmp_path / "b").exists()
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) <= 2 and "needs nncf" in err and "edgebert[openvino]" in err and "Traceback" not in err


def test_info_names_the_int8_engine_a_session_would_use(ov_bundle, capsys):
    from distill_helpers import run_cli

    code, out, _ = run_cli(capsys, "info", str(ov_bundle))
    assert code == 0 and "openvino: " in out and "runs the graphs of `export --target openvino`" in out
    line = next(ln for ln in out.splitlines() if "int8 engine here:" in ln)
    expected = "openvino" if EdgeSession(ov_bundle).engine == "openvino" else "onnxruntime"
    assert line.split("int8 engine here: ")[1].startswith(expected)


def test_the_export_summary_describes_the_openvino_graph(ov_bundle):
    from edgebert.exporters.result import ExportResult

    lines = ExportResult(ov_bundle, read_manifest(ov_bundle), 1.0).summary_lines()
    line = next(ln for ln in lines if "model.int8-openvino.xml" in ln)
    assert "(target openvino): OpenVINO IR by nncf" in line and "static INT8 + 2 weight-only MatMul(s)" in line
    assert "FakeQuantize=" in line and "cosine mean 0.99" in line and "on 200 held-out texts" in line
    assert "U8S8" not in line                   # onnxruntime's kernels: not what runs an OpenVINO graph
    portable = next(ln for ln in lines if "model_quantized.onnx" in ln)
    assert "(target portable): int8 weights [-64, 64] (7-bit), calibrated scales" in portable


@pytest.mark.slow
@pytest.mark.parametrize("archive", [None, "b.zip"])
def test_cli_export_int8_openvino_prints_its_summary_and_writes_the_archive(tmp_path, capsys, archive):
    from distill_helpers import run_cli

    model_dir = make_model_dir(tmp_path / "model", "BertModel", seed=3)
    extra = ["--archive", str(tmp_path / archive)] if archive else []
    code, out, err = run_cli(capsys, "export", str(model_dir), "--out", str(tmp_path / "b"), "--int8",
                             "--target", "openvino", *extra)
    assert code == 0, err
    assert "int8 model.int8-openvino.xml (target openvino): OpenVINO IR" in out and "KeyError" not in out + err
    if archive:
        assert f"archive: {tmp_path / archive} (" in out
        session = EdgeSession(tmp_path / archive, int8_target="openvino")
        assert session.engine == "openvino" and session.embed(TEXTS).shape[0] == len(TEXTS)


def test_tune_times_the_openvino_graph_in_its_own_blocks_and_a_profile_can_choose_it(ov_bundle, tmp_path, monkeypatch):
    from edgebert.runtime import openvino_graph
    from edgebert.runtime.tune import TuneConfig, tune

    monkeypatch.setenv("EDGEBERT_CACHE", str(tmp_path / "cache"))
    bundle = tmp_path / "bundle"
    shutil.copytree(ov_bundle, bundle)
    cfg = TuneConfig(bundle, shapes=((1, 8),), threads=(1,), graphs=("int8", "openvino"), rounds=2, warmup=1,
                     pause=0.0, repeats=2)
    result = tune(cfg)
    assert [(g["graph"], g["passed"]) for g in result.gates] == [("int8", True), ("int8-openvino", True)]
    ov = [c for c in result.candidates if c.engine == "openvino"]
    assert [c.name for c in ov] == ["int8-openvino t1"] and ov[0].score is None and not ov[0].p50_ms   # no heats
    finals = {f.name: f for f in result.finals}
    assert set(finals) == {"default (EdgeSession)", "int8 t1 spin off", "int8 t1 spin on", "int8-openvino t1"}
    assert finals["int8-openvino t1"].spinning is None and len(finals["int8-openvino t1"].ratios) == 2

    ov_settings = finals["int8-openvino t1"].settings()          # a profile that chose it: the session runs OpenVINO
    from edgebert.runtime.device_profile import DeviceProfile, machine_identity, manifest_sha256, save_profile
    save_profile(bundle, DeviceProfile(str(bundle.resolve()), manifest_sha256(bundle), machine_identity(detect_host()),
                                       ov_settings, {}, "today"))
    session = EdgeSession(bundle)
    assert (session.engine, session.int8_target, session.threads) == ("openvino", "openvino", 1)
    assert session.embed(TEXTS).shape[0] == len(TEXTS)

    monkeypatch.setattr(openvino_graph, "openvino_version", lambda: None)     # openvino absent: left out, saying so
    result = tune(TuneConfig(bundle, shapes=((1, 8),), threads=(1,), graphs=("int8", "openvino"), rounds=1,
                             warmup=1, pause=0.0, repeats=1, save=False))
    assert result.gates[1]["graph"] == "int8-openvino" and not result.gates[1]["passed"]
    assert "openvino is not installed" in result.gates[1]["reason"]
    assert all(c.engine == "onnxruntime" for c in result.candidates)
