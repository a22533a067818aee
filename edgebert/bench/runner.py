"""``measure`` / ``run_bench``: every provider x precision x batch x seq of a bundle, beside the PyTorch
reference. This module orders the work; ``paths`` measures one path, ``derived`` computes the figures
that follow from the measured ones, ``schema`` holds the report, ``report`` renders it.

Order of work: check everything that can be checked (bundle hashes, sequence lengths, reference, the
``--data`` file: CoNLL for a token-cls bundle, SQuAD JSON for a qa one, whose windows are then the length
mix unless ``--lengths-from`` names another file) before anything is written; calibrate the matmul peak; load the
CPU paths, each checked and through its memory pass as it comes: the reference (if any; its outputs on the
accuracy inputs are kept), then each ONNX CPU precision; time them side by side in interleaved rounds
(``edgebert.bench.timing``: a burst of other work then hits every path, not one), and let them go; then, one
after another, each in its own block: (GPU providers requested, torch sees a GPU) the reference on CUDA in
fp32 and fp16, and each ONNX GPU path (provider x precision). An unavailable provider, a path that cannot run
here or one that fails is recorded with its reason and the run goes on; so is every figure that could not be
measured (``not_measured``). Speedups and roofline fractions are filled in at the end; the share of the CPU
other programs took is measured over the timed calls (``OtherCpuLoad``).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from edgebert.bench.answer_scores import AnswerData
from edgebert.bench.config import BenchConfig
from edgebert.bench.derived import derive
from edgebert.bench.entity_scores import EntityData
from edgebert.bench.flops import ModelShape
from edgebert.bench.gpu import Nvml
from edgebert.bench.header import bundle_hf_config, load_average, new_report
from edgebert.bench.measure import OtherCpuLoad
from edgebert.bench.paths import Run, measure_onnx, measure_reference, measure_reference_gpu
from edgebert.bench.peak import calibrate
from edgebert.bench.record import Record
from edgebert.bench.rows import GPU_PROVIDERS, SIDE_BY_SIDE, ProviderRow, Unavailable
from edgebert.bench.schema import AnswersSection, BenchReport, EntitiesSection, LengthMixSection
from edgebert.bench.workloads import LengthMix, read_texts, synthetic_feeds
from edgebert.bundle import Manifest, open_bundle, tokenizer_path
from edgebert.bundle.task_registry import bundle_task
from edgebert.errors import ConfigError
from edgebert.files.outdirs import OutputDir

REPORT_FILES = ("report.json", "report.md", "latency.png", "bench.jsonl")


class _Log:
    """Progress bar on stderr (a plain line per step when stderr is not a terminal) + one JSON line per
    measured row (``bench.jsonl`` in the report dir)."""

    def __init__(self, config: BenchConfig, out: OutputDir | None):
        self.path = config.report_dir / "bench.jsonl" if config.report_dir else None
        if out is not None:
            out.create()
            self.path.write_text("", encoding="utf-8")
        self.progress = None
        self.task = None
        self.lines = None             # stderr as plain lines, when it is not a terminal
        if config.progress:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            console = Console(stderr=True)
            if not console.is_terminal:
                self.lines = console
            else:
                self.progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                         TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                                         console=console, transient=True)

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

    def step(self, what: str, row: Record | None = None) -> None:
        if self.progress:
            self.progress.update(self.task, advance=1, description=what)
        else:
            self.say(what)
        if row is not None and self.path:
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(row.to_dict()) + "\n")

    def say(self, what: str) -> None:
        if self.progress:
            self.progress.update(self.task, description=what)
        elif self.lines is not None:
            self.lines.print(f"bench: {what}", highlight=False, markup=False, soft_wrap=True)


def _eval_batches(config: BenchConfig, manifest: Manifest, encoder, pad_id: int) -> list[dict]:
    """Padded feeds the accuracy comparison runs: real texts when a lengths file is given."""
    from edgebert.runtime.text import Encoded, pad_batch

    vocab_wide = "vocab_size" in bundle_task(manifest.task).metric_shape      # (B, T, V) logits: few texts
    n = min(config.eval_texts, 8) if vocab_wide else config.eval_texts
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


def _check_request(config: BenchConfig, manifest: Manifest) -> None:
    """What can be refused before anything is measured or written."""
    if bundle_task(manifest.task).inputs == "choices":
        raise ConfigError("bench times (batch, sequence) inputs; a multiple-choice bundle takes (batch, choices, "
                          "sequence)", "time its graph with onnxruntime directly")
    if max(config.seqs) > manifest.max_length:
        raise ConfigError(f"seq {max(config.seqs)} is longer than the bundle's max_sequence_length "
                          f"{manifest.max_length}", f"use --seq values <= {manifest.max_length}")
    if config.reference is not None and not (config.reference / "config.json").is_file():
        raise ConfigError(f"reference {config.reference} is not a model directory (no config.json)",
                          "pass a directory written by edgebert or a Hugging Face BERT directory")


def _record_gpu_gaps(run: Run, gpu_requested: bool, statuses: dict) -> None:
    """GPU figures this run cannot produce, with the reason (before anything is timed)."""
    if not gpu_requested:
        return
    gpu = run.report.environment.gpu or {}
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


def measure(config: BenchConfig) -> BenchReport:
    """Measure everything ``config`` asks for; return the report (and write it if ``report_dir``)."""
    from edgebert.runtime.providers import probe
    from edgebert.runtime.text import TextEncoder

    # --report: a new or empty folder, or an earlier report (whose files are replaced): edgebert.files.outdirs
    out = (OutputDir(config.report_dir, "bench", names=REPORT_FILES, overwrite=True, signature="report.json")
           if config.report_dir is not None else None)
    manifest = open_bundle(config.bundle_dir, verify=True)
    _check_request(config, manifest)
    hf_config = bundle_hf_config(config.bundle_dir, manifest)
    labels = tuple(manifest.label_names)
    shape = ModelShape.from_hf_dict(hf_config, len(labels) or None)
    pad_id = manifest.tokenizer.pad_id
    encoder = TextEncoder(tokenizer_path(config.bundle_dir, manifest), manifest.max_length, pad_id)
    entities = answers = None
    if config.data is not None and bundle_task(manifest.task).inputs == "questions":
        answers = AnswerData.load(config.data, manifest.task, tokenizer_path(config.bundle_dir, manifest),
                                  manifest.max_length, pad_id, config.max_texts)
    elif config.data is not None:
        entities = EntityData.load(config.data, manifest.task, encoder, labels, pad_id, config.max_texts)
    gpu_requested = any(p in GPU_PROVIDERS for p in config.providers)
    nvml = Nvml() if gpu_requested else None
    report = new_report(config, manifest, hf_config, nvml)
    if entities is not None:
        report.entities = EntitiesSection.from_dict(entities.summary(), exact=False)
    if answers is not None:
        report.answers = AnswersSection.from_dict(answers.summary(), exact=False)
    others = OtherCpuLoad()
    with _Log(config, out) as log, tempfile.TemporaryDirectory(prefix="edgebert-trt-") as cache_root:
        log.say("calibrating matmul peak")
        report.calibration = calibrate(config.calibration_size, config.threads)
        mix = None
        if config.lengths_from is not None:
            mix = LengthMix.load(config.lengths_from, encoder, max(config.seqs), config.max_texts)
        elif answers is not None:
            mix = answers.length_mix()         # the file's own window lengths
        if mix is not None:
            report.length_mix = LengthMixSection.from_dict(mix.summary(), exact=False)
        shapes = sorted(((b, s) for b in config.batches for s in config.seqs),
                        key=lambda bs: (bs[0] * bs[1], bs))             # smallest first: see measure.py
        run = Run(config, manifest, shapes, mix, _eval_batches(config, manifest, encoder, pad_id), pad_id, report,
                  log, nvml, Path(cache_root), entities, answers, cpu_load=others)
        statuses = {p: probe(p) for p in config.providers}
        for p, status in statuses.items():
            report.providers.append(ProviderRow.from_dict(status.as_dict(), exact=False))
            if not status.available:
                report.unavailable.append(Unavailable(p, None, status.reason))
        runnable = [(p, q) for p in config.providers if statuses[p].available for q in config.precisions]
        torch_gpu = config.reference is not None and config.torch_gpu and gpu_requested
        log.plan(run.steps_per_path * (len(runnable) + (config.reference is not None) + 2 * torch_gpu))
        _record_gpu_gaps(run, gpu_requested, statuses)
        if config.reference is not None:
            measure_reference(run, hf_config, len(labels) or 2)
        for provider, precision in runnable:
            if provider in SIDE_BY_SIDE:
                measure_onnx(run, provider, precision)
        run.time_waiting()
        if torch_gpu:
            measure_reference_gpu(run)
        for provider, precision in runnable:
            if provider not in SIDE_BY_SIDE:
                measure_onnx(run, provider, precision)
    report.environment.load_average_at_end = load_average()
    report.environment.cpu_share_used_by_other_processes = others.fraction()
    derive(report, shape, manifest.task)
    if config.report_dir is not None:
        from edgebert.bench.report import write_reports

        write_reports(report, config.report_dir)
    return report


def run_bench(config: BenchConfig) -> dict[str, Any]:
    """``measure(config)`` as its JSON (what report.json holds), for callers that read the dict."""
    return measure(config).to_dict()
