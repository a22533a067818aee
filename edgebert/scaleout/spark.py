"""Spark: a bundle's task as a ``pyspark.ml.functions.predict_batch_udf`` (pyspark imported only here).

::

    from edgebert.scaleout.spark import bundle_udf, ship_bundle

    bundle = ship_bundle(spark, "bundle.tar.gz")          # SparkContext.addFile: every executor gets a copy
    embed = embed_udf(bundle)                             # returns array<float>
    df.withColumn("embedding", embed("text")).write.parquet("out/")

One factory per served method (``bundle_udf`` picks by the bundle's task, ``edgebert.bundle.task_registry``):
``embed_udf`` -> ``array<float>``; ``classify_udf`` -> ``struct<label: string, score: double>``; ``tag_udf`` ->
``struct<entities: array<struct<entity, score, word, start, end>>>``; ``answer_udf`` (two columns: question,
context) -> ``struct<answer, start, end, score>``.
Spark's model cache keeps one ``BundleWorker`` (one session) per Python worker; its onnxruntime threads are
``spark.task.cpus`` (``worker.cpu_share``). The bundle: a path every executor can read, or an archive shipped
with ``ship_bundle`` (``SparkContext.addFile``; found on the executor with ``SparkFiles.get`` and extracted once
per node into the cache its workers share).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from edgebert.bundle.task_registry import task_serving
from edgebert.errors import ConfigError, DataError
from edgebert.scaleout.tasks import ENTITY_FIELDS, TaskColumns, task_columns
from edgebert.scaleout.worker import BundleWorker


@dataclass(frozen=True)
class ShippedBundle:
    """An archive sent to every executor with ``SparkContext.addFile``: ``path()`` finds it there."""

    name: str

    def path(self) -> str:
        from pyspark import SparkFiles

        return SparkFiles.get(self.name)


def ship_bundle(spark, bundle: str | os.PathLike) -> ShippedBundle | str:
    """An ``export --archive`` file: shipped to every executor (``addFile``); a folder: its path as it is (it
    must be readable at the same path on every executor: shared storage)."""
    path = Path(bundle)
    if path.is_dir():
        return str(path)
    if not path.is_file():
        raise ConfigError(f"bundle {path} does not exist", "pass a bundle folder or its export --archive file")
    spark.sparkContext.addFile(str(path.resolve()))
    return ShippedBundle(path.name)


def _spark_type(kind: str):
    from pyspark.sql import types as T

    if kind == "float32_list":
        return T.ArrayType(T.FloatType())
    if kind == "entities":
        return T.ArrayType(T.StructType([T.StructField(n, _spark_type(t)) for n, t in ENTITY_FIELDS]))
    return {"string": T.StringType(), "float64": T.DoubleType(), "int64": T.LongType()}[kind]


def return_type(spec: TaskColumns):
    """The UDF's Spark type: ``array<float>`` for embeddings, else a struct of the result columns."""
    from pyspark.sql import types as T

    if spec.outputs == ("embedding",):
        return _spark_type("float32_list")
    return T.StructType([T.StructField(n, _spark_type(k)) for n, k in spec.fields])


def make_predict_fn(bundle: str | ShippedBundle, spec: TaskColumns, options: dict[str, Any]) -> Callable:
    """``predict_batch_udf``'s ``make_predict_fn``: runs once per Python worker (Spark caches its result) and
    opens the bundle there."""

    def make():
        where = bundle.path() if isinstance(bundle, ShippedBundle) else bundle
        worker = BundleWorker(where, engine="spark", **options)
        embedding = spec.outputs == ("embedding",)

        def predict_columns(*inputs: np.ndarray):
            # pandas hands a null text to the UDF as NaN: null it is, so it gives a null result
            results = worker(*[[None if isinstance(v, float) and v != v else v for v in x] for x in inputs])
            if embedding:
                if any(v is None for v in results["embedding"]):
                    raise DataError("a null text in the input column: the embedding UDF gives one vector per row",
                                    "drop the null rows first (df.na.drop(subset=[column]))")
                return np.stack(results["embedding"]) if results["embedding"] else np.zeros((0, 0), np.float32)
            rows = []
            for i in range(len(inputs[0])):
                row = {}
                for name, kind in spec.fields:
                    value = results[name][i]
                    if kind == "entities":
                        value = np.array(value or [], dtype=object)
                    elif kind == "float64":
                        value = np.float64(np.nan if value is None else value)
                    elif kind == "int64":
                        value = np.int64(-1 if value is None else value)
                    row[name] = value
                rows.append(row)
            return rows

        # Spark counts the function's parameters to split its input columns: one per role, by name
        if len(spec.inputs) == 2:
            return lambda questions, contexts: predict_columns(questions, contexts)
        return lambda texts: predict_columns(texts)

    return make


def bundle_udf(bundle: str | os.PathLike | ShippedBundle, task: str, *, batch_size: int = 32,
               rows_per_call: int = 1024, threads: int | None = None, precision: str | None = None,
               workers: int | None = None, aggregation: str = "simple"):
    """The ``predict_batch_udf`` of ``task`` (the bundle's; one the batch engines serve, ``tasks.task_columns``)
    on ``bundle`` (a path, or ``ship_bundle``'s result). Call it on the input column(s): ``udf("text")``, for a
    question-answering bundle ``udf("question", "context")``."""
    from pyspark.ml.functions import predict_batch_udf

    spec = task_columns(task)
    if not isinstance(bundle, ShippedBundle):
        bundle = str(bundle)
    options = {"task": task, "threads": threads, "precision": precision, "batch_size": batch_size,
               "workers": workers, "aggregation": aggregation}
    return predict_batch_udf(make_predict_fn(bundle, spec, options), return_type=return_type(spec),
                             batch_size=rows_per_call)


def embed_udf(bundle, **kwargs):
    return bundle_udf(bundle, task_serving("embed").name, **kwargs)


def classify_udf(bundle, **kwargs):
    return bundle_udf(bundle, task_serving("classify").name, **kwargs)


def tag_udf(bundle, **kwargs):
    return bundle_udf(bundle, task_serving("tag").name, **kwargs)


def answer_udf(bundle, **kwargs):
    return bundle_udf(bundle, task_serving("answer").name, **kwargs)


def rows_of(value: Any) -> Any:
    """A Spark result value (``Row`` / list of ``Row`` / numpy) as plain Python (dicts, lists)."""
    if hasattr(value, "asDict"):
        return {k: rows_of(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return {k: rows_of(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [rows_of(v) for v in value]
    return value
