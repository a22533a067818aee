"""What this CPU can run exactly: instruction sets, and whether onnxruntime's U8S8 kernel saturates.

Torch-free and onnx-free (stdlib, numpy, onnxruntime): the runtime calls it before loading an INT8
graph, ``edgebert check`` and ``edgebert bench`` report it.

Why it matters. Dynamic and calibrated INT8 graphs multiply uint8 activations by int8 weights
(U8S8). On x86 CPUs with AVX2 or AVX-512 but without VNNI, onnxruntime's kernel uses VPMADDUBSW,
which adds two u8 x s8 products into a *saturating* int16: 255 x 127 x 2 = 64770 > 32767, so
full-range int8 weights give wrong sums (onnxruntime docs, "When and why do I need to try U8U8?";
ORT issues 5849, 6004, 14642). VNNI (VPDPBUSD, int32 sums) and ARM64 kernels are exact. Weights in
[-64, 64] (``reduce_range``) cannot saturate (2 x 255 x 64 = 32640), and the session option
``session.x64quantprecision=1`` makes onnxruntime convert full-range int8 weights to uint8 at load
(exact, slower U8U8 kernel).

Two sources of truth, both reported:

* ``isa``: instruction-set flags read from the OS (Linux ``/proc/cpuinfo``: x86 ``flags``, ARM64
  ``Features`` ``asimddp`` / ``i8mm`` / ``sve``; macOS ``sysctl hw.optional.arm.FEAT_DotProd`` /
  ``FEAT_I8MM`` / ``FEAT_SVE``; Windows ``IsProcessorFeaturePresent``); ``None`` where the OS does not say.
* ``u8s8``: an empirical probe. A 64-term ``MatMulInteger`` (uint8 255 x int8 127, a bundled
  244-byte graph) runs through this process's onnxruntime: ``exact`` if it returns the true sum,
  ``saturating`` if it returns 32 x 32767. This is what the kernels really do here, also in VMs
  that hide CPU flags and under emulators.

On ARM64 every onnxruntime U8S8 kernel sums in int32 (exact): i8mm (``UMMLA``/``SMMLA``, Graviton3,
Apple M2+), dot product (``UDOT``, ARMv8.2+: Neoverse N1 / Graviton2, Cortex-A55/A76, Apple M1) and,
on CPUs without the dot product (Cortex-A53/A72: Raspberry Pi 3 and 4), plain NEON widening
multiplies: exact too, without the dot product's speed. ``HostCpu.int8_kernel`` names which one the
flags imply; the summary line says it (checked under QEMU: ``benchmarks/results/arm64_check/arm64_check.md``).
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import platform
from dataclasses import asdict, field
from pathlib import Path
from typing import Any, Callable, Mapping

from edgebert.files.stamps import keep, recall
from edgebert.records import record
from edgebert.system.environment import cpu_model, cpuinfo, sysctl

PROBE_FILE = Path(__file__).resolve().parents[1] / "assets" / "u8s8_probe.onnx"
PROBE_K = 64                                  # terms in the probe's dot product
PROBE_EXACT = PROBE_K * 255 * 127             # 2,072,640
PROBE_SATURATED = (PROBE_K // 2) * 32767      # every int16 pair sum clipped
PRECISION_OPTION = "session.x64quantprecision"

X86_FLAGS = ("avx2", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "amx_int8")
ARM_FLAGS = ("dotprod", "i8mm", "sve")
ARM_FEATURES = {"dotprod": "asimddp", "i8mm": "i8mm", "sve": "sve"}      # flag -> Linux `Features` word
MACOS_ARM_SYSCTL = {"dotprod": "hw.optional.arm.FEAT_DotProd", "i8mm": "hw.optional.arm.FEAT_I8MM",
                    "sve": "hw.optional.arm.FEAT_SVE"}
KINDS = ("x86-vnni", "x86-avx512", "x86-avx2", "x86-sse", "arm64", "unknown")
# ARM64 U8S8 kernel families (all exact: int32 sums), best first; see the module docstring
ARM_KERNELS = {"i8mm": "i8mm matrix-multiply kernel", "dotprod": "dot-product kernel",
               "neon": "plain NEON kernel, without the dot product's speed-up",
               "unknown": "kernel family not reported by the OS"}


@record
class HostCpu:
    """One machine, as INT8 sees it.

    arch: ``x86_64`` / ``arm64`` / other (``platform.machine()`` normalised).
    isa: flag -> True / False / None (the OS does not say).
    kind: the INT8 kernel family, from the flags: ``x86-vnni`` (AVX-512 VNNI or AVX-VNNI),
      ``x86-avx512`` / ``x86-avx2`` (no VNNI: U8S8 saturates), ``x86-sse``, ``arm64``, ``unknown``.
    u8s8: the probe's verdict, ``exact`` / ``saturating`` / ``unknown`` (onnxruntime missing).
    precise_fix: with ``session.x64quantprecision=1`` the probe is exact (None: not probed).
    """

    arch: str
    isa: dict[str, bool | None]
    kind: str
    u8s8: str
    precise_fix: bool | None
    os: str = field(default_factory=platform.system)
    model: str = ""

    @property
    def saturates(self) -> bool:
        """True unless the probe showed exact U8S8 products: unknown counts as unsafe."""
        return self.u8s8 != "exact"

    @property
    def int8_kernel(self) -> str | None:
        """ARM64: the U8S8 kernel family its flags imply (``i8mm`` / ``dotprod`` / ``neon``, i.e. no dot
        product / ``unknown``); None elsewhere (``kind`` says it on x86)."""
        if self.arch != "arm64":
            return None
        if self.isa.get("i8mm"):
            return "i8mm"
        if self.isa.get("dotprod"):
            return "dotprod"
        return "neon" if self.isa.get("dotprod") is False else "unknown"

    def flags(self) -> list[str]:
        """The instruction sets present, e.g. ``['avx2']`` or ``['avx2', 'avx512f', 'avx512_vnni']``."""
        return [k for k, v in self.isa.items() if v]

    def _detail(self) -> str:
        """The CPU in parentheses' words: the flags, and on ARM64 the core's name and a missing dot product."""
        if self.arch != "arm64":
            return " ".join(self.flags()) or "no flags reported"
        name = self.model if self.model not in ("", "arm64", "aarch64") else ""
        flags = " ".join((["no dot product"] if self.int8_kernel == "neon" else []) + self.flags())
        return "; ".join(p for p in (name, flags) if p) or "no flags reported"

    def cpu_text(self) -> str:
        """What the CPU is, as INT8 sees it: ``x86-vnni CPU (avx2 avx512f ...)``, ``arm64 CPU (Arm
        Cortex-A72; no dot product)``: the words ``int8_choice`` uses."""
        return f"{self.kind} CPU ({self._detail()})"

    def summary(self) -> str:
        """One line for logs and reports."""
        if self.arch == "arm64":
            kernel = {"exact": f" ({ARM_KERNELS[self.int8_kernel or 'unknown']})",
                      "saturating": ": NOT exact, unlike every ARM64 kernel (an emulator?), so treated as unsafe"}
            return f"arm64 ({self._detail()}); onnxruntime U8S8 kernel: {self.u8s8}{kernel.get(self.u8s8, '')}"
        flags = " ".join(self.flags()) or "none reported"
        return (f"{self.arch} {self.kind} ({flags}); onnxruntime U8S8 kernel: {self.u8s8}"
                + ("" if self.u8s8 != "saturating" else
                   f", exact with {PRECISION_OPTION}=1" if self.precise_fix else ", NOT fixed by the option"))

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["flags"] = self.flags()
        d["saturates"] = self.saturates
        d["int8_kernel"] = self.int8_kernel
        return d


def _machine() -> str:
    m = platform.machine().lower()
    return {"amd64": "x86_64", "x64": "x86_64", "aarch64": "arm64", "arm64": "arm64"}.get(m, m)


# ---------------------------------------------------------------------------------- flags per OS
Sysctl = Callable[[str], "str | None"]


def linux_flags(arch: str, fields: Mapping[str, str] | None = None) -> dict[str, bool | None]:
    """Flags from ``/proc/cpuinfo`` fields (``environment.cpuinfo``; default: this machine's): x86
    ``flags``, ARM64 ``Features`` (``asimddp`` = the dot product, ``i8mm``, ``sve``)."""
    fields = cpuinfo() if fields is None else fields
    value = fields.get("flags", fields.get("Features"))
    if value is None:
        return {}
    words = set(value.split())
    if arch == "x86_64":
        return {f: f in words for f in X86_FLAGS}
    return {flag: word in words for flag, word in ARM_FEATURES.items()}


def macos_flags(arch: str, query: Sysctl = sysctl) -> dict[str, bool | None]:
    """Flags from macOS ``sysctl`` (``query``: the reader, faked in tests). Apple silicon lists
    ``hw.optional.arm.FEAT_*`` (macOS 12+): a name it lacks is a feature it lacks; without the dot
    product's name the OS says nothing (None)."""
    if arch == "arm64":
        said = {flag: query(name) for flag, name in MACOS_ARM_SYSCTL.items()}
        if said["dotprod"] is None:
            return {flag: None for flag in said}
        return {flag: value == "1" for flag, value in said.items()}
    leaf7 = (query("machdep.cpu.leaf7_features") or "").upper().split()
    if not leaf7:
        return {f: None for f in X86_FLAGS}
    return {"avx2": "AVX2" in leaf7, "avx512f": "AVX512F" in leaf7, "avx512bw": "AVX512BW" in leaf7,
            "avx512_vnni": "AVX512VNNI" in leaf7, "avx_vnni": None, "amx_int8": None}


def _windows_flags(arch: str) -> dict[str, bool | None]:
    try:
        present = ctypes.windll.kernel32.IsProcessorFeaturePresent  # type: ignore[attr-defined]
    except AttributeError:
        return {}
    if arch == "arm64":
        return {"dotprod": bool(present(43)), "i8mm": None}     # PF_ARM_V82_DP_INSTRUCTIONS_AVAILABLE
    # PF_AVX2_INSTRUCTIONS_AVAILABLE = 40, PF_AVX512F_INSTRUCTIONS_AVAILABLE = 41; Windows names no VNNI
    return {"avx2": bool(present(40)), "avx512f": bool(present(41)), "avx512bw": None,
            "avx512_vnni": None, "avx_vnni": None, "amx_int8": None}


def isa_flags(arch: str | None = None, *, system: str | None = None, fields: Mapping[str, str] | None = None,
              query: Sysctl = sysctl) -> dict[str, bool | None]:
    """This machine's INT8-relevant flags (``X86_FLAGS`` / ``ARM_FLAGS``: True, False or None where the OS
    does not say); ``system``, ``fields`` (``/proc/cpuinfo``) and ``query`` (``sysctl``) stand in for
    the machine's in tests."""
    arch = arch or _machine()
    system = system or platform.system()
    if system == "Linux":
        flags = linux_flags(arch, fields)
    elif system == "Darwin":
        flags = macos_flags(arch, query)
    elif system == "Windows":
        flags = _windows_flags(arch)
    else:
        flags = {}
    names = X86_FLAGS if arch == "x86_64" else ARM_FLAGS if arch == "arm64" else ()
    return {f: flags.get(f) for f in names}


def cpu_kind(arch: str, isa: dict[str, bool | None]) -> str:
    """The INT8 kernel family of a machine (see ``HostCpu.kind``)."""
    if arch == "arm64":
        return "arm64"
    if arch != "x86_64":
        return "unknown"
    if isa.get("avx512_vnni") or isa.get("avx_vnni"):
        return "x86-vnni"
    if isa.get("avx512f"):
        return "x86-avx512"
    if isa.get("avx2"):
        return "x86-avx2"
    if isa.get("avx2") is False:
        return "x86-sse"
    return "unknown"


# ---------------------------------------------------------------------------------- the probe
def probe_u8s8(precise: bool = False) -> str:
    """Run the bundled U8S8 probe through onnxruntime: ``exact`` / ``saturating`` / ``unknown``."""
    try:
        import numpy as np
        import onnxruntime as ort
    except ImportError:
        return "unknown"
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.intra_op_num_threads = 1
    if precise:
        opts.add_session_config_entry(PRECISION_OPTION, "1")
    try:
        session = ort.InferenceSession(str(PROBE_FILE), opts, providers=["CPUExecutionProvider"])
        value = int(session.run(None, {"a": np.full((1, PROBE_K), 255, np.uint8)})[0][0, 0])
    except Exception:  # noqa: BLE001  (no CPU kernel, unreadable asset: the answer is "unknown")
        return "unknown"
    if value == PROBE_EXACT:
        return "exact"
    return "saturating" if value == PROBE_SATURATED else "unknown"


def host_from(arch: str, isa: dict[str, bool | None], u8s8: str, precise_fix: bool | None,
              model: str = "", system: str | None = None) -> HostCpu:
    """A ``HostCpu`` from what was read and probed. Where the flags claim exact kernels but the probe
    saturates (an emulator or a VM that passes an x86 host's flags through), the kernels decide."""
    kind = cpu_kind(arch, isa)
    if u8s8 == "saturating" and arch == "x86_64" and kind in ("x86-vnni", "unknown"):
        kind = "x86-avx512" if isa.get("avx512f") else "x86-avx2"
    return HostCpu(arch, isa, kind, u8s8, precise_fix, system or platform.system(), model)


@functools.lru_cache(maxsize=1)
def detect_host() -> HostCpu:
    """This machine (cached per process; the probe's verdicts also across processes, ``remembered_probe``;
    ``EDGEBERT_ASSUME_U8S8=saturating|exact`` overrides the probe's verdict for tests of the selection logic)."""
    arch = _machine()
    isa = isa_flags(arch)
    u8s8 = os.environ.get("EDGEBERT_ASSUME_U8S8") or remembered_probe(arch, isa, precise=False)
    fix = remembered_probe(arch, isa, precise=True) == "exact" if u8s8 == "saturating" else None
    return host_from(arch, isa, u8s8, fix, cpu_model())


def probe_identity(arch: str, isa: Mapping[str, bool | None], precise: bool) -> str | None:
    """What the probe's verdict depends on: onnxruntime's build, the CPU as the OS names it, and the
    instruction sets the CPU itself reports to this process (numpy's CPUID reading: under an emulator
    that passes the host's ``/proc/cpuinfo`` through, these are the emulated CPU's). ``None`` without them."""
    try:
        import onnxruntime as ort
        from numpy._core._multiarray_umath import __cpu_features__ as cpuid
    except ImportError:
        return None
    return json.dumps(["u8s8-probe", ort.__version__, ort.__file__, arch, cpu_model(), sorted(k for k, v in isa.items() if v),
                       sorted(k for k, v in cpuid.items() if v), precise, PROBE_EXACT, PROBE_K])


def remembered_probe(arch: str, isa: Mapping[str, bool | None], precise: bool) -> str:
    """``probe_u8s8``, its verdict kept in the user cache under ``probe_identity``: a second process on the
    same machine and onnxruntime skips the probe session; any change of either probes again."""
    identity = probe_identity(arch, isa, precise)
    if identity is None:
        return probe_u8s8(precise)
    kept = recall(identity)
    if kept is not None and kept.get("u8s8") in ("exact", "saturating"):
        return kept["u8s8"]
    verdict = probe_u8s8(precise)
    if verdict != "unknown":
        keep(identity, u8s8=verdict)
    return verdict
