"""``edgebert tune`` and the device profile: tuning a tiny bundle writes a profile keyed by the bundle's manifest and
this machine, which ``EdgeSession`` and ``edgebert info`` apply and show; an argument beats it; a profile of another
export of the bundle (stale) or of another machine (foreign) is ignored, saying why. Runs in the torch-free
runtime install too (ready-made bundles). No timing is asserted: only what was chosen among what was timed."""

from __future__ import annotations

import json
import shutil

import pytest

from edgebert.errors import ConfigError
from edgebert.runtime import EdgeSession
from edgebert.runtime.device_profile import load_profile, profile_path
from edgebert.runtime.tune import TuneConfig, tune
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
                     pause=0.0, **options)
    return tune(cfg)


def test_tune_gates_times_and_keeps_a_profile_the_session_applies(bundle):
    result = _tuned(bundle)
    assert [g["graph"] for g in result.gates] == ["fp32", "int8"] and all(g["passed"] for g in result.gates)
    assert sorted(c.name for c in result.candidates) == ["fp32 t1", "int8 t1"]
    assert all(set(c.p50_ms) == {"1x8", "4x16"} and c.score > 0 for c in result.candidates)
    best = min(result.candidates, key=lambda c: (c.score, c.name))
    assert result.chosen["precision"] == best.precision and result.chosen["threads"] == 1
    assert result.chosen["allow_spinning"] is result.spinning["kept"]
    stored = json.loads(profile_path(bundle).read_text())
    assert stored["settings"] == result.chosen and stored["machine"]["cpu_kind"] == result.machine["cpu_kind"]

    session = EdgeSession(bundle)
    said = session.describe()["profile"]
    assert said["status"] == "applied" and said["applied"]["threads"] == 1
    assert (session.precision, session.threads, session.allow_spinning) == (
        result.chosen["precision"], 1, result.chosen["allow_spinning"])
    assert "device profile" in session.describe()["precision_reason"]
    explicit = EdgeSession(bundle, precision="fp32", threads=1)
    assert explicit.precision == "fp32" and set(explicit.describe()["profile"]["overridden"]) >= {"precision", "threads"}
    assert EdgeSession(bundle, profile=False).describe()["profile"]["status"] == "off"


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
    assert report["profile_file"] is None and report["chosen"]["precision"] == "fp32"
    assert [c["name"] for c in report["candidates"]] == ["fp32 t1"] and not profile_path(bundle).exists()
    assert main(["tune", str(bundle), "--shapes", "2x", "--rounds", "1"]) == 2          # one line, exit 2
    assert "is not BATCHxSEQUENCE" in capsys.readouterr().err
    _tuned(bundle)
    assert main(["info", str(bundle)]) == 0
    out = capsys.readouterr().out
    assert "device profile: device profile of" in out and "threads=1" in out
