"""``edgebert tune BUNDLE``: on the device, time what the bundle and the machine allow and keep the fastest that
stays accurate, as the bundle's device profile (``runtime.device_profile``), which ``EdgeSession`` then applies.

1. **Graphs, gated here first.** Each INT8 graph the bundle carries for the onnxruntime CPU (every target) is
   re-measured against fp32 on this CPU exactly as ``edgebert check`` measures it (its metric, texts and budget);
   one that misses is left out, saying so. ``--graphs`` adds ``fp32`` (the reference: always accurate), ``int4``
   (the small graph, against its own budget) and ``openvino`` (where the bundle has that graph and openvino is
   installed).
2. **Settings.** Each passing graph at every intra-op thread count (``--threads``, default 1 to the CPUs this process
   may use) and, on a text file (``--texts``), every ``batch_tokens`` cap; spinning off while timed side by side.
3. **Timing, side by side** (``benchmarks/cpu_peers.py``'s protocol for onnxruntime sessions): every candidate and
   EdgeSession's own defaults (``default``) in interleaved rounds (the order rotating each round), after warmup;
   each workload's p50: a fixed shape (``--shapes 1x128,8x64``: random ids, every token real) is one ``run`` call,
   a text file is the whole file through the session's own batching. A candidate's score is the geometric mean of
   its p50s over the default's (lower is better).
4. **Spinning.** The best candidate is timed again with onnxruntime's threads spinning and not, each in its own
   block after a pause (a spinning session steals the cores of the one timed next to it); spinning is kept where it
   was faster by more than 3%.

The profile holds the chosen settings and the figures (default vs chosen per workload); ``save=False`` only reports.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import numpy as np

from edgebert.errors import ConfigError
from edgebert.runtime.device_profile import DeviceProfile, machine_identity, manifest_sha256, save_profile

GRAPH_KINDS = ("int8", "fp32", "int4", "openvino")
SPIN_GAIN = 0.03                    # spinning kept only when this much faster
Say = Callable[[str], None]


@dataclass(frozen=True)
class TuneConfig:
    bundle: Path
    shapes: tuple[tuple[int, int], ...] = ((1, 128),)
    texts: Path | None = None
    max_texts: int = 200
    threads: tuple[int, ...] | None = None           # None: 1 .. the usable CPUs
    graphs: tuple[str, ...] = ("int8",)
    batch_tokens: tuple[int, ...] = (0, 512, 1024, 2048)
    rounds: int = 10
    warmup: int = 2
    pause: float = 0.5
    save: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "bundle", Path(self.bundle))
        bad = [g for g in self.graphs if g not in GRAPH_KINDS]
        if bad or not self.graphs:
            raise ConfigError(f"--graphs {','.join(self.graphs)}: not graphs tune knows", f"use {', '.join(GRAPH_KINDS)}")
        if not self.shapes and self.texts is None:
            raise ConfigError("tune needs something to time", "pass --shapes 1x128 or --texts FILE")
        if any(b < 1 or s < 3 for b, s in self.shapes):
            raise ConfigError(f"--shapes {self.shapes}: each is BATCHxSEQUENCE, batch >= 1, sequence >= 3")
        for name in ("rounds", "max_texts"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1")
        if self.threads is not None:
            from edgebert.system.environment import check_threads

            for t in self.threads:
                check_threads(t)


@dataclass
class Candidate:
    name: str
    graph: str                       # a manifest key: int8, int8-x86-vnni, fp32, int4, int8-openvino
    precision: str | None
    int8_target: str | None
    threads: int | None
    batch_tokens: int | None
    p50_ms: dict[str, float] = field(default_factory=dict)
    score: float | None = None

    def settings(self, allow_spinning: bool) -> dict[str, Any]:
        return {"precision": self.precision, "int8_target": self.int8_target, "threads": self.threads,
                "allow_spinning": allow_spinning, "batch_tokens": self.batch_tokens}


@dataclass
class TuneResult:
    bundle: str
    machine: dict[str, Any]
    gates: list[dict[str, Any]]
    candidates: list[Candidate]
    chosen: dict[str, Any]
    default_ms: dict[str, float]
    chosen_ms: dict[str, float]
    spinning: dict[str, Any]
    profile_file: str | None

    def as_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)


# --------------------------------------------------------------------------- 1. graphs, gated here
def gated_graphs(cfg: TuneConfig, say: Say) -> tuple[list[tuple[str, str | None, str | None]], list[dict]]:
    """[(manifest key, precision, int8_target)] of the graphs that pass here, and every gate's figures."""
    from edgebert.bundle import read_manifest
    from edgebert.runtime.check import check_bundle

    manifest = read_manifest(cfg.bundle)
    passing, gates = [], []
    if "fp32" in cfg.graphs and "fp32" in manifest.models:
        passing.append(("fp32", "fp32", None))
        gates.append({"graph": "fp32", "passed": True, "reason": "the reference"})
    for key, entry in manifest.int8_graphs().items():
        openvino = entry.engine == "openvino"
        if not (openvino and "openvino" in cfg.graphs or entry.is_cpu_int8 and "int8" in cfg.graphs):
            continue
        say(f"gate: {key} against fp32 on this CPU, as `edgebert check` measures it")
        report = check_bundle(cfg.bundle, int8_target=entry.target)
        gates.append({"graph": key, "passed": report.passed, "reason": report.reason, "fidelity": report.fidelity})
        if report.passed:
            passing.append((key, "int8", entry.target))
    if "int4" in cfg.graphs and "int4" in manifest.models:
        report = check_bundle(cfg.bundle)
        small = report.small or {}
        ok = bool(small.get("within_budget"))
        gates.append({"graph": "int4", "passed": ok, "reason": "within its budget here" if ok else
                      "over its budget here (or not measured)", "fidelity": small})
        if ok:
            passing.append(("int4", "int4", None))
    for gate in gates:
        say(f"gate {gate['graph']}: {'pass' if gate['passed'] else 'left out'} ({gate['reason'][:160]})")
    return passing, gates


# --------------------------------------------------------------------------- 2-3. candidates, timed side by side
def _workloads(cfg: TuneConfig, session) -> dict[str, Callable[[Any], None]]:
    """name -> one timed unit of work on a session."""
    from edgebert.bench.workloads import read_texts, synthetic_feeds

    out: dict[str, Callable[[Any], None]] = {}
    for b, s in cfg.shapes:
        if s > session.max_length:
            raise ConfigError(f"shape {b}x{s} is longer than the bundle's {session.max_length} tokens")
        feeds = synthetic_feeds(b, s, session.manifest)
        out[f"{b}x{s}"] = lambda sess, f=feeds: sess.run(f, sess.output_names[:1])
    if cfg.texts is not None:
        texts = read_texts(cfg.texts, cfg.max_texts)
        rows = session.encoder.encode(texts, isinstance(texts[0], tuple), truncate=True)
        out[f"texts ({len(rows)})"] = lambda sess, r=rows: [None for _ in sess._batches(r, sess.output_names[:1], None)]
    return out


def _open(bundle: Path, c: Candidate | None, spinning: bool = False):
    from edgebert.runtime.session import EdgeSession

    if c is None:          # EdgeSession's own defaults (no profile)
        return EdgeSession(bundle, "cpu", allow_spinning=spinning, profile=False, verify=False)
    return EdgeSession(bundle, "cpu", c.precision, c.threads, int8_target=c.int8_target, batch_tokens=c.batch_tokens,
                       allow_spinning=spinning, profile=False, verify=False)


def _p50(times: dict[str, list[float]]) -> dict[str, float]:
    return {k: round(float(np.median(v)), 3) for k, v in times.items()}


def time_side_by_side(cfg: TuneConfig, candidates: list[Candidate], say: Say) -> dict[str, float]:
    """Fill each candidate's ``p50_ms`` and ``score``; return the default's p50s."""
    sessions = {"default": _open(cfg.bundle, None)}
    sessions.update({c.name: _open(cfg.bundle, c) for c in candidates})
    work = _workloads(cfg, sessions["default"])
    names = list(sessions)
    for name in names:
        for _ in range(cfg.warmup):
            for fn in work.values():
                fn(sessions[name])
    times = {n: {w: [] for w in work} for n in names}
    for r in range(cfg.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            for w, fn in work.items():
                t0 = time.perf_counter()
                fn(sessions[name])
                times[name][w].append((time.perf_counter() - t0) * 1000)
        say(f"round {r + 1}/{cfg.rounds}: {len(names)} candidates x {len(work)} workloads")
    default = _p50(times["default"])
    for c in candidates:
        c.p50_ms = _p50(times[c.name])
        c.score = round(math.exp(np.mean([math.log(c.p50_ms[w] / default[w]) for w in work])), 4)
    return default


def _block(cfg: TuneConfig, c: Candidate, spinning: bool) -> dict[str, float]:
    """One candidate alone, after a pause (another's spinning threads have stopped)."""
    time.sleep(cfg.pause)
    session = _open(cfg.bundle, c, spinning)
    work = _workloads(cfg, session)
    times = {w: [] for w in work}
    for _ in range(cfg.warmup):
        for fn in work.values():
            fn(session)
    for _ in range(cfg.rounds):
        for w, fn in work.items():
            t0 = time.perf_counter()
            fn(session)
            times[w].append((time.perf_counter() - t0) * 1000)
    del session
    return _p50(times)


def candidates_of(cfg: TuneConfig, graphs: list[tuple[str, str | None, str | None]]) -> list[Candidate]:
    from edgebert.system.environment import usable_cpus

    threads = cfg.threads or tuple(range(1, usable_cpus() + 1))
    caps = cfg.batch_tokens if cfg.texts is not None else (None,)
    return [Candidate(f"{key} t{t}" + (f" bt{bt}" if bt is not None else ""), key, precision, target, t, bt)
            for key, precision, target in graphs for t in threads for bt in caps]


def tune(cfg: TuneConfig, say: Say = lambda m: None) -> TuneResult:
    """See the module docstring."""
    from edgebert.runtime.hostcpu import detect_host

    host = detect_host()
    graphs, gates = gated_graphs(cfg, say)
    if not graphs:
        raise ConfigError(f"no graph of {cfg.bundle} passes its accuracy gate on this CPU (or none was asked for)",
                          "run `edgebert check BUNDLE` for the reasons; --graphs fp32 tunes the fp32 graph")
    candidates = candidates_of(cfg, graphs)
    say(f"timing {len(candidates)} candidates and the defaults side by side, {cfg.rounds} rounds")
    default_ms = time_side_by_side(cfg, candidates, say)
    best = min(candidates, key=lambda c: (c.score, c.name))
    off, on = _block(cfg, best, False), _block(cfg, best, True)
    gain = math.exp(np.mean([math.log(on[w] / off[w]) for w in off]))
    spinning = {"off_ms": off, "on_ms": on, "on_over_off": round(gain, 4), "kept": gain < 1 - SPIN_GAIN}
    chosen_ms = on if spinning["kept"] else off
    settings = best.settings(spinning["kept"])
    say(f"chosen: {best.name}, spinning {'on' if spinning['kept'] else 'off'} (score {best.score} of the defaults')")
    machine = machine_identity(host)
    path = None
    if cfg.save:
        measured = {"default_ms": default_ms, "chosen_ms": chosen_ms, "score": best.score,
                    "workloads": list(default_ms), "rounds": cfg.rounds}
        profile = DeviceProfile(str(cfg.bundle.resolve()), manifest_sha256(cfg.bundle), machine, settings, measured,
                                datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))
        path = str(save_profile(cfg.bundle, profile))
    return TuneResult(str(cfg.bundle), {**machine, "host": host.summary()}, gates, candidates, settings, default_ms,
                      chosen_ms, spinning, path)
