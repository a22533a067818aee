"""Ray Data: a bundle's task as a callable class for ``Dataset.map_batches`` (ray imported only by the caller).

::

    import ray
    from edgebert.scaleout.ray_data import BundleMapper, map_kwargs

    ds = ray.data.read_parquet("s3://bucket/texts/")
    out = ds.map_batches(BundleMapper, **map_kwargs("bundle.tar.gz", workers=8, threads=2, column="text"))
    out.write_parquet("s3://bucket/embedded/")

Each of the ``workers`` actors (``ray.data.ActorPoolStrategy(size=workers)``, ``num_cpus=threads``) builds one
``BundleMapper``, whose ``BundleWorker`` opens the bundle on the first batch, with onnxruntime threads equal to
the actor's CPUs (``worker.cpu_share``). A batch comes back with its columns plus the task's result columns
(``tasks``: ``embedding``; ``label`` / ``score``; ``entities``; ``answer`` / ``start`` / ``end`` / ``score``),
as a ``pyarrow.Table`` for ``batch_format="pyarrow"`` (the default of ``map_kwargs``) or a dict of numpy arrays
for ``"numpy"``. The bundle: a path every node can read (shared storage: a folder or an ``export --archive``
file), or with ``map_kwargs(..., ship=True)`` an archive sent through Ray's object store (no shared storage
needed): each actor writes it once per node into the cache (``shipped/<sha256>``), and the node's actors open it
from there (extracted once per node into the content-addressed cache, ``runtime.archive``).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from edgebert.errors import ConfigError, DataError
from edgebert.scaleout.tasks import arrow_columns
from edgebert.scaleout.worker import BundleWorker, count_option

PID_COLUMN = "worker_pid"


class BundleMapper:
    """``map_batches`` callable: ``columns`` are the input columns, one per task role (``("text",)``; for
    ``qa`` ``("question", "context")``); ``with_pid`` adds the actor's process id as ``worker_pid`` (to see
    which actor ran a row). Other keywords are ``BundleWorker``'s."""

    def __init__(self, bundle: str | os.PathLike, *, columns: Sequence[str] = ("text",), task: str | None = None,
                 threads: int | None = None, precision: str | None = None, batch_size: int = 32,
                 workers: int | None = None, aggregation: str = "simple", with_pid: bool = False,
                 archive_bytes: Any = None):
        if archive_bytes is not None:           # shipped through the object store: its bytes, or their reference
            if not isinstance(archive_bytes, (bytes, bytearray)):
                import ray
                archive_bytes = ray.get(archive_bytes)
            bundle = shipped_archive(Path(bundle).name, archive_bytes)
        self.worker = BundleWorker(bundle, task=task, engine="ray", workers=workers, threads=threads,
                                   precision=precision, batch_size=batch_size, aggregation=aggregation)
        self.input_columns = tuple(columns)
        self.with_pid = bool(with_pid)

    def __call__(self, batch: Any) -> Any:
        spec = self.worker.columns
        if len(self.input_columns) != len(spec.inputs):
            raise ConfigError(f"a '{self.worker.task}' bundle reads {len(spec.inputs)} column(s) "
                              f"({', '.join(spec.inputs)}); columns={list(self.input_columns)}",
                              f"pass columns=({', '.join(repr(r) for r in spec.inputs)}) naming your columns")
        names = list(batch.column_names) if hasattr(batch, "column_names") else list(batch)
        missing = [c for c in self.input_columns if c not in names]
        if missing:
            raise DataError(f"the batch has no column {', '.join(missing)} (it has {', '.join(names)})",
                            "pass columns= naming the text column(s)")
        inputs = [_values(batch[c]) for c in self.input_columns]
        results = self.worker(*inputs)
        n = len(inputs[0])
        if hasattr(batch, "append_column"):        # pyarrow.Table
            for name, array in arrow_columns(spec, results).items():
                batch = batch.append_column(name, array)
            if self.with_pid:
                import pyarrow as pa
                batch = batch.append_column(PID_COLUMN, pa.array([os.getpid()] * n, pa.int64()))
            return batch
        out = dict(batch)
        for name, kind in spec.fields:
            out[name] = _numpy(results[name], kind)
        if self.with_pid:
            out[PID_COLUMN] = np.full(n, os.getpid(), dtype=np.int64)
        return out

    def describe(self) -> dict[str, Any]:
        return self.worker.describe()


def shipped_archive(name: str, data: bytes) -> Path:
    """An archive's bytes as a file in this node's cache, ``shipped/<sha256>/<name>`` (written once: a worker
    that finds it there uses it; concurrent writers publish the same bytes by rename)."""
    from edgebert.files.atomic import atomic_path
    from edgebert.files.user_cache import cache_root

    target = cache_root() / "shipped" / hashlib.sha256(data).hexdigest() / name
    if not (target.is_file() and target.stat().st_size == len(data)):
        with atomic_path(target) as tmp:
            tmp.write_bytes(data)
    return target


def _values(column: Any) -> list:
    return column.to_pylist() if hasattr(column, "to_pylist") else list(column)


def _numpy(values: list, kind: str) -> np.ndarray:
    if kind == "float32_list" and all(v is not None for v in values) and values:
        return np.stack(values).astype(np.float32, copy=False)
    if kind in ("float64", "int64") and all(v is not None for v in values):
        return np.asarray(values, dtype=kind)
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def map_kwargs(bundle: str | os.PathLike, *, workers: int, threads: int | None = 1, column: str = "text",
               columns: Sequence[str] | None = None, batch_format: str = "pyarrow", rows_per_call: int = 1024,
               ship: bool = False, **worker_options: Any) -> dict[str, Any]:
    """The keywords of ``Dataset.map_batches(BundleMapper, **map_kwargs(...))``: ``workers`` actors
    (``ActorPoolStrategy``) of ``threads`` CPUs each, each session with ``threads`` onnxruntime threads.
    ``ship``: send the archive ``bundle`` through the object store (``ray.put``) instead of reading its path
    on every node."""
    import ray
    import ray.data

    workers = count_option("workers", workers)
    threads = count_option("threads", threads, 1)          # None: one CPU (and onnxruntime thread) an actor
    if workers is None:
        raise ConfigError("workers=None: map_kwargs needs the number of actors", "pass workers=N")
    if ship:
        if not Path(bundle).is_file():
            raise ConfigError(f"ship=True sends an archive; {bundle} is not a file",
                              "pass the `edgebert export --archive` file, or a folder every node reads without ship")
        worker_options = {**worker_options, "archive_bytes": ray.put(Path(bundle).read_bytes())}
    # the actors' onnxruntime threads: their num_cpus, read inside each actor (``worker.cpu_share``)
    kwargs = {"columns": tuple(columns or (column,)), "workers": workers, **worker_options}
    return {"fn_constructor_kwargs": {"bundle": str(bundle), **kwargs},
            "compute": ray.data.ActorPoolStrategy(size=workers), "num_cpus": threads,
            "batch_size": rows_per_call, "batch_format": batch_format}
