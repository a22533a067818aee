"""Timing loops and process memory: the two raw measurements of the benchmark.

Memory is the process resident set (Linux ``/proc/self/status``), because onnxruntime's CPU arena
cannot be queried from Python: the arena, the weights and the activations all show up in RSS.
``VmHWM`` (peak RSS) is reset before each measured shape by writing 5 to ``/proc/self/clear_refs``,
and freed heap is handed back to the OS (glibc ``malloc_trim``) between paths, so one path's garbage
does not hide the next one's growth.
"""

from __future__ import annotations

import ctypes
import gc
import os
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .rows import Percentiles

MEMORY_METHOD = (
    "process RSS from /proc/self/status. load_rss_mb = RSS after creating the session (or loading "
    "the PyTorch model) minus RSS before; peak_rss_mb = peak RSS (VmHWM, reset via "
    "/proc/self/clear_refs before each shape) during that shape's timed runs minus RSS before the "
    "path was loaded, i.e. weights + runtime + arena/activations. onnxruntime's CPU arena keeps "
    "memory between runs, so shapes run smallest first. GPU memory is not measured.")


def _status_kb(field: str) -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def rss_mb() -> float | None:
    kb = _status_kb("VmRSS")
    return None if kb is None else kb / 1024.0


def peak_rss_mb() -> float | None:
    kb = _status_kb("VmHWM")
    return None if kb is None else kb / 1024.0


def reset_peak_rss() -> bool:
    """Set the peak-RSS mark to the current RSS; False where the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def release_memory() -> None:
    """Collect garbage and return freed heap pages to the OS (glibc only; no-op elsewhere)."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


@dataclass(frozen=True)
class Latency:
    """Wall-clock seconds of each timed call."""

    samples: np.ndarray

    @property
    def iters(self) -> int:
        return int(len(self.samples))

    def ms(self) -> Percentiles:
        s = self.samples * 1e3
        p50, p90, p99 = np.percentile(s, [50, 90, 99])
        return Percentiles(*(round(float(v), 4) for v in (p50, p90, p99, s.mean(), s.min(), s.max())))

    @property
    def mean_s(self) -> float:
        return float(self.samples.mean())


def time_calls(fn: Callable[[], object], warmup: int, iters: int, max_seconds: float) -> Latency:
    """Run ``fn`` ``warmup`` times untimed, then up to ``iters`` timed calls (at least 3; fewer than
    ``iters`` once ``max_seconds`` of timed calls have passed)."""
    for _ in range(warmup):
        fn()
    samples = []
    started = time.perf_counter()
    for i in range(iters):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
        if i >= 2 and time.perf_counter() - started > max_seconds:
            break
    return Latency(np.asarray(samples))


class OtherCpuLoad:
    """Share of all cores used by *other* processes between ``__init__`` and ``fraction()``.

    Load averages lag by minutes; this is exact for the run: machine busy time from /proc/stat minus
    this process's own CPU time. Linux only (None elsewhere).
    """

    def __init__(self):
        self._start = self._sample()

    @staticmethod
    def _sample() -> tuple[float, float, float] | None:
        try:
            with open("/proc/stat", encoding="ascii") as fh:
                fields = [int(x) for x in fh.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        ticks = os.sysconf("SC_CLK_TCK")
        busy = (sum(fields[:8]) - fields[3] - fields[4]) / ticks         # all but idle and iowait
        own = sum(os.times()[:2])
        return busy, own, time.perf_counter()

    def fraction(self) -> float | None:
        end = self._sample()
        if self._start is None or end is None:
            return None
        busy, own, wall = (e - s for e, s in zip(end, self._start))
        if wall <= 0:
            return None
        return round(max(0.0, busy - own) / (wall * (os.cpu_count() or 1)), 3)
