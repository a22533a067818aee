"""Reliable with real disks, real processes and Ctrl-C (issue 20): every defect of the issue has a test
here (its number in the test's docstring). Each ends in one line "error: ...", the right exit code and
nothing half-written; the race uses two real processes, the full disk a real small filesystem (a tmpfs,
where this process may mount one) and Ctrl-C a real SIGINT."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from edgebert.cli import main
from edgebert.errors import OutputError
from edgebert.files.outdirs import OutputDir
from edgebert.files.outfiles import OutputFile, png_software
from runtime_fixtures import make_tiny_model_dir, tiny_bundle
from test_safety import snapshot


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("reliability")
    return {"mlm": make_tiny_model_dir(root / "mlm", "BertForMaskedLM"), "embed": make_tiny_model_dir(root / "embed")}


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err and "unexpected" not in err, err
    return lines[0]


def _cli(*args: str, **kw) -> subprocess.Popen:
    """``python -m edgebert.cli ARGS`` as a real process (SIGINT at its default, whatever ours is)."""
    return subprocess.Popen([sys.executable, "-m", "edgebert.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL), **kw)


# ---------------------------------------------------------------------------- 1: output files
def test_attention_never_replaces_a_file_it_did_not_write(models, tmp_path, capsys):
    """Defect 1: --out an existing file of the user's is refused (it was silently turned into a PNG);
    a picture attention drew is replaced only with --overwrite; an empty file is taken."""
    mine = tmp_path / "notes.txt"
    mine.write_text("the user's text")
    other_png = tmp_path / "photo.png"                       # a PNG, but not one attention drew
    import matplotlib.pyplot as plt
    import numpy as np

    plt.imsave(other_png, np.zeros((4, 4)))
    before = snapshot(tmp_path)
    for target, extra in ((mine, []), (mine, ["--overwrite"]), (other_png, ["--overwrite"])):
        assert main(["attention", str(models["mlm"]), "hello world", "--out", str(target), *extra]) == 2
        line = _one_error_line(capsys.readouterr().err)
        assert line == (f"error: --out {target} already exists and was not written by `edgebert attention` "
                        "(name a new file; edgebert never replaces a file it did not write)")
    assert snapshot(tmp_path) == before

    pic = tmp_path / "attn.png"
    assert main(["attention", str(models["mlm"]), "hello world", "--out", str(pic)]) == 0
    assert png_software(pic) == "edgebert attention"
    first = pic.read_bytes()
    assert main(["attention", str(models["mlm"]), "a fun film", "--out", str(pic)]) == 2
    assert "already holds the output of `edgebert attention` (pass --overwrite" in capsys.readouterr().err
    assert pic.read_bytes() == first
    assert main(["attention", str(models["mlm"]), "a fun film", "--out", str(pic), "--overwrite"]) == 0
    assert pic.read_bytes() != first and png_software(pic) == "edgebert attention"
    empty = tmp_path / "empty.png"
    empty.touch()
    assert main(["attention", str(models["mlm"]), "hello", "--out", str(empty)]) == 0
    assert empty.stat().st_size > 1000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["attn.png", "empty.png", "notes.txt", "photo.png"]


def test_an_output_file_changed_while_drawing_is_not_replaced(tmp_path):
    """Defect 2 (files): the check is repeated when publishing; a file that appeared meanwhile is kept."""
    target = tmp_path / "a.png"
    out = OutputFile(target, "attention", ours=lambda p: False)
    assert out.state == "new"
    with pytest.raises(OutputError, match=f"another run wrote {target} after this run checked it"):
        with out.writing() as tmp:
            tmp.write_bytes(b"ours")
            target.write_text("someone else's")
    assert target.read_text() == "someone else's"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.png"]


# ---------------------------------------------------------------------------- 2: one writer per --out
def test_two_exports_into_one_folder_one_wins_whole(models, tmp_path):
    """Defect 2: `export A --out o --int8 & export B --out o`: both printed `bundle: o` and o held B's
    fp32 bundle only. Now exactly one succeeds, the other says another run writes/wrote o, and o
    holds the winner's complete, verified bundle."""
    from edgebert.bundle import open_bundle

    out = tmp_path / "o"
    runs = {"int8": _cli("export", str(models["embed"]), "--out", str(out), "--int8"),
            "fp32": _cli("export", str(models["embed"]), "--out", str(out))}
    done = {name: (p.wait(timeout=300), *p.communicate()) for name, p in runs.items()}
    winners = [name for name, (code, _, _) in done.items() if code == 0]
    assert len(winners) == 1, done
    (loser,) = set(done) - set(winners)
    code, stdout, err = done[loser]
    line = _one_error_line(err)
    assert code == 2 and str(out) in line and "bundle:" not in stdout
    assert ("another edgebert run" in line and "is writing" in line) or "another run wrote" in line \
        or "already holds the output of `edgebert export`" in line, line
    assert f"bundle: {out}" in done[winners[0]][1]
    manifest = open_bundle(out, verify=True)
    assert bool(manifest.int8_graphs()) == (winners[0] == "int8")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o"]          # no temp folder, no lock file


def test_the_second_writer_is_refused_while_the_first_holds_the_folder(tmp_path):
    """Defect 2, both ways of losing, deterministic: a run that finds the folder locked, and a run
    whose folder was published by another after its check (it used to replace it)."""
    out = tmp_path / "o"
    first, second = OutputDir(out, "export"), OutputDir(out, "export")
    assert first.state == second.state == "new"
    with first.staged() as staging:
        (staging / "model.onnx").write_text("first")
        with pytest.raises(OutputError, match=rf"another edgebert run \(pid {os.getpid()}\) is writing {out}"):
            with second.staged():
                pass
    with pytest.raises(OutputError, match=f"another run wrote {out} after this run checked it"):
        with second.staged() as staging:
            (staging / "model.onnx").write_text("second")
    assert (out / "model.onnx").read_text() == "first"
    # training-style folders: the lock is held for the whole run
    run, rival = OutputDir(tmp_path / "run", "pretrain"), OutputDir(tmp_path / "run", "pretrain")
    with run.writing():
        with pytest.raises(OutputError, match=rf"another edgebert run \(pid \d+\) is writing {tmp_path / 'run'}"):
            with rival.writing():
                pass
        assert (tmp_path / "run").is_dir()                  # the loser removed nothing of the winner's
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o", "run"]


def test_files_dropped_into_an_empty_out_while_exporting_are_kept(tmp_path):
    """Defect 2: publishing checks the folder it replaces again (it deleted what appeared meanwhile)."""
    out = tmp_path / "o"
    out.mkdir()
    staged = OutputDir(out, "export")
    assert staged.state == "empty"
    with pytest.raises(OutputError, match=f"another run wrote {out}"):
        with staged.staged() as staging:
            (staging / "model.onnx").write_text("ours")
            (out / "notes.txt").write_text("the user's")
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o"]


# ---------------------------------------------------------------------------- 3: OS errors without a file name
@pytest.fixture
def small_disk(tmp_path):
    """A 256 KiB tmpfs (smaller than any bundle), where this process may mount one; else skipped."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("mounting a small filesystem needs root")
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k,mode=0755", "tmpfs", str(disk)],
                          capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_export_onto_a_full_disk_is_one_line(models, small_disk, tmp_path, capsys):
    """Defect 3: [Errno 28] while writing the bundle was a traceback (exit 1); now one line naming
    --out, exit 2, and nothing of the export left on the disk."""
    out = small_disk / "bundle"
    assert main(["export", str(models["embed"]), "--out", str(out)]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert line == (f"error: no space left on device while writing {out} "
                    "(free space on that disk, or choose another output path)")
    assert list(small_disk.iterdir()) == []


def test_export_with_tmpdir_on_a_full_disk_names_tmpdir(models, small_disk, tmp_path, capsys, monkeypatch):
    """Defect 3: with TMPDIR on the full disk the line says so (the bundle's own disk has room)."""
    scratch = small_disk / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    out = tmp_path / "bundle"
    assert main(["export", str(models["embed"]), "--out", str(out)]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert line == (f"error: no space left on device while writing scratch files in {scratch} "
                    "(free space there, or set TMPDIR to a folder on a disk with room)")
    assert not out.exists() and not [p for p in scratch.iterdir() if p.name.startswith("edgebert-")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["disk"]


def test_training_onto_a_full_disk_is_one_line(small_disk, capsys):
    """Defect 3: a checkpoint that does not fit (torch.save says "unexpected pos") is one line naming
    --out; the run that had nothing committed leaves nothing."""
    out = small_disk / "run"
    code = main(["pretrain", "--preset", "tiny", "--out", str(out), "--max-steps", "2", "--no-progress"])
    line = _one_error_line(capsys.readouterr().err)
    assert code == 2 and line.startswith(f"error: no space left on device while writing {out}"), line
    assert list(small_disk.iterdir()) == []


def test_disk_full_without_a_small_filesystem(models, tmp_path, capsys, monkeypatch):
    """Defect 3, simulated (runs everywhere): ENOSPC with no file name from inside the exporter."""
    import errno

    import edgebert.exporters.pipeline as pipeline

    def full(model, path, *args, **kwargs):
        Path(path).write_bytes(b"\0" * 100)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pipeline, "export_onnx", full)
    out = tmp_path / "bundle"
    assert main(["export", str(models["embed"]), "--out", str(out)]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert line.startswith(f"error: no space left on device while writing {out}"), line
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_file_size_limit_is_one_line(models, tmp_path):
    """Defect 3: EFBIG (ulimit -f) while writing the bundle: one line, exit 2, nothing left."""
    import resource

    def limit():
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, resource.RLIM_INFINITY))

    out = tmp_path / "bundle"
    run = subprocess.run([sys.executable, "-m", "edgebert.cli", "export", str(models["embed"]), "--out", str(out)],
                         capture_output=True, text=True, preexec_fn=limit, timeout=300)
    line = _one_error_line(run.stderr)
    assert run.returncode == 2 and line.startswith(f"error: cannot write {out}: file too large"), line
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def ner_bundle(tmp_path_factory):
    from edgebert.exporters import ExportConfig, export_bundle

    root = tmp_path_factory.mktemp("reliability_ner")
    model_dir = make_tiny_model_dir(root / "model", "BertForTokenClassification",
                                    id2label={0: "O", 1: "B-PER", 2: "I-PER"})
    export_bundle(ExportConfig(model_dir=model_dir, out_dir=root / "bundle", validation_batch_sizes=(1,),
                               validation_seq_lens=(7,)))
    return root / "bundle"


def test_unreadable_inputs_are_one_line(models, ner_bundle, tmp_path_factory, tmp_path, capsys):
    """Defect 3: `--data /proc/self/mem` (EIO, no file name) was a traceback, exit 1, in bench, check,
    finetune and pretrain; now one line naming the file and the reason, exit 2, nothing written."""
    mem = "/proc/self/mem"
    _, bundle = tiny_bundle(tmp_path_factory.getbasetemp())
    cases = {
        "bench": ["bench", str(ner_bundle), "--preset", "quick", "--data", mem],
        "check": ["check", str(bundle), "--data", mem],
        "finetune": ["finetune", str(models["mlm"]), "--task", "sst2", "--train", mem, "--out", str(tmp_path / "f"),
                     "--preset", "tiny"],
        "pretrain": ["pretrain", "--preset", "tiny", "--corpus", mem, "--out", str(tmp_path / "p")],
    }
    for name, argv in cases.items():
        assert main(argv) == 2, name
        line = _one_error_line(capsys.readouterr().err)
        assert "cannot read" in line and f"{mem}: Input/output error" in line, (name, line)
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------- 8: Ctrl-C
def test_ctrl_c_while_training_says_what_was_kept(tmp_path):
    """Defect 8: SIGINT gave exit 130 and a consistent checkpoint but printed nothing; now the one
    line `error: interrupted (...)` names the step kept and how to continue."""
    out = tmp_path / "run"
    run = _cli("pretrain", "--preset", "tiny", "--out", str(out), "--max-steps", "100000", "--save-every", "0",
               "--progress")
    for line in run.stdout:                 # not a terminal: one line per logged step
        if line.startswith("step "):
            break
    run.send_signal(signal.SIGINT)
    stdout, err = run.communicate(timeout=120)
    assert run.returncode == 130, err
    line = _one_error_line(err)
    pointer = json.loads((out / "checkpoint.json").read_text())
    step = pointer["step"]
    assert line == (f"error: interrupted (at step {step}; the checkpoint of step {step} in {out} is kept: "
                    "pass --resume to continue)")
    assert (out / pointer["dir"] / "training_state.pt").is_file() and (out / "model.safetensors").is_file()
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith((".tmp", ".edgebert-lock"))]


def test_ctrl_c_during_export_says_nothing_was_left(models, tmp_path, capsys, monkeypatch):
    """Defect 8: the same line for a command that keeps nothing (exit 130, no folder, no temp)."""
    import edgebert.exporters.pipeline as pipeline

    def interrupted(model, path, *args, **kwargs):
        Path(path).write_bytes(b"\0" * 100)
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, "export_onnx", interrupted)
    assert main(["export", str(models["embed"]), "--out", str(tmp_path / "bundle")]) == 130
    assert _one_error_line(capsys.readouterr().err) == "error: interrupted (nothing half-written is left)"
    assert list(tmp_path.iterdir()) == []
