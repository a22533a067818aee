"""The ``openvino`` INT8 target: the traced graph as an OpenVINO IR model, quantized by NNCF on edgebert's
calibration text, for apps that run OpenVINO. Not picked by default: on the VNNI CPUs measured it ran no
faster than the ``x86-vnni`` onnxruntime graph and slower on short texts (``runtime.int8_choice.OPENVINO_SLOWER``).

Recipe (the measurements that chose it: benchmarks/results/int8_targets/decisions.md):

* NNCF's transformer preset (``ModelType.TRANSFORMER``: SmoothQuant, INT8 attention matmuls, fast bias
  correction) on every weight MatMul breaks a few short texts;
* the break comes from the FFN output projections (their input is the GELU output, whose few outlier
  channels set one per-tensor scale);
* so those projections get INT8 **weights** only (``nncf.compress_weights``) and OpenVINO quantizes their
  activations per token, in groups of ``DYNAMIC_GROUP`` channels, at run time (the graph carries
  ``DYNAMIC_QUANTIZATION_GROUP_SIZE`` in its ``runtime_options``).

``OpenVinoInt8Quantizer`` follows the gate's ``Quantizer`` protocol (``candidates`` / ``quantize``), so
``quantization.accuracy.quantize_with_guard`` measures it on held-out text and keeps more layers out of
static INT8 when the budget is missed, as for the onnxruntime targets. Needs ``openvino`` and ``nncf``
(the ``[openvino]`` extra) at export time; a bundle's runtime needs ``openvino`` alone.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import onnx

from edgebert.errors import ConfigError
from edgebert.quantization.outliers import split_candidates
from edgebert.runtime.openvino_graph import INSTALL_HINT, RUNTIME_OPTIONS

DYNAMIC_GROUP = 32          # channels per activation scale of the weight-only INT8 layers (per token)
TARGET = "openvino"
REQUIREMENTS = {"engine": "openvino", "python": f"openvino ({INSTALL_HINT})",
                "exact_on": ["x86-64 and ARM64 CPUs OpenVINO supports; measured at export on the export host"]}


def require_openvino() -> None:
    """ConfigError (one line, what to install) unless openvino and nncf import."""
    import importlib.util

    missing = [m for m in ("openvino", "nncf") if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigError(f"--target openvino needs {' and '.join(missing)}, which is not installed",
                          f"{INSTALL_HINT}, or drop openvino from --target")


def down_projections(model: onnx.ModelProto) -> list[str]:
    """Names of the weight MatMuls that project the FFN's wide GELU output back to the hidden size."""
    dims = {i.name: tuple(i.dims) for i in model.graph.initializer}
    weights = {n.name: dims[n.input[1]] for n in model.graph.node if n.name in split_candidates(model)}
    return sorted(name for name, (rows, cols) in weights.items() if rows > cols)


class OpenVinoInt8Quantizer:
    """NNCF INT8 of the traced graph ``raw`` (see the module docstring); ``calibration``: feed dicts."""

    def __init__(self, raw: Path, calibration: Iterable[dict[str, np.ndarray]]):
        require_openvino()
        self.raw = Path(raw)
        model = onnx.load(str(raw), load_external_data=False)
        names = {i.name for i in model.graph.input}
        self.calibration = [{k: v for k, v in feeds.items() if k in names} for feeds in calibration]
        self.weight_only = down_projections(model)
        self._candidates = sorted(split_candidates(model))

    def candidates(self) -> list[str]:
        """The weight MatMuls statically quantized (the gate may keep some of them out)."""
        return [n for n in self._candidates if n not in self.weight_only]

    def quantize(self, out_path: str | Path, exclude: Iterable[str] = (), only: str | None = None) -> Path:
        """Write the INT8 IR at ``out_path`` (``.xml`` + ``.bin``): static INT8 except ``exclude`` and the
        down-projections (INT8 weights, per-token activations at run time); ``only``: that node alone."""
        import nncf
        import openvino as ov

        candidates = self.candidates()
        kept_out = set(self.weight_only) | set(exclude)
        if only is not None:
            kept_out = set(candidates) - {only} | set(self.weight_only)
        model = ov.convert_model(str(self.raw))
        quantized = nncf.quantize(model, nncf.Dataset(self.calibration), model_type=nncf.ModelType.TRANSFORMER,
                                  subset_size=len(self.calibration),
                                  ignored_scope=nncf.IgnoredScope(names=sorted(kept_out), validate=False))
        if only is None:
            quantized = nncf.compress_weights(quantized, mode=nncf.CompressWeightsMode.INT8_ASYM)
            quantized.set_rt_info(str(DYNAMIC_GROUP), [RUNTIME_OPTIONS, "DYNAMIC_QUANTIZATION_GROUP_SIZE"])
        return _save(quantized, Path(out_path))

    def describe(self) -> dict[str, Any]:
        import nncf
        import openvino as ov

        return {"engine": "openvino", "graph": "openvino-ir", "format": "OpenVINO IR", "tool": f"nncf {nncf.__version__}",
                "openvino": ov.__version__, "preset": "ModelType.TRANSFORMER (SmoothQuant, INT8 attention matmuls)",
                "static_int8": "activations: per-tensor scales from calibration; weights: per channel",
                "weight_only_int8": self.weight_only,
                "weight_only_activations": f"quantized per token at run time, groups of {DYNAMIC_GROUP} channels "
                                           "(DYNAMIC_QUANTIZATION_GROUP_SIZE)",
                "calibration_batches": len(self.calibration)}


def _save(model: Any, out: Path) -> Path:
    """``out`` (.xml) and its .bin written under temporary names, then renamed (.bin first)."""
    import openvino as ov

    tmp = out.with_name(f".{out.stem}.{os.getpid()}.tmp.xml")
    ov.save_model(model, str(tmp), compress_to_fp16=False)
    os.replace(tmp.with_suffix(".bin"), out.with_suffix(".bin"))
    os.replace(tmp, out)
    return out
