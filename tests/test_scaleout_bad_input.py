"""``edgebert batch``, the adapters and ``edgebert triton-repo`` under bad input: a resume never mixes two models
or two inputs, every setting a worker would refuse is one line before any worker starts (and before
``--overwrite`` deletes anything), the input's text columns are read as text, a local worker never outlives its
driver, errors name the row as the user counts it, and a Triton repository never writes outside ``--out`` nor
over a user's files inside it. Tiny seeded bundles (``scaleout_fixtures``); runs in ``make test`` and in
``make test-scaleout``."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import REPO
from scaleout_fixtures import QUESTIONS, TEXTS, scaleout_bundle, small_graph_bundle

pa = pytest.importorskip("pyarrow", reason="edgebert batch needs pyarrow (pip install 'edgebert[batch]')")
import pyarrow.parquet as pq  # noqa: E402

from edgebert.errors import CheckpointError, ConfigError, DataError  # noqa: E402
from edgebert.scaleout.batch import BatchConfig, run_batch  # noqa: E402
from edgebert.scaleout.tables import read_table  # noqa: E402
from edgebert.scaleout.worker import BundleWorker  # noqa: E402

pytestmark = pytest.mark.scaleout


@pytest.fixture(scope="module")
def bundles(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.getbasetemp()
    return {task: scaleout_bundle(root, task) for task in ("embed", "cls", "token-cls", "qa")}


def _csv(path: Path, texts: list[str]) -> Path:
    import pyarrow.csv as pcsv

    pcsv.write_csv(pa.table({"id": list(range(len(texts))), "text": texts}), path)
    return path


def _cli(*args: str) -> tuple[int, str, str]:
    """``edgebert ARGS`` in a fresh process (as a user runs it): exit code, stdout, stderr."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "edgebert.cli", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=300)
    return done.returncode, done.stdout, done.stderr


# --------------------------------------------------------------------------- resume: the same model, the same input
def test_resume_refuses_another_model_at_the_same_path(bundles, tmp_path):
    """The bundle at the path is replaced by another model of the same task between the runs: the resumed
    run refuses (it would mix the two models' results), whatever the path says."""
    data = _csv(tmp_path / "in.csv", TEXTS)
    path = tmp_path / "bundle"
    shutil.copytree(bundles["embed"], path)
    out = tmp_path / "out"
    cfg = dict(bundle=path, input=data, output=out, workers=1, threads=1, part_rows=6)
    run_batch(BatchConfig(**cfg))
    (out / "part-00003.parquet").unlink()                     # as if the run had been killed before its last part
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["description"] = "retrained"                     # another bundle: every file hash-checked, new manifest
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="its run had another bundle") as refused:
        run_batch(BatchConfig(**cfg, resume=True))
    assert "--overwrite" in refused.value.hint
    assert not (out / "part-00003.parquet").exists()          # nothing of the other model written
    shutil.rmtree(path)
    shutil.copytree(bundles["embed"], path)                   # the same model again: resumes
    assert run_batch(BatchConfig(**cfg, resume=True)).parts_resumed == 3


def test_resume_refuses_an_input_rewritten_with_its_size_and_time_put_back(bundles, tmp_path):
    data = _csv(tmp_path / "in.csv", TEXTS)
    out = tmp_path / "out"
    cfg = dict(bundle=bundles["cls"], input=data, output=out, workers=1, threads=1, part_rows=6)
    run_batch(BatchConfig(**cfg))
    (out / "part-00001.parquet").unlink()
    stat = data.stat()
    text = data.read_text(encoding="utf-8")
    data.write_text(text.replace("worst plot ever", "best plot ever!"), encoding="utf-8")   # same length
    os.utime(data, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert data.stat().st_size == stat.st_size and data.stat().st_mtime_ns == stat.st_mtime_ns
    with pytest.raises(CheckpointError, match="its run had another input"):
        run_batch(BatchConfig(**cfg, resume=True))
    data.write_text(text, encoding="utf-8")                   # the same content, a new time: the same input
    assert run_batch(BatchConfig(**cfg, resume=True)).parts_resumed == 3


# --------------------------------------------------------------------------- settings: one line, before any worker
@pytest.mark.parametrize("args, says", [
    (["--precision", "bogus"], "unknown precision 'bogus'"),
    (["--precision", "fp16"], "fp16"),                    # a CPU bundle has no fp16 graph
    (["--aggregation", "bogus"], "--aggregation bogus is not one of"),
])
def test_a_setting_the_workers_would_refuse_is_one_line_before_they_start(bundles, tmp_path, args, says):
    data = _csv(tmp_path / "in.csv", TEXTS)
    out = tmp_path / "out"
    code, _, err = _cli("batch", bundles["embed"], "--input", data, "--output", out, "--workers", "2",
                        "--threads", "1", *args)
    assert code == 2 and len(err.strip().splitlines()) == 1 and says in err, err
    assert "Traceback" not in err and "worker process died" not in err
    assert not out.exists()


def test_int8_on_a_bundle_without_an_int8_graph_is_one_line(bundles, tmp_path):
    data = _csv(tmp_path / "in.csv", TEXTS)
    code, _, err = _cli("batch", bundles["token-cls"], "--input", data, "--output", tmp_path / "out",
                        "--workers", "2", "--threads", "1", "--precision", "int8")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "int8" in err and "Traceback" not in err, err


def test_overwrite_keeps_the_old_parts_when_the_new_run_cannot_start(bundles, tmp_path):
    data = _csv(tmp_path / "in.csv", TEXTS)
    out = tmp_path / "out"
    run_batch(BatchConfig(bundle=bundles["embed"], input=data, output=out, workers=1, threads=1, part_rows=6))
    before = sorted((p.name, p.read_bytes()) for p in out.glob("part-*"))
    code, _, err = _cli("batch", bundles["embed"], "--input", data, "--output", out, "--workers", "1",
                        "--threads", "1", "--precision", "bogus", "--overwrite")
    assert code == 2 and "unknown precision" in err
    assert sorted((p.name, p.read_bytes()) for p in out.glob("part-*")) == before and len(before) == 4


# --------------------------------------------------------------------------- the input's text columns
def test_the_text_columns_are_read_as_text_whatever_they_look_like(tmp_path):
    csv = tmp_path / "digits.csv"
    csv.write_text("id,text\n1,123\n2,4567\n", encoding="utf-8")
    table = read_table(csv, ["text"])
    assert table.column("text").to_pylist() == ["123", "4567"] and table.column("id").type == pa.int64()

    category = pa.table({"text": pa.array(["a cat", "a dog", "a cat"]).dictionary_encode()})
    pq.write_table(category, tmp_path / "cat.parquet")
    assert read_table(tmp_path / "cat.parquet", ["text"]).column("text").to_pylist() == ["a cat", "a dog", "a cat"]

    long = tmp_path / "long.jsonl"
    long.write_text(json.dumps({"text": "word " * 400_000}) + "\n" + json.dumps({"text": "short"}) + "\n")
    assert long.stat().st_size > 1 << 20                         # a line past pyarrow's 1 MB default block
    assert read_table(long, ["text"]).num_rows == 2


def test_parquet_files_that_disagree_are_named(tmp_path):
    folder = tmp_path / "parts"
    folder.mkdir()
    pq.write_table(pa.table({"text": ["a"], "n": ["one"]}), folder / "a.parquet")
    pq.write_table(pa.table({"text": ["b"], "n": [2]}), folder / "b.parquet")
    with pytest.raises(DataError, match="do not share one schema: b.parquet has int64 where a.parquet has string"):
        read_table(folder, ["text"])
    pq.write_table(pa.table({"text": [3], "n": ["three"]}), folder / "b.parquet")
    with pytest.raises(DataError, match="b.parquet: column 'text' holds int64, not text"):
        read_table(folder, ["text"])


# --------------------------------------------------------------------------- a killed driver
def _children(pid: int) -> set[int]:
    found = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with open(task / "children") as fh:
            found.update(int(p) for p in fh.read().split())
    return found


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc (Linux)")
def test_local_workers_exit_when_their_driver_is_killed(bundles, tmp_path):
    data = _csv(tmp_path / "in.csv", TEXTS * 3000)                  # 60,000 rows: minutes on two workers
    script = textwrap.dedent(f"""
        from edgebert.scaleout.batch import BatchConfig, run_batch
        run_batch(BatchConfig(bundle={str(bundles['embed'])!r}, input={str(data)!r}, output={str(tmp_path / 'out')!r},
                              workers=2, threads=1, part_rows=500))
    """)
    driver = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": str(REPO)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline, workers = time.monotonic() + 120, set()
        while time.monotonic() < deadline and not (tmp_path / "out" / "part-00000.parquet").exists():
            time.sleep(0.2)
        workers = {p for p in _children(driver.pid) if Path(f"/proc/{p}").exists()}
        assert len(workers) >= 2, workers                           # the pool's processes (and its tracker)
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=30)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in workers):
        time.sleep(0.2)
    alive = [p for p in workers if Path(f"/proc/{p}").exists()
             and "Z" not in Path(f"/proc/{p}/stat").read_text().split(")")[-1].split()[:1]]
    assert not alive, f"worker processes {alive} outlived their killed driver"


# --------------------------------------------------------------------------- the adapters
def test_the_worker_takes_none_as_the_default_and_refuses_what_is_not_a_count(bundles):
    assert BundleWorker(bundles["embed"], batch_size=None).batch_size == 32
    for bad in ({"batch_size": "abc"}, {"batch_size": 0}, {"threads": 2.5}, {"workers": True}):
        with pytest.raises(ConfigError, match="must be a whole number of at least 1"):
            BundleWorker(bundles["embed"], **bad)
    worker = BundleWorker(bundles["embed"], threads=1)
    with pytest.raises(ConfigError, match="the text column is a single str, not a column of texts"):
        worker("a small cat")
    assert len(worker(["a small cat"])["embedding"]) == 1


def test_an_error_names_the_row_as_the_input_counts_it(bundles):
    worker = BundleWorker(bundles["qa"], threads=1)
    (q, c), _ = QUESTIONS[:2]
    with pytest.raises(DataError, match=r"question\[3\]"):
        worker([q, None, q, "   "], [c, c, c, c])
    with pytest.raises(DataError, match=r"question\[13\]"):
        worker([q, None, q, "   "], [c, c, c, c], first_row=10)


# --------------------------------------------------------------------------- triton-repo
@pytest.mark.parametrize("name", ["..", ".", "a/b", "../x", ""])
def test_a_triton_model_name_is_one_folder_inside_out(bundles, tmp_path, name):
    from edgebert.scaleout.triton_repo import write_triton_repo

    base = tmp_path / "base"
    base.mkdir()
    (base / "config.pbtxt").write_text("the user's", encoding="utf-8")
    with pytest.raises(ConfigError, match="is not a Triton model name"):
        write_triton_repo(bundles["embed"], base / "repo", name=name)
    assert sorted(p.name for p in base.iterdir()) == ["config.pbtxt"]
    assert (base / "config.pbtxt").read_text() == "the user's"


def test_triton_cores_zero_is_refused_not_read_as_all(bundles, tmp_path):
    from edgebert.scaleout.triton_repo import write_triton_repo

    for cores in (0, -2):
        with pytest.raises(ConfigError, match=f"--cores {cores} must be a positive integer"):
            write_triton_repo(bundles["embed"], tmp_path / "repo", cores=cores)


HAS_TRITONCLIENT = __import__("importlib").util.find_spec("tritonclient") is not None


@pytest.mark.skipif(not HAS_TRITONCLIENT, reason="tritonclient is not installed here (Triton's config schema)")
def test_triton_overwrite_never_deletes_another_version_or_a_users_file(bundles, tmp_path):
    from edgebert.errors import OutputError
    from edgebert.scaleout.triton_repo import write_triton_repo

    repo = tmp_path / "repo"
    write_triton_repo(bundles["embed"], repo, threads=1, instances=1)
    model = repo / "edgebert_embed"
    (model / "2").mkdir()
    (model / "2" / "model.onnx").write_bytes(b"the user's version 2")
    (model / "notes.md").write_text("mine", encoding="utf-8")
    with pytest.raises(OutputError, match="did not write \\(edgebert_embed/2, edgebert_embed/notes.md\\); --overwrite never deletes them"):
        write_triton_repo(bundles["embed"], repo, threads=1, instances=1, overwrite=True)
    assert (model / "2" / "model.onnx").read_bytes() == b"the user's version 2"
    assert (model / "notes.md").read_text() == "mine"
    shutil.rmtree(model / "2")
    (model / "notes.md").unlink()
    assert write_triton_repo(bundles["embed"], repo, threads=1, instances=1, overwrite=True).model == "edgebert_embed"


@pytest.mark.skipif(not HAS_TRITONCLIENT, reason="tritonclient is not installed here (Triton's config schema)")
def test_triton_serves_the_small_graph_as_target_int4(tmp_path_factory, tmp_path):
    from edgebert.bundle import read_manifest
    from edgebert.runtime import EdgeSession
    from edgebert.scaleout import triton_model
    from edgebert.scaleout.triton_repo import write_triton_repo

    bundle = small_graph_bundle(tmp_path_factory.getbasetemp())
    assert "int4" in read_manifest(bundle).models
    repo = write_triton_repo(bundle, tmp_path / "repo", target="int4", threads=1, instances=1)
    version = tmp_path / "repo" / repo.model / "1"
    assert any("packed for int4" in note for note in repo.notes), repo.notes
    params = {"bundle": "bundle", "threads": "1", "precision": "int4", "int8_target": ""}
    role = triton_model.make_role(version, params)
    want = EdgeSession(bundle, provider="cpu", precision="int4", threads=1).embed(TEXTS[:4])
    assert abs(role.run({"text": TEXTS[:4]})["embedding"] - want).max() <= 1e-6
    with pytest.raises(ConfigError, match="serves the small"):
        write_triton_repo(bundle, tmp_path / "repo2", target="int4", precision="fp32")


def test_a_request_with_bytes_that_are_not_utf8_fails_alone(bundles):
    from edgebert.runtime import EdgeSession
    from edgebert.scaleout import triton_model

    role = triton_model.make_role(bundles["embed"].parent, {"bundle": bundles["embed"].name, "threads": "1"})
    good = [triton_model.strings(TEXTS[:2]), triton_model.strings(TEXTS[2:3])]
    bad = triton_model.strings(["fine"])
    bad[0, 0] = b"\xff\xfe not utf-8"

    def read(request):
        return {"text": triton_model.texts_of(request, "text")}

    results = triton_model.run_requests(role, [good[0], bad, good[1]], read, merge=True)
    assert isinstance(results[1], ValueError) and "text[0] is not UTF-8 text" in str(results[1])
    want = EdgeSession(bundles["embed"], provider="cpu", threads=1).embed(TEXTS[:3])
    assert abs(results[0]["embedding"] - want[:2]).max() <= 1e-6
    assert abs(results[2]["embedding"] - want[2:3]).max() <= 1e-6
