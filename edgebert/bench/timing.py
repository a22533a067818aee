"""How the bench times its paths, and the rows it makes of the samples.

The CPU paths (the PyTorch reference and the onnxruntime CPU sessions, ``rows.SIDE_BY_SIDE``) are timed
side by side: each is loaded, checked and put through a short memory pass (``memory_pass``: one call
per shape, its peak RSS), then waits (``Waiting``) until all are loaded; ``time_side_by_side`` then runs,
for each fixed shape and each length-mix replay, interleaved rounds (``measure.interleave``). Timed one
after another, a burst of other work lands on one path only and can turn a speedup upside down (one run
showed 0.43x at batch 1 x 128 and 5.93x on the length mix); in rounds every path meets the same load.
The GPU paths are timed one after another, each in its own block (``time_shapes``, ``replay``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from edgebert.bench.config import BenchConfig
from edgebert.bench.gpu import Nvml
from edgebert.bench.measure import Latency, interleave, peak_rss_mb, release_memory, reset_peak_rss, time_calls
from edgebert.bench.rows import LatencyRow, MixRow
from edgebert.bench.workloads import LengthMix, synthetic_feeds
from edgebert.bundle import Manifest
from edgebert.errors import EdgebertError

CALLS_PER_ROUND = 3       # timed calls of a path per turn: few, so a burst of load spans every path's turn
TIMING_METHOD = (
    f"interleaved rounds, {CALLS_PER_ROUND} calls per path per round, spinning off: the CPU paths (PyTorch "
    "reference, onnxruntime CPU sessions) are all loaded, then for each fixed shape and each length-mix replay "
    f"they take turns, {CALLS_PER_ROUND} timed calls each after one untimed call (so no timed call follows "
    "another path's), the order rotating every round, until each has its iters (fixed shapes: or max_seconds x "
    "the number of paths of wall clock; the mix: every batch once); warmup calls are interleaved too. "
    "onnxruntime sessions run with session.intra_op / inter_op.allow_spinning = 0, so an idle session's "
    "threads leave the cores to the running one. GPU paths (CUDA, TensorRT, PyTorch on CUDA) are timed one "
    "after another, each in its own block. cpu_share_used_by_other_processes covers the timed calls only")

Feeds = dict[str, np.ndarray]


def latency_row(path, name: str, batch: int, seq: int, lat: Latency, peak_mb: float | None,
                gpu_mem_mb: float | None = None) -> LatencyRow:
    """A fixed shape's row from its timed calls."""
    return LatencyRow(name, path.provider, path.precision, batch, seq, lat.iters, lat.ms(),
                      sequences_per_s=round(batch / lat.mean_s, 3), tokens_per_s=round(batch * seq / lat.mean_s, 1),
                      peak_rss_mb=peak_mb, gpu_mem_mb=gpu_mem_mb)


def mix_row(path, name: str, batch: int, mode: str, feeds: list[Feeds], lat: Latency, texts: int) -> MixRow:
    """A length-mix replay's row from its timed calls (one per batch of ``feeds``, in order)."""
    total = float(lat.samples.sum())
    real = int(sum(int(f["attention_mask"].sum()) for f in feeds))
    computed = int(sum(f["input_ids"].size for f in feeds))
    return MixRow(name, path.provider, path.precision, batch, mode, len(feeds), texts, lat.ms(),
                  total_s=float(f"{total:.4g}"), sequences_per_s=round(texts / total, 2),
                  real_tokens_per_s=round(real / total, 1), padding_fraction=round(1 - real / computed, 4),
                  shapes=[f["input_ids"].shape for f in feeds])


# --------------------------------------------------------------------------- one path, in a block (GPU)
def time_shapes(path, name: str, config: BenchConfig, manifest: Manifest, shapes, before_mb, log,
                gpu: tuple[Nvml, float | None] | None = None) -> list[LatencyRow]:
    rows = []
    for batch, seq in shapes:
        feeds = synthetic_feeds(batch, seq, manifest, config.seed)
        release_memory()
        reset_peak_rss()
        lat = time_calls(lambda: path.run(feeds), config.warmup, config.iters, config.max_seconds)
        peak = peak_rss_mb()
        used = gpu[0].used_mb() if gpu else None
        rows.append(latency_row(path, name, batch, seq, lat, delta_mb(peak, before_mb),
                                None if used is None or gpu[1] is None else round(used - gpu[1], 1)))
        log.step(f"{name} b={batch} s={seq}", rows[-1])
    return rows


def replay(path, name: str, config: BenchConfig, mix: LengthMix, pad_id: int, log) -> list[MixRow]:
    rows = []
    for batch in config.batches:
        for mode in config.mix_modes:
            feeds = mix.batches(batch, padded=mode == "padded", pad_id=pad_id)
            for f in feeds[:config.warmup]:
                path.run(f)
            samples = []
            for f in feeds:
                t0 = time.perf_counter()
                path.run(f)
                samples.append(time.perf_counter() - t0)
            rows.append(mix_row(path, name, batch, mode, feeds, Latency(np.asarray(samples)), len(mix.rows)))
            log.step(f"{name} replay b={batch} {mode}", rows[-1])
    return rows


# --------------------------------------------------------------------------- the CPU paths, side by side
@dataclass
class Waiting:
    """A CPU path loaded, checked and through its memory pass, waiting to be timed with the others."""
    path: Any
    name: str
    peaks: dict[tuple[int, int], float | None]        # (batch, seq) -> peak_rss_mb
    rows: list[LatencyRow] = field(default_factory=list)
    mix_rows: list[MixRow] = field(default_factory=list)
    failed: bool = False


def memory_pass(path, config: BenchConfig, manifest: Manifest, shapes, before_mb: float | None
                ) -> dict[tuple[int, int], float | None]:
    """Peak RSS of one call per shape (smallest first) minus ``before_mb``, right after ``path`` is loaded:
    interleaved, the peak would be every loaded path's at once."""
    peaks = {}
    for batch, seq in shapes:
        feeds = synthetic_feeds(batch, seq, manifest, config.seed)
        release_memory()
        reset_peak_rss()
        path.run(feeds)
        peaks[(batch, seq)] = delta_mb(peak_rss_mb(), before_mb)
    return peaks


class _Failed(Exception):
    def __init__(self, waiting: Waiting, error: EdgebertError):
        super().__init__(error.one_line())
        self.waiting, self.error = waiting, error


def _guarded(waiting: Waiting, call: Callable[[int], object]) -> Callable[[int], object]:
    def run(i: int) -> object:
        try:
            return call(i)
        except EdgebertError as exc:
            raise _Failed(waiting, exc) from exc
    return run


OnFailure = Callable[[Waiting, EdgebertError], None]


def _rounds(waiting: list[Waiting], call_of: Callable[[Waiting], Callable[[int], object]], warmup: int, iters: int,
            max_seconds: float | None, failed: OnFailure) -> list[tuple[Waiting, Latency]]:
    """Warm up and time the paths not failed yet, side by side; one that fails is handed to ``failed`` and
    the rounds start again without it."""
    while True:
        live = [w for w in waiting if not w.failed]
        if not live:
            return []
        calls = [_guarded(w, call_of(w)) for w in live]
        try:
            if warmup:
                interleave(calls, warmup, CALLS_PER_ROUND, rewarm=False)
            cap = None if max_seconds is None else max_seconds * len(live)      # what the paths' blocks had
            samples = interleave(calls, iters, CALLS_PER_ROUND, cap)
        except _Failed as stop:
            stop.waiting.failed = True
            failed(stop.waiting, stop.error)
            continue
        return [(w, Latency(s)) for w, s in zip(live, samples)]


def time_side_by_side(waiting: list[Waiting], config: BenchConfig, manifest: Manifest, shapes,
                      mix: LengthMix | None, pad_id: int, log, failed: OnFailure) -> None:
    """Time the waiting paths in interleaved rounds at every fixed shape (smallest first), then on the length
    mix; fills each one's ``rows`` and ``mix_rows``. A path whose call raises an ``EdgebertError`` is handed
    to ``failed`` and left out from then on."""
    for batch, seq in shapes:
        feeds = synthetic_feeds(batch, seq, manifest, config.seed)
        for w, lat in _rounds(waiting, lambda w: lambda i: w.path.run(feeds), config.warmup, config.iters,
                              config.max_seconds, failed):
            w.rows.append(latency_row(w.path, w.name, batch, seq, lat, w.peaks.get((batch, seq))))
            log.step(f"{w.name} b={batch} s={seq}", w.rows[-1])
    if mix is None:
        return
    for batch in config.batches:
        for mode in config.mix_modes:
            mix_feeds = mix.batches(batch, padded=mode == "padded", pad_id=pad_id)
            for w, lat in _rounds(waiting, lambda w: lambda i: w.path.run(mix_feeds[i % len(mix_feeds)]),
                                  min(config.warmup, len(mix_feeds)), len(mix_feeds), None, failed):
                w.mix_rows.append(mix_row(w.path, w.name, batch, mode, mix_feeds, lat, len(mix.rows)))
                log.step(f"{w.name} replay b={batch} {mode}", w.mix_rows[-1])


def delta_mb(after: float | None, before: float | None) -> float | None:
    return None if after is None or before is None else round(after - before, 1)
