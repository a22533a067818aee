"""``run_bench``: every provider x precision x batch x seq of a bundle, beside the PyTorch reference.

Order of work: calibrate the matmul peak; load the reference (if any) and measure it first, keeping
its outputs on the accuracy inputs, then (GPU providers requested, torch sees a GPU) the reference on
CUDA in fp32 and fp16; then each ONNX path (provider x precision): open it (cold start timed; TensorRT
with an empty, then a warm engine cache), compare with the reference, time every shape smallest first
(GPU memory through NVML where it works), replay the length mix (``mix_modes``); with ``data`` (a
CoNLL file, token-cls bundle) every path, the reference included, is scored on it (entity F1,
``edgebert.bench.entities``). An unavailable provider, a path that
cannot run here or one that fails at run time is recorded with its reason and the run goes on; so is
every figure that could not be measured (``not_measured``). Speedups and roofline fractions are filled
in at the end from the measured figures.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..bundle import open_bundle, tokenizer_path
from edgebert.system.environment import describe
from ..errors import BundleError, ConfigError, EdgebertError
from edgebert.files.outdirs import OutputDir
from .accuracy import AccuracyTracker
from .config import BenchConfig
from .entities import EntityData
from .flops import ModelShape, forward_flops
from .gpu import GPU_MEMORY_METHOD, Nvml, gpu_environment
from .measure import (MEMORY_METHOD, Latency, OtherCpuLoad, peak_rss_mb, release_memory, reset_peak_rss, rss_mb,
                      time_calls)
from .peak import calibrate, peak_for
from .startup import STARTUP_METHOD, open_path
from .workloads import LengthMix, read_texts, synthetic_feeds

REPORT_FILES = ("report.json", "report.md", "latency.png", "bench.jsonl")
REPORT_SCHEMA = "edgebert-bench"
REPORT_VERSION = 2          # 2: startup, not_measured, environment.gpu, GPU memory, torch on CUDA
REFERENCE_PATH = "torch fp32"
GPU_PROVIDERS = ("cuda", "tensorrt")


def _bundle_hf_config(bundle_dir: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """The bundle's config.json (has intermediate_size), else the manifest's summary of it."""
    path = bundle_dir / "config.json"
    if path.is_file():
        try:
            return {**manifest["config"], **json.loads(path.read_text(encoding="utf-8"))}
        except json.JSONDecodeError:
            pass
    return dict(manifest["config"])


class _Log:
    """Progress bar (stderr) + one JSON line per measured row (``bench.jsonl`` in the report dir)."""

    def __init__(self, config: BenchConfig, out: OutputDir | None):
        self.path = config.report_dir / "bench.jsonl" if config.report_dir else None
        if out is not None:
            out.create()
            self.path.write_text("", encoding="utf-8")
        self.progress = None
        self.task = None
        if config.progress:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self.progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                     TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                                     console=Console(stderr=True), transient=True)

    def __enter__(self):
        if self.progress:
            self.progress.start()
            self.task = self.progress.add_task("bench", total=1)
        return self

    def __exit__(self, *exc):
        if self.progress:
            self.progress.stop()

    def plan(self, steps: int) -> None:
        if self.progress:
            self.progress.update(self.task, total=max(steps, 1))

    def step(self, what: str, row: dict[str, Any] | None = None) -> None:
        if self.progress:
            self.progress.update(self.task, advance=1, description=what)
        if row is not None and self.path:
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(row) + "\n")

    def say(self, what: str) -> None:
        if self.progress:
            self.progress.update(self.task, description=what)


def _eval_batches(config: BenchConfig, manifest: dict[str, Any], encoder, pad_id: int) -> list[dict]:
    """Padded feeds the accuracy comparison runs: real texts when a lengths file is given."""
    from ..runtime.text import Encoded, pad_batch

    n = config.eval_texts if manifest["task"] != "mlm" else min(config.eval_texts, 8)  # V-wide logits
    if config.lengths_from is not None:
        texts = read_texts(config.lengths_from, n)
        rows = encoder.encode(texts, isinstance(texts[0], tuple), truncate=True)
    else:  # random lengths so padding and masking are exercised
        rng = np.random.default_rng(config.seed)
        longest = min(64, encoder.max_length)
        rows = []
        for i in range(n):
            length = int(rng.integers(4, longest + 1))
            ids = synthetic_feeds(1, length, manifest, seed=config.seed + i)["input_ids"][0]
            rows.append(Encoded(ids, np.zeros_like(ids)))
    return [pad_batch(rows[i:i + 8], pad_id) for i in range(0, len(rows), 8)]


def _time_shapes(path, name: str, config: BenchConfig, manifest: dict, shapes, before_mb, log,
                 gpu: tuple[Nvml, float | None] | None = None) -> list[dict]:
    rows = []
    for batch, seq in shapes:
        feeds = synthetic_feeds(batch, seq, manifest, config.seed)
        release_memory()
        reset_peak_rss()
        lat = time_calls(lambda: path.run(feeds), config.warmup, config.iters, config.max_seconds)
        peak = peak_rss_mb()
        used = gpu[0].used_mb() if gpu else None
        row = {"path": name, "provider": path.provider, "precision": path.precision, "batch": batch,
               "seq": seq, "iters": lat.iters, "latency_ms": lat.ms(),
               "sequences_per_s": round(batch / lat.mean_s, 3),
               "tokens_per_s": round(batch * seq / lat.mean_s, 1),
               "peak_rss_mb": None if peak is None or before_mb is None else round(peak - before_mb, 1),
               "gpu_mem_mb": None if used is None or gpu[1] is None else round(used - gpu[1], 1)}
        rows.append(row)
        log.step(f"{name} b={batch} s={seq}", row)
    return rows


def _replay(path, name: str, config: BenchConfig, mix: LengthMix, pad_id: int, log) -> list[dict]:
    rows = []
    for batch in config.batches:
        for mode in config.mix_modes:
            feeds = mix.batches(batch, padded=mode == "padded", pad_id=pad_id)
            for f in feeds[:config.warmup]:
                path.run(f)
            samples = []
            for f in feeds:
                t0 = time.perf_counter()
                path.run(f)
                samples.append(time.perf_counter() - t0)
            lat = Latency(np.asarray(samples))
            total = float(lat.samples.sum())
            real = int(sum(int(f["attention_mask"].sum()) for f in feeds))
            computed = int(sum(f["input_ids"].size for f in feeds))
            row = {"path": name, "provider": path.provider, "precision": path.precision, "batch": batch,
                   "mode": mode, "batches": len(feeds), "texts": len(mix.rows),
                   "latency_ms": lat.ms(), "total_s": round(total, 4),
                   "sequences_per_s": round(len(mix.rows) / total, 2),
                   "real_tokens_per_s": round(real / total, 1),
                   "padding_fraction": round(1 - real / computed, 4),
                   "shapes": [list(f["input_ids"].shape) for f in feeds]}
            rows.append(row)
            log.step(f"{name} replay b={batch} {mode}", {k: v for k, v in row.items() if k != "shapes"})
    return rows


class _OnnxPath:
    """An EdgeSession seen as a benchmark path."""

    def __init__(self, session):
        self.session = session
        self.provider = session.provider
        self.precision = session.precision
        self.size_bytes = session.model_file.stat().st_size

    def run(self, feeds):
        return self.session.run(feeds)

    def logits(self, feeds):
        return self.session.run(feeds, ["logits"])["logits"]


@dataclass
class _Run:
    """What every path of one benchmark run shares."""

    config: BenchConfig
    manifest: dict[str, Any]
    task: str
    shapes: list[tuple[int, int]]
    mix: LengthMix | None
    eval_feeds: list[dict[str, np.ndarray]]
    pad_id: int
    report: dict[str, Any]
    log: _Log
    nvml: Nvml | None = None
    cache_root: Path | None = None
    entities: EntityData | None = None
    ref_outputs: list[dict[str, np.ndarray]] | None = None
    comparison: dict[str, Any] | None = None

    @property
    def steps_per_path(self) -> int:
        return len(self.shapes) + (len(self.config.mix_modes) * len(self.config.batches) if self.mix else 0)

    def measure(self, path, name: str, before_mb: float | None, gpu_before: float | None = None) -> None:
        """Time every fixed shape (smallest first), then replay the length mix."""
        gpu = (self.nvml, gpu_before) if self.nvml is not None and path.provider not in ("cpu", "torch") else None
        self.report["results"] += _time_shapes(path, name, self.config, self.manifest, self.shapes,
                                               before_mb, self.log, gpu)
        if self.mix:
            self.report["length_mix"]["results"] += _replay(path, name, self.config, self.mix,
                                                            self.pad_id, self.log)

    def accuracy(self, run_fn) -> dict[str, Any] | None:
        """Outputs of ``run_fn`` on the evaluation batches against the reference's (None: no reference)."""
        if self.ref_outputs is None:
            return None
        tracker = AccuracyTracker(self.task)
        for feeds, ref_out in zip(self.eval_feeds, self.ref_outputs):
            tracker.add(feeds, run_fn(feeds), ref_out)
        return tracker.result()

    def score_entities(self, name: str, run_feeds, labels: tuple[str, ...] | None = None) -> None:
        """Entity F1 of one path on ``--data`` (``labels``: the path's own label names, when they may
        differ from the bundle's, as a reference model's may)."""
        if self.entities is None:
            return
        if labels is not None and tuple(labels) != self.entities.labels:
            self.not_measured(f"entity F1 of {name}", f"its labels {list(labels)} are not the bundle's "
                                                       f"{list(self.entities.labels)}")
            return
        self.log.say(f"{name}: entity F1 on {len(self.entities.words)} sentences")
        self.report["entities"]["results"][name] = self.entities.score(run_feeds)

    def not_measured(self, what: str, reason: str) -> None:
        self.report["not_measured"].append({"what": what, "reason": reason})


def _header(config: BenchConfig, manifest: dict, hf_config: dict, max_len: int,
            nvml: Nvml | None) -> dict[str, Any]:
    """The report skeleton: config, machine, GPU, bundle, how things are measured."""
    from ..runtime.hostcpu import detect_host

    environment = describe()
    environment["gpu"] = gpu_environment(nvml) if nvml is not None else None
    environment["int8_host"] = {**detect_host().as_dict(), "summary": detect_host().summary()}
    environment["threads_requested"] = config.threads
    environment["onnxruntime_intra_op_threads"] = (config.threads
                                                   or "onnxruntime default (one per physical core)")
    environment["load_average_at_start"] = _load_average()
    models = {p: {"file": m["file"], "bytes": (config.bundle_dir / m["file"]).stat().st_size}
              for p, m in manifest["models"].items() if (config.bundle_dir / m["file"]).is_file()}
    size_keys = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                 "vocab_size", "max_position_embeddings")
    return {
        "schema": REPORT_SCHEMA, "version": REPORT_VERSION,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "config": config.as_dict(), "environment": environment,
        "bundle": {"dir": str(config.bundle_dir), "task": manifest["task"], "source": manifest.get("source"),
                   "config": {k: hf_config.get(k) for k in size_keys}, "max_sequence_length": max_len,
                   "models": models},
        "methods": {"memory": MEMORY_METHOD,
                    "latency": "wall clock per run() call (perf_counter) after warmup; percentiles over "
                               "the timed calls; throughput from the mean",
                    "flops": "analytic count from the config (edgebert.bench.flops): matmuls 2*M*N*K plus "
                             "element-wise work; roofline fraction = FLOPs / p50 latency / measured peak",
                    "inputs": "fixed shapes: random token ids, no padding; length mix: file order, dynamic "
                              "= each batch padded to its longest row, padded = every batch padded to pad_to",
                    "gpu_memory": GPU_MEMORY_METHOD, "startup": STARTUP_METHOD},
        "calibration": {}, "providers": [], "paths": [], "reference": None, "results": [],
        "length_mix": None, "entities": None, "unavailable": [], "startup": [], "not_measured": [],
    }


def _measure_reference(run: _Run, hf_config: dict, num_labels: int) -> None:
    """Load and time the PyTorch reference; keep its outputs on the accuracy inputs."""
    from .reference import TorchReference, comparability

    run.log.say("loading PyTorch reference")
    import torch  # noqa: F401  (imported before the RSS baseline: its libraries are not the model)

    release_memory()
    before = rss_mb()
    ref = TorchReference(run.config.reference, run.task, run.config.threads)
    loaded = rss_mb()
    run.comparison = comparability(run.task, hf_config, num_labels, ref)
    run.report["reference"] = {**ref.describe(), **run.comparison}
    run.report["environment"]["torch_threads"] = ref.threads
    if run.comparison["comparable"]:
        run.ref_outputs = [ref.run(f) for f in run.eval_feeds]
        run.score_entities(REFERENCE_PATH, ref.logits, ref.label_names)
    elif run.entities is not None:
        run.not_measured(f"entity F1 of {REFERENCE_PATH}", run.comparison["note"])
    run.report["paths"].append({"path": REFERENCE_PATH, "provider": "torch", "precision": "fp32",
                                "available": True, "model_bytes": ref.size_bytes,
                                "load_rss_mb": _delta(loaded, before), "providers": ["torch (CPU)"],
                                "notes": ref.notes, "accuracy": None, "reference": True})
    run.measure(ref, REFERENCE_PATH, before)
    del ref
    release_memory()


def _measure_reference_gpu(run: _Run) -> None:
    """The reference with PyTorch on CUDA, fp32 and fp16 (the GPU baseline), or why it was not measured."""
    from .reference import TorchReference, torch_cuda_status

    ok, why = torch_cuda_status()
    if not ok:
        run.not_measured("PyTorch reference on CUDA (fp32, fp16)", why)
        return
    for precision in ("fp32", "fp16"):
        name = f"torch cuda {precision}"
        run.log.say(f"loading {name}")
        gpu_before = run.nvml.used_mb() if run.nvml is not None else None
        try:
            ref = TorchReference(run.config.reference, run.task, run.config.threads, "cuda", precision)
        except Exception as exc:  # noqa: BLE001  (a CUDA error is a finding, not a crash)
            run.not_measured(f"PyTorch reference on CUDA {precision}", " ".join(str(exc).split())[:300])
            continue
        accuracy = run.accuracy(ref.run)
        if run.comparison["comparable"]:
            run.score_entities(name, ref.logits, ref.label_names)
        run.report["paths"].append({"path": name, "provider": "torch-cuda", "precision": precision,
                                    "available": True, "model_bytes": ref.size_bytes, "load_rss_mb": None,
                                    "providers": ["torch (CUDA)"], "notes": ref.notes, "accuracy": accuracy,
                                    "reference": False})
        run.measure(ref, name, None, gpu_before)
        del ref
        release_memory()


def _same_as_checked(session, manifest: dict[str, Any]) -> None:
    """The graph the session loaded (with ``verify=False``) still has the hash ``run_bench`` checked when
    it opened the bundle: bench measures exactly the files it hash-checked, or refuses."""
    from ..bundle import sha256_file

    name = session.model_file.name
    if sha256_file(session.model_file) != manifest["files"].get(name):
        raise BundleError(f"{session.model_file} changed after its hash was checked",
                          "do not modify a bundle while it is benchmarked")


def _measure_onnx(run: _Run, provider: str, precision: str) -> None:
    """Load one provider x precision; record it as unavailable (with the reason) if it cannot run."""
    name = f"onnx {provider} {precision}"
    release_memory()
    before = rss_mb()
    gpu_before = run.nvml.used_mb() if run.nvml is not None and provider != "cpu" else None
    run.log.say(f"loading {name}")
    try:
        session, startup = open_path(run.config, run.manifest, provider, precision, run.cache_root)
    except EdgebertError as exc:
        reason = exc.one_line()
        run.report["paths"].append({"path": name, "provider": provider, "precision": precision,
                                    "available": False, "reason": reason})
        run.report["unavailable"].append({"provider": provider, "precision": precision, "reason": reason})
        for _ in range(run.steps_per_path):
            run.log.step(f"{name}: unavailable")
        return
    run.report["startup"] += startup
    _same_as_checked(session, run.manifest)
    path = _OnnxPath(session)
    loaded = rss_mb()
    accuracy = run.accuracy(session.run)
    run.score_entities(name, path.logits)
    if accuracy is None and run.comparison is not None:
        accuracy = {"comparable": False, "reason": run.comparison["note"]}
    run.report["paths"].append({"path": name, "provider": provider, "precision": precision,
                                "available": True, "model_file": session.model_file.name,
                                "model_bytes": path.size_bytes, "load_rss_mb": _delta(loaded, before),
                                "providers": session.providers, "notes": session.provider_notes,
                                "model": session.model_key, "placement": session.placement.as_dict(),
                                "trt_profile": session.trt_profile.as_dict() if session.trt_profile else None,
                                "int8_graph": session.int8_choice.as_dict() if session.int8_choice else None,
                                "accuracy": accuracy, "reference": False})
    try:
        run.measure(path, name, before, gpu_before)
    except EdgebertError as exc:   # e.g. a run-time provider failure: recorded, never rerouted
        reason = f"failed while timing: {exc.one_line()}"
        run.report["paths"][-1]["failed"] = reason
        run.report["unavailable"].append({"provider": provider, "precision": precision, "reason": reason})
    del session, path
    release_memory()


def run_bench(config: BenchConfig) -> dict[str, Any]:
    """Measure everything ``config`` asks for; return the report (and write it if ``report_dir``)."""
    from ..runtime.providers import probe
    from ..runtime.text import TextEncoder

    # --report: a new or empty folder, or an earlier report (whose files are replaced): edgebert.files.outdirs
    out = (OutputDir(config.report_dir, "bench", names=REPORT_FILES, overwrite=True, signature="report.json")
           if config.report_dir is not None else None)
    manifest = open_bundle(config.bundle_dir, verify=True)
    task = manifest["task"]
    hf_config = _bundle_hf_config(config.bundle_dir, manifest)
    labels = manifest.get("labels") or {}
    shape = ModelShape.from_hf_dict(hf_config, len(labels) or None)
    max_len = int(min(manifest.get("max_sequence_length") or hf_config["max_position_embeddings"],
                      hf_config["max_position_embeddings"]))
    if max(config.seqs) > max_len:
        raise ConfigError(f"seq {max(config.seqs)} is longer than the bundle's max_sequence_length {max_len}",
                          f"use --seq values <= {max_len}")
    if config.reference is not None and not (config.reference / "config.json").is_file():
        raise ConfigError(f"reference {config.reference} is not a model directory (no config.json)",
                          "pass a directory written by edgebert or a Hugging Face BERT directory")
    pad_id = int(manifest["tokenizer"].get("pad_id", 0))
    encoder = TextEncoder(tokenizer_path(config.bundle_dir, manifest), max_len, pad_id)
    entities = None
    if config.data is not None:
        entities = EntityData.load(config.data, task, encoder, tuple(labels[str(i)] for i in range(len(labels))),
                                   pad_id, config.max_texts)
    gpu_requested = any(p in GPU_PROVIDERS for p in config.providers)
    nvml = Nvml() if gpu_requested else None
    report = _header(config, manifest, hf_config, max_len, nvml)
    if entities is not None:
        report["entities"] = entities.summary()
    others = OtherCpuLoad()
    with _Log(config, out) as log, tempfile.TemporaryDirectory(prefix="edgebert-trt-") as cache_root:
        log.say("calibrating matmul peak")
        report["calibration"] = calibrate(config.calibration_size, config.threads)
        mix = None
        if config.lengths_from is not None:
            mix = LengthMix.load(config.lengths_from, encoder, max(config.seqs), config.max_texts)
            report["length_mix"] = {**mix.summary(), "results": []}
        shapes = sorted(((b, s) for b in config.batches for s in config.seqs),
                        key=lambda bs: (bs[0] * bs[1], bs))             # smallest first: see measure.py
        run = _Run(config, manifest, task, shapes, mix, _eval_batches(config, manifest, encoder, pad_id),
                   pad_id, report, log, nvml, Path(cache_root), entities)
        statuses = {p: probe(p) for p in config.providers}
        for p, status in statuses.items():
            report["providers"].append(status.as_dict())
            if not status.available:
                report["unavailable"].append({"provider": p, "precision": None, "reason": status.reason})
        runnable = [(p, q) for p in config.providers if statuses[p].available for q in config.precisions]
        torch_gpu = config.reference is not None and config.torch_gpu and gpu_requested
        log.plan(run.steps_per_path * (len(runnable) + (config.reference is not None) + 2 * torch_gpu))
        _record_gpu_gaps(run, gpu_requested, statuses)
        if config.reference is not None:
            _measure_reference(run, hf_config, len(labels) or 2)
            if torch_gpu:
                _measure_reference_gpu(run)
        for provider, precision in runnable:
            _measure_onnx(run, provider, precision)
    report["environment"]["load_average_at_end"] = _load_average()
    report["environment"]["cpu_share_used_by_other_processes"] = others.fraction()
    _derive(report, shape, task)
    if config.report_dir is not None:
        from .report import write_reports

        write_reports(report, config.report_dir)
    return report


def _record_gpu_gaps(run: _Run, gpu_requested: bool, statuses: dict) -> None:
    """GPU figures this run cannot produce, with the reason (before anything is timed)."""
    if not gpu_requested:
        return
    gpu = run.report["environment"]["gpu"] or {}
    if not gpu.get("gpus"):
        run.not_measured("GPU name, driver and library versions", gpu.get("reason") or "no GPU")
    if run.nvml is not None and not run.nvml.ok:
        run.not_measured("GPU memory", run.nvml.reason)
    if "tensorrt" in statuses and not statuses["tensorrt"].available:
        run.not_measured("TensorRT engine build and cold start", statuses["tensorrt"].reason)
    if not run.config.cold_start:
        run.not_measured("cold start and engine build", "cold_start=False")
    if run.config.reference is None:
        run.not_measured("PyTorch reference (CPU and CUDA)", "no --reference given")


def _load_average() -> list[float] | None:
    """1/5/15-minute load: other work on the same cores skews every figure, so the report says."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (OSError, AttributeError):
        return None


def _sig(value: float, digits: int = 4) -> float:
    """Round to significant digits (tiny models run at tiny GFLOP/s; 2 decimals would show 0.0)."""
    return float(f"{value:.{digits}g}")


def _delta(after: float | None, before: float | None) -> float | None:
    return None if after is None or before is None else round(after - before, 1)


def _derive(report: dict[str, Any], shape: ModelShape, task: str) -> None:
    """Fill FLOPs, roofline fraction and speedups from the measured rows."""
    calibration = report["calibration"]
    ref = report.get("reference") or {}
    ref_shape = ModelShape.from_hf_dict(ref["config"]) if ref.get("config") else shape   # e.g. the teacher
    ref_task = "embed" if ref.get("task") == "encoder" else (ref.get("task") or task)  # BertModel has a pooler

    def shape_of(provider: str) -> tuple[ModelShape, str]:
        """The torch rows time the reference model, which may be deeper than the bundle's."""
        return (ref_shape, ref_task) if provider in ("torch", "torch-cuda") else (shape, task)
    ref_p50 = {(r["batch"], r["seq"]): r["latency_ms"]["p50"] for r in report["results"]
               if r["provider"] == "torch"}
    cuda_p50 = {(r["precision"], r["batch"], r["seq"]): r["latency_ms"]["p50"] for r in report["results"]
                if r["provider"] == "torch-cuda"}
    for r in report["results"]:
        path_shape, path_task = shape_of(r["provider"])
        flops = forward_flops(path_shape, r["batch"], r["seq"], path_task)["total"]
        achieved = flops / (r["latency_ms"]["p50"] / 1e3) / 1e9
        peak = peak_for(calibration, r["provider"], r["precision"])
        r["gflop"] = _sig(flops / 1e9)
        r["achieved_gflops"] = _sig(achieved)
        r["peak_gflops"] = peak
        r["fraction_of_peak"] = _sig(achieved / peak) if peak else None
        ref = ref_p50.get((r["batch"], r["seq"]))
        r["speedup_vs_reference"] = round(ref / r["latency_ms"]["p50"], 3) if ref else None
        if r["provider"] in GPU_PROVIDERS:   # against PyTorch on the same GPU: fp32 vs fp32, else vs fp16
            base = cuda_p50.get(("fp32" if r["precision"] == "fp32" else "fp16", r["batch"], r["seq"]))
            r["speedup_vs_torch_cuda"] = round(base / r["latency_ms"]["p50"], 3) if base else None
    mix = report.get("length_mix")
    if mix:
        totals = {(r["path"], r["batch"], r["mode"]): r["total_s"] for r in mix["results"]}
        for r in mix["results"]:
            path_shape, path_task = shape_of(r["provider"])
            flops = sum(forward_flops(path_shape, b, s, path_task)["total"] for b, s in r.pop("shapes"))
            peak = peak_for(calibration, r["provider"], r["precision"])
            achieved = flops / r["total_s"] / 1e9
            r["gflop"] = _sig(flops / 1e9)
            r["achieved_gflops"] = _sig(achieved)
            r["fraction_of_peak"] = _sig(achieved / peak) if peak else None
            ref = totals.get((REFERENCE_PATH, r["batch"], r["mode"]))
            r["speedup_vs_reference"] = round(ref / r["total_s"], 3) if ref else None
            padded = totals.get((r["path"], r["batch"], "padded"))
            r["speedup_vs_padded"] = round(padded / r["total_s"], 3) if padded else None
