"""Measuring one path of a bench run: the PyTorch reference (CPU), PyTorch on CUDA (fp32, fp16) and each
ONNX provider x precision.

A path is opened (``startup`` times an ONNX one), checked on the evaluation batches (accuracy against
the reference's outputs; outputs holding a NaN or an infinity make the path FAILED, with no figures),
scored on ``--data`` (entity F1, or SQuAD EM / F1), then timed at every fixed shape, smallest first, and on the length
mix: a CPU path side by side with the other CPU paths once all are loaded (``Run.time_waiting``), a GPU path
at once, in its own block (``edgebert.bench.timing``). What cannot run is recorded with its reason in the
shared ``BenchReport`` and the run goes on.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from edgebert.bench.answer_scores import AnswerData, SpanTracker
from edgebert.bench.config import BenchConfig
from edgebert.bench.entity_scores import EntityData
from edgebert.bench.gpu import Nvml
from edgebert.bench.measure import OtherCpuLoad, release_memory, rss_mb
from edgebert.bench.rows import REFERENCE_PATH, SIDE_BY_SIDE, Accuracy, NotMeasured, PathRow, StartupRow, Unavailable
from edgebert.bench.schema import AnswerScores, BenchReport, EntityScores, ReferenceFacts
from edgebert.bench.startup import open_path
from edgebert.bench.timing import Waiting, delta_mb, memory_pass, replay, time_shapes, time_side_by_side
from edgebert.bench.workloads import LengthMix
from edgebert.bundle import Manifest
from edgebert.bundle.task_registry import bundle_task
from edgebert.errors import BundleError, EdgebertError, RuntimeFault
from edgebert.runtime.fidelity import FidelityTracker
from edgebert.runtime.numeric import nonfinite_rows

Feeds = dict[str, np.ndarray]


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
    cpu_load: OtherCpuLoad | None = None        # counts other programs' CPU use while timing
    waiting: list[Waiting] = field(default_factory=list)   # CPU paths loaded, to be timed side by side

    @property
    def task(self) -> str:
        return self.manifest.task

    @property
    def steps_per_path(self) -> int:
        return len(self.shapes) + (len(self.config.mix_modes) * len(self.config.batches) if self.mix else 0)

    def measure(self, path, name: str, before_mb: float | None, gpu_before: float | None = None) -> None:
        """A CPU path: its memory pass now, its timing later, side by side with the other CPU paths
        (``time_waiting``). A GPU path: timed now at every fixed shape (smallest first), then on the length mix."""
        if path.provider in SIDE_BY_SIDE:
            self.waiting.append(Waiting(path, name, memory_pass(path, self.config, self.manifest, self.shapes,
                                                                before_mb)))
            return
        gpu = (self.nvml, gpu_before) if self.nvml is not None else None
        with self._timing():
            self.report.results += time_shapes(path, name, self.config, self.manifest, self.shapes, before_mb,
                                               self.log, gpu)
            if self.mix:
                self.report.length_mix.results += replay(path, name, self.config, self.mix, self.pad_id, self.log)

    def time_waiting(self) -> None:
        """Time the waiting CPU paths side by side (``timing.time_side_by_side``), record the rows of those
        that did not fail, in path order, and let them go."""
        if not self.waiting:
            return
        with self._timing():
            time_side_by_side(self.waiting, self.config, self.manifest, self.shapes, self.mix, self.pad_id,
                              self.log, self._failed_timing)
        for w in self.waiting:
            if not w.failed:
                self.report.results += w.rows
                if self.mix:
                    self.report.length_mix.results += w.mix_rows
        self.waiting.clear()
        release_memory()

    def _timing(self):
        return self.cpu_load.timing() if self.cpu_load is not None else nullcontext()

    def _failed_timing(self, waiting: Waiting, error: EdgebertError) -> None:
        """A side-by-side path that failed while timing: no figures, its reason recorded (as in a block)."""
        row = next(p for p in self.report.paths if p.path == waiting.name)
        row.failed = f"failed while timing: {error.one_line()}"
        self.report.unavailable.append(Unavailable(row.provider, row.precision, row.failed))
        for _ in range(self.steps_per_path - len(waiting.rows) - len(waiting.mix_rows)):
            self.log.step(f"{waiting.name}: failed")

    def outputs_check(self, run_fn: Callable[[Feeds], Feeds]) -> tuple[Accuracy | None, str | None]:
        """Run ``run_fn`` on the evaluation batches: (its accuracy against the reference's outputs, None
        without comparable ones; why it failed: outputs holding a NaN or an infinity, else None)."""
        texts = sum(len(f["input_ids"]) for f in self.eval_feeds)
        if self.ref_outputs is None:
            accuracy = None
            bad = sum(max(nonfinite_rows(v) for v in run_fn(f).values()) for f in self.eval_feeds)
        else:
            tracker = SpanTracker() if bundle_task(self.task).inputs == "questions" else FidelityTracker(self.task)
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
    """Load the PyTorch reference (timed later, side by side with the ONNX CPU paths: ``Run.time_waiting``);
    keep its outputs on the accuracy inputs."""
    from edgebert.bench.reference import TorchReference, comparability

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
                                    load_rss_mb=delta_mb(loaded, before), providers=["torch (CPU)"],
                                    notes=ref.notes, reference=True))
    run.measure(ref, REFERENCE_PATH, before)
    del ref
    release_memory()


def measure_reference_gpu(run: Run) -> None:
    """The reference with PyTorch on CUDA, fp32 and fp16 (the GPU baseline), or why it was not measured."""
    from edgebert.bench.reference import TorchReference, torch_cuda_status

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
    from edgebert.bundle import sha256_file

    name = manifest.models[session.model_key].file       # its name in the manifest (onnx/... in a bundle)
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
                  load_rss_mb=delta_mb(loaded, before), providers=session.providers, notes=session.provider_notes,
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
