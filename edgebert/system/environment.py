"""What machine and library versions a result came from (recorded in reports and benchmarks), and the
one reader of Linux's ``/proc/cpuinfo`` (``cpuinfo``: also what ``edgebert.runtime.hostcpu`` reads
the instruction sets from). Stdlib only."""

from __future__ import annotations

import importlib.metadata as md
import os
import platform
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def versions() -> dict[str, str | None]:
    """The library versions a bundle records (its manifest's ``versions``; None: not installed)."""
    return {"onnxruntime": _version("onnxruntime-gpu") or _version("onnxruntime"), "onnx": _version("onnx"),
            "torch": _version("torch"), "edgebert": _version("edgebert"), "tokenizers": _version("tokenizers")}


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one, else all of them)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def check_threads(threads: object, what: str = "threads") -> int | None:
    """``threads`` if it is None or an integer from 1 to ``usable_cpus()``, else ``ConfigError``: more
    threads than CPUs only contend (2,000 onnxruntime threads take minutes just to start)."""
    from edgebert.errors import ConfigError

    if threads is None:
        return None
    limit = usable_cpus()
    if not isinstance(threads, int) or isinstance(threads, bool) or not 1 <= threads <= limit:
        raise ConfigError(f"{what}={threads!r} must be an integer from 1 to {limit} (the CPUs this process may use)",
                          f"use at most {limit}, or leave it unset for onnxruntime's default")
    return threads


def onnxruntime_packages() -> list[str]:
    """Installed onnxruntime distributions: more than one share the ``onnxruntime`` module and break it."""
    return [d for d in ("onnxruntime", "onnxruntime-gpu", "onnxruntime-openvino", "onnxruntime-directml")
            if _version(d)]


def cpuinfo(path: Path = CPUINFO) -> dict[str, str]:
    """The fields of the first processor in ``/proc/cpuinfo`` (``flags`` on x86, ``Features`` on ARM,
    ``model name`` ...), each as its text; empty where there is no such file (macOS, Windows)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    return fields


def cpu_flags() -> list[str]:
    """SIMD flags that matter for int8/fp32 kernels (Linux; empty elsewhere)."""
    wanted = {"avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "amx_int8", "amx_bf16"}
    return sorted(wanted & set(cpuinfo().get("flags", "").split()))


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``; elsewhere what ``platform`` says)."""
    return cpuinfo().get("model name") or platform.processor() or platform.machine()


def describe() -> dict[str, object]:
    """Machine, versions and threads. Imports neither torch nor onnxruntime unless installed."""
    info: dict[str, object] = {
        "machine": platform.machine(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_flags": cpu_flags(),
        "python": platform.python_version(),
        "edgebert": _version("edgebert"),
        "torch": _version("torch"),
        "onnx": _version("onnx"),
        "onnxruntime": _version("onnxruntime-gpu") or _version("onnxruntime"),
        "onnxruntime_packages": onnxruntime_packages(),
        "tokenizers": _version("tokenizers"),
        "transformers": _version("transformers"),
    }
    try:
        import onnxruntime as ort

        info["onnxruntime_providers"] = ort.get_available_providers()
    except ImportError:
        info["onnxruntime_providers"] = []
    return info
