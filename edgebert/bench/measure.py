"""Timing loops and process memory: the two raw measurements of the benchmark, and the share of the CPU
other programs took while timing.

``time_calls`` times one path on its own (the GPU paths, in blocks); ``interleave`` times several paths
side by side in rounds (the CPU paths: a burst of other work then hits every path, not just one).

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
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import numpy as np

from edgebert.bench.rows import Percentiles

MEMORY_METHOD = (
    "process RSS from /proc/self/status. load_rss_mb = RSS after creating the session (or loading "
    "the PyTorch model) minus RSS before; peak_rss_mb = peak RSS (VmHWM, reset via "
    "/proc/self/clear_refs before each shape) during one call of that shape made right after the path was "
    "loaded (CPU paths, a short pass per path before the interleaved timing, in which every path's calls "
    "would share one peak) or during that shape's timed runs (GPU paths), minus RSS before the path was "
    "loaded, i.e. weights + runtime + arena/activations. onnxruntime's CPU arena keeps memory between runs, "
    "so shapes run smallest first. GPU memory is not measured.")


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


def interleave(calls: Sequence[Callable[[int], object]], iters: int, per_round: int,
               max_seconds: float | None = None, rewarm: bool = True, min_iters: int = 3,
               clock: Callable[[], float] = time.perf_counter) -> list[np.ndarray]:
    """Time several paths side by side: wall-clock seconds of ``iters`` timed calls of each of ``calls``.

    Rounds: in round ``r`` the paths take turns starting with path ``r % len(calls)`` (the order rotates,
    so no path always follows the same one); in its turn a path makes ``per_round`` timed calls, after
    one untimed call when ``rewarm`` and there are several paths (so a timed call never follows another
    path's: that call takes the cold caches and any threads the previous path left spinning).
    ``calls[p](i)`` is path ``p``'s ``i``-th call (``i`` counts timed calls; the re-warm call gets the
    index of the timed call it precedes). Every path has made the same number of timed calls at the end of
    a round, so all stop together: at ``iters``, or at the end of the first round after ``max_seconds``
    of wall clock once each has ``min_iters`` (or ``iters``, if fewer)."""
    n = len(calls)
    samples: list[list[float]] = [[] for _ in range(n)]
    started = clock()
    done = 0                      # timed calls of every path so far (equal at round ends)
    rnd = 0
    while done < iters:
        take = min(per_round, iters - done)
        for p in ((rnd + k) % n for k in range(n)):
            if rewarm and n > 1:
                calls[p](done)
            for i in range(done, done + take):
                t0 = clock()
                calls[p](i)
                samples[p].append(clock() - t0)
        done += take
        rnd += 1
        if max_seconds is not None and done >= min(min_iters, iters) and clock() - started > max_seconds:
            break
    return [np.asarray(s) for s in samples]


class OtherCpuLoad:
    """Share of all cores used by *other* processes while timing: summed over the ``timing()`` windows
    (the timed calls of every path), so loading, calibration and scoring do not dilute it.

    Load averages lag by minutes; this is exact for the windows: machine busy time from /proc/stat minus
    this process's own CPU time. Linux only (None elsewhere).
    """

    def __init__(self):
        self._spent = [0.0, 0.0, 0.0]           # busy, own, wall seconds inside the windows
        self._ok = self._sample() is not None

    @contextmanager
    def timing(self) -> Iterator[None]:
        """Count what other processes do while the block runs."""
        start = self._sample()
        try:
            yield
        finally:
            end = self._sample()
            if start is None or end is None:
                self._ok = False
            else:
                self._spent = [t + e - s for t, e, s in zip(self._spent, end, start)]

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
        """The share (0 to 1) of all cores, None before any window or where /proc/stat cannot be read.
        Clipped to 1: /proc/stat counts in ticks (10 ms), so a short window can overshoot a little."""
        busy, own, wall = self._spent
        if not self._ok or wall <= 0:
            return None
        return round(min(1.0, max(0.0, busy - own) / (wall * (os.cpu_count() or 1))), 3)
