"""A bundle's OpenVINO INT8 graph behind onnxruntime's session interface.

``OpenVinoSession`` gives an OpenVINO IR model (``model.int8-openvino.xml`` + ``.bin``, made by ``export
--target openvino``) the four calls the runtime and the export gate use on an onnxruntime session
(``get_inputs``, ``get_outputs``, ``get_providers``, ``run``), so ``EdgeSession``, ``edgebert check``
and the INT8 accuracy gate run it like any other graph. Torch-free; ``openvino`` is optional (the
``[openvino]`` extra): without it the runtime loads the bundle's onnxruntime INT8 graph instead.

Settings, fixed for the figures the export measured: the CPU device, one stream, latency hint, float
parts in fp32 (``INFERENCE_PRECISION_HINT=f32``: OpenVINO would otherwise pick bf16 on CPUs with AMX or
AVX512-BF16), ``threads`` as ``INFERENCE_NUM_THREADS``, and the compile options the graph carries in its
``runtime_options`` (the export writes ``DYNAMIC_QUANTIZATION_GROUP_SIZE`` there for the layers it keeps
out of static INT8). One infer request behind a lock: a session may be shared between threads.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from edgebert.bundle.manifest import OPENVINO_ENGINE
from edgebert.system.extras import PROVIDED_BY

ENGINE = OPENVINO_ENGINE
INSTALL_HINT = PROVIDED_BY[ENGINE][1]       # pip install 'edgebert[openvino]'
PROVIDER_NAME = "OpenVINO CPU"
BASE_CONFIG = {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": "1", "INFERENCE_PRECISION_HINT": "f32"}
RUNTIME_OPTIONS = "runtime_options"       # the IR's rt_info section OpenVINO reads compile options from
GRAPH_OPTIONS = ("DYNAMIC_QUANTIZATION_GROUP_SIZE",)


def openvino_version() -> str | None:
    """The installed ``openvino`` distribution's version, or None when it is not installed."""
    import importlib.metadata  # here: every runtime start imports this module, few have openvino
    import importlib.util

    if importlib.util.find_spec("openvino") is None:
        return None
    try:
        return importlib.metadata.version("openvino")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def graph_options(model: Any) -> dict[str, str]:
    """The compile options an IR carries in ``rt_info.runtime_options`` (only those in ``GRAPH_OPTIONS``)."""
    options = {}
    for name in GRAPH_OPTIONS:
        if model.has_rt_info([RUNTIME_OPTIONS, name]):
            options[name] = str(model.get_rt_info([RUNTIME_OPTIONS, name]).astype(str))
    return options


@dataclass(frozen=True)
class Port:
    """An input or output as onnxruntime describes it (the name is what the runtime reads)."""
    name: str


class OpenVinoSession:
    """An OpenVINO IR graph compiled for the CPU, called like ``onnxruntime.InferenceSession``."""

    def __init__(self, path: str | Path, threads: int | None = None):
        import openvino as ov

        core = ov.Core()
        model = core.read_model(str(path))
        self.config = {**BASE_CONFIG, **graph_options(model)}
        if threads:
            self.config["INFERENCE_NUM_THREADS"] = str(int(threads))
        self._compiled = core.compile_model(model, "CPU", self.config)
        self._request = self._compiled.create_infer_request()
        self._inputs = [Port(p.get_any_name()) for p in self._compiled.inputs]
        self._outputs = [Port(p.get_any_name()) for p in self._compiled.outputs]
        self._lock = threading.Lock()

    def get_inputs(self) -> list[Port]:
        return list(self._inputs)

    def get_outputs(self) -> list[Port]:
        return list(self._outputs)

    def get_providers(self) -> list[str]:
        return [PROVIDER_NAME]

    def run(self, output_names: Sequence[str] | None, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """The named outputs (all when None) for ``feeds``, as arrays the caller owns."""
        names = list(output_names or [p.name for p in self._outputs])
        arrays = {k: np.ascontiguousarray(v) for k, v in feeds.items()}
        with self._lock:
            # inputs wrap the arrays (no copy into tensors sized by an earlier, shorter call); the
            # outputs alias the request's buffers until the next call, so the ones asked for are copied
            result = self._request.infer(arrays, share_inputs=True, share_outputs=True)
            return [np.array(result[name]) for name in names]
