"""The GPU side of a benchmark: what GPU and libraries it ran on, and GPU memory through NVML.

NVML (``nvidia-ml-py``, the ``[gpu]`` extra) is optional: without it, or without a driver, GPU memory
is "not measured" with the reason, never a number. The GPU facts (name, driver, CUDA, cuDNN, TensorRT)
come from ``edgebert.runtime.gpu_probe`` plus NVML's driver version where NVML works. Torch-free.
"""

from __future__ import annotations

from typing import Any

GPU_MEMORY_METHOD = ("GPU memory: NVML device memory in use (nvmlDeviceGetMemoryInfo, device 0) after each "
                     "shape's timed runs minus before the path was loaded: weights, onnxruntime's CUDA arena "
                     "(kept between runs, so shapes run smallest first) and TensorRT engine memory; other "
                     "processes on the GPU count too")


class Nvml:
    """NVML on device 0, or the reason it cannot be used (``reason``; ``ok`` False)."""

    def __init__(self) -> None:
        self.ok, self.reason, self._nvml, self._handle = False, "", None, None
        try:
            import pynvml
        except ImportError:
            self.reason = "nvidia-ml-py is not installed (pip install 'edgebert[gpu]')"
            return
        try:
            pynvml.nvmlInit()
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        except pynvml.NVMLError as exc:
            self.reason = f"NVML cannot be used here ({exc})"
            return
        self.ok, self._nvml = True, pynvml

    def used_mb(self) -> float | None:
        if not self.ok:
            return None
        return self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used / 2 ** 20

    def facts(self) -> dict[str, Any]:
        if not self.ok:
            return {}
        nv = self._nvml

        def text(value: Any) -> str:
            return value.decode() if isinstance(value, bytes) else str(value)
        return {"nvml_driver": text(nv.nvmlSystemGetDriverVersion()),
                "nvml_name": text(nv.nvmlDeviceGetName(self._handle)),
                "memory_total_mb": round(nv.nvmlDeviceGetMemoryInfo(self._handle).total / 2 ** 20)}


def gpu_environment(nvml: Nvml) -> dict[str, Any]:
    """GPU name(s), driver, CUDA (driver / onnxruntime build), cuDNN and TensorRT versions; ``None`` where
    unknown, with ``reason`` when there is no usable GPU."""
    from edgebert.runtime.gpu_probe import gpu_facts, preload_gpu_libraries

    preload_gpu_libraries()   # so cuDNN / TensorRT versions are read from the libraries onnxruntime loads
    facts = gpu_facts()
    facts.update(nvml.facts())
    facts["nvml"] = "ok" if nvml.ok else nvml.reason
    if not facts["gpus"]:
        facts["reason"] = facts.get("driver_error") or "no GPU reported by the driver"
    return facts


def gpu_summary(env: dict[str, Any] | None) -> str:
    """One line for reports: 'NVIDIA H100 80GB HBM3, driver 560.35, CUDA 13.0 (onnxruntime build 13.0), ...'."""
    if not env:
        return "not probed (no GPU provider requested)"
    if not env.get("gpus"):
        return f"none: {env.get('reason')}"
    driver = env.get("nvml_driver") or "version unknown (NVML: " + str(env.get("nvml")) + ")"
    return (f"{', '.join(env['gpus'])}; driver {driver} (CUDA {env.get('driver_cuda')}); onnxruntime built for "
            f"CUDA {env.get('onnxruntime_cuda_build')}; cuDNN {env.get('cudnn') or 'not loaded'}; "
            f"TensorRT {env.get('tensorrt') or 'not loaded'}")
