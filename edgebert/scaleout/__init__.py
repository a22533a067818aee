"""The same bundle on engines users already run: Ray Data, Spark, a Triton server, and ``edgebert batch``.

Torch-free: numpy, onnxruntime, tokenizers and pyarrow, plus the engine a module adapts (ray, pyspark,
tritonclient), each imported only when used. One module per job:

* ``tasks``: a bundle's task (``bundle.task_registry``) as a function from input columns to result
  columns (``embedding``; ``label`` / ``score``; ``entities``; ``answer`` / ``start`` / ``end`` / ``score``),
  through ``EdgeSession``'s own methods, so every engine gives ``EdgeSession``'s results;
* ``worker``: a picklable ``BundleWorker`` (the bundle's path or archive, the task, threads); the session
  opens lazily inside the worker and is never pickled; threads default to the worker's CPU share;
* ``ray_data`` / ``spark``: ``Dataset.map_batches`` callables and ``predict_batch_udf`` factories;
* ``batch`` (+ ``tables`` its input, ``parts`` its output folder, ``engines`` where it runs): the
  ``edgebert batch`` bulk job, resumable, on ``local`` worker processes, Ray or Spark;
* ``triton_*``: the Triton model repository of ``edgebert triton-repo``.
"""
