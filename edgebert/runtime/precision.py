"""The precision a session loads when the caller names none: the best graph the bundle has for this host.

INT8 when the bundle has a CPU INT8 graph that this CPU computes exactly (``int8_choice``: a graph made
for it, one that cannot saturate, or one loaded with exact products), else fp32. The reason is kept
for ``EdgeSession.describe()``. A precision the caller names is never replaced: a bundle without it
stays a ``BundleError``. Torch-free.

``precision="smallest"`` (asked for, never the default): the fewer-bytes of the bundle's small graph (``int4``)
and the graph the default picks here, the small graph only if its gate met the budget (``accuracy.within_budget``
not false: a small graph over budget is written to be looked at, not loaded unasked). A one-device bundle of the
small graph (``edgebert pack --target int4``: no fp32 or INT8 graph) loads it by default.
"""

from __future__ import annotations

from typing import NamedTuple

from edgebert.bundle import PRECISIONS, Manifest
from edgebert.errors import BundleError, ConfigError
from edgebert.runtime.hostcpu import HostCpu
from edgebert.runtime.int8_choice import choose_int8, choose_openvino

SMALLEST = "smallest"


class PrecisionChoice(NamedTuple):
    precision: str
    reason: str


def choose_precision(requested: str | None, manifest: Manifest, host: HostCpu,
                     int8_target: str | None = None, *, graph_format: str = "onnx") -> PrecisionChoice:
    """``requested`` as given (``ConfigError`` if unknown), or the default described in the module docstring.
    ``graph_format``: the form the session loads (an 8-bit graph's ``.ort`` form runs exactly on fewer CPUs)."""
    if requested == SMALLEST:
        return _smallest(manifest, host, int8_target, graph_format)
    if requested is not None:
        if requested not in PRECISIONS:
            raise ConfigError(f"unknown precision {requested!r}",
                              f"use one of {', '.join(PRECISIONS)}, {SMALLEST!r}, or leave it unset for the best one here")
        return PrecisionChoice(requested, "asked for by the caller")
    if int8_target is not None:       # a target names an INT8 graph: the caller asked for INT8
        return PrecisionChoice("int8", f"int8_target={int8_target!r} names an INT8 graph")
    if not manifest.int8_graphs() and "fp32" not in manifest.models and "int4" in manifest.models:
        return PrecisionChoice("int4", "default: a one-device bundle of the small (int4) graph (`edgebert pack "
                                       "--target int4`), its only graph")
    if not manifest.int8_graphs():
        return PrecisionChoice("fp32", f"default: the bundle has no INT8 graph (it has: {', '.join(manifest.models)})")
    held = manifest.get_extra("default_precision")    # the export kept fp32 as the default (exporters.int8)
    if held:
        return PrecisionChoice(held["precision"], f"default: {held['reason']}")
    engine, _ = choose_openvino(manifest, host)       # the bundle's OpenVINO graph, where it runs by default
    if engine is not None:
        return PrecisionChoice("int8", f"default: the best graph here ({engine.reason})")
    try:
        choice = choose_int8(manifest, host, int8_target, graph_format=graph_format)
    except BundleError as exc:
        if not any(e.precision == "fp32" for e in manifest.models.values()):
            raise           # a one-device (packed) bundle: its INT8 graph's refusal says what loads instead
        return PrecisionChoice("fp32", f"default: no INT8 graph of the bundle runs exactly here ({exc.message})")
    return PrecisionChoice("int8", f"default: the best graph here ({choice.reason})")


def _smallest(manifest: Manifest, host: HostCpu, int8_target: str | None, graph_format: str) -> PrecisionChoice:
    """``precision="smallest"``: see the module docstring."""
    best = choose_precision(None, manifest, host, int8_target, graph_format=graph_format)
    small = manifest.models.get("int4")
    if small is None:
        return PrecisionChoice(best.precision, f"smallest: the bundle has no small (int4) graph; {best.reason}")
    if small.missed_budget:
        return PrecisionChoice(best.precision, f"smallest: the small (int4) graph missed its accuracy budget; "
                                               f"{best.reason}")
    if best.precision == "int8" and manifest.get_extra("default_precision") is None:
        entry = choose_int8(manifest, host, int8_target, graph_format=graph_format).entry
    else:
        entry = next(e for e in manifest.models.values() if e.precision == best.precision)
    sizes = manifest.get_extra("sizes") or {}          # file -> bytes, as written at export
    small_bytes, other = sizes.get(small.file, small.get("bytes")), sizes.get(entry.file)
    if not isinstance(small_bytes, int) or not isinstance(other, int):
        return PrecisionChoice(best.precision, f"smallest: the manifest does not say the graphs' sizes; {best.reason}")
    if other <= small_bytes:
        return PrecisionChoice(best.precision, f"smallest: {entry.key} ({other:,} bytes) is no larger than the small "
                                               f"(int4) graph ({small_bytes:,} bytes); {best.reason}")
    return PrecisionChoice("int4", f"smallest: the small (int4) graph ({small_bytes:,} bytes) is within its accuracy "
                                   f"budget and smaller than {entry.key} ({other:,} bytes)")
