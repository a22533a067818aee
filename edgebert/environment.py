"""What machine and library versions a result came from (recorded in reports and benchmarks)."""

from __future__ import annotations

import importlib.metadata as md
import os
import platform


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def cpu_flags() -> list[str]:
    """SIMD flags that matter for int8/fp32 kernels (Linux; empty elsewhere)."""
    wanted = {"avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "amx_int8", "amx_bf16"}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return sorted(wanted & set(line.split(":", 1)[1].split()))
    except OSError:
        pass
    return []


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


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
        "tokenizers": _version("tokenizers"),
        "transformers": _version("transformers"),
    }
    try:
        import onnxruntime as ort

        info["onnxruntime_providers"] = ort.get_available_providers()
    except ImportError:
        info["onnxruntime_providers"] = []
    return info
