"""What machine and library versions a result came from (recorded in reports and benchmarks), the
one reader of Linux's ``/proc/cpuinfo`` (``cpuinfo`` / ``cpuinfo_blocks``: also what
``edgebert.runtime.hostcpu`` reads the instruction sets from), the one macOS ``sysctl`` reader, and the
CPU's name (``cpu_model``: x86 ``model name``; on ARM64 the core named from its MIDR implementer and
part, e.g. ``Arm Cortex-A72``, plus the board where the kernel says, e.g. a Raspberry Pi). Stdlib only."""

from __future__ import annotations

import ctypes
import os
import platform
import sys
from pathlib import Path
from typing import Callable, Mapping, Sequence

CPUINFO = Path("/proc/cpuinfo")
DEVICE_TREE_MODEL = Path("/sys/firmware/devicetree/base/model")   # ARM boards: "Raspberry Pi 4 Model B ..."
SIMD_FLAGS = {"avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "amx_int8", "amx_bf16",
              "asimd", "asimddp", "i8mm", "sve", "sve2", "bf16", "sme"}   # x86 `flags`, ARM64 `Features`
# ARM64 MIDR implementer and part numbers (Linux arch/arm64/include/asm/cputype.h); unknown ones print as hex
ARM_IMPLEMENTERS = {0x41: "Arm", 0x42: "Broadcom", 0x43: "Cavium", 0x46: "Fujitsu", 0x48: "HiSilicon",
                    0x4E: "NVIDIA", 0x50: "APM", 0x51: "Qualcomm", 0x61: "Apple", 0xC0: "Ampere"}
ARM_PARTS = {
    0x41: {0xD03: "Cortex-A53", 0xD04: "Cortex-A35", 0xD05: "Cortex-A55", 0xD07: "Cortex-A57", 0xD08: "Cortex-A72",
           0xD09: "Cortex-A73", 0xD0A: "Cortex-A75", 0xD0B: "Cortex-A76", 0xD0C: "Neoverse N1", 0xD0D: "Cortex-A77",
           0xD40: "Neoverse V1", 0xD41: "Cortex-A78", 0xD42: "Cortex-A78AE", 0xD44: "Cortex-X1",
           0xD46: "Cortex-A510", 0xD47: "Cortex-A710", 0xD48: "Cortex-X2", 0xD49: "Neoverse N2",
           0xD4B: "Cortex-A78C", 0xD4D: "Cortex-A715", 0xD4E: "Cortex-X3", 0xD4F: "Neoverse V2",
           0xD80: "Cortex-A520", 0xD81: "Cortex-A720", 0xD82: "Cortex-X4", 0xD84: "Neoverse V3",
           0xD8E: "Neoverse N3"},
    0x46: {0x001: "A64FX"}, 0x48: {0xD01: "Kunpeng 920 (TSV110)"}, 0x4E: {0x003: "Denver", 0x004: "Carmel"},
    0xC0: {0xAC3: "Ampere-1", 0xAC4: "Ampere-1A"},
}


def _version(dist: str) -> str | None:
    import importlib.metadata as md  # here, not at the top: the runtime imports this module on every start

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


def cpuinfo_blocks(path: Path = CPUINFO) -> list[dict[str, str]]:
    """``/proc/cpuinfo`` as one dict per blank-line-separated block (one per processor, and on ARM boards
    a trailing ``Hardware`` / ``Model`` block); empty where there is no such file (macOS, Windows)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    blocks: list[dict[str, str]] = [{}]
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            blocks[-1].setdefault(key.strip(), value.strip())
        elif not line.strip() and blocks[-1]:
            blocks.append({})
    return [b for b in blocks if b]


def cpuinfo(path: Path = CPUINFO) -> dict[str, str]:
    """The fields of the first processor in ``/proc/cpuinfo`` (``flags`` on x86, ``Features`` on ARM,
    ``model name`` ...), each as its text, with the fields only later blocks have (an ARM board's
    ``Model``); empty where there is no such file (macOS, Windows)."""
    fields: dict[str, str] = {}
    for block in cpuinfo_blocks(path):
        for key, value in block.items():
            fields.setdefault(key, value)
    return fields


def sysctl(name: str) -> str | None:
    """macOS ``sysctlbyname`` through libc (no subprocess): an integer as its decimal text, a string as
    itself; None where the name does not exist or this is not macOS."""
    try:
        libc = ctypes.CDLL("libc.dylib")
        size = ctypes.c_size_t(0)
        if libc.sysctlbyname(name.encode(), None, ctypes.byref(size), None, 0) != 0:
            return None
        buf = ctypes.create_string_buffer(size.value)
        if libc.sysctlbyname(name.encode(), buf, ctypes.byref(size), None, 0) != 0:
            return None
        raw = buf.raw[:size.value]
        if size.value in (4, 8) and b"\x00" in raw[1:]:      # an integer
            return str(int.from_bytes(raw, sys.byteorder))
        return raw.rstrip(b"\x00").decode(errors="replace")
    except (OSError, AttributeError):
        return None


def cpu_flags(fields: Mapping[str, str] | None = None) -> list[str]:
    """SIMD flags that matter for int8/fp32 kernels: x86 ``flags`` or ARM64 ``Features`` (Linux; empty
    elsewhere)."""
    fields = cpuinfo() if fields is None else fields
    return sorted(SIMD_FLAGS & set(fields.get("flags", fields.get("Features", "")).split()))


def _hex(value: str | None) -> int | None:
    try:
        return int(value or "", 0)
    except ValueError:
        return None


def arm_core_name(fields: Mapping[str, str]) -> str | None:
    """``Arm Cortex-A72`` from one processor's ``CPU implementer`` / ``CPU part`` (None: not ARM)."""
    imp, part = _hex(fields.get("CPU implementer")), _hex(fields.get("CPU part"))
    if imp is None or part is None:
        return None
    vendor = ARM_IMPLEMENTERS.get(imp, f"implementer {imp:#04x}")
    return f"{vendor} {ARM_PARTS.get(imp, {}).get(part, f'part {part:#05x}')}"


def arm_cpu_name(blocks: Sequence[Mapping[str, str]], board: str | None = None) -> str | None:
    """The ARM64 CPU of ``cpuinfo_blocks``: its cores in order of appearance (``Arm Cortex-A55 + Cortex-A76``
    on a big.LITTLE chip) and the board (``Model`` field, else ``board``), e.g. ``Arm Cortex-A72
    (Raspberry Pi 4 Model B Rev 1.4)``; None without MIDR fields."""
    cores: list[str] = []
    for name in filter(None, (arm_core_name(b) for b in blocks)):
        if name not in cores:
            cores.append(name)
    if not cores:
        return None
    vendor = cores[0].split()[0]
    names = [cores[0]] + [c[len(vendor) + 1:] if c.startswith(vendor + " ") else c for c in cores[1:]]
    model = next((b["Model"] for b in blocks if b.get("Model")), None) or board
    return " + ".join(names) + (f" ({model})" if model else "")


def _board() -> str | None:
    try:
        return DEVICE_TREE_MODEL.read_bytes().rstrip(b"\x00").decode(errors="replace").strip() or None
    except OSError:
        return None


def cpu_model(blocks: Sequence[Mapping[str, str]] | None = None, system: str | None = None,
              query: Callable[[str], str | None] = sysctl) -> str:
    """The CPU's name: macOS ``machdep.cpu.brand_string`` (``Apple M2``); Linux x86 ``model name``; Linux
    ARM64 the MIDR's cores and the board (``arm_cpu_name``; the device tree's model where ``/proc/cpuinfo``
    names none); else what ``platform`` says. ``blocks`` (``cpuinfo_blocks``), ``system`` and ``query``
    (the sysctl reader) default to this machine's."""
    system = system or platform.system()
    if system == "Darwin":
        brand = query("machdep.cpu.brand_string")
        if brand:
            return brand
    here = blocks is None
    blocks = cpuinfo_blocks() if here else blocks
    is_arm = any("CPU part" in b for b in blocks)
    arm = arm_cpu_name(blocks, _board() if here and is_arm else None)
    first = blocks[0] if blocks else {}
    return arm or first.get("model name") or platform.processor() or platform.machine()


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
