"""The measured rows of a bench report: ``LatencyRow`` (a fixed shape), ``MixRow`` (a length-mix replay),
``StartupRow`` (cold start), ``PathRow`` (an ONNX provider x precision or a PyTorch path, with its
``Accuracy`` against the reference), ``ProviderRow`` (a provider's probe), ``Unavailable`` and
``NotMeasured`` (what has no figure, and why). Each row's ``to_dict()`` is its report.json entry; a
latency or mix row written before the derived figures exist (a bench.jsonl line) leaves them out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from edgebert.bench.record import INTERNAL, Record

REFERENCE_PATH = "torch fp32"
GPU_PROVIDERS = ("cuda", "tensorrt")
TORCH_PROVIDERS = ("torch", "torch-cuda")
SIDE_BY_SIDE = ("cpu", "torch")           # timed side by side in interleaved rounds (bench.timing); the rest in blocks


@dataclass
class Percentiles(Record):
    """Milliseconds per call over the timed calls."""
    p50: float
    p90: float
    p99: float
    mean: float
    min: float
    max: float


@dataclass
class LatencyRow(Record):
    """One path at one fixed (batch, seq) shape; the fields from ``gflop`` on are derived afterwards."""
    path: str
    provider: str
    precision: str
    batch: int
    seq: int
    iters: int
    latency_ms: Percentiles
    sequences_per_s: float
    tokens_per_s: float
    peak_rss_mb: float | None = None
    gpu_mem_mb: float | None = None
    gflop: float | None = None
    achieved_gflops: float | None = None
    peak_gflops: float | None = None
    fraction_of_peak: float | None = None
    speedup_vs_reference: float | None = None
    speedup_vs_torch_cuda: float | None = None      # GPU providers only
    NESTED: ClassVar[dict[str, Any]] = {"latency_ms": Percentiles}
    DERIVED: ClassVar[tuple[str, ...]] = ("gflop", "achieved_gflops", "peak_gflops", "fraction_of_peak",
                                          "speedup_vs_reference", "speedup_vs_torch_cuda")

    def omitted(self) -> set[str]:
        if self.gflop is None:                          # not derived yet: a bench.jsonl line
            return set(self.DERIVED)
        return set() if self.provider in GPU_PROVIDERS else {"speedup_vs_torch_cuda"}


@dataclass
class MixRow(Record):
    """One path replaying the length mix at one batch size in one mode (dynamic / padded)."""
    path: str
    provider: str
    precision: str
    batch: int
    mode: str
    batches: int
    texts: int
    latency_ms: Percentiles
    total_s: float
    sequences_per_s: float
    real_tokens_per_s: float
    padding_fraction: float
    shapes: list[tuple[int, int]] = field(default_factory=list, metadata=INTERNAL)   # (batch, seq) per call
    gflop: float | None = None
    achieved_gflops: float | None = None
    fraction_of_peak: float | None = None
    speedup_vs_reference: float | None = None
    speedup_vs_padded: float | None = None
    NESTED: ClassVar[dict[str, Any]] = {"latency_ms": Percentiles}

    def omitted(self) -> set[str]:
        return set() if self.gflop is not None else {"gflop", "achieved_gflops", "fraction_of_peak",
                                                    "speedup_vs_reference", "speedup_vs_padded"}


@dataclass
class StartupRow(Record):
    """Session creation and first call of an ONNX path (``edgebert.bench.startup``)."""
    path: str
    provider: str
    precision: str
    model: str
    engine_cache: str | None
    session_s: float
    first_run_s: float
    cold_start_s: float
    engine_build_s: float | None = None              # TensorRT, empty vs warm engine cache

    def omitted(self) -> set[str]:
        return set() if self.engine_build_s is not None else {"engine_build_s"}


@dataclass
class Accuracy(Record):
    """One path's outputs against the PyTorch reference's on the same inputs (``FidelityTracker.add_runs``).

    JSON: ``{"comparable": false, "reason"}`` when the outputs cannot be compared; otherwise the metric
    (cosine: ``cosine_mean`` / ``cosine_min``, else the agreement under the metric's own name),
    ``inputs`` (texts, or tokens for token tasks) and the largest differences; ``non_finite`` (texts
    whose outputs hold a NaN or an infinity) only when there are some, and then no figure at all."""
    metric: str | None = None
    inputs: int | None = None
    max_abs_diff: float | None = None
    agreement: float | None = None
    cosine_mean: float | None = None
    cosine_min: float | None = None
    pooler_max_abs_diff: float | None = None
    prob_max_abs_diff: float | None = None
    non_finite: int | None = None
    comparable: bool | None = None
    reason: str | None = None

    @classmethod
    def from_fidelity(cls, f: Any) -> "Accuracy":
        """From a ``runtime.fidelity.Fidelity`` made by ``add_runs``."""
        inputs = f.tokens if f.tokens is not None else f.n
        if f.non_finite:
            return cls(f.metric, inputs, non_finite=f.non_finite)
        fig = finite_or_none
        if f.metric == "cosine":
            return cls(f.metric, inputs, fig(f.max_abs_diff), cosine_mean=fig(f.mean), cosine_min=fig(f.min),
                       pooler_max_abs_diff=fig(f.pooler_max_abs_diff))
        return cls(f.metric, inputs, fig(f.max_abs_diff), agreement=fig(f.mean),
                   prob_max_abs_diff=fig(f.prob_max_abs_diff))

    @classmethod
    def not_comparable(cls, reason: str) -> "Accuracy":
        return cls(comparable=False, reason=reason)

    def to_dict(self) -> dict[str, Any]:
        if self.comparable is False:
            return {"comparable": False, "reason": self.reason}
        out: dict[str, Any] = {"metric": self.metric, "inputs": self.inputs, "max_abs_diff": self.max_abs_diff}
        if self.metric == "cosine":
            out.update(pooler_max_abs_diff=self.pooler_max_abs_diff, cosine_mean=self.cosine_mean,
                       cosine_min=self.cosine_min)
        else:
            out[self.metric] = self.agreement
            if self.prob_max_abs_diff is not None:
                out["prob_max_abs_diff"] = self.prob_max_abs_diff
        if self.non_finite:
            out["non_finite"] = self.non_finite
        return out

    @classmethod
    def from_dict(cls, value: dict[str, Any]) -> "Accuracy":
        if value.get("comparable") is False:
            return cls.not_comparable(value.get("reason"))
        return cls(value.get("metric"), value.get("inputs"), value.get("max_abs_diff"),
                   value.get(value.get("metric")) if value.get("metric") != "cosine" else None,
                   value.get("cosine_mean"), value.get("cosine_min"), value.get("pooler_max_abs_diff"),
                   value.get("prob_max_abs_diff"), value.get("non_finite"))


@dataclass
class PathRow(Record):
    """One measured path: an ONNX provider x precision, the PyTorch reference or PyTorch on CUDA. An
    unavailable one holds only its name and ``reason``; ``failed`` says why a loaded one has no figures."""
    path: str
    provider: str
    precision: str
    available: bool
    reason: str | None = None
    model_file: str | None = None
    model_bytes: int | None = None
    load_rss_mb: float | None = None
    providers: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    model: str | None = None
    placement: dict[str, Any] | None = None          # runtime.placement.Placement.as_dict()
    trt_profile: dict[str, Any] | None = None
    int8_graph: dict[str, Any] | None = None         # runtime.int8_choice: target, reason, ...
    accuracy: Accuracy | None = None
    reference: bool = False
    failed: str | None = None
    NESTED: ClassVar[dict[str, Any]] = {"accuracy": Accuracy}
    ONNX_ONLY: ClassVar[set[str]] = {"model_file", "model", "placement", "trt_profile", "int8_graph"}

    @property
    def is_torch(self) -> bool:
        return self.provider in TORCH_PROVIDERS

    def omitted(self) -> set[str]:
        if not self.available:
            return {f.name for f in fields(self)} - {"path", "provider", "precision", "available", "reason"}
        left_out = {"reason"} | (self.ONNX_ONLY if self.is_torch else set())
        return left_out | {"failed"} if self.failed is None else left_out


@dataclass
class ProviderRow(Record):
    """A requested provider's probe (``runtime.providers.ProviderStatus.as_dict()``)."""
    provider: str
    available: bool
    reason: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Unavailable(Record):
    """A provider (``precision`` None) or a path with no figures, and why."""
    provider: str
    precision: str | None
    reason: str

    @property
    def name(self) -> str:
        return self.provider + (f" {self.precision}" if self.precision else "")


@dataclass
class NotMeasured(Record):
    """A figure this run could not produce, and why."""
    what: str
    reason: str


def finite_or_none(value: float | None) -> float | None:
    """A figure for the JSON: NaN and infinities are not numbers a report may show."""
    return None if value is None or not math.isfinite(value) else value
