"""Where ``edgebert batch`` runs its parts: ``local`` worker processes, Ray Data, or Spark.

Each engine takes the pending parts (index, a ``pyarrow.Table`` of the input columns) and yields (index,
result ``pyarrow.Table``) as parts complete, in any order; the job (``batch``) writes them.

* ``local``: ``workers`` processes on this machine (``spawn``, so no onnxruntime state is forked), each one
  ``BundleWorker`` with ``threads`` onnxruntime threads, workers x threads <= the cores (``plan_local``); one
  worker runs in this process. ``pin``: each worker on its own core (``os.sched_setaffinity``), for scaling
  measurements.
* ``ray``: the running cluster (``RAY_ADDRESS``, or one ``ray start`` made on this machine) or a local one
  (``ray.init()``); one streaming ``map_batches`` over every pending part with an actor pool of ``workers``
  actors of ``threads`` CPUs (default: the cluster's CPUs / threads); an archive goes through the object store.
* ``spark``: the active ``SparkSession`` or a ``local[workers x threads]`` one (``spark.task.cpus`` =
  threads); one Spark job per part through the task's ``predict_batch_udf``; an archive is shipped with
  ``addFile``.
"""

from __future__ import annotations

import os
import sys
from concurrent.futures import FIRST_COMPLETED, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from edgebert.errors import ConfigError, RuntimeFault
from edgebert.scaleout.tasks import TaskColumns, arrow_columns
from edgebert.scaleout.worker import ENGINES, BundleWorker
from edgebert.system.environment import usable_cpus

PART_COLUMN, ROW_COLUMN = "__edgebert_part", "__edgebert_row"


@dataclass
class Layout:
    """workers x threads of a run, and why (filled in by the engine when it knows its cluster)."""

    engine: str
    workers: int | None
    threads: int | None
    why: str = ""

    def line(self) -> str:
        return f"{self.engine}, {self.workers or '?'} workers x {self.threads or '?'} threads"


def plan(engine: str, workers: int | None, threads: int | None) -> Layout:
    """Check the engine's workers and threads; ``local`` splits this machine's cores: workers x threads <= cores
    (default: one worker per core, one thread each)."""
    if engine not in ENGINES:
        raise ConfigError(f"--engine {engine} is not one of {', '.join(ENGINES)}")
    for name, value in (("--workers", workers), ("--threads", threads)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise ConfigError(f"{name} {value!r} must be a whole number of at least 1")
    if engine != "local":
        return Layout(engine, workers, threads, "the engine's CPUs")
    cores = usable_cpus()
    if workers is None:
        workers = max(1, cores // (threads or 1))
    if threads is None:
        threads = max(1, cores // workers)
    if workers * threads > cores:
        raise ConfigError(f"--workers {workers} x --threads {threads} = {workers * threads} onnxruntime threads on "
                          f"{cores} cores: they would slow each other down",
                          f"keep workers x threads <= {cores} (e.g. --workers {min(workers, cores)} --threads "
                          f"{max(1, cores // min(workers, cores))})")
    return Layout("local", workers, threads, f"{cores} cores")


def prepare(layout: Layout) -> None:
    """The engine up, before the job writes anything: its package imported (a missing one is the CLI's one-line
    ``edgebert batch needs Ray Data (pip install 'edgebert[ray]')``), Ray's cluster joined or started and Spark's
    session found or made, and workers x threads checked against the CPUs it has (``ConfigError``), as
    ``local``'s are in ``plan``."""
    if layout.engine == "ray":
        _ray_layout(layout)
    elif layout.engine == "spark":
        _spark_session(layout)


def _oversubscribed(workers: int, threads: int, cpus: int, where: str) -> ConfigError:
    return ConfigError(f"--workers {workers} x --threads {threads} = {workers * threads} onnxruntime threads on "
                       f"{where} of {cpus} CPUs: they would slow each other down",
                       f"keep workers x threads <= {cpus}")


def run_parts(layout: Layout, options: dict[str, Any], spec: TaskColumns, columns: Sequence[str],
              parts: Sequence[tuple[int, Any]], pin: bool = False,
              first_rows: dict[int, int] | None = None) -> Iterator[tuple[int, Any]]:
    """(index, result table) per part, as they complete. ``options``: ``BundleWorker``'s keywords (bundle,
    task, precision, batch_size, aggregation); ``first_rows``: each part's first input row (local: errors name
    the input's row)."""
    if not parts:
        return iter(())
    if layout.engine == "local":
        return _local(layout, options, spec, columns, parts, pin, first_rows or {})
    if layout.engine == "ray":
        return _ray(layout, options, spec, columns, parts)
    return _spark(layout, options, spec, columns, parts)


# --------------------------------------------------------------------------- local
_WORKER: BundleWorker | None = None


def _exit_with_parent(parent: int, every: float = 0.5) -> None:
    """A daemon thread that ends this worker process when its parent (the batch driver) is gone, killed -9
    included (then this process is re-parented): a worker never outlives the run holding a session."""
    import threading
    import time

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every)
        os._exit(1)

    threading.Thread(target=watch, name="edgebert-parent-watch", daemon=True).start()


def _start_worker(options: dict[str, Any], cores=None, parent: int | None = None) -> None:
    """A local worker process's initializer: its parent watched, its core (``pin``), then its session, opened
    before the first part."""
    global _WORKER
    if parent is not None:
        _exit_with_parent(parent)
    if cores is not None:
        os.sched_setaffinity(0, {cores.get()})
    _WORKER = BundleWorker(**options)
    _WORKER.session


def _run_part(index: int, inputs: list[list], spec: TaskColumns, first_row: int = 0):
    import pyarrow as pa

    return index, pa.table(arrow_columns(spec, _WORKER(*inputs, first_row=first_row)))


def _inputs(table, columns: Sequence[str]) -> list[list]:
    return [table.column(c).to_pylist() for c in columns]


def _local(layout: Layout, options, spec, columns, parts, pin, first_rows) -> Iterator[tuple[int, Any]]:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    options = {**options, "engine": "local", "workers": layout.workers, "threads": layout.threads}
    if layout.workers == 1 and not pin:
        global _WORKER
        _start_worker(options)
        try:
            for index, table in parts:
                yield _run_part(index, _inputs(table, columns), spec, first_rows.get(index, 0))
        finally:
            _WORKER = None                      # the session closes with the run
        return
    context = multiprocessing.get_context("spawn")
    cores = None
    if pin:
        cores = context.Queue()
        for core in sorted(os.sched_getaffinity(0))[:layout.workers]:
            cores.put(core)
    with ProcessPoolExecutor(layout.workers, mp_context=context, initializer=_start_worker,
                             initargs=(options, cores, os.getpid())) as pool:
        todo = list(parts)[::-1]
        running = set()
        while todo or running:
            while todo and len(running) < 2 * layout.workers:   # a bounded queue: memory stays flat
                index, table = todo.pop()
                running.add(pool.submit(_run_part, index, _inputs(table, columns), spec, first_rows.get(index, 0)))
            finished, running = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                try:
                    result = future.result()
                except BrokenProcessPool as exc:
                    raise RuntimeFault(f"a local worker process died ({' '.join(str(exc).split())[:160]})",
                                       "out of memory? fewer --workers or a smaller --part-rows; the parts "
                                       "written are kept: run again with --resume") from exc
                yield result


# --------------------------------------------------------------------------- Ray
def _ray(layout: Layout, options, spec, columns, parts) -> Iterator[tuple[int, Any]]:
    import pyarrow as pa
    import pyarrow.compute as pc
    import ray

    from edgebert.scaleout.ray_data import BundleMapper, map_kwargs

    _ray_layout(layout)
    threads = layout.threads
    tables, sizes = [], {}
    for index, table in parts:
        n = table.num_rows
        sizes[index] = n
        t = table.select(list(columns))
        t = t.append_column(PART_COLUMN, pa.array([index] * n, pa.int64()))
        tables.append(t.append_column(ROW_COLUMN, pa.array(range(n), pa.int64())))
    dataset = ray.data.from_arrow(tables)
    ship = Path(options["bundle"]).is_file()       # an archive travels through the object store to every node
    kwargs = map_kwargs(options["bundle"], workers=layout.workers, threads=threads, columns=columns, ship=ship,
                        task=options.get("task"), precision=options.get("precision"),
                        batch_size=options.get("batch_size", 32), aggregation=options.get("aggregation", "simple"))
    mapped = dataset.map_batches(BundleMapper, **kwargs)
    pending: dict[int, list] = {}
    for batch in mapped.iter_batches(batch_format="pyarrow", batch_size=None):
        for index in set(batch.column(PART_COLUMN).to_pylist()):
            rows = batch.filter(pc.equal(batch.column(PART_COLUMN), index))
            pending.setdefault(index, []).append(rows)
            if sum(t.num_rows for t in pending[index]) == sizes[index]:
                whole = pa.concat_tables(pending.pop(index)).sort_by(ROW_COLUMN)
                yield index, whole.select(list(spec.outputs))


def _ray_layout(layout: Layout) -> None:
    """Join the running Ray cluster (``RAY_ADDRESS``) or start a local one; workers x threads within its CPUs."""
    import ray

    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS") or None, include_dashboard=False, log_to_driver=False)
    threads = layout.threads or 1
    cpus = int(ray.cluster_resources().get("CPU", 1))
    if layout.workers is None:
        layout.workers = max(1, cpus // threads)
    if layout.workers * threads > cpus:
        raise _oversubscribed(layout.workers, threads, cpus, "a Ray cluster")
    layout.threads, layout.why = threads, f"Ray cluster of {cpus} CPUs"


# --------------------------------------------------------------------------- Spark
def _spark_session(layout: Layout):
    """The active ``SparkSession`` (its ``spark.task.cpus`` are the threads), or a ``local[workers x threads]``
    one made here, workers x threads within this machine's cores as for ``local``."""
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    threads = layout.threads or 1
    if spark is None:
        cores = usable_cpus()
        workers = layout.workers or max(1, cores // threads)
        if workers * threads > cores:
            raise _oversubscribed(workers, threads, cores, "this machine")
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)    # its Python workers: this interpreter
        spark = (SparkSession.builder.master(f"local[{workers * threads}]").appName("edgebert batch")
                 .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
                 .config("spark.task.cpus", str(threads)).config("spark.ui.enabled", "false").getOrCreate())
    else:
        threads = int(spark.conf.get("spark.task.cpus", "1"))
        workers = layout.workers or max(1, spark.sparkContext.defaultParallelism // threads)
    layout.workers, layout.threads, layout.why = workers, threads, "spark.task.cpus"
    return spark


def _spark(layout: Layout, options, spec, columns, parts) -> Iterator[tuple[int, Any]]:
    import pyarrow as pa

    from edgebert.scaleout.spark import bundle_udf, rows_of, ship_bundle

    spark = _spark_session(layout)
    workers = layout.workers
    bundle = ship_bundle(spark, options["bundle"])
    udf = bundle_udf(bundle, options["task"], batch_size=options.get("batch_size", 32),   # threads: task.cpus
                     precision=options.get("precision"), workers=workers,
                     aggregation=options.get("aggregation", "simple"))
    for index, table in parts:
        # null in, null out, as on the other engines: only rows whose inputs are all present go to Spark
        # (pandas would turn a null text into NaN, and an embedding UDF has no null row)
        inputs = _inputs(table, columns)
        present = [i for i, row in enumerate(zip(*inputs)) if all(v is not None for v in row)]
        results = {name: [None] * table.num_rows for name in spec.outputs}
        if present:
            frame = table.select(list(columns)).take(present).to_pandas()
            frame[ROW_COLUMN] = range(len(frame))
            result = (spark.createDataFrame(frame).repartition(workers)
                      .select(ROW_COLUMN, udf(*columns).alias("result")).toPandas().sort_values(ROW_COLUMN))
            values = [rows_of(v) for v in result["result"]]
            for name in spec.outputs:
                got = values if spec.outputs == ("embedding",) else [None if v is None else v[name] for v in values]
                for i, v in zip(present, got):
                    results[name][i] = v
        yield index, pa.table(arrow_columns(spec, results))
