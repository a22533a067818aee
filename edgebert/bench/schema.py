"""``BenchReport``: what one ``edgebert bench`` run found, as typed fields; with ``edgebert.bench.rows``
(the measured rows) the one place that knows the keys of ``report.json`` and ``bench.jsonl``.

The runner fills a ``BenchReport`` (``edgebert.bench.runner``), ``edgebert.bench.derived`` adds the
figures computed from the measured ones, and ``edgebert.bench.report`` renders it. ``to_dict()`` is
report.json; ``BenchReport.from_dict`` reads one back, older versions included (``edgebert.bench.record``:
a key a row does not model is kept as it is, a key the JSON lacked stays out of ``to_dict()``).

Here: the header (``Environment``: machine, versions, GPU, INT8 kernels, threads, load; ``BundleFacts``;
``Calibration``; ``ReferenceFacts``), the sections ``LengthMixSection``, ``EntitiesSection`` and
``AnswersSection``, and the report itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from edgebert.bench.record import Record
from edgebert.bench.rows import LatencyRow, MixRow, NotMeasured, PathRow, ProviderRow, StartupRow, Unavailable

REPORT_SCHEMA = "edgebert-bench"
REPORT_VERSION = 2          # 2: startup, not_measured, environment.gpu, GPU memory, torch on CUDA


# --------------------------------------------------------------------------- header
@dataclass
class Environment(Record):
    """The machine, the library versions (``system.environment.describe``), GPU and INT8 facts, threads,
    and the load on the machine around the run."""
    machine: str | None = None
    cpu: str | None = None
    cpu_count: int | None = None
    cpu_flags: list[str] = field(default_factory=list)
    python: str | None = None
    edgebert: str | None = None
    torch: str | None = None
    onnx: str | None = None
    onnxruntime: str | None = None
    onnxruntime_packages: list[str] = field(default_factory=list)
    tokenizers: str | None = None
    transformers: str | None = None
    onnxruntime_providers: list[str] = field(default_factory=list)
    gpu: dict[str, Any] | None = None                # bench.gpu.gpu_environment; None: no GPU provider asked
    int8_host: dict[str, Any] | None = None          # runtime.hostcpu.detect_host().as_dict() + summary
    threads_requested: int | None = None
    onnxruntime_intra_op_threads: int | str | None = None
    load_average_at_start: list[float] | None = None
    torch_threads: int | None = None                 # with a reference only
    load_average_at_end: list[float] | None = None
    cpu_share_used_by_other_processes: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def omitted(self) -> set[str]:
        return set() if self.torch_threads is not None else {"torch_threads"}

    @property
    def int8_summary(self) -> str:
        return (self.int8_host or {}).get("summary", "not probed")


@dataclass
class ModelSize(Record):
    """The config fields that set a model's cost (``max_position_embeddings``: the bundle's only)."""
    hidden_size: int | None = None
    num_hidden_layers: int | None = None
    num_attention_heads: int | None = None
    intermediate_size: int | None = None
    vocab_size: int | None = None
    max_position_embeddings: int | None = None

    def omitted(self) -> set[str]:
        return set() if self.max_position_embeddings is not None else {"max_position_embeddings"}


@dataclass
class GraphFile(Record):
    file: str
    bytes: int


@dataclass
class BundleFacts(Record):
    dir: str
    task: str
    source: Any = None
    config: ModelSize = field(default_factory=ModelSize)
    max_sequence_length: int | None = None
    models: dict[str, GraphFile] = field(default_factory=dict)
    NESTED: ClassVar[dict[str, Any]] = {"config": ModelSize, "models": {str: GraphFile}}


@dataclass
class Calibration(Record):
    """The measured matmul peak (``edgebert.bench.peak``); all None (JSON ``{}``) when skipped."""
    method: str | None = None
    size: int | None = None
    threads: int | None = None
    fp32_gflops: float | None = None
    fp32_gflops_error: str | None = None
    int8_gops: float | None = None
    int8_gops_error: str | None = None
    numpy_fp32_gflops: float | None = None

    def omitted(self) -> set[str]:
        if self.method is None:
            return {f.name for f in fields(self)}
        return {k for k in ("fp32_gflops_error", "int8_gops_error") if getattr(self, k) is None}


@dataclass
class ReferenceFacts(Record):
    """The PyTorch reference (``TorchReference.describe()``) and whether its outputs are comparable."""
    dir: str
    architecture: str
    device: str
    precision: str
    task: str
    parameters: int
    size_bytes: int
    config: ModelSize
    torch_threads: int
    notes: list[str] = field(default_factory=list)
    same_model: bool = False
    comparable: bool = False
    note: str = ""
    NESTED: ClassVar[dict[str, Any]] = {"config": ModelSize}


# --------------------------------------------------------------------------- sections
@dataclass
class LengthMixSection(Record):
    """The replayed file's length mix (``workloads.LengthMix.summary``) and the replay rows."""
    file: str
    texts: int
    pad_to: int
    tokens_mean: float
    tokens_p50: int
    tokens_p90: int
    tokens_max: int
    truncated: int
    results: list[MixRow] = field(default_factory=list)
    NESTED: ClassVar[dict[str, Any]] = {"results": [MixRow]}


@dataclass
class EntityScores(Record):
    f1: float
    precision: float
    recall: float
    word_accuracy: float
    f1_per_type: dict[str, float]
    sentences: int
    wall_s: float


@dataclass
class EntitiesSection(Record):
    """``--data``: the CoNLL file and each path's entity scores (``edgebert.bench.entity_scores``)."""
    file: str
    sentences: int
    words: int
    entities_scored_by: str
    batch: int
    through: str
    results: dict[str, EntityScores] = field(default_factory=dict)
    NESTED: ClassVar[dict[str, Any]] = {"results": {str: EntityScores}}


@dataclass
class AnswerScores(Record):
    exact_match: float
    f1: float
    questions: int
    wall_s: float


@dataclass
class AnswersSection(Record):
    """``--data FILE.json``: the SQuAD file and each path's EM / F1 (``edgebert.bench.answer_scores``)."""
    file: str
    questions: int
    answerable: int
    windows: int
    max_length: int
    doc_stride: int
    batch: int
    scored_by: str
    through: str
    results: dict[str, AnswerScores] = field(default_factory=dict)
    NESTED: ClassVar[dict[str, Any]] = {"results": {str: AnswerScores}}


@dataclass
class BenchReport(Record):
    """One benchmark run. ``to_dict()`` is report.json."""
    created: str
    config: dict[str, Any]                            # BenchConfig.as_dict()
    environment: Environment
    bundle: BundleFacts
    methods: dict[str, str]
    schema: str = REPORT_SCHEMA
    version: int = REPORT_VERSION
    calibration: Calibration = field(default_factory=Calibration)
    providers: list[ProviderRow] = field(default_factory=list)
    paths: list[PathRow] = field(default_factory=list)
    reference: ReferenceFacts | None = None
    results: list[LatencyRow] = field(default_factory=list)
    length_mix: LengthMixSection | None = None
    entities: EntitiesSection | None = None
    answers: AnswersSection | None = None
    unavailable: list[Unavailable] = field(default_factory=list)
    startup: list[StartupRow] = field(default_factory=list)
    not_measured: list[NotMeasured] = field(default_factory=list)
    ORDER: ClassVar[tuple[str, ...]] = ("schema", "version", "created", "config", "environment", "bundle",
                                        "methods", "calibration", "providers", "paths", "reference", "results",
                                        "length_mix", "entities", "answers", "unavailable", "startup",
                                        "not_measured")
    NESTED: ClassVar[dict[str, Any]] = {
        "environment": Environment, "bundle": BundleFacts, "calibration": Calibration, "providers": [ProviderRow],
        "paths": [PathRow], "reference": ReferenceFacts, "results": [LatencyRow], "length_mix": LengthMixSection,
        "entities": EntitiesSection, "answers": AnswersSection, "unavailable": [Unavailable], "startup": [StartupRow],
        "not_measured": [NotMeasured]}

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        return {k: out[k] for k in self.ORDER if k in out}

    @classmethod
    def of(cls, report: "BenchReport | dict[str, Any]") -> "BenchReport":
        """``report`` itself, or a report.json's dict read back."""
        return report if isinstance(report, BenchReport) else cls.from_dict(report)

    @property
    def threads(self) -> int | None:
        return self.config.get("threads")

    @property
    def mix_modes(self) -> list[str]:
        return list(self.config.get("mix_modes") or ("dynamic", "padded"))

    def path_sizes(self) -> dict[str, int | None]:
        return {p.path: p.model_bytes for p in self.paths}
