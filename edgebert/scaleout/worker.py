"""``BundleWorker``: one bundle's task in one worker of an engine, picklable, its session opened inside the worker.

An ``EdgeSession`` cannot be pickled (it holds an onnxruntime session), so what an engine ships to its workers
is this small holder: where the bundle is (a folder path, or an ``export --archive`` file: ``EdgeSession``
extracts it once per node into the content-addressed cache, ``runtime.archive``, which concurrent workers
share), the task's columns and the session's options. The session opens on the first call, inside the
worker, and ``__getstate__`` leaves it out: a worker pickled after use ships without it.

Threads: onnxruntime's default is one intra-op thread per core *in every worker*, so n workers on n cores
run n x n threads. Unless ``threads`` is given, a worker takes its CPU share (``cpu_share``): Ray's CPUs
assigned to the actor, Spark's ``spark.task.cpus``, for ``local`` the cores divided by the workers, and a
process that is none of those the CPUs it may use. ``describe()`` says which.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

from edgebert.errors import ConfigError
from edgebert.scaleout.tasks import TaskColumns, run_task, task_columns
from edgebert.system.environment import usable_cpus

ENGINES = ("local", "ray", "spark")
DEFAULT_BATCH_SIZE = 32


def count_option(name: str, value: Any, default: int | None = None) -> int | None:
    """A count an adapter takes (workers, threads, batch_size): None is ``default`` (as ``EdgeSession`` reads None),
    else a whole number of at least 1 (not a bool, not 2.5, not "4"); ``ConfigError`` naming it otherwise."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name}={value!r} must be a whole number of at least 1",
                          f"pass {name}=None for the default" if default is not None or name == "threads" else None)
    return value


def ray_cpus() -> float | None:
    """CPUs Ray assigned to this actor or task (None outside a Ray worker)."""
    import sys

    if "ray" not in sys.modules:
        return None
    import ray

    if not ray.is_initialized():
        return None
    try:
        cpus = ray.get_runtime_context().get_assigned_resources().get("CPU")
    except Exception:  # noqa: BLE001  (the driver has no assigned resources in some Ray versions)
        return None
    return float(cpus) if cpus else None


def spark_task_cpus() -> int | None:
    """``spark.task.cpus`` of the Spark task running this code (None outside one)."""
    import sys

    if "pyspark" not in sys.modules:
        return None
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        return None
    try:
        return int(context.cpus())
    except Exception:  # noqa: BLE001  (older pyspark: read the conf the task carries)
        value = context.getLocalProperty("spark.task.cpus")
        return int(value) if value else 1


def cpu_share(engine: str, workers: int | None = None) -> tuple[int, str]:
    """(threads, why) for one worker of ``engine``: its CPU share, at least 1 and at most the CPUs this
    process may use."""
    cores = usable_cpus()
    if engine == "ray":
        cpus = ray_cpus()
        share, why = (cpus, "Ray's num_cpus of the actor") if cpus else (1, "Ray assigned no CPU: 1")
    elif engine == "spark":
        cpus = spark_task_cpus()
        share, why = (cpus, "spark.task.cpus") if cpus else (1, "no Spark task: 1")
    elif engine == "local" and workers:
        share, why = cores // workers, f"{cores} cores / {workers} workers"
    else:
        share, why = cores, f"the {cores} CPUs this process may use"
    return max(1, min(cores, int(share))), why


class BundleWorker:
    """A bundle's task on input columns, for one engine worker (see the module docstring).

    bundle: a bundle folder or its ``.tar.gz`` / ``.zip`` archive, as ``EdgeSession`` takes it (on a cluster:
    a path every node can read, or the file an engine shipped, e.g. ``SparkFiles.get``).
    task: the bundle's task (None: read from its manifest when the session opens; give it to know the
    columns without opening the bundle). engine: ``local`` | ``ray`` | ``spark`` (whose CPU share sets the
    threads). workers: how many workers the engine runs (for ``describe`` and ``local``'s share).
    threads, precision, batch_size: ``EdgeSession``'s; aggregation: ``tag``'s.
    """

    def __init__(self, bundle: str | os.PathLike, *, task: str | None = None, engine: str = "local",
                 workers: int | None = None, threads: int | None = None, precision: str | None = None,
                 batch_size: int | None = DEFAULT_BATCH_SIZE, aggregation: str = "simple"):
        if engine not in ENGINES:
            raise ConfigError(f"engine={engine!r} is not one of {', '.join(ENGINES)}")
        threads = count_option("threads", threads)
        workers = count_option("workers", workers)
        batch_size = count_option("batch_size", batch_size, DEFAULT_BATCH_SIZE)
        self.bundle = str(bundle)
        self.task = task
        self.engine, self.workers = engine, workers
        self.threads, self.threads_why = (threads, "asked for") if threads else (None, None)
        self.precision, self.batch_size, self.aggregation = precision, int(batch_size), aggregation
        self._session = None

    # ------------------------------------------------------------------ pickling: never the session
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_session"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    # ------------------------------------------------------------------ the session, opened here
    @property
    def session(self):
        if self._session is None:
            from edgebert.runtime import EdgeSession

            if self.threads is None:
                self.threads, self.threads_why = cpu_share(self.engine, self.workers)
            self._session = EdgeSession(self.bundle, provider="cpu", precision=self.precision,
                                        threads=self.threads, batch_size=self.batch_size)
            if self.task is None:
                self.task = self._session.task
        return self._session

    @property
    def columns(self) -> TaskColumns:
        """The task's input and result columns (opens the session if the task was not given)."""
        return task_columns(self.task if self.task is not None else self.session.task)

    def __call__(self, *columns: Sequence[Any], first_row: int = 0) -> dict[str, list]:
        """Result columns for input columns (one per ``columns.inputs`` role), in row order; an error names the
        row as ``first_row`` + its index (the input's numbering, not the chunk's)."""
        for role, column in zip(self.columns.inputs, columns):
            if isinstance(column, (str, bytes)):
                raise ConfigError(f"the {role} column is a single {type(column).__name__}, not a column of texts",
                                  f"pass a list of texts: worker([{role}, ...])")
        return run_task(self.session, self.columns, columns, self.batch_size, self.aggregation, first_row=first_row)

    def describe(self) -> dict[str, Any]:
        """What runs in this worker: engine, workers x threads (and why), bundle, task, precision, pid."""
        session = self._session
        workers = self.workers if self.workers else "?"
        return {"engine": self.engine, "workers": self.workers, "threads": self.threads,
                "threads_why": self.threads_why, "layout": f"{workers} workers x {self.threads or '?'} threads",
                "bundle": self.bundle, "bundle_dir": str(session.bundle_dir) if session else None,
                "task": self.task, "precision": session.precision if session else self.precision,
                "pid": os.getpid(), "opened": session is not None}

    def __repr__(self) -> str:
        return f"BundleWorker({Path(self.bundle).name!r}, engine={self.engine!r}, threads={self.threads})"
