"""Safe with real folders and real devices (issue 13): each defect of the issue has a test here (its
number in the test's docstring), and the held-out hostile inputs all give one line "error: ...", exit 2,
nothing half-written and nothing of the user's touched (``test_hostile_input``)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from edgebert.bundle import model_path
from edgebert.cli import main
from edgebert.errors import BundleError, CheckpointError, ConfigError, DataError, OutputError
from edgebert.files.atomic import current_umask, remove_stale_temps, remove_stale_work_dirs
from edgebert.files.outdirs import MARKER, OutputDir
from edgebert.model import load_model, save_model
from runtime_fixtures import make_tiny_model_dir, tiny_bundle


# ---------------------------------------------------------------------------- shared material
@pytest.fixture(scope="module")
def material(tmp_path_factory):
    """Read-only inputs shared by the cases: models (good, NaN, int32, bad config), a bundle, a corpus."""
    root = tmp_path_factory.mktemp("safety")
    embed_model, bundle = tiny_bundle(tmp_path_factory.getbasetemp())
    good = make_tiny_model_dir(root / "mlm", "BertForMaskedLM")
    nan = shutil.copytree(good, root / "nan")
    _edit_weights(nan, lambda sd: sd["bert.encoder.layer.0.output.dense.weight"].__setitem__((0, 0), float("nan")))
    int32 = shutil.copytree(good, root / "int32")
    _edit_weights(int32, lambda sd: sd.__setitem__("bert.embeddings.word_embeddings.weight",
                                                    sd["bert.embeddings.word_embeddings.weight"].to(torch.int32)))
    badcfg = shutil.copytree(good, root / "badcfg")
    cfg = json.loads((badcfg / "config.json").read_text())
    (badcfg / "config.json").write_text(json.dumps({**cfg, "hidden_dropout_prob": "abc"}))
    corpus = root / "corpus.txt"
    from edgebert.data.corpus import builtin_corpus

    corpus.write_text("\n\n".join(d.replace("\n", " ") for d in builtin_corpus()[:30]), encoding="utf-8")
    return {"bundle": bundle, "embed_model": embed_model, "good": good, "nan": nan, "int32": int32, "badcfg": badcfg, "corpus": corpus}


def _edit_weights(model_dir: Path, change) -> None:
    from safetensors.torch import load_file, save_file

    sd = load_file(str(model_dir / "model.safetensors"))
    change(sd)
    save_file(sd, str(model_dir / "model.safetensors"))


def _bundle_copy(src: Path, dst: Path, edit=None) -> Path:
    shutil.copytree(src, dst)
    if edit:
        manifest = json.loads((dst / "manifest.json").read_text())
        edit(manifest)
        (dst / "manifest.json").write_text(json.dumps(manifest))
    return dst


def _user_folder(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text('{"mine": true}')
    (path / "notes.txt").write_text("my notes")
    return path


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under ``root``: kind, bytes (files), permissions."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            data = p.read_bytes() if stat.S_ISREG(st.st_mode) else None
            out[str(p.relative_to(root))] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), data)
    return out


def _temp_entries() -> set[str]:
    """This process's scratch folders in the temp dir (other processes on the machine make their own)."""
    import tempfile

    return {p.name for p in Path(tempfile.gettempdir()).iterdir() if p.name.startswith("edgebert-")
            and f"-{os.getpid()}-" in p.name}


# ---------------------------------------------------------------------------- the held-out list
# Each case: (defect, function(tmp, material) -> argv). Everything the command is given lives in tmp
# (copies where a case edits something), so the snapshot of tmp covers the user's files.
HOSTILE = {
    "export --out an existing file": (1, lambda t, m: [
        "export", str(m["good"]), "--out", str(_file(t / "bundle.txt"))]),
    "export --out a folder of the user's": (2, lambda t, m: [
        "export", str(m["good"]), "--out", str(_user_folder(t / "mine"))]),
    "export --overwrite a folder of the user's": (2, lambda t, m: [
        "export", str(m["good"]), "--out", str(_user_folder(t / "mine")), "--overwrite"]),
    "pretrain --out a folder of the user's": (2, lambda t, m: [
        "pretrain", "--preset", "tiny", "--corpus", str(m["corpus"]), "--out", str(_user_folder(t / "mine"))]),
    "finetune --out a folder of the user's": (2, lambda t, m: [
        "finetune", str(m["good"]), "--task", "sst2", "--train", str(_file(t / "train.tsv", "sentence\tlabel\nok\t1\n")),
        "--out", str(_user_folder(t / "mine")), "--preset", "tiny"]),
    "distill --out a folder of the user's": (2, lambda t, m: [
        "distill", str(m["good"]), "--out", str(_user_folder(t / "mine")), "--preset", "tiny",
        "--corpus", str(m["corpus"])]),
    "import-hf --overwrite a folder of the user's": (2, lambda t, m: [
        "import-hf", str(m["good"]), "--out", str(_user_folder(t / "mine")), "--overwrite"]),
    "pretrain with hidden_size 1e12": (3, lambda t, m: [
        "pretrain", "--preset", "tiny", "--corpus", str(m["corpus"]), "--out", str(t / "o"),
        "--config", str(_file(t / "huge.json", json.dumps(
            {"hidden_size": 10**12, "num_attention_heads": 1, "num_hidden_layers": 1, "intermediate_size": 4,
             "max_position_embeddings": 64, "vocab_size": 1000})))]),
    "pretrain with a missing --vocab": (3, lambda t, m: [
        "pretrain", "--preset", "tiny", "--corpus", str(m["corpus"]), "--out", str(t / "o"),
        "--vocab", str(t / "nope.txt")]),
    "bench: manifest without config.hidden_size": (5, lambda t, m: [
        "bench", str(_bundle_copy(m["bundle"], t / "b", lambda x: x["config"].pop("hidden_size"))), "--preset", "quick"]),
    "check: int8 entry without a file": (5, lambda t, m: [
        "check", str(_bundle_copy(m["bundle"], t / "b", lambda x: x["models"][_int8_key(x)].pop("file")))]),
    "check: tokenizer given as a string": (5, lambda t, m: [
        "check", str(_bundle_copy(m["bundle"], t / "b", lambda x: x.__setitem__("tokenizer", "tokenizer.json")))]),
    "bench: task that does not match the graph": (5, lambda t, m: [
        "bench", str(_bundle_copy(m["bundle"], t / "b", _as_cls)), "--preset", "quick"]),
    "bench --threads 100000": (6, lambda t, m: ["bench", str(m["bundle"]), "--threads", "100000"]),
    "check --threads 100000": (6, lambda t, m: ["check", str(m["bundle"]), "--threads", "100000"]),
    # issue 49: a target the bundle has no graph for, or a budget export refuses, is a usage error, not a FAIL
    "check --target bogus": (6, lambda t, m: ["check", str(m["bundle"]), "--target", "bogus"]),
    "check --target arm64 (not in the bundle)": (6, lambda t, m: ["check", str(m["bundle"]), "--target", "arm64"]),
    "check --max-accuracy-loss -0.1": (6, lambda t, m: ["check", str(m["bundle"]), "--max-accuracy-loss", "-0.1"]),
    "check --max-accuracy-loss nan": (6, lambda t, m: ["check", str(m["bundle"]), "--max-accuracy-loss", "nan"]),
    "check --max-accuracy-loss 2": (6, lambda t, m: ["check", str(m["bundle"]), "--max-accuracy-loss", "2"]),
    "pretrain --out under /proc": (7, lambda t, m: [
        "pretrain", "--preset", "tiny", "--corpus", str(m["corpus"]), "--out", "/proc/edgebert-run"]),
    "pretrain --out below a file": (7, lambda t, m: [
        "pretrain", "--preset", "tiny", "--corpus", str(m["corpus"]), "--out", str(_file(t / "f.txt") / "run")]),
    "attention --out a folder": (7, lambda t, m: [
        "attention", str(m["good"]), "hello world", "--out", str(_folder(t / "pictures"))]),
    "bench --report a file": (7, lambda t, m: [
        "bench", str(m["bundle"]), "--preset", "quick", "--report", str(_file(t / "report.txt"))]),
    "evaluate NaN weights": (9, lambda t, m: [
        "evaluate", str(m["nan"]), "--task", "mlm", "--data", str(m["corpus"])]),
    "attention on NaN weights": (9, lambda t, m: [
        "attention", str(m["nan"]), "hello world", "--out", str(t / "a.png")]),
    "evaluate int32 weights": (9, lambda t, m: [
        "evaluate", str(m["int32"]), "--task", "mlm", "--data", str(m["corpus"])]),
    "evaluate hidden_dropout_prob 'abc'": (10, lambda t, m: [
        "evaluate", str(m["badcfg"]), "--task", "mlm", "--data", str(m["corpus"])]),
    "import-hf NaN weights": (10, lambda t, m: ["import-hf", str(m["nan"]), "--out", str(t / "o")]),
}


def _file(path: Path, text: str = "the user's file") -> Path:
    path.write_text(text)
    return path


def _folder(path: Path) -> Path:
    path.mkdir()
    return path


def _int8_key(manifest: dict) -> str:
    return next(k for k in manifest["models"] if k.startswith("int8"))


def _as_cls(manifest: dict) -> None:   # an embed graph declared as a classifier
    manifest["task"] = "cls"
    manifest["outputs"] = [{"name": "logits", "shape": ["batch", 2]}]
    manifest["labels"] = {"0": "neg", "1": "pos"}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_input(case, material, tmp_path, capsys):
    """Defects 1-3, 5-7, 9, 10: one line "error: ...", exit 2, nothing new and nothing changed."""
    argv = HOSTILE[case][1](tmp_path, material)
    before, bundle_before, temps_before = snapshot(tmp_path), snapshot(material["bundle"]), _temp_entries()
    code = main(argv)
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2, (code, err)
    assert len(lines) == 1 and lines[0].startswith("error: ") and "unexpected" not in lines[0], err
    assert "Traceback" not in err + out
    assert snapshot(tmp_path) == before
    assert snapshot(material["bundle"]) == bundle_before
    assert _temp_entries() <= temps_before


def test_hostile_messages_name_the_problem(material, tmp_path, capsys):
    expected = {
        "export --out an existing file": "bundle.txt is a file, not a folder",
        "pretrain --out a folder of the user's": "is not empty and was not written by `edgebert pretrain`",
        "export --overwrite a folder of the user's": "is not empty and was not written by `edgebert export`",
        "pretrain with hidden_size 1e12": "more than this machine's",
        "bench: manifest without config.hidden_size": "config.hidden_size is None, not a positive integer",
        "check: int8 entry without a file": "must be an object with a file name",
        "check: tokenizer given as a string": "tokenizer must be an object with a file name",
        "bench: task that does not match the graph": "has no output 'logits'",
        "bench --threads 100000": f"threads=100000 must be an integer from 1 to {len(os.sched_getaffinity(0))}",
        "check --target bogus": "--target 'bogus' names no INT8 graph of",
        "check --target arm64 (not in the bundle)": "(its INT8 targets: portable) (pass one of them, or leave --target out",
        "check --max-accuracy-loss -0.1": "max accuracy loss -0.1 must be in [0, 1)",
        "check --max-accuracy-loss nan": "max accuracy loss nan must be in [0, 1)",
        "check --max-accuracy-loss 2": "max accuracy loss 2.0 must be in [0, 1)",
        "pretrain --out under /proc": "/proc",
        "pretrain --out below a file": "f.txt is a file, not a folder",
        "attention --out a folder": "pictures is a folder, not a file",
        "bench --report a file": "report.txt is a file, not a folder",
        "evaluate NaN weights": "holds 1 NaN or infinite value(s)",
        "evaluate int32 weights": "is int32, not floating point",
        "evaluate hidden_dropout_prob 'abc'": "hidden_dropout_prob='abc' must be a number",
        "import-hf NaN weights": "holds 1 NaN or infinite value(s)",
    }
    for case, phrase in expected.items():
        sub = tmp_path / case.replace(" ", "_").replace("/", "_").replace("'", "")
        sub.mkdir()
        assert main(HOSTILE[case][1](sub, material)) == 2, case
        err = capsys.readouterr().err
        assert phrase in err, (case, err)


# ---------------------------------------------------------------------------- 1 + 2: output folders
def test_export_replaces_only_its_own_bundle(material, tmp_path):
    """Defect 1 and 2: --overwrite replaces an earlier bundle; user files are never deleted, and no
    hidden ``.X.old`` is ever left beside it."""
    import tempfile

    from edgebert.exporters import ExportConfig, export_bundle

    out = tmp_path / "bundle"
    dead = _dead_pid()                       # defect 8: what a killed export left behind
    stale_beside = tmp_path / f".bundle.eb{dead}-k1ll.tmp"
    stale_work = Path(tempfile.gettempdir()) / f"edgebert-export-{dead}-k1ll"
    for folder in (stale_beside, stale_work):
        folder.mkdir()
        (folder / "model.onnx").write_bytes(b"\0" * 1000)
    export_bundle(ExportConfig(model_dir=material["embed_model"], out_dir=out, task="embed"))
    assert not stale_beside.exists() and not stale_work.exists()
    assert (out / MARKER).is_file() and "files" in json.loads((out / "manifest.json").read_text())
    with pytest.raises(OutputError, match="already holds the output of `edgebert export`"):
        export_bundle(ExportConfig(model_dir=material["embed_model"], out_dir=out, task="embed"))
    export_bundle(ExportConfig(model_dir=material["embed_model"], out_dir=out, task="embed", overwrite=True))
    (out / "keep.txt").write_text("mine")
    with pytest.raises(OutputError, match=r"did not write \(keep.txt\)"):
        export_bundle(ExportConfig(model_dir=material["embed_model"], out_dir=out, task="embed", overwrite=True))
    assert (out / "keep.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle"]   # no .bundle.old, no temp folder


def test_output_dir_rule():
    """Defect 2: the one rule, on its own (new, empty, ours, theirs)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        assert OutputDir(root / "new", "pretrain").state == "new"
        (root / "empty").mkdir()
        assert OutputDir(root / "empty", "pretrain").state == "empty"
        out = OutputDir(root / "run", "pretrain", names=("config.json",))
        with out.writing():
            (root / "run" / "config.json").write_text("{}")
        with pytest.raises(OutputError, match="already holds the output of `edgebert pretrain`"):
            OutputDir(root / "run", "pretrain", names=("config.json",))
        with pytest.raises(OutputError, match="holds the output of `edgebert pretrain`, not of `edgebert distill`"):
            OutputDir(root / "run", "distill", overwrite=True)
        assert OutputDir(root / "run", "pretrain", names=("config.json",), overwrite=True).state == "overwrite"
        with pytest.raises(ConfigError, match="--resume continues a run, --overwrite starts it again"):
            OutputDir(root / "run", "pretrain", resume=True, overwrite=True)
        # a failure before anything worth keeping removes what the run created, parents included
        failing = OutputDir(root / "a" / "b" / "c", "pretrain")
        with pytest.raises(RuntimeError), failing.writing():
            raise RuntimeError("boom")
        assert not (root / "a").exists()


# ---------------------------------------------------------------------------- 3: nothing half-written
def test_failed_pretrain_leaves_nothing(material, tmp_path, monkeypatch):
    """Defect 3: a failure after the folder was made (NaN loss) removes everything the run wrote."""
    from edgebert.stages.pretrain import PretrainConfig, pretrain
    from edgebert.training import trainer as trainer_mod

    monkeypatch.setattr(trainer_mod.Trainer, "fit", lambda self, task, stop=None: (_ for _ in ()).throw(
        trainer_mod.TrainingError("the loss became NaN at step 1")))
    with pytest.raises(trainer_mod.TrainingError):
        pretrain(PretrainConfig.preset("tiny", tmp_path / "run", corpus=(material["corpus"],),
                                       train=dict(max_steps=2, progress=False)))
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------- 5: the manifest
def _session(bundle: Path, **kw):
    from edgebert.runtime import EdgeSession

    return EdgeSession(bundle, provider="cpu", **kw)


@pytest.mark.parametrize("edit, match", [
    (lambda m: m["config"].pop("hidden_size"), "config.hidden_size is None"),
    (lambda m: m["models"][_int8_key(m)].pop("file"), "must be an object with a file name"),
    (lambda m: m.__setitem__("tokenizer", "tokenizer.json"), "tokenizer must be an object"),
    (_as_cls, "has no output 'logits'"),
    (lambda m: m["outputs"][0].__setitem__("shape", ["batch", "seq", 999]), "has size 64 on axis 2"),
    (lambda m: m["models"]["fp32"].__setitem__("file", "../outside.onnx"), "names a file outside the bundle"),
    (lambda m: m.__setitem__("labels", {"0": "a", "5": "b"}), "labels must map 0..N-1"),
])
def test_manifest_is_validated_on_load_even_without_hashes(material, tmp_path, edit, match):
    """Defect 5: typed BundleError when the bundle is opened, with verify=False too."""
    bundle = _bundle_copy(material["bundle"], tmp_path / "b", edit)
    for verify in (True, False):
        with pytest.raises(BundleError, match=match):
            _session(bundle, verify=verify)


def test_manifest_extra_keys_and_entries_are_tolerated(material, tmp_path):
    """Defect 5: newer exporters' additions (a GPU graph entry, extra keys) pass the check."""
    def add(m):
        m["models"]["trt-fp16"] = {"file": "model.onnx", "precision": "tensorrt-fp16", "engine": {"x": 1}}
        m["something_new"] = [1, 2]
    session = _session(_bundle_copy(material["bundle"], tmp_path / "b", add), verify=False)
    assert session.embed("hello").shape == (1, 64)


def test_symlink_that_leaves_the_bundle_is_refused(material, tmp_path):
    """Defect 5: a graph swapped for a symlink to a file outside the bundle, hashes not checked."""
    bundle = _bundle_copy(material["bundle"], tmp_path / "b")
    outside = tmp_path / "outside.onnx"
    graph = model_path(bundle)
    shutil.copy(graph, outside)
    graph.unlink()
    graph.symlink_to(outside)
    with pytest.raises(BundleError, match="is a symlink that leaves the bundle"):
        _session(bundle, verify=False)


# ---------------------------------------------------------------------------- 6: bounded resources
def test_threads_and_batch_size_are_bounded(material):
    """Defect 6: threads above the usable CPUs and batch_size=0 are errors, not hangs or defaults."""
    cpus = len(os.sched_getaffinity(0))
    with pytest.raises(ConfigError, match=f"threads=100000 must be an integer from 1 to {cpus}"):
        _session(material["bundle"], threads=100000)
    with pytest.raises(ConfigError, match="batch_size=0 must be a positive integer"):
        _session(material["bundle"], batch_size=0)
    session = _session(material["bundle"], threads=cpus)
    with pytest.raises(ConfigError, match="batch_size=0 must be a positive integer"):
        session.embed(["a", "b"], batch_size=0)
    from edgebert.bench.config import BenchConfig

    with pytest.raises(ConfigError, match="threads=100000"):
        BenchConfig(bundle_dir=material["bundle"], threads=100000)


# ---------------------------------------------------------------------------- 8: checkpoint sets
class Killed(BaseException):
    """Stands for SIGKILL: no ``except`` of the trainer catches it."""


def test_a_kill_while_saving_keeps_a_consistent_checkpoint(tmp_path, monkeypatch):
    """Defect 8: killed while writing the second checkpoint's training state, the run resumes from the
    first set, whose model files equal the ones published in the folder; killed writers' temp files
    are removed by the next run."""
    from edgebert.training import TrainConfig, checkpoint_dir, train
    from test_training import ToyRegression

    cfg = TrainConfig(max_steps=8, batch_size=8, lr=1e-2, warmup_steps=0, log_every=1, eval_every=100,
                      save_every=4, progress=False, seed=3)
    out = tmp_path / "run"
    real_save, calls = torch.save, []

    def dying_save(obj, path, *a, **k):
        calls.append(path)
        if len(calls) == 2:
            Path(path).write_bytes(b"half a file")
            raise Killed                     # kill -9 in the middle of training_state.pt: no handler runs
        return real_save(obj, path, *a, **k)

    monkeypatch.setattr(torch, "save", dying_save)
    with pytest.raises(Killed):
        train(ToyRegression(), cfg, out)
    monkeypatch.setattr(torch, "save", real_save)
    ckpt = checkpoint_dir(out)
    assert ckpt.name == "step-0000004"
    assert (out / "model.safetensors").read_bytes() == (ckpt / "model.safetensors").read_bytes()
    stale = out / ".model.safetensors.eb999999999-x.tmp"     # a writer (pid 999999999) that was killed
    stale.write_bytes(b"junk")
    assert train(ToyRegression(), cfg, out, resume=True).step == 8
    assert not stale.exists()
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-0000008"]


def _dead_pid() -> int:
    """The id of a process that has exited."""
    return int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True, check=True).stdout)


def test_stale_temporaries_of_dead_processes_are_removed(tmp_path):
    """Defect 8: only this tool's temp names, only of processes that are gone."""
    dead = _dead_pid()
    mine = tmp_path / f".bundle.eb{dead}-abc.tmp"
    mine.mkdir()
    alive = tmp_path / f".bundle.eb{os.getpid()}-abc.tmp"
    alive.write_text("in progress")
    other = tmp_path / ".bundle.old"
    other.write_text("not ours")
    assert remove_stale_temps(tmp_path) == [mine]
    assert alive.exists() and other.exists()
    work = tmp_path / f"edgebert-export-{dead}-xyz"
    work.mkdir()
    (tmp_path / f"edgebert-export-{os.getpid()}-xyz").mkdir()
    assert remove_stale_work_dirs(tmp_path) == [work]


# ---------------------------------------------------------------------------- 9 + 10: weights, config, text
def test_weights_are_checked_when_loading(material):
    """Defect 9."""
    with pytest.raises(CheckpointError, match="NaN or infinite"):
        load_model(material["nan"])
    with pytest.raises(CheckpointError, match="int32, not floating point"):
        load_model(material["int32"])


def test_untyped_inputs_become_typed_errors(material):
    """Defect 10: a lone surrogate, max_length='abc', a [MASK] past the truncation point."""
    session = _session(material["bundle"])
    with pytest.raises(DataError, match="invalid character"):
        session.embed("bad \udc80 text")
    with pytest.raises(ConfigError, match="max_length='abc' must be an integer"):
        _session(material["bundle"], max_length="abc")


def test_mask_past_truncation_says_so(tmp_path):
    """Defect 10: the message names the truncation, not a missing [MASK]."""
    _, bundle = tiny_bundle(tmp_path, task="mlm")
    session = _session(bundle, max_length=8)
    with pytest.raises(DataError, match=r"past the truncation point \(8 tokens\)"):
        session.fill_mask("the " * 20 + "[MASK]")
    with pytest.raises(DataError, match="no \\[MASK\\] token"):
        session.fill_mask("the cat")


def test_weights_file_has_normal_permissions(material, tmp_path):
    """Defect 10: model.safetensors was written 0600, every other file 0644."""
    save_model(load_model(material["good"]), tmp_path)
    wanted = 0o666 & ~current_umask()
    assert stat.S_IMODE((tmp_path / "model.safetensors").stat().st_mode) == wanted
    assert stat.S_IMODE((tmp_path / "config.json").stat().st_mode) == wanted


def test_config_values_are_typed():
    """Defect 10: config parsing gives ConfigError, not TypeError."""
    from edgebert.model import BertConfig

    with pytest.raises(ConfigError, match="hidden_dropout_prob='abc' must be a number"):
        BertConfig.preset("tiny", hidden_dropout_prob="abc")


def test_missing_extra_is_one_line(capsys, monkeypatch):
    """The runtime install: a command that needs torch says which extra, in one line, exit 2."""
    import builtins

    real_import = builtins.__import__

    def no_torch(name, *args, **kwargs):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError("No module named 'torch'", name="torch")
        return real_import(name, *args, **kwargs)

    for mod in [m for m in sys.modules if m.startswith("edgebert.stages")]:
        monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setattr(builtins, "__import__", no_torch)
    code = main(["pretrain", "--out", "/nonexistent/never-made"])
    err = capsys.readouterr().err
    assert code == 2 and err.strip() == "error: edgebert pretrain needs PyTorch (pip install 'edgebert[train]')"


def test_failed_pipeline_leaves_nothing_and_the_rerun_is_accepted(material, tmp_path, monkeypatch):
    """Defect 3: a pipeline that fails after writing data/ removes it; the same --out then works."""
    import edgebert.pipeline.run as run
    from edgebert.errors import TrainingError
    from edgebert.pipeline import build_pipeline_config, run_pipeline

    def fail(*args, **kwargs):
        raise TrainingError("the loss became NaN at step 3")

    cfg = build_pipeline_config(tmp_path / "p", "wiki", teacher=material["embed_model"], layers=1,
                                corpus=(material["corpus"],))
    monkeypatch.setattr(run, "distill_student", fail)
    with pytest.raises(TrainingError):
        run_pipeline(cfg)
    assert list(tmp_path.iterdir()) == []
    cfg.out.mkdir()                                  # an empty folder is accepted
    assert OutputDir(cfg.out, "pipeline").state == "empty"


def test_bench_measures_only_the_files_it_checked(material, tmp_path):
    """Defect 5: a graph changed between bench's hash check and its session is refused."""
    from edgebert.bench.paths import same_as_checked as _same_as_checked
    from edgebert.bundle import read_manifest

    bundle = _bundle_copy(material["bundle"], tmp_path / "b")
    session = _session(bundle, precision="fp32")
    manifest = read_manifest(bundle)
    _same_as_checked(session, manifest)                       # unchanged: fine
    with open(model_path(bundle), "ab") as fh:
        fh.write(b"\0")
    with pytest.raises(BundleError, match="changed after its hash was checked"):
        _same_as_checked(session, manifest)


def test_pretrain_overwrite_starts_again_in_its_own_folder(material, tmp_path):
    """Defect 2: --overwrite restarts a run this command wrote (old metrics and checkpoints gone), and
    a file of the user's in that folder makes it refuse instead."""
    from edgebert.stages.pretrain import PretrainConfig, pretrain

    def run(**kw):
        return pretrain(PretrainConfig.preset("tiny", tmp_path / "run", corpus=(material["corpus"],),
                                              train=dict(max_steps=2, warmup_steps=0, progress=False), **kw))

    run()
    with pytest.raises(OutputError, match="already holds the output of `edgebert pretrain`"):
        run()
    assert run(overwrite=True).step == 2
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2]
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["step-0000002"]
    (tmp_path / "run" / "notes.txt").write_text("mine")
    with pytest.raises(OutputError, match=r"did not write \(notes.txt\)"):
        run(overwrite=True)
    assert (tmp_path / "run" / "notes.txt").read_text() == "mine"


def test_export_and_check_refuse_the_same_budgets_in_the_same_words(material):
    """Issue 49: `check --max-accuracy-loss` took -0.1, nan and 2, which `export` refuses: one rule
    (``task_registry.check_budget``) for both."""
    from edgebert.quantization.config import Int8Config
    from edgebert.runtime.check import check_bundle

    for bad in (-0.1, float("nan"), 2, 1.0, True, "0.1"):
        said = set()
        for call in (lambda: Int8Config(max_accuracy_loss=bad),
                     lambda: check_bundle(material["bundle"], max_accuracy_loss=bad)):
            with pytest.raises(ConfigError) as raised:
                call()
            said.add(raised.value.one_line())
        assert said == {f"max accuracy loss {bad!r} must be in [0, 1) (e.g. 0.005 = at most 0.5 points)"}
    assert Int8Config(max_accuracy_loss=0).max_accuracy_loss == 0
