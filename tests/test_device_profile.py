"""``edgebert tune`` and the device profile: tuning a tiny bundle writes a profile keyed by the bundle's manifest and
this machine, which ``EdgeSession`` and ``edgebert info`` apply and show; an argument beats it; a profile of another
export of the bundle (stale) or of another machine (foreign) is ignored, saying why. Runs in the torch-free
runtime install too (ready-made bundles). No timing is asserted: only what was chosen among what was timed."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from edgebert.errors import ConfigError
from edgebert.runtime import EdgeSession
from edgebert.runtime.device_profile import load_profile, profile_path
from edgebert.runtime.tune import TuneConfig, tune, winner
from runtime_fixtures import tiny_bundle


@pytest.fixture()
def bundle(tmp_path_factory, tmp_path, monkeypatch):
    """A copy of the tiny embed bundle (fp32 + INT8) in its own folder, and a private profile cache."""
    monkeypatch.setenv("EDGEBERT_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("EDGEBERT_PROFILE", raising=False)
    source = tiny_bundle(tmp_path_factory.getbasetemp())[1]
    copy = tmp_path / "bundle"
    shutil.copytree(source, copy)
    return copy


def _tuned(bundle, **options):
    cfg = TuneConfig(bundle, shapes=((1, 8), (4, 16)), threads=(1,), graphs=("int8", "fp32"), rounds=2, warmup=1,
                     pause=0.0, repeats=2, **options)
    return tune(cfg)


def _settings(precision="int8", threads=1, spinning=True):
    return {"precision": precision, "int8_target": None, "threads": threads, "allow_spinning": spinning,
            "pin_threads": None, "batch_tokens": None}


def test_tune_gates_runs_heats_and_finals_and_keeps_a_profile(bundle):
    result = _tuned(bundle)
    assert [g["graph"] for g in result.gates] == ["fp32", "int8"] and all(g["passed"] for g in result.gates)
    assert sorted(c.name for c in result.candidates) == ["fp32 t1", "int8 t1"]
    assert all(set(c.p50_ms) == {"1x8", "4x16"} and c.score > 0 for c in result.candidates)
    # the finals: the default, then both heats candidates (finalists=3 >= 2) spinning off and on, 2 repeats each
    names = [f.name for f in result.finals]
    assert names[0] == "default (EdgeSession)" and sorted(names[1:]) == [
        "fp32 t1 spin off", "fp32 t1 spin on", "int8 t1 spin off", "int8 t1 spin on"]
    assert all(len(f.ratios) == 2 and len(f.p50_ms) == 2 for f in result.finals)
    assert result.finals[0].ratios == [1.0, 1.0] and result.finals[0].score == 1.0
    best = winner(result.finals)
    faster = [f for f in result.finals[1:] if max(f.ratios) < 1]
    assert best.score == min([f.score for f in faster] or [1.0]) and result.chosen == best.settings()
    stored = json.loads(profile_path(bundle).read_text())
    assert stored["settings"] == result.chosen and stored["machine"]["cpu_kind"] == result.machine["cpu_kind"]
    assert stored["measured"]["chosen"] == best.name and stored["measured"]["repeats"] == 2
    said = EdgeSession(bundle).describe()["profile"]
    assert said["status"] == "applied"
    assert said["applied"] == {k: v for k, v in result.chosen.items() if v is not None}


def test_the_session_applies_a_profile_an_argument_beats_it_and_defaults_are_said(bundle):
    from edgebert.runtime.device_profile import DeviceProfile, machine_identity, manifest_sha256, save_profile
    from edgebert.runtime.hostcpu import detect_host

    def keep(settings):
        save_profile(bundle, DeviceProfile(str(bundle.resolve()), manifest_sha256(bundle),
                                           machine_identity(detect_host()), settings, {}, "today"))

    keep(_settings("int8", 1, False))
    session = EdgeSession(bundle)
    said = session.describe()["profile"]
    assert said["status"] == "applied" and said["applied"] == {"precision": "int8", "threads": 1,
                                                               "allow_spinning": False}
    assert (session.precision, session.threads, session.allow_spinning) == ("int8", 1, False)
    assert "device profile" in session.describe()["precision_reason"]
    explicit = EdgeSession(bundle, precision="fp32", threads=2)
    assert (explicit.precision, explicit.threads) == ("fp32", 2)
    assert set(explicit.describe()["profile"]["overridden"]) == {"precision", "threads"}
    assert EdgeSession(bundle, profile=False).describe()["profile"]["status"] == "off"
    keep(dict.fromkeys(_settings()))              # tune found nothing faster than the defaults
    said = EdgeSession(bundle).describe()["profile"]
    assert said["applied"] == {} and said["note"].endswith("EdgeSession's defaults (tune found none faster)")


def test_the_finals_pick_the_lowest_median_of_those_faster_in_every_repeat_else_the_defaults(monkeypatch):
    from edgebert.runtime import thread_pinning
    from edgebert.runtime.tune import Candidate, _spinning, finalists_of

    monkeypatch.setattr(thread_pinning, "plan", lambda threads: (None, "not here"))   # pinning: its own test

    cfg = TuneConfig(".", finalists=1)
    a = Candidate("int8 t2", "int8", "int8", None, 2, None, score=0.9)
    b = Candidate("int8 t1", "int8", "int8", None, 1, None, score=1.4)
    ov = Candidate("int8-openvino t2", "int8-openvino", "int8", "openvino", 2, None, engine="openvino")
    finals = finalists_of(cfg, [b, a, ov])       # the heats' best only, spinning off and on; OpenVINO as it comes
    assert [(f.name, f.spinning) for f in finals] == [("default (EdgeSession)", None), ("int8 t2 spin off", False),
                                                      ("int8 t2 spin on", True), ("int8-openvino t2", None)]
    for f, ratios in zip(finals, ([1, 1, 1], [1.1, 0.8, 1.2], [0.7, 0.9, 0.8], [0.95, 0.6, 1.0])):
        f.ratios, f.score = ratios, float(sorted(ratios)[1])
    best = winner(finals)       # OpenVINO's median (0.95) is higher, and it did not beat the defaults in repeat 3
    assert best.name == "int8 t2 spin on" and best.score == 0.8 and best.settings()["allow_spinning"] is True
    finals[3].ratios, finals[3].score = [0.6, 0.7, 0.75], 0.7
    assert winner(finals) is finals[3]
    finals[1].p50_ms = finals[2].p50_ms = [{}] * 3
    spin = _spinning(finals, best)           # the median over the repeats of on / off: 0.7/1.1, 0.9/0.8, 0.8/1.2
    assert spin["kept"] is True and spin["on_over_off"] == pytest.approx(0.6667, abs=1e-4)
    assert finals[3].settings() == {"precision": "int8", "int8_target": "openvino", "threads": 2,
                                    "allow_spinning": None, "pin_threads": None, "batch_tokens": None}
    assert _spinning(finals, finals[3])["kept"] is None
    for f in finals[1:]:                     # each lost (or tied) one repeat at least: the defaults stay
        f.ratios[0] = 1.0
    assert winner(finals).candidate is None and winner(finals).settings() == dict.fromkeys(_settings())


def test_a_stale_or_foreign_profile_is_ignored_saying_why(bundle, monkeypatch):
    from edgebert.runtime.hostcpu import detect_host

    _tuned(bundle)
    path = profile_path(bundle)
    stored = json.loads(path.read_text())
    foreign = {**stored, "machine": {**stored["machine"], "cpu_kind": "x86-avx2", "cpus": 64}}
    path.write_text(json.dumps(foreign))
    profile, said = load_profile(bundle, detect_host())
    assert profile is None and said.status == "foreign"
    assert "cpu_kind 'x86-avx2'" in said.note and "cpus 64" in said.note
    assert EdgeSession(bundle).describe()["profile"]["applied"] == {}

    path.write_text(json.dumps(stored))
    assert load_profile(bundle, detect_host())[1].status == "applied"
    manifest = json.loads((bundle / "manifest.json").read_text())       # the bundle exported again: another manifest
    manifest["re_exported"] = True
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    profile, said = load_profile(bundle, detect_host())
    assert profile is None and said.status == "stale" and stored["bundle_sha256"][:12] in said.note
    monkeypatch.setenv("EDGEBERT_PROFILE", "0")
    assert load_profile(bundle, detect_host())[1].status == "off"


def test_a_profile_is_keyed_by_the_bundle_folder(bundle, tmp_path):
    _tuned(bundle, save=True)
    other = tmp_path / "other"
    shutil.copytree(bundle, other)
    assert profile_path(other) != profile_path(bundle)
    assert EdgeSession(other).describe()["profile"]["status"] == "none"


def test_bad_requests_are_refused_in_one_line(bundle):
    with pytest.raises(ConfigError, match="not graphs tune knows"):
        TuneConfig(bundle, graphs=("int3",))
    with pytest.raises(ConfigError, match="needs something to time"):
        TuneConfig(bundle, shapes=())
    with pytest.raises(ConfigError, match="longer than the bundle"):
        tune(TuneConfig(bundle, shapes=((1, 100000),), threads=(1,), graphs=("fp32",), rounds=1))


def test_the_command_reports_without_saving_and_info_shows_the_profile(bundle, capsys):
    from edgebert.cli import main

    assert main(["tune", str(bundle), "--shapes", "1x8", "--try-threads", "1", "--graphs", "fp32", "--rounds", "1",
                 "--no-save", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    faster = [f for f in report["finals"][1:] if max(f["ratios"]) < 1]       # chosen only if faster in every repeat
    assert report["profile_file"] is None and report["chosen"]["precision"] == ("fp32" if faster else None)
    assert [c["name"] for c in report["candidates"]] == ["fp32 t1"] and not profile_path(bundle).exists()
    assert main(["tune", str(bundle), "--shapes", "2x", "--rounds", "1"]) == 2          # one line, exit 2
    assert "is not BATCHxSEQUENCE" in capsys.readouterr().err
    from edgebert.runtime.device_profile import DeviceProfile, machine_identity, manifest_sha256, save_profile
    from edgebert.runtime.hostcpu import detect_host

    save_profile(bundle, DeviceProfile(str(bundle.resolve()), manifest_sha256(bundle), machine_identity(detect_host()),
                                       _settings("int8", 1, False), {}, "today"))    # what tune picks is timing's
    assert main(["info", str(bundle)]) == 0
    out = capsys.readouterr().out
    assert "device profile: device profile of" in out and "threads=1" in out


def test_texts_one_at_a_time_drop_the_batch_caps(bundle, tmp_path):
    texts = tmp_path / "texts.txt"
    texts.write_text("a charming film\ntoo long and not funny\nbad .\n")
    result = tune(TuneConfig(bundle, shapes=(), texts=texts, text_batch=1, threads=(1,), graphs=("fp32",), rounds=1,
                             warmup=1, pause=0.0, repeats=1, save=False))
    assert [c.name for c in result.candidates] == ["fp32 t1"]                  # no bt caps: a batch of one
    assert list(result.default_ms) == ["texts (3, 1 per call)"]
    batched = tune(TuneConfig(bundle, shapes=(), texts=texts, threads=(1,), graphs=("fp32",), batch_tokens=(0, 512),
                              rounds=1, warmup=1, pause=0.0, repeats=1, save=False))
    assert [c.name for c in batched.candidates] == ["fp32 t1 bt0", "fp32 t1 bt512"]
    with pytest.raises(ConfigError, match="texts per call"):
        TuneConfig(bundle, texts=texts, text_batch=0)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="pinning needs Linux and 2 usable CPUs")
def test_pinned_threads_give_the_same_outputs_and_give_the_caller_its_cpus_back(bundle, monkeypatch):
    from edgebert.runtime import thread_pinning
    from edgebert.runtime.tune import Candidate, finalists_of

    cpus = sorted(os.sched_getaffinity(0))
    pinned, note = thread_pinning.plan(2)
    assert pinned.caller_cpu == cpus[0] and pinned.pool_affinities == str(cpus[1] + 1)      # onnxruntime counts from 1
    assert thread_pinning.plan(1)[0] is None and "nothing to pin" in thread_pinning.plan(1)[1]
    texts = ["a charming film", "too long and not funny", "bad ."]
    plain = EdgeSession(bundle, threads=2, profile=False)
    session = EdgeSession(bundle, threads=2, pin_threads=True, profile=False)
    assert session.describe()["pin_threads"] == note
    before = os.sched_getaffinity(0)
    assert np.abs(session.embed(texts) - plain.embed(texts)).max() < 1e-6        # where threads run, not what
    assert os.sched_getaffinity(0) == before                      # the caller's own affinity, back after each call
    c = Candidate("int8 t2", "int8", "int8", None, 2, None, score=0.9)
    assert [f.name for f in finalists_of(TuneConfig(bundle, finalists=1), [c])][1:] == [
        "int8 t2 spin off", "int8 t2 spin on", "int8 t2 spin on pinned"]
    one = Candidate("int8 t1", "int8", "int8", None, 1, None, score=0.9)          # one thread: nothing to pin
    assert [f.name for f in finalists_of(TuneConfig(bundle, finalists=1), [one])][1:] == [
        "int8 t1 spin off", "int8 t1 spin on"]
    monkeypatch.delattr(thread_pinning.os, "sched_setaffinity")
    assert thread_pinning.plan(2) == (None, "pin_threads: this OS has no sched_setaffinity; threads left unpinned")
