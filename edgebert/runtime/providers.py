"""Which onnxruntime execution provider a session really gets, and why.

``onnxruntime-gpu`` lists TensorRT and CUDA as *available* on any Linux x86-64 machine, GPU or not;
asking for them there makes onnxruntime log errors and quietly fall back to the CPU. So before a
session is built each GPU provider is probed (driver present? does the provider's shared library
load, i.e. are its CUDA/cuDNN/TensorRT dependencies installed?), and after it is built
``session.get_providers()`` is checked: what a caller is told is what onnxruntime actually runs.
"""

from __future__ import annotations

import ctypes
import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError

ORT_NAMES = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "tensorrt": "TensorrtExecutionProvider",
}
SHORT_NAMES = {v: k for k, v in ORT_NAMES.items()}
PROVIDERS = tuple(ORT_NAMES)               # what a user may ask for, besides "auto"
AUTO_ORDER = ("tensorrt", "cuda", "cpu")   # what "auto" tries, best first


@dataclass(frozen=True)
class ProviderStatus:
    """Whether ``name`` can be used here; ``reason`` says why not (empty when usable)."""

    name: str
    available: bool
    reason: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"provider": self.name, "available": self.available, "reason": self.reason or None}


def short_name(ort_name: str) -> str:
    """``CUDAExecutionProvider`` -> ``cuda`` (unknown providers keep their onnxruntime name)."""
    return SHORT_NAMES.get(ort_name, ort_name)


def check_provider_name(name: str, allow_auto: bool = True) -> str:
    name = name.strip().lower()
    allowed = (("auto",) if allow_auto else ()) + PROVIDERS
    if name not in allowed:
        raise ConfigError(f"unknown provider {name!r}", f"use one of {', '.join(allowed)}")
    return name


def _load_error(library: str) -> str | None:
    """None if ``library`` loads; else the loader's message (e.g. which dependency is missing)."""
    try:
        ctypes.CDLL(library)
    except OSError as exc:
        return str(exc)
    return None


def _ort_capi_dir() -> Path:
    import onnxruntime

    return Path(onnxruntime.__file__).resolve().parent / "capi"


@functools.lru_cache(maxsize=None)
def probe(name: str) -> ProviderStatus:
    """Can provider ``name`` (cpu / cuda / tensorrt) run on this machine? Cached per process.

    Only definite answers count as "unavailable": the provider is not in this onnxruntime build,
    there is no NVIDIA driver, or the provider library cannot find one of its shared libraries.
    Anything inconclusive is left to the session itself (``resolve_session`` checks what it got).
    """
    import onnxruntime as ort

    name = check_provider_name(name, allow_auto=False)
    if name == "cpu":
        return ProviderStatus("cpu", True)
    if ORT_NAMES[name] not in ort.get_available_providers():
        return ProviderStatus(name, False, f"this onnxruntime build ({ort.__version__}) has no "
                                           f"{ORT_NAMES[name]}; install onnxruntime-gpu")
    reasons = []
    driver = _load_error("libcuda.so.1")
    if driver is not None:
        reasons.append("no NVIDIA GPU driver (libcuda.so.1 cannot be loaded)")
    lib = _ort_capi_dir() / f"libonnxruntime_providers_{name}.so"
    if lib.exists():
        # The shared provider library must be loaded (globally) first, as onnxruntime does.
        _load_error_global(_ort_capi_dir() / "libonnxruntime_providers_shared.so")
        error = _load_error(str(lib))
        if error is not None and "cannot open shared object file" in error:
            missing = error.split(":", 1)[0].strip()
            need = {"cuda": "CUDA and cuDNN", "tensorrt": "TensorRT, CUDA and cuDNN"}[name]
            reasons.append(f"onnxruntime's {name} provider library needs {missing}, which is not "
                           f"installed ({need} libraries are missing)")
    if reasons:
        return ProviderStatus(name, False, "; ".join(reasons))
    return ProviderStatus(name, True)


def _load_error_global(library: Path) -> None:
    try:
        ctypes.CDLL(str(library), mode=ctypes.RTLD_GLOBAL)
    except OSError:
        pass


def default_trt_cache_dir(model_file: Path) -> Path:
    """Engines depend on the model file, GPU and TensorRT version: one folder per model file hash."""
    from ..bundle import sha256_file

    root = Path(os.environ.get("EDGEBERT_CACHE", Path.home() / ".cache" / "edgebert"))
    return root / "tensorrt" / sha256_file(model_file)[:16]


def _shapes(input_names: list[str], dims: list[int]) -> str:
    """TensorRT profile string: ``input_ids:1x1,attention_mask:1x1,...``."""
    return ",".join(f"{n}:{'x'.join(str(int(d)) for d in dims)}" for n in input_names)


def provider_options(name: str, manifest: dict[str, Any], input_names: list[str], *,
                     precision: str, trt_cache_dir: Path | None) -> dict[str, Any]:
    """Options for one provider: TensorRT gets an engine cache and the manifest's shape profiles."""
    if name == "tensorrt":
        profile = manifest.get("tensorrt_profile") or {}
        max_len = int(manifest.get("max_sequence_length") or 512)
        mins, opts, maxs = (profile.get("min", [1, 1]), profile.get("opt", [8, min(128, max_len)]),
                            profile.get("max", [32, max_len]))
        options: dict[str, Any] = {
            "device_id": 0,
            "trt_engine_cache_enable": True,
            "trt_engine_cache_path": str(trt_cache_dir),
            "trt_timing_cache_enable": True,
            "trt_timing_cache_path": str(trt_cache_dir),
            "trt_profile_min_shapes": _shapes(input_names, mins),
            "trt_profile_opt_shapes": _shapes(input_names, opts),
            "trt_profile_max_shapes": _shapes(input_names, maxs),
        }
        if precision == "fp16":
            options["trt_fp16_enable"] = True
        return options
    if name == "cuda":
        return {"device_id": 0, "arena_extend_strategy": "kSameAsRequested",
                "cudnn_conv_algo_search": "HEURISTIC"}
    return {}


@dataclass(frozen=True)
class ProviderPlan:
    """What to ask onnxruntime for, and notes on every provider left out and why."""

    requested: str
    wanted: tuple[str, ...]              # short names, in preference order (always ends with cpu)
    notes: tuple[str, ...]


def plan_providers(requested: str) -> ProviderPlan:
    """``auto``: every usable one of TensorRT -> CUDA -> CPU. Explicit: that one (+ fallbacks
    onnxruntime needs for unsupported nodes), or ``ProviderUnavailable`` with the reason."""
    from ..errors import ProviderUnavailable

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
    chain = {"tensorrt": ("tensorrt", "cuda", "cpu"), "cuda": ("cuda", "cpu"), "cpu": ("cpu",)}[requested]
    wanted = tuple(p for p in chain if p == requested or probe(p).available)
    return ProviderPlan(requested, wanted, ())
