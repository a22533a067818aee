"""``edgebert tune BUNDLE``: on the device, time what the bundle and the machine allow and keep the fastest that
stays accurate, as the bundle's device profile (``runtime.device_profile``), which ``EdgeSession`` then applies.

1. **Graphs, gated here first.** Each INT8 graph the bundle carries for the onnxruntime CPU (every target) is
   re-measured against fp32 on this CPU exactly as ``edgebert check`` measures it (its metric, texts and budget);
   one that misses is left out, saying so. ``--graphs`` adds ``fp32`` (the reference: always accurate), ``int4``
   (the small graph, against its own budget) and ``openvino`` (where the bundle has that graph and openvino is
   installed).
2. **Settings.** Each passing graph at every intra-op thread count (``--threads``, default 1 to the CPUs this process
   may use) and, on a text file (``--texts``), every ``batch_tokens`` cap.
3. **Heats, side by side** (``benchmarks/cpu_peers.py``'s protocol for onnxruntime sessions): every onnxruntime
   candidate and EdgeSession's own defaults (``default``), spinning off, in interleaved rounds (the order rotating
   each round), after warmup; each workload's p50: a fixed shape (``--shapes 1x128,8x64``: random ids, every token
   real) is one ``run`` call, a text file is the whole file through the session's own batching (``--text-batch``
   texts per call; 1: one at a time, as a server answering single requests, and then no ``batch_tokens`` caps). A candidate's score
   is the geometric mean of its p50s over the default's (lower is better).
4. **Finals, each in its own block** (a spinning session steals the cores of the one timed next to it, and
   OpenVINO's threads always spin): the ``finalists`` best of the heats with onnxruntime's threads spinning and
   not, and every OpenVINO candidate, each block between two blocks of the default as EdgeSession opens it, a
   pause before each block, the order rotating over ``repeats``. A final's ratio is its p50s over its two
   neighbouring defaults' (cloud VMs drift between fast and slow phases within a minute: only neighbours
   compare); its score, the median over the repeats. The lowest score among the finals faster than the defaults in
   every repeat wins; where none is, the defaults stay (the profile then sets nothing).

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
from edgebert.runtime.device_profile import SETTINGS, DeviceProfile, machine_identity, manifest_sha256, save_profile

GRAPH_KINDS = ("int8", "fp32", "int4", "openvino")
Say = Callable[[str], None]


@dataclass(frozen=True)
class TuneConfig:
    bundle: Path
    shapes: tuple[tuple[int, int], ...] = ((1, 128),)
    texts: Path | None = None
    max_texts: int = 200
    text_batch: int | None = None                    # texts per call (1: one at a time, as a server); None: 32
    threads: tuple[int, ...] | None = None           # None: 1 .. the usable CPUs
    graphs: tuple[str, ...] = ("int8",)
    batch_tokens: tuple[int, ...] = (0, 512, 1024, 2048)
    rounds: int = 10
    warmup: int = 2
    pause: float = 0.5
    repeats: int = 3                                 # rotations of the finals' blocks
    finalists: int = 3                               # onnxruntime candidates from the heats to the finals
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
        if self.text_batch is not None and self.text_batch < 1:
            raise ConfigError(f"--text-batch {self.text_batch}: texts per call must be >= 1")
        for name in ("rounds", "max_texts", "repeats", "finalists"):
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
    engine: str = "onnxruntime"      # onnxruntime | openvino (its threads always spin: timed in the finals only)
    p50_ms: dict[str, float] = field(default_factory=dict)
    score: float | None = None       # the heats' (onnxruntime), else None

    def settings(self, allow_spinning: bool | None, pin_threads: bool | None = None) -> dict[str, Any]:
        return {"precision": self.precision, "int8_target": self.int8_target, "threads": self.threads,
                "allow_spinning": allow_spinning, "pin_threads": pin_threads, "batch_tokens": self.batch_tokens}


@dataclass
class Final:
    """One entry of the finals: a candidate (None: EdgeSession's defaults) with spinning on, off or (OpenVINO, the
    default) as it comes, pinned or not; its p50s and its score (over the default's) in each repeat, and their
    median."""
    name: str
    candidate: Candidate | None
    spinning: bool | None
    pinned: bool | None = None       # True: pin_threads (runtime.thread_pinning)
    p50_ms: list[dict[str, float]] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)
    score: float | None = None

    def settings(self) -> dict[str, Any]:
        """The profile's settings; the default's are all None (EdgeSession's own)."""
        if self.candidate is None:
            return dict.fromkeys(SETTINGS)
        return self.candidate.settings(self.spinning, self.pinned)


@dataclass
class TuneResult:
    bundle: str
    machine: dict[str, Any]
    gates: list[dict[str, Any]]
    candidates: list[Candidate]
    finals: list[Final]
    chosen: dict[str, Any]
    heats_default_ms: dict[str, float]
    default_ms: dict[str, float]
    chosen_ms: dict[str, float]
    spinning: dict[str, Any]
    profile_file: str | None

    def as_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)


# --------------------------------------------------------------------------- 1. graphs, gated here
Graph = tuple[str, str | None, str | None, str]       # manifest key, precision, int8_target, engine


def gated_graphs(cfg: TuneConfig, say: Say) -> tuple[list[Graph], list[dict]]:
    """[(manifest key, precision, int8_target, engine)] of the graphs that pass here, and every gate's figures."""
    from edgebert.bundle import read_manifest
    from edgebert.runtime.check import check_bundle
    from edgebert.runtime.openvino_graph import ENGINE as OPENVINO_ENGINE
    from edgebert.runtime.openvino_graph import INSTALL_HINT, openvino_version

    manifest = read_manifest(cfg.bundle)
    passing, gates = [], []
    if "fp32" in cfg.graphs and "fp32" in manifest.models:
        passing.append(("fp32", "fp32", None, "onnxruntime"))
        gates.append({"graph": "fp32", "passed": True, "reason": "the reference"})
    for key, entry in {**manifest.int8_graphs(), **manifest.openvino_graphs()}.items():
        openvino = entry.engine == OPENVINO_ENGINE
        if not (openvino and "openvino" in cfg.graphs or entry.is_cpu_int8 and "int8" in cfg.graphs):
            continue
        if openvino and openvino_version() is None:
            gates.append({"graph": key, "passed": False, "reason": f"openvino is not installed ({INSTALL_HINT})"})
            continue
        say(f"gate: {key} against fp32 on this CPU, as `edgebert check` measures it")
        report = check_bundle(cfg.bundle, int8_target=entry.target)
        gates.append({"graph": key, "passed": report.passed, "reason": report.reason, "fidelity": report.fidelity})
        if report.passed:
            passing.append((key, "int8", entry.target, entry.engine))
    if "int4" in cfg.graphs and "int4" in manifest.models:
        report = check_bundle(cfg.bundle)
        small = report.small or {}
        ok = bool(small.get("within_budget"))
        gates.append({"graph": "int4", "passed": ok, "reason": "within its budget here" if ok else
                      "over its budget here (or not measured)", "fidelity": small})
        if ok:
            passing.append(("int4", "int4", None, "onnxruntime"))
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
        per_call = f", {cfg.text_batch} per call" if cfg.text_batch else ""
        out[f"texts ({len(rows)}{per_call})"] = lambda sess, r=rows: [
            None for _ in sess._batches(r, sess.output_names[:1], cfg.text_batch)]
    return out


def _open(bundle: Path, c: Candidate | None, spinning: bool | None = False, pinned: bool | None = None):
    from edgebert.runtime.session import EdgeSession

    if c is None:          # EdgeSession's own defaults (no profile); None: its own spinning default
        return EdgeSession(bundle, "cpu", allow_spinning=spinning, profile=False, verify=False)
    return EdgeSession(bundle, "cpu", c.precision, c.threads, int8_target=c.int8_target, batch_tokens=c.batch_tokens,
                       allow_spinning=spinning, pin_threads=pinned, profile=False, verify=False)


def _p50(times: dict[str, list[float]]) -> dict[str, float]:
    return {k: round(float(np.median(v)), 3) for k, v in times.items()}


def _ratio(p50: dict[str, float], reference: dict[str, float]) -> float:
    """Geometric mean over the workloads of ``p50`` / ``reference``."""
    return round(math.exp(np.mean([math.log(p50[w] / reference[w]) for w in reference])), 4)


def time_side_by_side(cfg: TuneConfig, candidates: list[Candidate], say: Say) -> dict[str, float]:
    """The heats: fill each candidate's ``p50_ms`` and ``score``; return the default's p50s."""
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
        say(f"heats, round {r + 1}/{cfg.rounds}: {len(names)} candidates x {len(work)} workloads")
    default = _p50(times["default"])
    for c in candidates:
        c.p50_ms = _p50(times[c.name])
        c.score = _ratio(c.p50_ms, default)
    return default


def _block(cfg: TuneConfig, c: Candidate | None, spinning: bool | None, pinned: bool | None = None
           ) -> dict[str, float]:
    """One session alone, after a pause (the spinning threads of the one before have stopped)."""
    time.sleep(cfg.pause)
    session = _open(cfg.bundle, c, spinning, pinned)
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


def finalists_of(cfg: TuneConfig, candidates: list[Candidate]) -> list[Final]:
    """The default, the heats' best onnxruntime candidates spinning off and on (and, with 2 threads or more, spinning
    on with the threads pinned: ``runtime.thread_pinning``, Linux), and every OpenVINO candidate."""
    from edgebert.runtime.thread_pinning import plan

    heats = sorted((c for c in candidates if c.score is not None), key=lambda c: (c.score, c.name))
    finals = [Final("default (EdgeSession)", None, None)]
    for c in heats[:cfg.finalists]:
        finals += [Final(f"{c.name} spin off", c, False), Final(f"{c.name} spin on", c, True)]
        if plan(c.threads)[0] is not None:
            finals.append(Final(f"{c.name} spin on pinned", c, True, pinned=True))
    finals += [Final(c.name, c, None) for c in candidates if c.engine != "onnxruntime"]
    return finals


def run_finals(cfg: TuneConfig, finals: list[Final], say: Say) -> None:
    """Each final in its own block between two blocks of the default, the order rotating over ``cfg.repeats``; a
    final's ratio is its p50s over the geometric mean of its two neighbouring defaults' (a drift of the machine's
    speed during a repeat then cancels). Fills p50s, ratios and scores; the default's p50s are its first blocks'."""
    default, others = finals[0], finals[1:]
    default.p50_ms, default.ratios = [], []
    for r in range(cfg.repeats):
        order = others[r % len(others):] + others[:r % len(others)] if others else []
        before = _block(cfg, None, None)
        default.p50_ms.append(before)
        default.ratios.append(1.0)
        for f in order:
            p50 = _block(cfg, f.candidate, f.spinning, f.pinned)
            after = _block(cfg, None, None)
            reference = {w: math.sqrt(before[w] * after[w]) for w in before}
            f.p50_ms.append(p50)
            f.ratios.append(_ratio(p50, reference))
            before = after
        say(f"finals, repeat {r + 1}/{cfg.repeats}: {len(others)} blocks, each between two of the default")
    for f in finals:
        f.score = round(float(np.median(f.ratios)), 4)


def winner(finals: list[Final]) -> Final:
    """The final with the lowest median ratio among those faster than the defaults in every repeat (a margin
    within the machine's drift is no reason to change a setting); none such: the defaults (a profile of no
    settings)."""
    faster = [f for f in finals if f.candidate is not None and f.ratios and max(f.ratios) < 1]
    return min(faster, key=lambda f: (f.score, f.name)) if faster else finals[0]


def _spinning(finals: list[Final], best: Final) -> dict[str, Any]:
    """Spinning on vs off for the winner's candidate (an onnxruntime one), as the finals measured it."""
    pair = {f.spinning: f for f in finals if best.candidate is not None and f.candidate is best.candidate
            and f.spinning is not None and not f.pinned}
    if set(pair) != {False, True}:
        return {"kept": None, "reason": f"{best.name}: spinning as it comes (EdgeSession's default, or an engine "
                                        "whose threads always spin)"}
    on_over_off = round(float(np.median([a / b for a, b in zip(pair[True].ratios, pair[False].ratios)])), 4)
    return {"off_ms": pair[False].p50_ms, "on_ms": pair[True].p50_ms, "on_over_off": on_over_off,
            "kept": bool(best.spinning)}


def candidates_of(cfg: TuneConfig, graphs: list[Graph]) -> list[Candidate]:
    from edgebert.system.environment import usable_cpus

    threads = cfg.threads or tuple(range(1, usable_cpus() + 1))
    caps = cfg.batch_tokens if cfg.texts is not None and cfg.text_batch != 1 else (None,)   # a cap needs a batch
    return [Candidate(f"{key} t{t}" + (f" bt{bt}" if bt is not None else ""), key, precision, target, t, bt, engine)
            for key, precision, target, engine in graphs for t in threads for bt in caps]


def tune(cfg: TuneConfig, say: Say = lambda m: None) -> TuneResult:
    """See the module docstring."""
    from edgebert.runtime.hostcpu import detect_host

    host = detect_host()
    graphs, gates = gated_graphs(cfg, say)
    if not graphs:
        raise ConfigError(f"no graph of {cfg.bundle} passes its accuracy gate on this CPU (or none was asked for)",
                          "run `edgebert check BUNDLE` for the reasons; --graphs fp32 tunes the fp32 graph")
    candidates = candidates_of(cfg, graphs)
    heats = [c for c in candidates if c.engine == "onnxruntime"]
    say(f"heats: {len(heats)} onnxruntime candidates and the defaults side by side, {cfg.rounds} rounds")
    heats_default_ms = time_side_by_side(cfg, heats, say) if heats else {}
    finals = finalists_of(cfg, candidates)
    say(f"finals: {len(finals)} blocks x {cfg.repeats} repeats")
    run_finals(cfg, finals, say)
    best = winner(finals)
    spinning = _spinning(finals, best)
    settings = best.settings()
    chosen_ms = _p50({w: [p[w] for p in best.p50_ms] for w in best.p50_ms[0]})
    default_ms = _p50({w: [p[w] for p in finals[0].p50_ms] for w in finals[0].p50_ms[0]})
    say(f"chosen: {best.name} ({best.score} of the defaults' time, median of {cfg.repeats} repeats)")
    machine = machine_identity(host)
    path = None
    if cfg.save:
        measured = {"default_ms": default_ms, "chosen_ms": chosen_ms, "score": best.score, "chosen": best.name,
                    "workloads": list(default_ms), "rounds": cfg.rounds, "repeats": cfg.repeats}
        profile = DeviceProfile(str(cfg.bundle.resolve()), manifest_sha256(cfg.bundle), machine, settings, measured,
                                datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))
        path = str(save_profile(cfg.bundle, profile))
    return TuneResult(str(cfg.bundle), {**machine, "host": host.summary()}, gates, candidates, finals, settings,
                      heats_default_ms, default_ms, chosen_ms, spinning, path)
