"""The head of a bench report: what the run measured on (machine, versions, GPU, INT8 kernels, threads,
load), which bundle (its sizes and graph files) and how each figure is measured (``methods``).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import os
from pathlib import Path
from typing import Any

from edgebert.bench.config import BenchConfig
from edgebert.bench.gpu import GPU_MEMORY_METHOD, Nvml, gpu_environment
from edgebert.bench.measure import MEMORY_METHOD
from edgebert.bench.schema import BenchReport, BundleFacts, Environment, GraphFile, ModelSize
from edgebert.bench.startup import STARTUP_METHOD
from edgebert.bench.timing import TIMING_METHOD
from edgebert.bundle import Manifest
from edgebert.files.jsonfile import loads
from edgebert.system.environment import describe

METHODS = {
    "memory": MEMORY_METHOD,
    "latency": "wall clock per run() call (perf_counter) after warmup; percentiles over the timed calls; "
               "throughput from the mean",
    "flops": "analytic count from the config (edgebert.bench.flops): matmuls 2*M*N*K plus element-wise work; "
             "roofline fraction = FLOPs / p50 latency / measured peak",
    "inputs": "fixed shapes: random token ids, no padding; length mix: file order, dynamic = each batch padded "
              "to its longest row, padded = every batch padded to pad_to",
    "gpu_memory": GPU_MEMORY_METHOD, "startup": STARTUP_METHOD, "timing": TIMING_METHOD,
}


def bundle_hf_config(bundle_dir: Path, manifest: Manifest) -> dict[str, Any]:
    """The bundle's config.json (has intermediate_size, id2label), over the manifest's summary of it."""
    summary = dataclasses.asdict(manifest.config)
    path = bundle_dir / "config.json"
    if path.is_file():
        try:
            return {**summary, **loads(path.read_bytes())}
        except (OSError, ValueError, TypeError):       # a config.json that is not an object: the summary
            pass
    return summary


def load_average() -> list[float] | None:
    """1/5/15-minute load: other work on the same cores skews every figure, so the report says."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (OSError, AttributeError):
        return None


def environment(config: BenchConfig, nvml: Nvml | None) -> Environment:
    """Machine, versions, GPU (when a GPU provider is asked for), INT8 kernels, threads, load now."""
    from edgebert.runtime.hostcpu import detect_host

    env = Environment.from_dict(describe(), exact=False)
    env.gpu = gpu_environment(nvml) if nvml is not None else None
    host = detect_host()
    env.int8_host = {**host.as_dict(), "summary": host.summary()}
    env.threads_requested = config.threads
    env.onnxruntime_intra_op_threads = config.threads or "onnxruntime default (one per physical core)"
    env.load_average_at_start = load_average()
    return env


def new_report(config: BenchConfig, manifest: Manifest, hf_config: dict[str, Any],
               nvml: Nvml | None) -> BenchReport:
    """The report before anything is measured: config, machine, GPU, bundle, methods."""
    models = {key: GraphFile(m.file, (config.bundle_dir / m.file).stat().st_size)
              for key, m in manifest.models.items() if (config.bundle_dir / m.file).is_file()}
    size = ModelSize(**{f.name: hf_config.get(f.name) for f in dataclasses.fields(ModelSize)})
    bundle = BundleFacts(str(config.bundle_dir), manifest.task, manifest.get_extra("source"), size,
                         manifest.max_length, models)
    return BenchReport(_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), config.as_dict(),
                       environment(config, nvml), bundle, dict(METHODS))
