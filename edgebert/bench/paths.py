"""Measuring one path of a bench run: the PyTorch reference (CPU), PyTorch on CUDA (fp32, fp16) and each
ONNX provider x precision.

A path is opened (``startup`` times an ONNX one), checked on the evaluation batches (accuracy against
the reference's outputs; outputs holding a NaN or an infinity make the path FAILED, with no figures),
scored on ``--data`` (entity F1, or SQuAD EM / F1), then timed at every fixed shape, smallest first, and on the length
mix. What cannot run is recorded with its reason in the shared ``BenchReport`` and the run goes on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from edgebert.bundle import Manifest
from edgebert.runtime.fidelity import FidelityTracker
from edgebert.runtime.numeric import nonfinite_rows

from ..errors import BundleError, EdgebertError, RuntimeFault
from .answers import AnswerData, SpanTracker
from .config import BenchConfig
from .entities import EntityData
from .gpu import Nvml
from .measure import Latency, release_memory, reset_peak_rss, peak_rss_mb, rss_mb, time_calls
from .rows import REFERENCE_PATH, Accuracy, LatencyRow, MixRow, NotMeasured, PathRow, StartupRow, Unavailable
from .schema import AnswerScores, BenchReport, EntityScores, ReferenceFacts
from .startup import open_path
from .workloads import LengthMix, synthetic_feeds

Feeds = dict[str, np.ndarray]


def time_shapes(path, name: str, config: BenchConfig, manifest: Manifest, shapes, before_mb, log,
                gpu: tuple[Nvml, float | None] | None = None) -> list[LatencyRow]:
    rows = []
    for batch, seq in shapes:
        feeds = synthetic_feeds(batch, seq, manifest, config.seed)
        release_memory()
        reset_peak_rss()
        lat = time_calls(lambda: path.run(feeds), config.warmup, config.iters, config.max_seconds)
        peak = peak_rss_mb()
        used = gpu[0].used_mb() if gpu else None
        row = LatencyRow(name, path.provider, path.precision, batch, seq, lat.iters, lat.ms(),
                         sequences_per_s=round(batch / lat.mean_s, 3),
                         tokens_per_s=round(batch * seq / lat.mean_s, 1), peak_rss_mb=_delta(peak, before_mb),
                         gpu_mem_mb=None if used is None or gpu[1] is None else round(used - gpu[1], 1))
        rows.append(row)
        log.step(f"{name} b={batch} s={seq}", row)
    return rows


def replay(path, name: str, config: BenchConfig, mix: LengthMix, pad_id: int, log) -> list[MixRow]:
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
            row = MixRow(name, path.provider, path.precision, batch, mode, len(feeds), len(mix.rows), lat.ms(),
                         total_s=round(total, 4), sequences_per_s=round(len(mix.rows) / total, 2),
                         real_tokens_per_s=round(real / total, 1), padding_fraction=round(1 - real / computed, 4),
                         shapes=[f["input_ids"].shape for f in feeds])
            rows.append(row)
            log.step(f"{name} replay b={batch} {mode}", row)
    return rows


class OnnxPath:
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
class Run:
    """What every path of one benchmark run shares, and the report it fills."""

    config: BenchConfig
    manifest: Manifest
    shapes: list[tuple[int, int]]
    mix: LengthMix | None
    eval_feeds: list[Feeds]
    pad_id: int
    report: BenchReport
    log: Any
    nvml: Nvml | None = None
    cache_root: Path | None = None
    entities: EntityData | None = None
    answers: AnswerData | None = None
    ref_outputs: list[Feeds] | None = None      # the reference's, when comparable (report.reference)

    @property
    def task(self) -> str:
        return self.manifest.task

    @property
    def steps_per_path(self) -> int:
        return len(self.shapes) + (len(self.config.mix_modes) * len(self.config.batches) if self.mix else 0)

    def measure(self, path, name: str, before_mb: float | None, gpu_before: float | None = None) -> None:
        """Time every fixed shape (smallest first), then replay the length mix."""
        gpu = (self.nvml, gpu_before) if self.nvml is not None and path.provider not in ("cpu", "torch") else None
        self.report.results += time_shapes(path, name, self.config, self.manifest, self.shapes, before_mb,
                                           self.log, gpu)
        if self.mix:
            self.report.length_mix.results += replay(path, name, self.config, self.mix, self.pad_id, self.log)

    def outputs_check(self, run_fn: Callable[[Feeds], Feeds]) -> tuple[Accuracy | None, str | None]:
        """Run ``run_fn`` on the evaluation batches: (its accuracy against the reference's outputs, None
        without comparable ones; why it failed: outputs holding a NaN or an infinity, else None)."""
        texts = sum(len(f["input_ids"]) for f in self.eval_feeds)
        if self.ref_outputs is None:
            accuracy = None
            bad = sum(max(nonfinite_rows(v) for v in run_fn(f).values()) for f in self.eval_feeds)
        else:
            tracker = SpanTracker() if self.task == "qa" else FidelityTracker(self.task)
            for feeds, ref_out in zip(self.eval_feeds, self.ref_outputs):
                tracker.add_runs(ref_out, run_fn(feeds), feeds["attention_mask"])
            fidelity = tracker.result()
            accuracy, bad = Accuracy.from_fidelity(fidelity), fidelity.non_finite
        if bad:
            return accuracy, f"non-finite outputs (NaN or infinity) for {bad} of {texts} evaluation texts"
        return accuracy, None

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
        self.report.entities.results[name] = EntityScores(**self.entities.score(run_feeds))

    def score_answers(self, name: str, run: Callable[[Feeds], Feeds]) -> None:
        """SQuAD EM / F1 of one path on ``--data FILE.json`` (``run``: feeds -> start / end logits)."""
        if self.answers is None:
            return
        self.log.say(f"{name}: EM / F1 on {len(self.answers.examples)} questions")
        self.report.answers.results[name] = AnswerScores(**self.answers.score(run))

    def not_measured(self, what: str, reason: str) -> None:
        self.report.not_measured.append(NotMeasured(what, reason))

    def give_up(self, row: PathRow, reason: str) -> None:
        """``row`` gets no figures: recorded as unavailable with ``reason``, its progress steps skipped."""
        self.report.unavailable.append(Unavailable(row.provider, row.precision, reason))
        for _ in range(self.steps_per_path):
            self.log.step(f"{row.path}: {'failed' if row.available else 'unavailable'}")

    def add_checked(self, row: PathRow, path, run_fn, before_mb: float | None, gpu_before: float | None) -> None:
        """Record ``row`` with its output check; time ``path`` unless its outputs are not numbers (or an
        ``EdgeSession`` refused them: it raises ``RuntimeFault`` for NaN / infinite outputs itself)."""
        self.report.paths.append(row)
        try:
            row.accuracy, row.failed = self.outputs_check(run_fn)
        except EdgebertError as exc:
            row.failed = f"failed on the evaluation inputs: {exc.one_line()}"
        reference = self.report.reference
        if row.accuracy is None and reference is not None and not row.is_torch:
            row.accuracy = Accuracy.not_comparable(reference.note)
        if row.failed:
            self.give_up(row, row.failed)
            return
        self.measure(path, row.path, before_mb, gpu_before)


def measure_reference(run: Run, hf_config: dict, num_labels: int) -> None:
    """Load and time the PyTorch reference; keep its outputs on the accuracy inputs."""
    from .reference import TorchReference, comparability

    run.log.say("loading PyTorch reference")
    import torch  # noqa: F401  (imported before the RSS baseline: its libraries are not the model)

    release_memory()
    before = rss_mb()
    ref = TorchReference(run.config.reference, run.task, run.config.threads)
    loaded = rss_mb()
    facts = ReferenceFacts.from_dict({**ref.describe(), **comparability(run.task, hf_config, num_labels, ref)},
                                     exact=False)
    run.report.reference = facts
    run.report.environment.torch_threads = ref.threads
    if facts.comparable:
        run.ref_outputs = [ref.run(f) for f in run.eval_feeds]
        run.score_entities(REFERENCE_PATH, ref.logits, ref.label_names)
        run.score_answers(REFERENCE_PATH, ref.run)
    elif run.entities is not None or run.answers is not None:
        run.not_measured(f"{'entity F1' if run.entities else 'EM / F1'} of {REFERENCE_PATH}", facts.note)
    run.report.paths.append(PathRow(REFERENCE_PATH, "torch", "fp32", True, model_bytes=ref.size_bytes,
                                    load_rss_mb=_delta(loaded, before), providers=["torch (CPU)"],
                                    notes=ref.notes, reference=True))
    run.measure(ref, REFERENCE_PATH, before)
    del ref
    release_memory()


def measure_reference_gpu(run: Run) -> None:
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
        if run.report.reference.comparable:
            run.score_entities(name, ref.logits, ref.label_names)
            run.score_answers(name, ref.run)
        row = PathRow(name, "torch-cuda", precision, True, model_bytes=ref.size_bytes,
                      providers=["torch (CUDA)"], notes=ref.notes)
        run.add_checked(row, ref, ref.run, None, gpu_before)
        del ref
        release_memory()


def same_as_checked(session, manifest: Manifest) -> None:
    """The graph the session loaded (with ``verify=False``) still has the hash ``run_bench`` checked when
    it opened the bundle: bench measures exactly the files it hash-checked, or refuses."""
    from ..bundle import sha256_file

    name = session.model_file.name
    if sha256_file(session.model_file) != manifest.files.get(name):
        raise BundleError(f"{session.model_file} changed after its hash was checked",
                          "do not modify a bundle while it is benchmarked")


def measure_onnx(run: Run, provider: str, precision: str) -> None:
    """Load one provider x precision; record it as unavailable (with the reason) if it cannot run."""
    name = f"onnx {provider} {precision}"
    release_memory()
    before = rss_mb()
    gpu_before = run.nvml.used_mb() if run.nvml is not None and provider != "cpu" else None
    run.log.say(f"loading {name}")
    try:
        session, startup = open_path(run.config, run.manifest, provider, precision, run.cache_root)
    except RuntimeFault as exc:     # it opened, and its first call failed (e.g. NaN outputs): FAILED
        row = PathRow(name, provider, precision, True, failed=f"failed at its first call: {exc.one_line()}")
        run.report.paths.append(row)
        run.give_up(row, row.failed)
        return
    except EdgebertError as exc:    # this machine cannot run it: unavailable
        row = PathRow(name, provider, precision, False, reason=exc.one_line())
        run.report.paths.append(row)
        run.give_up(row, row.reason)
        return
    run.report.startup += [StartupRow.from_dict(r, exact=False) for r in startup]
    same_as_checked(session, run.manifest)
    path = OnnxPath(session)
    loaded = rss_mb()
    row = PathRow(name, provider, precision, True, model_file=session.model_file.name, model_bytes=path.size_bytes,
                  load_rss_mb=_delta(loaded, before), providers=session.providers, notes=session.provider_notes,
                  model=session.model_key, placement=session.placement.as_dict(),
                  trt_profile=session.trt_profile.as_dict() if session.trt_profile else None,
                  int8_graph=session.int8_choice.as_dict() if session.int8_choice else None)
    run.score_entities(name, path.logits)
    run.score_answers(name, session.run)
    try:
        run.add_checked(row, path, session.run, before, gpu_before)
    except EdgebertError as exc:   # e.g. a run-time provider failure: recorded, never rerouted
        row.failed = f"failed while timing: {exc.one_line()}"
        run.report.unavailable.append(Unavailable(provider, precision, row.failed))
    del session, path
    release_memory()


def _delta(after: float | None, before: float | None) -> float | None:
    return None if after is None or before is None else round(after - before, 1)
