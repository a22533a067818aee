"""Which of a bundle's INT8 graphs this host runs, and how, so that none runs silently wrong.

Rules, given the host (``hostcpu.detect_host``) and the graphs' ``requires.u8s8_exact``:

1. Host with exact U8S8 products (VNNI; every ARM64 CPU, with or without the dot product): prefer the
   graph made for this kind of CPU, then any 8-bit graph (more accurate), then the rest, in manifest
   order. So a ``--target portable,arm64`` bundle runs its arm64 graph on ARM64, and on a VNNI x86 CPU
   too (same 8-bit arithmetic, exact there).
2. Host whose U8S8 kernel saturates (AVX2 / AVX-512 without VNNI) or could not be probed: prefer a
   graph that cannot saturate (7-bit or uint8 weights). If the bundle (or the caller's ``target``) only
   has graphs that need exact products, load it with ``session.x64quantprecision=1`` (onnxruntime
   converts the int8 weights to uint8 at load: exact, U8U8 kernel, slower) when the probe showed that
   this fixes it; otherwise refuse with a ``BundleError`` that says what to export instead.
3. A graph loaded from its ``.ort`` form (``graph_format="ort"``, or a bundle packed with ``--ort-format``)
   cannot take that fix: onnxruntime makes the int8 -> uint8 weight rewrite (``Avx2WeightS8ToU8Transformer``,
   a level-2 graph transformer) when it optimizes a ``.onnx`` graph at load, and a saved ``.ort`` graph is
   loaded as saved, with no graph transformer run. Its int8 weights would meet the saturating kernel (an
   x86-vnni graph's ``.ort`` form gave cosine 0.70 vs fp32 on an AVX2 CPU, its ``.onnx`` form 0.998): on a
   host whose kernel saturates such a graph is refused, never run, and the caller is told what loads instead.

An ``openvino`` graph (``export --target openvino``: an OpenVINO IR, run by ``openvino_graph``) is loaded
when asked for (``int8_target="openvino"``, on any host; ``edgebert check`` measures it there). By default
it comes first only on the CPU kinds in ``OPENVINO_DEFAULT_ON`` (none at present: on the VNNI CPUs
measured it ran no faster than the bundle's ``x86-vnni`` onnxruntime graph at batch 1 and less accurately),
where ``openvino`` is installed and the CPU is of the kind its export
measured it on (``choose_openvino``); elsewhere the rules above pick an onnxruntime graph and say why the
OpenVINO one was passed over. ``int8_target`` naming an onnxruntime target never loads it.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any, Mapping

from edgebert.bundle import Manifest, ModelEntry
from edgebert.bundle.manifest import OPENVINO_ENGINE as ENGINE
from edgebert.errors import BundleError
from edgebert.records import record
from edgebert.runtime.hostcpu import PRECISION_OPTION, HostCpu

HOST_TARGETS = {"x86-vnni": ("x86-vnni",), "arm64": ("arm64",), "x86-avx2": ("x86-avx2",),
                "x86-avx512": ("x86-avx2",)}


@record
class GraphChoice:
    """The INT8 model entry to load, session config entries to set, and why. ``entry`` may be given as
    the entry's JSON (a dict); it is kept as a ``ModelEntry``."""

    key: str
    entry: ModelEntry
    session_config: dict[str, str] = field(default_factory=dict)
    reason: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.entry, ModelEntry):
            object.__setattr__(self, "entry", ModelEntry.from_dict(self.key, dict(self.entry)))

    @property
    def target(self) -> str:
        return str(self.entry.target or "?")

    def as_dict(self) -> dict[str, Any]:
        return {"model": self.key, "file": self.entry.file, "target": self.target,
                "session_config": dict(self.session_config), "reason": self.reason}


def choose_int8(manifest: Manifest | Mapping[str, Any], host: HostCpu, target: str | None = None, *,
                graph_format: str = "onnx") -> GraphChoice:
    """Pick the INT8 graph for ``host`` (or the one made for ``target``); see the module docstring.
    ``manifest`` may be given as its JSON (a dict). ``graph_format``: the form the session loads (``ort``:
    the graphs' saved ``.ort`` forms, rule 3)."""
    manifest = manifest if isinstance(manifest, Manifest) else Manifest.from_dict(dict(manifest))
    graphs = manifest.int8_graphs()
    if not graphs:
        raise BundleError(f"the bundle has no INT8 model (it has: {', '.join(manifest.models)})",
                          "re-export with --int8")
    if target is not None:
        graphs = {k: e for k, e in graphs.items() if e.target == target}
        if not graphs:
            have = ", ".join(str(e.target) for e in manifest.int8_graphs().values())
            raise BundleError(f"the bundle has no INT8 graph for target {target!r} (it has: {have})",
                              f"re-export with --target {target}, or leave the target to the runtime")
    where = f"this {host.cpu_text()}"
    passed = {k: e for k, e in graphs.items() if not e.missed_budget}
    if passed and len(passed) < len(graphs):    # a graph over its gate's budget runs only when nothing else does
        missed = ", ".join(str(e.target) for e in graphs.values() if e.missed_budget)
        graphs = passed
    else:
        missed = ""
    passed_over = f"; passed over: {missed} (over its accuracy budget at export)" if missed else ""
    if not host.saturates:
        own = HOST_TARGETS.get(host.kind, ())
        ranked = sorted(graphs.items(), key=lambda kv: (kv[1].target not in own, not kv[1].needs_exact_u8s8))
        key, entry = ranked[0]
        return GraphChoice(key, entry, {}, f"{where} computes U8S8 products exactly; {entry.target} graph "
                                           f"chosen ({_exact_host_why(entry, own, len(graphs))}){passed_over}")
    safe = [(k, e) for k, e in graphs.items() if not e.needs_exact_u8s8]
    if safe:
        key, entry = safe[0]
        kernel = "saturates" if host.u8s8 == "saturating" else "could not be probed"
        return GraphChoice(key, entry, {}, f"{where}: onnxruntime's U8S8 kernel {kernel}; {entry.target} "
                                           f"graph chosen (its weights cannot saturate){passed_over}")
    key, entry = next(iter(graphs.items()))
    return _exact_on_saturating(key, entry, host, graph_format, where, "the bundle's INT8 graphs "
                                f"({', '.join(str(e.target) for e in graphs.values())})")


def choose_small(manifest: Manifest, host: HostCpu, *, graph_format: str = "onnx") -> GraphChoice:
    """The bundle's small graph (``int4``: 4-bit MatMuls, its other parts INT8) with the session entries this
    host needs: rules 2 and 3 of the module docstring applied to that one graph (its 8-bit parts may need
    exact U8S8 products)."""
    entry = manifest.models["int4"]
    where = f"this {host.cpu_text()}"
    if not entry.needs_exact_u8s8:
        return GraphChoice("int4", entry, {}, "the small graph has no 8-bit products (every MatMul 4-bit): it runs "
                                              "as it is on any CPU")
    if not host.saturates:
        return GraphChoice("int4", entry, {}, f"{where} runs the small graph's 8-bit parts exactly")
    return _exact_on_saturating("int4", entry, host, graph_format, where,
                                "the 8-bit parts of the bundle's small graph (int4)")


def _exact_on_saturating(key: str, entry: ModelEntry, host: HostCpu, graph_format: str, where: str,
                         what: str) -> GraphChoice:
    """An 8-bit-weight graph on a host whose U8S8 kernel saturates (or was not probed): loaded with the
    weight fix, or refused when it cannot take it (rules 2 and 3). ``what``: the graphs named in a refusal."""
    if loads_saved_graph(entry, graph_format):
        raise BundleError(f"the {entry.target} INT8 graph's .ort form keeps 8-bit weights that need exact U8S8 "
                          f"products, which {where} does not compute, and a saved .ort graph cannot be loaded "
                          f"with {PRECISION_OPTION}=1 (onnxruntime converts the weights only when it optimizes "
                          "a .onnx graph at load): it would run with saturated sums",
                          "open the .onnx form (graph_format='onnx'), or pack/export for this CPU with "
                          "--target portable --ort-format")
    if host.precise_fix is False:
        raise BundleError(f"{what} need exact U8S8 products, which {where} does not compute, and "
                          f"{PRECISION_OPTION}=1 does not fix it here",
                          "export with --target portable, or use precision='fp32'")
    kernel = "saturates" if host.u8s8 == "saturating" else "could not be probed"
    return GraphChoice(key, entry, {PRECISION_OPTION: "1"},
                       f"{where}: onnxruntime's U8S8 kernel {kernel} and the {entry.target} graph has "
                       f"8-bit weights, so it is loaded with {PRECISION_OPTION}=1 (weights converted to uint8 "
                       "at load: exact, U8U8 kernel)")


def loads_saved_graph(entry: ModelEntry, graph_format: str) -> bool:
    """True when a session loads ``entry`` from a saved ``.ort`` graph (rule 3 of the module docstring): a
    packed ``.ort``-only entry, or ``graph_format="ort"``."""
    return graph_format == "ort" or str(entry.file).endswith(".ort")


def _exact_host_why(entry: ModelEntry, own: tuple[str, ...], n_graphs: int) -> str:
    """Why ``entry`` was ranked first on a host with exact U8S8 products."""
    if entry.target in own:
        return "made for this CPU" + (": 8-bit weights, exact int32 sums here" if entry.needs_exact_u8s8 else "")
    if entry.needs_exact_u8s8:
        return "8-bit weights: the most accurate graph, and exact here"
    hint = f"; export --target {own[0]} for this CPU's 8-bit graph" if own else ""
    return ("the bundle's only INT8 graph" if n_graphs == 1 else "no 8-bit graph in the bundle") + hint


# CPU kinds where the bundle's OpenVINO graph is picked by default: where it was measured faster than the
# bundle's onnxruntime graphs. None so far; why not, per kind (the figures: benchmarks/results/int8_targets/decisions.md):
OPENVINO_DEFAULT_ON: tuple[str, ...] = ()
OPENVINO_SLOWER = {kind: "OpenVINO's INT8 ran slower than onnxruntime's on an AVX2-only CPU"
                   for kind in ("x86-avx2", "x86-avx512")}
OPENVINO_SLOWER["x86-vnni"] = ("on the VNNI CPUs measured it was no faster than the x86-vnni onnxruntime graph, "
                               "slower on short texts and less accurate")


def choose_openvino(manifest: Manifest, host: HostCpu, target: str | None = None) -> tuple[GraphChoice | None, str]:
    """``(choice, "")`` when the bundle's OpenVINO graph should run here (see the module docstring), else
    ``(None, why not)``; ``why`` is empty when the bundle has none or another target was asked for.
    ``BundleError`` when ``target="openvino"`` cannot be had."""
    graphs = manifest.openvino_graphs()
    if target not in (None, ENGINE):
        return None, ""
    if not graphs:
        if target == ENGINE:
            have = ", ".join(str(e.target) for e in manifest.int8_graphs().values())
            raise BundleError(f"the bundle has no OpenVINO INT8 graph (it has: {have})",
                              "re-export with --target portable,openvino")
        return None, ""
    from edgebert.runtime.openvino_graph import INSTALL_HINT, openvino_version  # only for a bundle with one

    key, entry = next(iter(graphs.items()))
    version = openvino_version()
    if version is None:
        if target == ENGINE:
            raise BundleError("int8_target='openvino' needs the openvino package, which is not installed",
                              f"{INSTALL_HINT}, or leave int8_target unset")
        return None, f"the bundle's OpenVINO INT8 graph is not used: openvino is not installed ({INSTALL_HINT})"
    measured_on = (entry.requires or {}).get("measured_on")
    if target is None and host.kind not in OPENVINO_DEFAULT_ON:
        return None, (f"the bundle's OpenVINO INT8 graph is not picked by default on a {host.kind} CPU: "
                      f"{OPENVINO_SLOWER.get(host.kind, 'its speed there is not measured')} "
                      "(int8_target='openvino' loads it)")
    if target is None and measured_on and host.kind != measured_on:
        return None, (f"the bundle's OpenVINO INT8 graph was measured on a {measured_on} CPU, this one is "
                      f"{host.kind}: not picked by default (int8_target='openvino' loads it; `edgebert check` "
                      "measures it here)")
    why = ("asked for (int8_target='openvino')" if target == ENGINE else
           f"openvino {version} is installed and this {host.cpu_text()} is the kind the export measured the "
           f"graph on ({measured_on}); int8_target='portable' loads onnxruntime's graph instead")
    return GraphChoice(key, entry, {}, f"OpenVINO INT8 graph chosen: {why}"), ""
