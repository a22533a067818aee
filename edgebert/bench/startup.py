"""Cold start of an ONNX path: session creation and first call, timed apart from the latency figures.

TensorRT builds an engine when its session is created (the profile is explicit), which takes seconds to
minutes and is cached on disk. A TensorRT path is therefore opened twice: first with an empty engine
cache (``engine_cache="empty"``: the build), then again on the cache the first one filled
(``"warm"``: what every later start costs); the second session is the one timed. Other providers are
opened once (``engine_cache=None``). The start-up rows are returned as their JSON (``rows.StartupRow``'s
keys); a first call that fails raises what ``EdgeSession.run`` raises (``RuntimeFault`` for NaN outputs).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from edgebert.bench.config import BenchConfig
from edgebert.bench.rows import SIDE_BY_SIDE
from edgebert.bench.workloads import synthetic_feeds
from edgebert.bundle import Manifest
from edgebert.runtime.trt_profile import TrtProfile

STARTUP_METHOD = ("cold start = EdgeSession creation (bundle already verified; onnxruntime session, TensorRT "
                  "engine build or load) + the first run() at batch 1 x the shortest seq, wall clock; TensorRT "
                  "is opened with an empty engine cache (engine build), then again with the cache it filled "
                  "(warm); engine build ~ empty - warm. The caches are a fresh temporary folder per run; its "
                  "timing cache (kernel timings) is shared by the run's TensorRT paths, so later builds are faster")


def session_kwargs(config: BenchConfig, provider: str, precision: str, cache_root: Path | None) -> dict[str, Any]:
    """EdgeSession arguments of a benchmark path: a CPU session (timed side by side with the other CPU paths)
    does not spin its idle threads; TensorRT's profile covers every shape the bench runs."""
    kwargs: dict[str, Any] = {"provider": provider, "precision": precision, "threads": config.threads,
                              "verify": False, "batch_size": max(config.batches),
                              "allow_spinning": provider not in SIDE_BY_SIDE}
    if provider == "tensorrt":
        kwargs["trt_profile"] = TrtProfile.covering(config.batches, config.seqs)
        kwargs["trt_cache_dir"] = cache_root
    return kwargs


def open_timed(config: BenchConfig, manifest: Manifest, kwargs: dict[str, Any],
               engine_cache: str | None) -> tuple[Any, dict[str, Any]]:
    """(EdgeSession, start-up row); raises what EdgeSession raises."""
    from edgebert.runtime import EdgeSession

    t0 = time.perf_counter()
    session = EdgeSession(config.bundle_dir, **kwargs)
    t1 = time.perf_counter()
    session.run(synthetic_feeds(1, min(config.seqs), manifest, config.seed))
    t2 = time.perf_counter()
    row = {"path": f"onnx {kwargs['provider']} {kwargs['precision']}", "provider": session.provider,
           "precision": session.precision, "model": session.model_key, "engine_cache": engine_cache,
           "session_s": round(t1 - t0, 4), "first_run_s": round(t2 - t1, 4), "cold_start_s": round(t2 - t0, 4)}
    return session, row


def open_path(config: BenchConfig, manifest: Manifest, provider: str, precision: str,
              cache_root: Path | None) -> tuple[Any, list[dict[str, Any]]]:
    """The session a path is timed with, and its start-up rows (two for TensorRT, see the docstring)."""
    kwargs = session_kwargs(config, provider, precision, cache_root)
    if provider != "tensorrt" or not config.cold_start:
        session, row = open_timed(config, manifest, kwargs, None)
        return session, [row] if config.cold_start else []
    first, empty = open_timed(config, manifest, kwargs, "empty")
    del first
    session, warm = open_timed(config, manifest, kwargs, "warm")
    warm["engine_build_s"] = empty["engine_build_s"] = round(empty["cold_start_s"] - warm["cold_start_s"], 4)
    return session, [empty, warm]
