"""INT8 deployment targets: one named recipe each, kept as data, with why it was chosen.

A bundle is built on one machine and runs on another, so an INT8 graph is made *for a target*, not for
the export host. Every recipe here is dynamic-format INT8 on the fused graph (``QAttention`` +
``MatMulInteger``), per-channel int8 weights, uint8 activations, SmoothQuant scales folded into the LayerNorms
(``quantization.smoothing``, alpha 0.75), the outlier-channel split (``quantization.outliers``) and **calibrated
activation scales** (``quantization.scales``: one fixed
scale per tensor from calibration text, so a text's output never depends on its batch-mates). What
differs is the weight range, which decides where the graph is exact (``edgebert.runtime.hostcpu``):

* 7-bit weights (``reduce_range``: int8 in [-64, 64]) cannot saturate AVX2's int16 pair sums, so the
  graph is exact on every x86-64 and ARM64 CPU with no runtime help;
* 8-bit weights are exact on VNNI and ARM64 kernels; on AVX2 / AVX-512 without VNNI they saturate, so
  the runtime loads them with ``session.x64quantprecision=1`` (onnxruntime converts them to uint8,
  exact, U8U8 kernel) or refuses them.

Why these recipes: calibrated scales keep a text's output independent of its batch-mates; 7-bit weights are
the fastest exact choice on AVX2 (U8U8 weights are slower there); on VNNI / ARM64 8-bit weights are exact and
the most accurate. ``openvino`` (``ENGINE_TARGET``) names an OpenVINO IR graph made beside these
(``quantization.openvino_int8``), loaded only when asked for. The measurements that chose each recipe, with
their machines: benchmarks/results/int8_targets/decisions.md.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from edgebert.errors import ConfigError

WEIGHT_TYPES = ("int8", "uint8")
ACTIVATION_SCALES = ("calibrated", "per-call")


@dataclass(frozen=True)
class Int8Recipe:
    """How one target's INT8 graph is made."""

    target: str
    weight_type: str = "int8"                 # int8 (U8S8 kernels) | uint8 (U8U8 kernels)
    reduce_range: bool = False                # int8 weights in [-64, 64]: no AVX2 saturation
    per_channel: bool = True
    op_types: tuple[str, ...] = ("MatMul", "Attention")
    smooth_alpha: float = 0.75                # SmoothQuant scales folded into the LayerNorms first; 0 = off
    outlier_ratio: float = 3.0                # channels over ratio x median |max| stay float; 0 = off
    activation_scales: str = "calibrated"     # calibrated (fixed, batch-invariant) | per-call (dynamic)
    embedding_tables: bool = True             # word / position tables int8 per row (quantization.embedding_tables)
    tuned_for: tuple[str, ...] = ()           # instruction sets the recipe is chosen for
    why: str = ""

    def __post_init__(self) -> None:
        if self.weight_type not in WEIGHT_TYPES:
            raise ConfigError(f"unknown INT8 weight type {self.weight_type!r}", f"use one of {', '.join(WEIGHT_TYPES)}")
        if self.activation_scales not in ACTIVATION_SCALES:
            raise ConfigError(f"unknown activation scales {self.activation_scales!r}",
                              f"use one of {', '.join(ACTIVATION_SCALES)}")
        if self.weight_type == "uint8" and self.reduce_range:
            raise ConfigError("reduce_range only applies to int8 weights")
        if not 0 <= self.smooth_alpha < 1:
            raise ConfigError(f"smoothing alpha {self.smooth_alpha!r} must be 0 (off) or in (0, 1)",
                              "0.75 moves most of a LayerNorm output's outliers into the weights")
        if not (self.outlier_ratio == 0 or self.outlier_ratio > 1):
            raise ConfigError(f"outlier ratio {self.outlier_ratio!r} must be 0 (off) or > 1")
        object.__setattr__(self, "op_types", tuple(self.op_types))

    @property
    def needs_exact_u8s8(self) -> bool:
        """Full-range int8 weights: wrong on a saturating U8S8 kernel unless the runtime fixes it."""
        return self.weight_type == "int8" and not self.reduce_range

    def replace(self, **changes: Any) -> "Int8Recipe":
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["op_types"] = list(self.op_types)
        d["tuned_for"] = list(self.tuned_for)
        d["needs_exact_u8s8"] = self.needs_exact_u8s8
        return d

    def requirements(self) -> dict[str, Any]:
        """What a host needs to run this graph exactly (the manifest's ``requires``)."""
        if self.needs_exact_u8s8:
            return {"arch": ["x86_64", "arm64"], "u8s8_exact": True,
                    "exact_on": ["x86-vnni (AVX-512 VNNI or AVX-VNNI)", "arm64"],
                    "elsewhere": "x86 AVX2 / AVX-512 without VNNI: run with session.x64quantprecision=1 "
                                 "(onnxruntime converts the weights to uint8: exact, slower)"}
        return {"arch": ["x86_64", "arm64"], "u8s8_exact": False,
                "exact_on": ["any x86-64 (SSE4.1, AVX2, AVX-512, VNNI)", "arm64"]}


_PORTABLE = dict(weight_type="int8", reduce_range=True, tuned_for=("avx2", "avx512f", "avx512_vnni", "dotprod"),
                 why="7-bit int8 weights cannot saturate AVX2's int16 sums: the one graph that is exact on "
                     "every x86-64 and ARM64 CPU with no runtime option")
_EXACT_8BIT = dict(weight_type="int8", reduce_range=False,
                   why="8-bit int8 weights on kernels with int32 sums (VNNI, ARM64): the most accurate")

TARGETS: dict[str, Int8Recipe] = {
    # correct on any x86-64 or ARM64 CPU: the default
    "portable": Int8Recipe("portable", **_PORTABLE),
    # AVX2 / AVX-512 without VNNI: the portable arithmetic (7-bit weights) is also the fastest exact
    # choice there (faster than uint8 weights; benchmarks/results/int8_targets/decisions.md)
    "x86-avx2": Int8Recipe("x86-avx2", **{**_PORTABLE, "tuned_for": ("avx2", "avx512f")}),
    # AVX-512 VNNI / AVX-VNNI: VPDPBUSD sums in int32, so 8-bit weights are exact and more accurate
    "x86-vnni": Int8Recipe("x86-vnni", tuned_for=("avx512_vnni", "avx_vnni"), **_EXACT_8BIT),
    # ARM64 (NEON, dot product, i8mm): exact int32 sums like VNNI (checked emulated); latency unmeasured
    "arm64": Int8Recipe("arm64", tuned_for=("dotprod",), **_EXACT_8BIT),
}
ENGINE_TARGET = "openvino"      # not an onnxruntime recipe: quantization.openvino_int8 makes its graph
TARGET_NAMES = (*TARGETS, ENGINE_TARGET, "host")
HOST_TARGET = {"x86-vnni": "x86-vnni", "x86-avx512": "x86-avx2", "x86-avx2": "x86-avx2", "arm64": "arm64"}


def host_target() -> tuple[str, str]:
    """``(target, why)`` for ``--target host``: the recipe for this machine's INT8 kernels."""
    from edgebert.runtime.hostcpu import detect_host

    host = detect_host()
    target = HOST_TARGET.get(host.kind, "portable")
    return target, f"host: {host.summary()}"


def target_names(names: tuple[str, ...] | list[str] | str) -> tuple[str, ...]:
    """``names`` (a comma-separated string, or names that may hold commas) as checked, lower-case target
    names in the order given: the one parser of ``--target`` lists. ConfigError for none or an unknown one."""
    items = (names,) if isinstance(names, str) else tuple(names)
    parsed = tuple(t.strip().lower() for item in items for t in str(item).split(",") if t.strip())
    bad = [t for t in parsed if t not in TARGET_NAMES]
    if not parsed or bad:
        raise ConfigError(f"unknown INT8 target {bad[0]!r}" if bad else "no INT8 target given",
                          f"use one or more of {', '.join(TARGET_NAMES)}")
    return parsed


def resolve_targets(names: tuple[str, ...] | list[str] | str) -> tuple[list[Int8Recipe], list[str]]:
    """Recipes for ``names`` (``host`` resolved on this machine, duplicates dropped, order kept) and
    notes on how ``host`` was resolved. ConfigError for an unknown name."""
    recipes, notes, seen = [], [], set()
    for name in target_names(names):
        if name == ENGINE_TARGET:
            continue
        if name == "host":
            name, why = host_target()
            notes.append(f"--target host -> {name} ({why})")
        if name not in seen:
            seen.add(name)
            recipes.append(TARGETS[name])
    return recipes, notes
