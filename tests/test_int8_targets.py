"""INT8 that stays right on every CPU: targets as data, the host check (flags + U8S8 probe), the
runtime's choice of graph, batch invariance, ``edgebert check``, and an emulated AVX2 host.

Every assertion here holds on an AVX2-only CPU and on an AVX-512 VNNI CPU alike: host-dependent facts
are asserted against what the host's own flags say, and the AVX2 behaviour itself is shown under
``../shared/tools/avx2-python`` (QEMU as a Haswell CPU), whatever CPU runs the tests.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from conftest import REPO
from distill_helpers import run_cli
from edgebert.bundle import model_path
from edgebert.errors import BundleError
from edgebert.exporters import ExportConfig, export_bundle
from edgebert.quantization.targets import TARGETS, resolve_targets
from edgebert.runtime import EdgeSession
from edgebert.runtime.hostcpu import (
    PRECISION_OPTION,
    PROBE_EXACT,
    PROBE_FILE,
    PROBE_K,
    HostCpu,
    cpu_kind,
    detect_host,
    probe_u8s8,
)
from edgebert.runtime.int8_choice import choose_int8
from export_fixtures import make_model_dir

AVX2_PYTHON = REPO.parent / "shared" / "tools" / "avx2-python"
LONG = " ".join(["the story of a man and a woman who loved the music of the film"] * 6)
SHORT = ["a charming film", "too long and not funny", "the plot is awful", "one of the best films of the year",
         "beautiful music", "i hate this movie", "the actors are wonderful", "a dull mess"]


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("targets")


@pytest.fixture(scope="module")
def fleet_bundle(work) -> Path:
    """A tiny embed bundle with two INT8 graphs: portable (default) and x86-vnni."""
    model_dir = make_model_dir(work / "model", "BertModel", seed=21, initializer_range=0.3)
    return export_bundle(ExportConfig(model_dir=model_dir, out_dir=work / "fleet", int8=True,
                                      int8_targets=("portable", "x86-vnni"), max_accuracy_loss=0.5,
                                      validation_batch_sizes=(1, 3), validation_seq_lens=(7, 32))).bundle_dir


@pytest.fixture(scope="module")
def vnni_bundle(work, fleet_bundle) -> Path:
    """The same model with only the x86-vnni graph (8-bit weights: needs exact U8S8 products)."""
    return export_bundle(ExportConfig(model_dir=work / "model", out_dir=work / "vnni-only", int8=True,
                                      int8_targets=("x86-vnni",), max_accuracy_loss=0.5,
                                      validation_batch_sizes=(1,), validation_seq_lens=(7,))).bundle_dir


def host(u8s8: str, kind: str = "x86-avx2", fix: bool | None = True) -> HostCpu:
    flags = {"x86-avx2": {"avx2": True}, "x86-vnni": {"avx2": True, "avx512f": True, "avx512_vnni": True},
             "arm64": {"dotprod": True}}[kind]
    return HostCpu("arm64" if kind == "arm64" else "x86_64", flags, kind, u8s8, fix if u8s8 == "saturating" else None)


# --------------------------------------------------------------------------- targets and the host
def test_targets_are_data_with_the_weight_range_that_decides_where_they_are_exact():
    assert set(TARGETS) == {"portable", "x86-avx2", "x86-vnni", "arm64"}
    assert [n for n, r in TARGETS.items() if r.needs_exact_u8s8] == ["x86-vnni", "arm64"]
    for recipe in TARGETS.values():
        assert recipe.activation_scales == "calibrated" and recipe.outlier_ratio == 3.0 and recipe.per_channel
        assert recipe.requirements()["u8s8_exact"] is recipe.needs_exact_u8s8 and recipe.why
    assert TARGETS["portable"].reduce_range and not TARGETS["x86-vnni"].reduce_range


def test_host_target_follows_the_cpu_kind(monkeypatch):
    import edgebert.runtime.hostcpu as hostcpu

    for kind, target in (("x86-vnni", "x86-vnni"), ("x86-avx2", "x86-avx2"), ("arm64", "arm64")):
        monkeypatch.setattr(hostcpu, "detect_host", lambda k=kind: host("exact" if k != "x86-avx2" else "saturating", k))
        recipes, notes = resolve_targets("host")
        assert [r.target for r in recipes] == [target] and notes[0].startswith(f"--target host -> {target}")


def test_cpu_kind_from_flags():
    assert cpu_kind("x86_64", {"avx2": True, "avx512f": True, "avx512_vnni": True}) == "x86-vnni"
    assert cpu_kind("x86_64", {"avx2": True, "avx_vnni": True}) == "x86-vnni"          # Alder Lake: AVX-VNNI
    assert cpu_kind("x86_64", {"avx2": True, "avx512f": True, "avx512_vnni": False}) == "x86-avx512"
    assert cpu_kind("x86_64", {"avx2": True, "avx512f": False}) == "x86-avx2"
    assert cpu_kind("x86_64", {"avx2": False}) == "x86-sse"
    assert cpu_kind("x86_64", {"avx2": None}) == "unknown"                             # the OS did not say
    assert cpu_kind("arm64", {}) == "arm64"


def test_the_probe_is_a_real_u8s8_product_and_agrees_with_this_cpus_flags():
    graph = onnx.load(str(PROBE_FILE)).graph
    assert [n.op_type for n in graph.node] == ["MatMulInteger"]
    weight = onnx.numpy_helper.to_array(graph.initializer[0])
    assert weight.dtype == np.int8 and weight.shape == (PROBE_K, 2) and (weight[:, 0] == 127).all()
    exact = int((np.full((1, PROBE_K), 255, np.int64) @ weight[:, :1].astype(np.int64))[0, 0])
    assert exact == PROBE_EXACT
    me = detect_host()
    verdict = probe_u8s8()
    assert verdict in ("exact", "saturating")
    if me.kind in ("x86-avx2", "x86-avx512", "x86-sse"):
        assert verdict == "saturating" and probe_u8s8(precise=True) == "exact" and me.precise_fix
    elif me.kind in ("x86-vnni", "arm64"):
        assert verdict == "exact"


# --------------------------------------------------------------------------- the runtime's choice
def test_choice_prefers_a_safe_graph_on_a_saturating_host_and_the_made_for_graph_elsewhere(fleet_bundle):
    manifest = json.loads((fleet_bundle / "manifest.json").read_text())
    assert [manifest["models"][k]["target"] for k in ("int8", "int8-x86-vnni")] == ["portable", "x86-vnni"]
    on_avx2 = choose_int8(manifest, host("saturating"))
    assert on_avx2.key == "int8" and on_avx2.session_config == {} and "cannot saturate" in on_avx2.reason
    on_vnni = choose_int8(manifest, host("exact", "x86-vnni"))
    assert on_vnni.key == "int8-x86-vnni" and on_vnni.session_config == {} and "made for this CPU" in on_vnni.reason
    on_arm = choose_int8(manifest, host("exact", "arm64"))
    assert on_arm.target == "x86-vnni"                          # 8-bit weights, exact on ARM64 too
    forced = choose_int8(manifest, host("saturating"), target="x86-vnni")
    assert forced.session_config == {PRECISION_OPTION: "1"} and "loaded with" in forced.reason
    with pytest.raises(BundleError, match="no INT8 graph for target 'arm64'"):
        choose_int8(manifest, host("exact"), target="arm64")


def test_a_graph_that_would_saturate_is_fixed_or_refused_never_run_silently(vnni_bundle):
    manifest = json.loads((vnni_bundle / "manifest.json").read_text())
    fixed = choose_int8(manifest, host("saturating", fix=True))
    assert fixed.target == "x86-vnni" and fixed.session_config == {PRECISION_OPTION: "1"}
    with pytest.raises(BundleError, match="need exact U8S8 products") as refused:
        choose_int8(manifest, host("saturating", fix=False))
    assert "export with --target portable" in refused.value.one_line()
    legacy = {**manifest, "version": 1, "models": {k: {kk: vv for kk, vv in m.items() if kk not in ("precision", "target", "requires")}
                                                   for k, m in manifest["models"].items()}}
    old = choose_int8(legacy, host("saturating"))          # a version-1 bundle's 8-bit graph: same protection
    assert old.target == "legacy-8bit" and old.session_config == {PRECISION_OPTION: "1"}


def test_a_saved_ort_graph_with_8bit_weights_is_refused_where_the_kernel_saturates(vnni_bundle, fleet_bundle):
    """onnxruntime rewrites int8 weights to uint8 (session.x64quantprecision) only when it optimizes a .onnx
    graph at load: a saved .ort graph cannot take that fix, so on a saturating CPU it is refused, never run."""
    manifest = json.loads((vnni_bundle / "manifest.json").read_text())
    with pytest.raises(BundleError, match=r"\.ort form keeps 8-bit weights") as refused:
        choose_int8(manifest, host("saturating", fix=True), graph_format="ort")
    assert "graph_format='onnx'" in refused.value.one_line() and "--target portable --ort-format" in refused.value.one_line()
    packed = {**manifest, "models": {k: {**m, "file": m["file"].replace(".onnx", ".ort")}
                                     for k, m in manifest["models"].items()}}
    with pytest.raises(BundleError, match=r"\.ort form keeps 8-bit weights"):      # a pack --ort-format bundle
        choose_int8(packed, host("saturating", fix=True))
    assert choose_int8(manifest, host("exact", "x86-vnni"), graph_format="ort").session_config == {}
    fleet = json.loads((fleet_bundle / "manifest.json").read_text())     # a graph that cannot saturate: loaded
    assert choose_int8(fleet, host("saturating", fix=True), graph_format="ort").key == "int8"
    assert choose_int8(manifest, host("saturating", fix=True)).session_config == {PRECISION_OPTION: "1"}


def test_edge_session_on_this_host_runs_the_vnni_graph_exactly(vnni_bundle):
    session = EdgeSession(vnni_bundle, provider="cpu", precision="int8", threads=1)
    d = session.describe()
    assert d["int8"]["target"] == "x86-vnni" and d["host"] == detect_host().summary()
    if detect_host().saturates:             # AVX2-only CPU: loaded with the precision option, and says so
        assert d["int8"]["session_config"] == {PRECISION_OPTION: "1"}
        assert any(PRECISION_OPTION in n for n in d["provider_notes"])
    else:                                   # VNNI / ARM64: exact kernels, nothing to set
        assert d["int8"]["session_config"] == {}
    exact = _exact_session(model_path(vnni_bundle, "int8"))
    feeds = session.run(_feeds(session, SHORT))
    want = exact.run(["last_hidden_state"], _feeds(session, SHORT))[0]
    assert np.abs(feeds["last_hidden_state"] - want).max() < 1e-5      # what a VNNI CPU computes


# --------------------------------------------------------------------------- batch invariance
def test_calibrated_int8_output_does_not_depend_on_batch_mates(fleet_bundle, work):
    default = EdgeSession(fleet_bundle, provider="cpu", precision="int8", threads=1, batch_size=64)
    alone = np.stack([default.embed(t)[0] for t in SHORT])
    mixed = default.embed(SHORT + [LONG] * 24)[: len(SHORT)]
    worst = float((1 - (alone * mixed).sum(1)).max())
    assert worst < 1e-6                                          # issue 9's bound is 0.002
    manifest = json.loads((fleet_bundle / "manifest.json").read_text())
    assert manifest["models"]["int8"]["batch_invariance"]["max_1_minus_cos"] < 1e-6
    per_call = export_bundle(ExportConfig(model_dir=work / "model", out_dir=work / "per-call", int8=True,
                                          activation_scales="per-call", max_accuracy_loss=0.5,
                                          validation_batch_sizes=(1,), validation_seq_lens=(7,))).bundle_dir
    dynamic = EdgeSession(per_call, provider="cpu", precision="int8", threads=1, batch_size=64)
    moved = float((1 - (np.stack([dynamic.embed(t)[0] for t in SHORT]) * dynamic.embed(SHORT + [LONG] * 24)[:8]).sum(1)).max())
    assert moved > 100 * max(worst, 1e-9)                       # per-call scales move with the batch
    assert json.loads((per_call / "manifest.json").read_text())["models"]["int8"]["batch_invariance"]["max_1_minus_cos"] > 1e-6


# --------------------------------------------------------------------------- edgebert check
def test_check_passes_on_this_host_and_names_the_reason_when_it_fails(fleet_bundle, tmp_path, capsys):
    code, out, err = run_cli(capsys, "check", fleet_bundle)
    assert code == 0 and "PASS: INT8 graph" in out and detect_host().summary() in out
    assert "portable" in out and "x86-vnni" in out                      # both graphs listed with their needs
    code, out, _ = run_cli(capsys, "check", fleet_bundle, "--max-accuracy-loss", "0", "--json")
    report = json.loads(out)
    assert code == 1 and report["passed"] is False and report["reason"].startswith("FAIL: INT8 graph")
    assert "> budget 0" in report["reason"] and report["texts"]["as"] == "the export gate's"   # its texts
    gated = json.loads((fleet_bundle / "manifest.json").read_text())["models"][report["chosen"]["model"]]
    assert report["fidelity"]["n"] == gated["accuracy"]["held_out"]["texts"]
    tampered = tmp_path / "tampered"
    shutil.copytree(fleet_bundle, tampered)
    data = bytearray(model_path(tampered, "int8").read_bytes())
    data[len(data) // 2] ^= 1
    model_path(tampered, "int8").write_bytes(bytes(data))
    code, out, _ = run_cli(capsys, "check", tampered)
    assert code == 1 and "FAIL: bundle files do not match the manifest" in out and "model_quantized.onnx" in out
    code, _, err = run_cli(capsys, "check", tmp_path / "nothing")
    assert code == 2 and err.startswith("error: ") and "not found" in err


# --------------------------------------------------------------------------- an AVX2 host, emulated
_EMULATED = """
import json, sys, numpy as np, onnxruntime as ort
from edgebert.runtime import EdgeSession
from edgebert.runtime.hostcpu import detect_host
session = EdgeSession(sys.argv[1], provider="cpu", precision="int8", threads=1)
feeds = {k: np.asarray(v, np.int64) for k, v in json.loads(sys.argv[2]).items()}
guarded = session.run(feeds)["last_hidden_state"]
raw = ort.InferenceSession(str(session.model_file), providers=["CPUExecutionProvider"])   # no protection
naive = raw.run(["last_hidden_state"], feeds)[0]
print(json.dumps({"host": detect_host().as_dict(), "int8": session.describe()["int8"],
                  "guarded": guarded.tolist(), "naive": naive.tolist()}))
"""


@pytest.mark.avx2_emulated
def test_vnni_bundle_on_an_emulated_avx2_host_is_run_exactly_not_silently_wrong(vnni_bundle, tmp_path):
    """Under QEMU as a Haswell CPU onnxruntime takes its AVX2 kernels (bit-identical to a real one): the
    runtime must load the 8-bit graph with exact products; a plain session would saturate."""
    if not AVX2_PYTHON.exists() or sys.platform != "linux":
        pytest.skip("../shared/tools/avx2-python is not available here")
    session = EdgeSession(vnni_bundle, provider="cpu", precision="int8", threads=1)
    feeds = _feeds(session, SHORT)
    script = tmp_path / "emulated.py"
    script.write_text(_EMULATED, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([str(AVX2_PYTHON), sys.executable, str(script), str(vnni_bundle),
                           json.dumps({k: v.tolist() for k, v in feeds.items()})],
                          capture_output=True, text=True, timeout=600, env=env)
    if done.returncode == 127:
        pytest.skip(f"avx2-python cannot run here: {done.stderr.strip()[:200]}")
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["host"]["u8s8"] == "saturating" and got["host"]["precise_fix"] is True
    assert got["int8"]["target"] == "x86-vnni" and got["int8"]["session_config"] == {PRECISION_OPTION: "1"}
    want = _exact_session(model_path(vnni_bundle, "int8")).run(["last_hidden_state"], feeds)[0]
    guarded, naive = np.asarray(got["guarded"]), np.asarray(got["naive"])
    assert np.abs(guarded - want).max() < 1e-5                         # the VNNI result, on AVX2
    assert np.abs(naive - want).max() > 100 * max(np.abs(guarded - want).max(), 1e-6)   # saturated


_EMULATED_ORT = """
import json, sys, numpy as np, onnxruntime as ort
from edgebert.errors import BundleError
from edgebert.runtime import EdgeSession
feeds = {k: np.asarray(v, np.int64) for k, v in json.loads(sys.argv[3]).items()}
try:
    EdgeSession(sys.argv[1], provider="cpu", precision="int8", int8_target="x86-vnni", graph_format="ort")
    refused = ""
except BundleError as exc:
    refused = exc.one_line()
def run(path):       # the runtime's guard bypassed: what the weight fix does to each form of the graph
    so = ort.SessionOptions()
    so.add_session_config_entry("session.x64quantprecision", "1")
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"]).run(["last_hidden_state"], feeds)[0]
try:                 # the one-device bundle `pack --target x86-vnni --ort-format` writes, opened on this CPU
    EdgeSession(sys.argv[4])
    packed = ""
except BundleError as exc:
    packed = exc.one_line()
from edgebert.runtime.check import check_bundle
checked = check_bundle(sys.argv[4], max_texts=8)
print(json.dumps({"refused": refused, "onnx": run(sys.argv[2] + ".onnx").tolist(),
                  "ort": run(sys.argv[2] + ".ort").tolist(), "packed": packed,
                  "check": [checked.passed, checked.reason]}))
"""


@pytest.mark.avx2_emulated
def test_a_saved_ort_graph_cannot_take_the_weight_fix_on_an_emulated_avx2_host_and_is_refused(vnni_bundle, tmp_path):
    """Why a .ort graph differs from its .onnx graph where U8S8 saturates: onnxruntime's int8 -> uint8 weight
    rewrite (session.x64quantprecision) runs while it optimizes a .onnx graph at load; a saved .ort graph is not
    optimized again, so the option leaves it saturating. The runtime refuses such a graph there (rule 3)."""
    if not AVX2_PYTHON.exists() or sys.platform != "linux":
        pytest.skip("../shared/tools/avx2-python is not available here")
    bundle = export_bundle(ExportConfig(model_dir=vnni_bundle.parent / "model", out_dir=tmp_path / "vnni-ort",
                                        int8=True, int8_targets=("x86-vnni",), max_accuracy_loss=0.5,
                                        ort_format=True, validation_batch_sizes=(1,),
                                        validation_seq_lens=(7,))).bundle_dir
    session = EdgeSession(vnni_bundle, provider="cpu", precision="int8", threads=1)
    feeds = _feeds(session, SHORT)
    stem = str(model_path(bundle, "int8").with_suffix(""))
    from edgebert.runtime.pack import pack_bundle

    packed = pack_bundle(bundle, "x86-vnni", tmp_path / "packed", ort_format=True).out
    script = tmp_path / "emulated_ort.py"
    script.write_text(_EMULATED_ORT, encoding="utf-8")
    done = subprocess.run([str(AVX2_PYTHON), sys.executable, str(script), str(bundle), stem,
                           json.dumps({k: v.tolist() for k, v in feeds.items()}), str(packed)],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(REPO)})
    if done.returncode == 127:
        pytest.skip(f"avx2-python cannot run here: {done.stderr.strip()[:200]}")
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert ".ort form keeps 8-bit weights" in got["refused"] and "graph_format='onnx'" in got["refused"]
    assert ".ort form keeps 8-bit weights" in got["packed"] and "--target portable --ort-format" in got["packed"]
    assert got["check"][0] is False and ".ort form keeps 8-bit weights" in got["check"][1], got["check"]
    want = _exact_session(model_path(bundle, "int8")).run(["last_hidden_state"], feeds)[0]
    fixed, saved = np.abs(np.asarray(got["onnx"]) - want).max(), np.abs(np.asarray(got["ort"]) - want).max()
    assert fixed < 1e-5                                  # the .onnx form: weights rewritten at load, exact
    assert saved > 100 * max(fixed, 1e-6), (fixed, saved)   # the .ort form: the option changes nothing, saturated


def _exact_session(path: Path) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.add_session_config_entry(PRECISION_OPTION, "1")
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def _feeds(session: EdgeSession, texts: list[str]) -> dict[str, np.ndarray]:
    from edgebert.runtime import pad_batch

    return pad_batch(session.tokenize(texts), session.pad_id)
