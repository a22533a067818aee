"""``edgebert.scaleout`` without a cluster: the task columns, the picklable worker, its threads, and the
``edgebert batch`` job on the local engine (results equal ``EdgeSession``'s; resume after a killed run;
the output folder's rules). Runs in ``make test`` (pyarrow from [dev]) and in ``make test-scaleout``."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO
from scaleout_fixtures import TASKS, TEXTS, assert_same, inputs_of, reference, scaleout_bundle

pa = pytest.importorskip("pyarrow", reason="edgebert batch needs pyarrow (pip install 'edgebert[batch]')")
import pyarrow.parquet as pq  # noqa: E402

from edgebert.errors import CheckpointError, ConfigError, OutputError  # noqa: E402
from edgebert.scaleout.batch import BatchConfig, run_batch  # noqa: E402
from edgebert.scaleout.engines import plan  # noqa: E402
from edgebert.scaleout.worker import BundleWorker, cpu_share  # noqa: E402

pytestmark = pytest.mark.scaleout


@pytest.fixture(scope="module")
def bundles(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.getbasetemp()
    return {task: scaleout_bundle(root, task) for task in TASKS}


# --------------------------------------------------------------------------- the worker, in this process
@pytest.mark.parametrize("task", TASKS)
def test_the_worker_gives_edgesession_results_whatever_the_split(bundles, task):
    cols = inputs_of(task, copies=2)
    want = reference(bundles[task], task, cols)
    n = len(next(iter(cols.values())))
    for chunk, batch_size in ((3, 2), (7, 32)):
        worker = BundleWorker(bundles[task], threads=1, batch_size=batch_size)
        got: dict[str, list] = {}
        for start in range(0, n, chunk):
            part = worker(*[values[start:start + chunk] for values in cols.values()])
            for name, values in part.items():
                got.setdefault(name, []).extend(values)
        assert_same(task, got, want)


def test_a_null_text_gives_null_results_and_the_others_are_unchanged(bundles):
    worker = BundleWorker(bundles["cls"], threads=1)
    got = worker(["the film was good", None, "worst plot ever"])
    want = worker(["the film was good", "worst plot ever"])
    assert got["label"] == [want["label"][0], None, want["label"][1]]
    assert got["score"][1] is None and got["score"][2] == want["score"][1]


def test_the_worker_pickles_without_its_session(bundles):
    worker = BundleWorker(bundles["embed"], threads=1)
    before = worker(["the film was good"])["embedding"][0]
    assert worker._session is not None
    picklers = [pickle]
    for name in ("cloudpickle", "ray.cloudpickle", "pyspark.cloudpickle"):
        try:
            picklers.append(__import__(name, fromlist=["dumps"]))
            break
        except ImportError:
            continue
    for module in picklers:
        blob = module.dumps(worker)
        assert b"InferenceSession" not in blob and len(blob) < 2000, (module.__name__, len(blob))
        copy = pickle.loads(blob)
        assert copy._session is None                       # opened again, lazily, where it lands
        assert np.array_equal(copy(["the film was good"])["embedding"][0], before)


def test_the_ray_mapper_pickles_without_its_session(bundles):
    from edgebert.scaleout.ray_data import BundleMapper

    mapper = BundleMapper(bundles["cls"], threads=1)
    before = mapper(pa.table({"text": ["the film was good"]}))
    assert before.column_names == ["text", "label", "score"] and mapper.worker._session is not None
    copy = pickle.loads(pickle.dumps(mapper))
    assert copy.worker._session is None
    assert copy({"text": np.array(["the film was good"], dtype=object)})["label"][0] == before["label"][0].as_py()


def test_local_workers_share_one_extracted_archive(bundles, tmp_path):
    """Two worker processes open the same archive: one cache entry, and the folder's results."""
    from edgebert.runtime.archive import cache_root, write_archive

    archive = tmp_path / "cls.tar.gz"
    write_archive(bundles["cls"], archive)
    data = write_input(tmp_path / "in.parquet", "cls", copies=2)
    before = set(cache_root().iterdir()) if cache_root().is_dir() else set()
    run_batch(BatchConfig(bundle=archive, input=data, output=tmp_path / "out", workers=2, threads=1, part_rows=10))
    assert len(set(cache_root().iterdir()) - before) == 1
    got = read_output(tmp_path / "out")
    assert_same("cls", got, reference(bundles["cls"], "cls", inputs_of("cls", copies=2)))


def test_threads_default_to_the_cpu_share_never_onnxruntimes_default(bundles, monkeypatch):
    monkeypatch.setattr("edgebert.scaleout.engines.usable_cpus", lambda: 16)
    monkeypatch.setattr("edgebert.scaleout.worker.usable_cpus", lambda: 16)
    layout = plan("local", 4, None)
    assert (layout.workers, layout.threads) == (4, 4)
    assert (plan("local", None, 2).workers, plan("local", None, None).threads) == (8, 1)
    assert cpu_share("local", 3) == (5, "16 cores / 3 workers")
    assert cpu_share("ray") == (1, "Ray assigned no CPU: 1")          # not in a Ray actor
    with pytest.raises(ConfigError, match=r"--workers 6 x --threads 3 = 18 onnxruntime threads on 16 cores"):
        plan("local", 6, 3)
    monkeypatch.undo()
    cores = len(os.sched_getaffinity(0))
    worker = BundleWorker(bundles["embed"], workers=cores)          # local: the cores / the workers
    worker(["the film was good"])
    options = worker.session._session.get_session_options()
    assert options.intra_op_num_threads == worker.threads == 1
    assert worker.describe()["layout"] == f"{cores} workers x 1 threads"
    assert worker.describe()["threads_why"] == f"{cores} cores / {cores} workers"


# --------------------------------------------------------------------------- edgebert batch, local engine
def write_input(path: Path, task: str, copies: int = 1) -> Path:
    cols = inputs_of(task, copies)
    n = len(next(iter(cols.values())))
    pq.write_table(pa.table({"id": list(range(n)), **cols}), path)
    return path


def read_output(folder: Path) -> dict[str, list]:
    table = pq.read_table(folder)            # the record and metrics start with "_": not data to pyarrow
    return {name: table.column(name).to_pylist() for name in table.column_names}


@pytest.mark.parametrize("task", TASKS)
def test_batch_on_local_workers_gives_edgesession_results(bundles, task, tmp_path):
    data = write_input(tmp_path / "in.parquet", task, copies=2)
    want = reference(bundles[task], task, inputs_of(task, copies=2))
    for workers, batch_size in ((1, 4), (2, 32)):
        out = tmp_path / f"out{workers}"
        summary = run_batch(BatchConfig(bundle=bundles[task], input=data, output=out, engine="local",
                                        workers=workers, threads=1, batch_size=batch_size, part_rows=5))
        got = read_output(out)
        assert got["id"] == list(range(summary.rows)) and summary.rows_run == summary.rows
        assert summary.layout.line() == f"local, {workers} workers x 1 threads"
        assert_same(task, got, want)


def test_a_killed_batch_resumes_every_row_exactly_once(bundles, tmp_path):
    """The process is killed (SIGKILL) right after its second part reached the disk, before the record
    names it: --resume keeps the first, writes the second again and the rest once."""
    data = write_input(tmp_path / "in.parquet", "embed", copies=3)
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text("".join(json.dumps(row) + "\n" for row in pq.read_table(data).to_pylist()), encoding="utf-8")
    out = tmp_path / "out"
    script = textwrap.dedent(f"""
        import os, signal
        from edgebert.files import atomic
        from edgebert.scaleout import parts
        from edgebert.scaleout.batch import BatchConfig, run_batch
        written = []
        real = parts.write_json
        def write_json(target, obj):
            if len(obj.get("parts", {{}})) == 2:          # the second part is on disk, not yet recorded
                os.kill(os.getpid(), signal.SIGKILL)
            real(target, obj)
        parts.write_json = write_json
        run_batch(BatchConfig(bundle={str(bundles['embed'])!r}, input={str(jsonl)!r}, output={str(out)!r},
                              workers=1, threads=1, part_rows=8))
    """)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    killed = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert killed.returncode == -9, killed.stderr
    assert sorted(p.name for p in out.glob("part-*")) == ["part-00000.parquet", "part-00001.parquet"]
    with pytest.raises(OutputError, match="already holds the output of `edgebert batch`"):
        run_batch(BatchConfig(bundle=bundles["embed"], input=jsonl, output=out, workers=1, threads=1, part_rows=8))
    with pytest.raises(CheckpointError, match="its run had another part_rows"):
        run_batch(BatchConfig(bundle=bundles["embed"], input=jsonl, output=out, workers=1, threads=1,
                              part_rows=9, resume=True))

    from edgebert.cli import main
    assert main(["batch", str(bundles["embed"]), "--input", str(jsonl), "--output", str(out), "--workers", "1",
                 "--threads", "1", "--part-rows", "8", "--resume"]) == 0
    clean = tmp_path / "clean"
    run_batch(BatchConfig(bundle=bundles["embed"], input=jsonl, output=clean, workers=2, threads=1, part_rows=8))
    resumed, whole = read_output(out), read_output(clean)
    assert resumed["id"] == whole["id"] == list(range(len(TEXTS) * 3))          # every row, once, in order
    assert np.abs(np.stack(resumed["embedding"]) - np.stack(whole["embedding"])).max() <= 1e-6
    runs = [line for line in (out / "_metrics.jsonl").read_text().splitlines() if '"event": "run"' in line]
    assert len(runs) == 1 and '"rows_run": 52' in runs[0] and '"parts_resumed": 1' in runs[0]


def test_resume_rewrites_a_part_that_no_longer_matches_its_record(bundles, tmp_path, capsys):
    data = write_input(tmp_path / "in.parquet", "cls")
    out = tmp_path / "out"
    cfg = dict(bundle=bundles["cls"], input=data, output=out, workers=1, threads=1, part_rows=6)
    run_batch(BatchConfig(**cfg))
    before = read_output(out)
    (out / "part-00001.parquet").write_bytes(b"not parquet")
    summary = run_batch(BatchConfig(**cfg, resume=True))
    assert summary.redone == ["part-00001.parquet"] and summary.rows_run == 6 and summary.parts_resumed == 3
    assert read_output(out) == before


def test_overwrite_replaces_only_what_batch_wrote(bundles, tmp_path, capsys):
    import pyarrow.csv as pcsv

    from edgebert.cli import main

    data = write_input(tmp_path / "in.parquet", "cls")
    csv = tmp_path / "in.csv"
    pcsv.write_csv(pq.read_table(data), csv)
    out = tmp_path / "out"
    args = ["batch", str(bundles["cls"]), "--input", str(csv), "--output", str(out), "--workers", "1",
            "--threads", "1"]
    assert main(args) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith(f"batch: {len(TEXTS)} rows in ") and "on local, 1 workers x 1 threads" in line
    assert main(args) == 2
    assert "already holds the output of `edgebert batch` (pass --resume or --overwrite" in capsys.readouterr().err
    (out / "notes.txt").write_text("mine", encoding="utf-8")
    assert main([*args, "--overwrite"]) == 2
    err = capsys.readouterr().err
    assert "holds files `edgebert batch` did not write (notes.txt); --overwrite never deletes them" in err
    (out / "notes.txt").unlink()
    assert main([*args, "--overwrite", "--part-rows", "7"]) == 0
    assert sorted(p.name for p in out.glob("part-*")) == [f"part-0000{i}.parquet" for i in range(3)]
    other = tmp_path / "other"
    other.mkdir()
    (other / "data.csv").write_text("x", encoding="utf-8")
    assert main([*args[:-6], "--output", str(other), "--workers", "1", "--threads", "1"]) == 2
    assert "is not empty and was not written by `edgebert batch` (it holds data.csv)" in capsys.readouterr().err


def test_batch_errors_are_one_line(bundles, tmp_path, capsys, monkeypatch):
    from edgebert.cli import main

    data = write_input(tmp_path / "in.parquet", "embed")
    out = str(tmp_path / "out")
    assert main(["batch", str(bundles["embed"]), "--input", str(data), "--output", out, "--column", "body"]) == 2
    assert "has no column 'body' (its columns: id, text) (name the text column with --column)" in \
        capsys.readouterr().err
    assert main(["batch", str(bundles["embed"]), "--input", str(data), "--output", out, "--workers", "64",
                 "--threads", "64"]) == 2
    assert "onnxruntime threads on" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "ray", None)                       # as where ray is not installed
    assert main(["batch", str(bundles["embed"]), "--input", str(data), "--output", out, "--engine", "ray"]) == 2
    assert capsys.readouterr().err.strip() == "error: edgebert batch needs Ray Data (pip install 'edgebert[ray]')"
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    assert main(["batch", str(bundles["embed"]), "--input", str(data), "--output", out]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: edgebert batch reads and writes Parquet with pyarrow, which is not installed (pip install "
        "'edgebert[batch]' (pyarrow; [ray] / [spark] include it))")
    assert not Path(out).exists()
