"""``BenchConfig``: what ``edgebert bench`` measures, validated at construction, with presets."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgebert.bundle import PRECISIONS
from edgebert.errors import ConfigError
from edgebert.runtime.providers import PROVIDERS
from edgebert.system.environment import check_threads

MIX_MODES = ("dynamic", "padded")     # how the length mix is replayed: see BenchConfig


def _names(what: str, values: Any, known: tuple[str, ...]) -> tuple[str, ...]:
    """``values`` lower-cased, without repeats, each one of ``known`` (at least one)."""
    names = tuple(dict.fromkeys(v.strip().lower() for v in values))
    bad = [v for v in names if v not in known]
    if not names or bad:
        raise ConfigError(f"unknown {what} {bad[0] if bad else '(none)'!r}", f"use a comma list of {', '.join(known)}")
    return names


def _positive_ints(name: str, values: Any) -> tuple[int, ...]:
    values = tuple(values)
    if not values:
        raise ConfigError(f"{name} is empty", f"give at least one {name} value")
    for v in values:
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ConfigError(f"{name} value {v!r} must be a positive integer")
    return tuple(sorted(set(values)))


@dataclass(frozen=True)
class BenchConfig:
    """One benchmark run: every provider x precision x batch x seq, plus the PyTorch reference.

    reference: a model directory timed with PyTorch fp32 in the same run (speedups are ratios
    measured side by side) and used for accuracy deltas where its outputs are comparable.
    lengths_from: a text/TSV/CoNLL file whose real length mix is replayed, in each of ``mix_modes``:
    ``dynamic`` (each batch padded to its longest text, as EdgeSession runs) and ``padded`` (every
    batch padded to the longest --seq, as a static-shape export must).
    data: a CoNLL file scored on every path of a token-cls bundle, the PyTorch reference included:
    entity precision / recall / F1 against its gold tags (``edgebert.bench.entity_scores``); or a SQuAD
    JSON file for a qa bundle: EM / F1 of every path, and its windows as the length mix unless
    ``lengths_from`` is given (``edgebert.bench.answer_scores``).
    max_seconds: per path and measured shape, stop early once the timed loop has run this long (>= 3 iters);
    the CPU paths, timed side by side, share max_seconds x their number per shape (``bench.timing``).
    torch_gpu: when a GPU provider is benchmarked and torch sees a GPU, also time the reference with
    PyTorch on CUDA in fp32 and fp16 (the GPU baseline); otherwise say why it was not measured.
    cold_start: time session creation and the first call of every path; TensorRT twice, with an empty
    engine cache (the engine build) and with the cache it filled (reported apart from latency). The
    caches live in a fresh temporary folder per run, so "empty" really builds. TensorRT sessions get a
    profile covering every shape of the run.
    """

    bundle_dir: Path
    providers: tuple[str, ...] = ("cpu", "cuda", "tensorrt")
    precisions: tuple[str, ...] = ("fp32", "int8")
    batches: tuple[int, ...] = (1, 8, 32)
    seqs: tuple[int, ...] = (16, 64, 128)
    lengths_from: Path | None = None
    mix_modes: tuple[str, ...] = MIX_MODES
    data: Path | None = None
    max_texts: int | None = None          # cap on texts replayed from lengths_from / scored from data (None: all)
    reference: Path | None = None
    threads: int | None = None            # onnxruntime intra-op and torch threads (None: defaults)
    warmup: int = 5
    iters: int = 50
    max_seconds: float = 10.0
    report_dir: Path | None = None
    calibration_size: int = 1024          # square GEMM size of the peak calibration (0: skip)
    eval_texts: int = 64                  # inputs of the accuracy comparison
    seed: int = 0
    progress: bool = True
    torch_gpu: bool = True
    cold_start: bool = True

    def __post_init__(self) -> None:
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731  (frozen dataclass)
        set_("bundle_dir", Path(self.bundle_dir))
        for key in ("lengths_from", "data", "reference", "report_dir"):
            if getattr(self, key) is not None:
                set_(key, Path(getattr(self, key)))
        set_("providers", _names("provider", self.providers, PROVIDERS))
        set_("precisions", _names("precision", self.precisions, PRECISIONS))
        set_("mix_modes", _names("length-mix mode", self.mix_modes, MIX_MODES))
        set_("batches", _positive_ints("batch", self.batches))
        set_("seqs", _positive_ints("seq", self.seqs))
        if min(self.seqs) < 3:
            raise ConfigError(f"seq {min(self.seqs)} is too short", "a sequence needs [CLS], a token and [SEP]")
        check_threads(self.threads)
        if not isinstance(self.warmup, int) or self.warmup < 0:
            raise ConfigError(f"warmup={self.warmup!r} must be >= 0")
        if not isinstance(self.iters, int) or self.iters < 3:
            raise ConfigError(f"iters={self.iters!r} must be >= 3", "percentiles need a few samples")
        if not self.max_seconds > 0:
            raise ConfigError(f"max_seconds={self.max_seconds!r} must be > 0")
        if self.max_texts is not None and self.max_texts < 1:
            raise ConfigError(f"max_texts={self.max_texts!r} must be >= 1")
        if self.calibration_size < 0 or self.eval_texts < 1:
            raise ConfigError("calibration_size must be >= 0 and eval_texts >= 1")

    @classmethod
    def preset(cls, name: str, bundle_dir: str | Path, **overrides: Any) -> "BenchConfig":
        """``quick`` (smoke run, seconds), ``default`` (the CLI defaults), ``full`` (more shapes), ``gpu``
        (CUDA and TensorRT x fp32/fp16/int8, batch to 128, sequence to 512)."""
        if name not in PRESETS:
            raise ConfigError(f"unknown bench preset {name!r}", f"use one of {', '.join(PRESETS)}")
        return cls(bundle_dir=bundle_dir, **{**PRESETS[name], **overrides})

    def replace(self, **changes: Any) -> "BenchConfig":
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        return {k: (str(v) if isinstance(v, Path) else list(v) if isinstance(v, tuple) else v)
                for k, v in d.items()}


PRESETS: dict[str, dict[str, Any]] = {
    "quick": dict(batches=(1, 8), seqs=(16, 64), warmup=2, iters=10, max_seconds=2.0, calibration_size=512),
    "default": {},
    "full": dict(batches=(1, 8, 32), seqs=(16, 32, 64, 128, 256), iters=100, max_seconds=20.0),
    # GPU: the sweep a GPU needs to fill (the bundle's max length must be >= 512 for the last column)
    "gpu": dict(providers=("cuda", "tensorrt"), precisions=("fp32", "fp16", "int8"), batches=(1, 8, 32, 128),
                seqs=(16, 64, 128, 256, 512), warmup=10, iters=100, max_seconds=10.0),
}
