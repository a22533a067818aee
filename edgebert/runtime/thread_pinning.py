"""Pinning a session's threads (``EdgeSession(pin_threads=True)``, a setting ``edgebert tune`` measures): onnxruntime's
intra-op pool threads on CPUs of their own and the calling thread, for the length of each call, on the one left.

Why: unpinned, the scheduler may put the caller where a spinning pool thread runs. On the 2-vCPU cloud VMs measured
(AMD EPYC Zen 4 and Zen 5) an unpinned 2-thread INT8 session ran MiniLM at 1 x 128 in one of two modes, about 3.1-3.5 or
4.6-4.9 ms (Zen 5), for minutes at a time; with the caller and the pool thread on distinct vCPUs every block ran in the
fast one (benchmarks/results/tune/README.md). OpenVINO pins its own threads by default for the same reason. Whether
it pays depends on the machine (pinned threads cannot dodge another program's load), so it is never the default:
``tune`` times it beside the unpinned settings and keeps it only where it won.

Linux only (``os.sched_setaffinity``); elsewhere ``plan`` returns None and the session runs unpinned, saying so.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator


@dataclass(frozen=True)
class PinPlan:
    caller_cpu: int                 # the calling thread's CPU during a call (0-based, as os.sched_setaffinity)
    pool_affinities: str            # onnxruntime's session.intra_op_thread_affinities (1-based, one per pool thread)


def plan(threads: int | None) -> tuple[PinPlan | None, str]:
    """Where ``threads`` intra-op threads go (the caller is one of them); (None, why) where pinning cannot apply."""
    if not hasattr(os, "sched_setaffinity"):
        return None, "pin_threads: this OS has no sched_setaffinity; threads left unpinned"
    cpus = sorted(os.sched_getaffinity(0))
    n = len(cpus) if threads is None else threads
    if n < 2 or len(cpus) < n:
        return None, f"pin_threads: {n} thread(s) on {len(cpus)} usable CPU(s): nothing to pin"
    pool = ";".join(str(cpu + 1) for cpu in cpus[1:n])
    return PinPlan(cpus[0], pool), f"pin_threads: caller on CPU {cpus[0]}, pool threads on CPUs " + \
        ", ".join(str(c) for c in cpus[1:n])


@contextmanager
def caller_on(cpu: int) -> Iterator[None]:
    """The calling thread on ``cpu`` inside the block; its own affinity back after it."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)
