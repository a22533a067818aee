"""INT8 deployment targets: one named recipe each, kept as data, with the measurement that chose it.

A bundle is built on one machine and runs on another, so an INT8 graph is made *for a target*, not for
the export host. Every recipe here is dynamic-format INT8 on the fused graph (``QAttention`` +
``MatMulInteger``), per-channel int8 weights, uint8 activations, the outlier-channel split
(``quantization.outliers``) and **calibrated activation scales** (``quantization.scales``: one fixed
scale per tensor from calibration text, so a text's output never depends on its batch-mates). What
differs is the weight range, which decides where the graph is exact (``edgebert.runtime.hostcpu``):

* 7-bit weights (``reduce_range``: int8 in [-64, 64]) cannot saturate AVX2's int16 pair sums, so the
  graph is exact on every x86-64 and ARM64 CPU with no runtime help;
* 8-bit weights are exact on VNNI and ARM64 kernels; on AVX2 / AVX-512 without VNNI they saturate, so
  the runtime loads them with ``session.x64quantprecision=1`` (onnxruntime converts them to uint8,
  exact, U8U8 kernel) or refuses them.

Measurements (benchmarks/results/int8_targets/int8_targets.md; all-MiniLM-L6-v2, sentence-embedding cosine against
``transformers.BertModel`` fp32 over SST-2 dev (872) + 200 WikiText-2 test paragraphs, texts run one
at a time; calibration on the built-in text; AMD EPYC host, family 25 model 1 (Zen 3): AVX2, no VNNI, so
onnxruntime's U8S8 kernel saturates; "exact" = the same graph with ``session.x64quantprecision=1``, the
integer results a VNNI or ARM64 CPU computes):

===============================================  ===============  ===============  =======================
recipe                                           AVX2 mean / min  exact mean / min  note
===============================================  ===============  ===============  =======================
8-bit, per-call scales, no split (old default)   0.9908 / 0.970   0.9930 / 0.966   saturates on AVX2
8-bit, per-call, split ratio 6 (old --calib)     0.9956 / 0.972   0.9980 / 0.993   saturates on AVX2
7-bit, per-call, split 6                         0.9970 / 0.991   (same)           batch-dependent
7-bit, calibrated scales, split 6                0.9962 / 0.985   (same)           batch-invariant
7-bit, calibrated, split 3  = portable           0.9968 / 0.986   (same)           exact on every CPU
8-bit, calibrated, split 3  = x86-vnni, arm64    0.9974 / 0.991   0.9977 / 0.991   needs exact U8S8
uint8 weights (U8U8), calibrated, split 3        0.9977 / 0.991   (same)           no VNNI speed-up
Optimum ``AutoQuantizationConfig.avx2`` (U8U8)   0.9915 / 0.978   (same)           per-call, no split
===============================================  ===============  ===============  =======================

Per-call (dynamic) scales change with the batch: 50 SST-2 sentences embedded alone and inside batches
of 32 with long WikiText paragraphs moved by up to 1 - cos = 0.0067 (0.020 on issue 9's AVX2 host with
8-bit weights); with calibrated scales by 1.8e-7.

Latency, measured on idle machines (issue 26; batch 1 x 128, 2 threads): the default INT8 graph runs at
0.64-0.75x the fused fp32 p50 on this AVX2-only Zen 3 host and at 0.68x on an AVX-512 VNNI Intel Xeon
(family 6 model 207); since the CPU graph pass (``exporters.cpu_passes``: SkipLayerNormalization unfused,
INT8 0.88x and fp32 0.94x of the graphs before it), 0.51x on an AVX-512 VNNI AMD EPYC Zen 4 (family 25
model 17: 9.41 vs 18.45 ms, benchmarks/results/cpu_peers/cpu_peers_x86-vnni.md). The first figures recorded here (INT8 no faster than fp32) came from a machine busy
with other jobs and named the CPU wrongly; benchmarks/cpu_peers.py and benchmarks/int8_profile.py now
time and profile with the load recorded. On an AVX-512 VNNI host the 8-bit per-call split recipe ran at
0.52-0.63x fused fp32 (benchmarks/results/export_minilm/export_minilm*.md); on an Intel AVX2 host (issue 9) 7-bit
weights ran at 0.76x and uint8 weights (U8U8, or 8-bit with the precision option) at 0.85x. Hence 7-bit int8
weights for ``x86-avx2`` rather than U8U8, and 8-bit for VNNI/ARM, where reduce_range would only cost
accuracy. ``arm64`` shares the VNNI arithmetic: exact on aarch64, checked under QEMU (benchmarks/results/arm64_check/arm64_check.md: mean cosine 0.99770 vs transformers fp32, as on an exact x86); its latency on a real board is unmeasured.

``openvino`` (``ENGINE_TARGET``) is not a recipe here: it names an OpenVINO IR graph made beside the onnxruntime
ones (``quantization.openvino_int8``, its recipe and measurements there). On the Zen 4 EPYC above, with
EdgeSession's defaults (spinning on), 1 x 128 p50: portable 7.56, x86-vnni 7.46, openvino 7.65 ms against
OpenVINO's own NNCF INT8 7.41 (benchmarks/results/cpu_peers/cpu_int8_gap_x86-vnni.md); on an Intel Xeon family 6 model
207 (VNNI + AMX), 3 runs pooled: 8.11, 7.93, 7.98 against 6.78 (benchmarks/results/cpu_peers/cpu_peers_xeon/). So the
runtime loads it only when asked for (``int8_target="openvino"``).
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
    outlier_ratio: float = 3.0                # channels over ratio x median |max| stay float; 0 = off
    activation_scales: str = "calibrated"     # calibrated (fixed, batch-invariant) | per-call (dynamic)
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
                     "every x86-64 and ARM64 CPU with no runtime option (cosine 0.9968 / min 0.986 on MiniLM)")
_EXACT_8BIT = dict(weight_type="int8", reduce_range=False,
                   why="8-bit int8 weights on kernels with int32 sums (VNNI, ARM64): the most accurate "
                       "(cosine 0.9977 / min 0.991 on MiniLM)")

TARGETS: dict[str, Int8Recipe] = {
    # correct on any x86-64 or ARM64 CPU: the default
    "portable": Int8Recipe("portable", **_PORTABLE),
    # AVX2 / AVX-512 without VNNI: the portable arithmetic (7-bit weights) is also the fastest exact
    # choice there (0.76x fp32 vs 0.85x for uint8 weights on an Intel AVX2 host)
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
