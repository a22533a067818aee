"""Execution provider names, the options each one gets per precision, and what ``auto`` will try.

Availability is probed in ``gpu_probe`` (driver, devices, CUDA version, provider libraries; its verdict,
``ProviderStatus``, is defined there and re-exported here); session creation, one attempt per provider,
lives in ``attempts``. Here:

* ``provider_options``: TensorRT gets its precision flags (``trt_fp16_enable`` for fp16,
  ``trt_int8_enable`` for the QDQ INT8 graph: without it the builder refuses Q/DQ layers, onnxruntime
  issue #13381), an engine cache and a timing cache, and a min/opt/max profile for *every* input.
  CUDA gets ``use_tf32=0``: "fp32" means fp32 (TF32 rounds GEMM inputs to 10 mantissa bits).
* ``plan_providers``: ``auto`` lists every usable one of TensorRT -> CUDA -> CPU; an explicit provider
  is that one alone (``ProviderUnavailable`` with the reason if the probe says no).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Sequence

from edgebert.errors import ConfigError
from edgebert.files.user_cache import cache_root
from edgebert.runtime.provider_status import ORT_PROVIDER_NAMES, ProviderStatus, not_in_build

if TYPE_CHECKING:
    from edgebert.runtime.trt_profile import TrtProfile

ORT_NAMES = {"cpu": "CPUExecutionProvider", **ORT_PROVIDER_NAMES}
SHORT_NAMES = {v: k for k, v in ORT_NAMES.items()}
PROVIDERS = tuple(ORT_NAMES)               # what a user may ask for, besides "auto"
AUTO_ORDER = ("tensorrt", "cuda", "cpu")   # what "auto" tries, best first

__all__ = ["ORT_NAMES", "SHORT_NAMES", "PROVIDERS", "AUTO_ORDER", "ProviderStatus", "probe", "short_name",
           "check_provider_name", "trt_cache_dirs", "provider_options", "ProviderPlan", "plan_providers"]


def short_name(ort_name: str) -> str:
    """``CUDAExecutionProvider`` -> ``cuda`` (unknown providers keep their onnxruntime name)."""
    return SHORT_NAMES.get(ort_name, ort_name)


def check_provider_name(name: str, allow_auto: bool = True) -> str:
    name = name.strip().lower()
    allowed = (("auto",) if allow_auto else ()) + PROVIDERS
    if name not in allowed:
        raise ConfigError(f"unknown provider {name!r}", f"use one of {', '.join(allowed)}")
    return name


def probe(name: str) -> ProviderStatus:
    """Can provider ``name`` (cpu / cuda / tensorrt) run on this machine? (``gpu_probe``; cached.) A build
    without the provider (the CPU install) is answered here, without loading the GPU probe."""
    name = check_provider_name(name, allow_auto=False)
    if name == "cpu":
        return ProviderStatus("cpu", True)
    import onnxruntime as ort

    if ORT_NAMES[name] not in ort.get_available_providers():
        return not_in_build(name, ort.__version__)
    from edgebert.runtime.gpu_probe import probe_gpu_provider  # only a GPU build loads the GPU probe

    return probe_gpu_provider(name)


def trt_cache_dirs(model_file: Path, precision: str, profile: TrtProfile,
                   root: Path | None = None) -> tuple[Path, Path]:
    """(engine cache, timing cache) folders. An engine depends on the model file, the precision flags and
    the profile (and the GPU and TensorRT version, which onnxruntime checks itself), so each combination
    gets its own engine folder; the timing cache (kernel timings per GPU) is shared."""
    from edgebert.bundle import sha256_file

    root = Path(root) if root is not None else cache_root() / "tensorrt"
    engines = root / f"{sha256_file(model_file)[:16]}-{precision}-{profile.key()}"
    return engines, root / "timing"


def provider_options(name: str, precision: str, input_names: Sequence[str], *,
                     profile: TrtProfile | None = None, engine_cache: Path | None = None,
                     timing_cache: Path | None = None) -> dict[str, Any]:
    """onnxruntime options for provider ``name`` running ``precision`` (see the module docstring)."""
    if name == "tensorrt":
        if profile is None or engine_cache is None or timing_cache is None:
            raise ConfigError("TensorRT needs a shape profile, an engine cache and a timing cache folder")
        options: dict[str, Any] = {
            "device_id": 0,
            "trt_fp16_enable": precision == "fp16",
            "trt_int8_enable": precision == "int8",
            "trt_engine_cache_enable": True,
            "trt_engine_cache_path": str(engine_cache),
            "trt_timing_cache_enable": True,
            "trt_timing_cache_path": str(timing_cache),
            **profile.provider_options(input_names),
        }
        if precision == "fp16":
            options["trt_layer_norm_fp32_fallback"] = True   # LayerNorm's variance overflows in fp16
        return options
    if name == "cuda":
        return {"device_id": 0, "use_tf32": 0, "arena_extend_strategy": "kSameAsRequested",
                "cudnn_conv_algo_search": "HEURISTIC"}
    return {}


class ProviderPlan(NamedTuple):
    """Providers to try, one session attempt each, best first; notes on every one left out and why."""

    requested: str
    wanted: tuple[str, ...]              # short names, in preference order
    notes: tuple[str, ...]


def plan_providers(requested: str) -> ProviderPlan:
    """``auto``: every usable one of TensorRT -> CUDA -> CPU. Explicit: that one, or
    ``ProviderUnavailable`` with the probe's reason."""
    from edgebert.errors import ProviderUnavailable

    requested = check_provider_name(requested)
    if requested == "auto":
        notes = []
        wanted = []
        for name in AUTO_ORDER:
            status = probe(name)
            if status.available:
                wanted.append(name)
            else:
                notes.append(f"{name}: not used, {status.reason}")
        return ProviderPlan("auto", tuple(wanted), tuple(notes))
    status = probe(requested)
    if not status.available:
        raise ProviderUnavailable(f"provider {requested!r} is unavailable on this machine: {status.reason}",
                                  "use provider='cpu' or 'auto' (auto reports what it got)")
    return ProviderPlan(requested, (requested,), ())
