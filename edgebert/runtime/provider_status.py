"""A provider's verdict (``ProviderStatus``) and the GPU providers' onnxruntime names: what ``providers`` answers for
every provider and ``gpu_probe`` for the GPU ones, in a module of its own so that neither imports the other (a
CPU-only install never loads the GPU probe)."""

from __future__ import annotations

from typing import Any, NamedTuple

ORT_PROVIDER_NAMES = {"cuda": "CUDAExecutionProvider", "tensorrt": "TensorrtExecutionProvider"}   # the GPU ones


class ProviderStatus(NamedTuple):
    """Whether provider ``name`` can be used here; ``reason`` says why not (empty when usable). The probe's
    verdict (``runtime.providers.probe`` gives it for every provider)."""

    name: str
    available: bool
    reason: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"provider": self.name, "available": self.available, "reason": self.reason or None}


def not_in_build(name: str, ort_version: str) -> ProviderStatus:
    """The verdict for a GPU provider this onnxruntime build does not have (plain ``onnxruntime``)."""
    return ProviderStatus(name, False, f"this onnxruntime build ({ort_version}) has no {ORT_PROVIDER_NAMES[name]}; "
                                       "install onnxruntime-gpu")
