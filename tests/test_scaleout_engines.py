"""``edgebert.scaleout`` on the engines themselves: a local Ray cluster (2 CPUs, an actor pool of two, both
used) and Spark ``local[2]`` (the bundle from a path and from an archive shipped with ``addFile``); the results
equal ``EdgeSession``'s for every task. One cluster per module (their start-up is the slow part). Skips, naming
the package, where ray or pyspark is absent (``make test``); ``make test-scaleout`` has both."""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from scaleout_fixtures import TASKS, assert_same, inputs_of, reference, scaleout_bundle

pa = pytest.importorskip("pyarrow", reason="edgebert.scaleout needs pyarrow (pip install 'edgebert[batch]')")
import pyarrow.parquet as pq  # noqa: E402

pytestmark = pytest.mark.scaleout


@pytest.fixture(scope="module")
def bundles(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.getbasetemp()
    return {task: scaleout_bundle(root, task) for task in TASKS}


def _table(task: str, copies: int = 2):
    cols = inputs_of(task, copies)
    n = len(next(iter(cols.values())))
    return pa.table({"id": list(range(n)), **cols}), cols


# --------------------------------------------------------------------------- Ray
@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'edgebert[ray]'; make test-scaleout)")
    pytest.importorskip("ray.data", reason="Ray Data is not installed (pip install 'edgebert[ray]')")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    context.wait_for_min_actors_s = 120        # both actors up before the first block: each one gets rows
    yield ray
    ray.shutdown()


@pytest.mark.parametrize("task", TASKS)
def test_ray_data_actor_pool_gives_edgesession_results_on_both_actors(ray_cluster, bundles, task):
    from edgebert.scaleout.ray_data import PID_COLUMN, BundleMapper, map_kwargs

    table, cols = _table(task, copies=6 if task == "qa" else 3)
    columns = tuple(inputs_of(task))
    # six blocks from the start: an all-to-all repartition would wait for CPUs the actor pool holds
    dataset = ray_cluster.data.from_arrow([table.slice(i, 4) for i in range(0, table.num_rows, 4)])
    mapped = dataset.map_batches(BundleMapper, **map_kwargs(bundles[task], workers=2, threads=1, columns=columns,
                                                             rows_per_call=4, with_pid=True))
    out = pa.concat_tables(list(mapped.iter_batches(batch_format="pyarrow", batch_size=None))).sort_by("id")
    assert out.column("id").to_pylist() == list(range(table.num_rows))
    assert len(set(out.column(PID_COLUMN).to_pylist())) == 2          # both actors of the pool ran rows
    got = {name: out.column(name).to_pylist() for name in out.column_names}
    assert_same(task, got, reference(bundles[task], task, cols))


def test_ray_numpy_batches_and_the_actor_threads(ray_cluster, bundles):
    from edgebert.scaleout.ray_data import BundleMapper, map_kwargs

    table, cols = _table("embed")

    class Described(BundleMapper):
        def __call__(self, batch):
            out = super().__call__(batch)
            out["layout"] = [self.describe()["layout"]] * len(out["text"])
            out["threads_why"] = [self.describe()["threads_why"]] * len(out["text"])
            return out

    kwargs = map_kwargs(bundles["embed"], workers=2, threads=1, batch_format="numpy")
    rows = ray_cluster.data.from_arrow(table).map_batches(Described, **kwargs).take_all()
    assert {r["layout"] for r in rows} == {"2 workers x 1 threads"}
    assert {r["threads_why"] for r in rows} == {"Ray's num_cpus of the actor"}
    rows.sort(key=lambda r: r["id"])
    assert_same("embed", {"embedding": [r["embedding"] for r in rows]}, reference(bundles["embed"], "embed", cols))


def test_batch_on_ray_with_an_archive_shipped_through_the_object_store(ray_cluster, bundles, tmp_path):
    from edgebert.files.user_cache import cache_root
    from edgebert.runtime.archive import write_archive
    from edgebert.scaleout.batch import BatchConfig, run_batch

    archive = tmp_path / "cls.zip"
    write_archive(bundles["cls"], archive)
    table, cols = _table("cls", copies=3)
    pq.write_table(table, tmp_path / "in.parquet")
    summary = run_batch(BatchConfig(bundle=archive, input=tmp_path / "in.parquet", output=tmp_path / "out",
                                    engine="ray", threads=1, part_rows=16))
    shipped = cache_root() / "shipped" / hashlib.sha256(archive.read_bytes()).hexdigest() / "cls.zip"
    assert shipped.read_bytes() == archive.read_bytes()                   # the actors' copy, from the object store
    assert summary.layout.line() == "ray, 2 workers x 1 threads"
    out = pq.read_table(tmp_path / "out")
    assert out.column("id").to_pylist() == list(range(table.num_rows))
    assert_same("cls", {n: out.column(n).to_pylist() for n in ("label", "score")},
                reference(bundles["cls"], "cls", cols))


# --------------------------------------------------------------------------- Spark
@pytest.fixture(scope="module")
def spark():
    pytest.importorskip("pyspark", reason="pyspark is not installed (pip install 'edgebert[spark]'; make "
                                          "test-scaleout)")
    pytest.importorskip("pandas", reason="Spark's pandas UDFs need pandas (pip install 'edgebert[spark]')")
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)      # the workers: this venv's python
    session = (SparkSession.builder.master("local[2]").appName("edgebert tests").config("spark.ui.enabled", "false")
               .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def _spark_results(spark, udf, task: str, table) -> dict[str, list]:
    from edgebert.scaleout.spark import rows_of

    columns = tuple(inputs_of(task))
    frame = spark.createDataFrame(table.to_pandas()).repartition(2)
    rows = sorted(frame.select("id", udf(*columns).alias("r")).collect(), key=lambda r: r["id"])
    values = [rows_of(r["r"]) for r in rows]
    if task == "embed":
        return {"embedding": values}
    return {name: [v[name] for v in values] for name in values[0]}


@pytest.mark.parametrize("task", TASKS)
def test_spark_predict_batch_udf_from_a_path_gives_edgesession_results(spark, bundles, task):
    from edgebert.scaleout.spark import bundle_udf

    table, cols = _table(task)
    udf = bundle_udf(str(bundles[task]), task, rows_per_call=5, batch_size=4)
    assert_same(task, _spark_results(spark, udf, task, table), reference(bundles[task], task, cols))


def test_a_spark_worker_takes_spark_task_cpus_threads(spark):
    from edgebert.scaleout.worker import cpu_share

    shares = spark.sparkContext.parallelize(range(2), 2).mapPartitions(lambda _: [cpu_share("spark")]).collect()
    assert shares == [(1, "spark.task.cpus")] * 2
    assert cpu_share("spark") == (1, "no Spark task: 1")                 # the driver is no task


def test_the_spark_udf_pickles_without_a_session(spark, bundles):
    """What Spark ships to its Python workers (make_predict_fn's closure) holds the bundle's path, never a
    session, even after a predict function was made and used in this process."""
    from pyspark import cloudpickle

    from edgebert.scaleout.spark import make_predict_fn
    from edgebert.scaleout.tasks import task_columns

    make = make_predict_fn(str(bundles["cls"]), task_columns("cls"), {"task": "cls", "threads": 1})
    predict = make()
    assert [r["label"] for r in predict(np.array(["the film was good"], dtype=object))]
    blob = cloudpickle.dumps(make)
    assert b"InferenceSession" not in blob and len(blob) < 20_000, len(blob)
    assert cloudpickle.loads(blob)()(np.array(["worst plot ever"], dtype=object))[0]["label"]


def test_spark_from_an_archive_shipped_with_addfile(spark, bundles, tmp_path):
    from edgebert.runtime.archive import write_archive
    from edgebert.scaleout.spark import ShippedBundle, bundle_udf, ship_bundle

    archive = tmp_path / "tiny-embed.tar.gz"
    write_archive(bundles["embed"], archive)
    shipped = ship_bundle(spark, archive)
    assert shipped == ShippedBundle("tiny-embed.tar.gz")
    table, cols = _table("embed")
    got = _spark_results(spark, bundle_udf(shipped, "embed"), "embed", table)
    assert_same("embed", got, reference(bundles["embed"], "embed", cols))


def test_batch_on_spark(spark, bundles, tmp_path):
    from edgebert.scaleout.batch import BatchConfig, run_batch

    table, cols = _table("qa", copies=3)
    pq.write_table(table, tmp_path / "in.parquet")
    summary = run_batch(BatchConfig(bundle=bundles["qa"], input=tmp_path / "in.parquet", output=tmp_path / "out",
                                    engine="spark", part_rows=5))
    assert summary.layout.line() == "spark, 2 workers x 1 threads" and summary.parts == 3
    out = pq.read_table(tmp_path / "out")
    assert out.column("id").to_pylist() == list(range(table.num_rows))
    got = {n: out.column(n).to_pylist() for n in ("answer", "start", "end", "score")}
    assert_same("qa", got, reference(bundles["qa"], "qa", cols))


def test_spark_keeps_null_in_null_out_as_the_local_engine(spark, bundles, tmp_path):
    """pandas turns a null text into NaN: the Spark engine sends only present rows, so every task's null row
    gets null results, the others the local engine's."""
    from edgebert.scaleout.batch import BatchConfig, run_batch

    for task in ("embed", "cls", "token-cls"):
        texts = ["the film was good", None, "worst plot ever", None]
        pq.write_table(pa.table({"id": [0, 1, 2, 3], "text": pa.array(texts, pa.string())}), tmp_path / f"{task}.pq")
        outs = {}
        for engine in ("spark", "local"):
            out = tmp_path / f"{task}-{engine}"
            run_batch(BatchConfig(bundle=bundles[task], input=tmp_path / f"{task}.pq", output=out, engine=engine,
                                  workers=1, threads=1))
            outs[engine] = pq.read_table(out).drop_columns(["id", "text"]).to_pylist()
        assert all(v is None for row in (outs["spark"][1], outs["spark"][3]) for v in row.values()), outs["spark"]
        assert outs["spark"][0].keys() == outs["local"][0].keys()
        for got, want in zip(outs["spark"], outs["local"]):
            for name, value in want.items():
                if isinstance(value, list) and value and isinstance(value[0], float):
                    assert np.abs(np.array(got[name]) - np.array(value)).max() <= 1e-6
                elif isinstance(value, float):
                    assert abs(got[name] - value) <= 1e-6
                elif name != "entities":
                    assert got[name] == value, (task, name)


def test_spark_and_ray_refuse_before_they_start(spark, bundles, tmp_path, monkeypatch):
    from pyspark.sql import SparkSession

    from edgebert.errors import ConfigError
    from edgebert.scaleout.batch import BatchConfig, run_batch
    from edgebert.scaleout.engines import Layout, prepare

    pq.write_table(pa.table({"text": ["a film"]}), tmp_path / "in.pq")
    for engine in ("spark", "ray"):
        with pytest.raises(ConfigError, match="unknown precision 'bogus'"):
            run_batch(BatchConfig(bundle=bundles["embed"], input=tmp_path / "in.pq", output=tmp_path / engine,
                                  engine=engine, precision="bogus"))
        assert not (tmp_path / engine).exists()
    monkeypatch.setattr(SparkSession, "getActiveSession", staticmethod(lambda: None))   # no session yet
    with pytest.raises(ConfigError, match="--workers 64 x --threads 4 = 256 onnxruntime threads on this machine"):
        prepare(Layout("spark", 64, 4))


def test_the_ray_adapter_reads_none_as_its_default_and_refuses_what_is_not_a_count(ray_cluster, bundles):
    from edgebert.errors import ConfigError
    from edgebert.scaleout.ray_data import map_kwargs

    assert map_kwargs(bundles["embed"], workers=2, threads=None)["num_cpus"] == 1
    for bad in ({"workers": 2.5}, {"workers": 0}, {"workers": 2, "threads": "2"}):
        with pytest.raises(ConfigError, match="must be a whole number of at least 1"):
            map_kwargs(bundles["embed"], **bad)
