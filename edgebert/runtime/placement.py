"""Where a session's nodes really run: onnxruntime's own record of the graph partition.

onnxruntime 1.31 records, when the session config entry ``session.record_ep_graph_assignment_info`` is
``"1"``, which execution provider every node was assigned to
(``InferenceSession.get_provider_graph_assignment_info()``: subgraphs with ``ep_name`` and nodes with
``op_type``). ``session.get_providers()`` only lists the providers that were *registered*: a CUDA
session whose provider library failed to load lists just the CPU, but a registered provider that was
given no node (or a few) still shows up there. Older onnxruntime builds lack the record; then the
registered list is all there is, and the placement says so (``method``). Torch-free.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import field
from typing import Any

from edgebert.records import record

RECORD_CONFIG = "session.record_ep_graph_assignment_info"
METHOD_RECORD = "onnxruntime graph assignment record (session.record_ep_graph_assignment_info)"
METHOD_PROVIDERS = "registered providers only (this onnxruntime has no graph assignment record)"
# ops that only compute shapes, indices or masks: onnxruntime places some of them on the CPU on purpose
# (GetCpuPreferredNodes: cheaper there than a device round trip); every other op is a compute op
SHAPE_OPS = frozenset({"Shape", "Size", "Gather", "Unsqueeze", "Squeeze", "Concat", "Slice", "Reshape",
                       "ConstantOfShape", "Range", "Expand", "Equal", "Where", "Cast", "NonZero", "Identity",
                       "Constant", "Not", "Less", "Greater"})
ON, SHAPES_ON_CPU, HYBRID, ELSEWHERE = "on provider", "on provider (shape ops on CPU)", "hybrid", "not on provider"
_FORCED_CPU = r"Force fallback to CPU execution for node: (\S+)"           # patterns: compiled on first use
_NO_KERNEL = r"(\w+) kernel not found in registries for Op type: (\S+) node name: (\S*)"
REASON_CPU_PREFERRED = ("onnxruntime put it on the CPU on purpose: shape computation, cheaper there than a "
                        "device round trip")
REASON_NO_KERNEL = "the provider has no kernel for this op and these input types"
REASON_UNLOGGED = "no reason in onnxruntime's log"


@record
class Placement:
    """Nodes per provider (short names) and the op types of each; ``method`` says how it was read."""

    nodes: dict[str, int]
    op_types: dict[str, dict[str, int]] = field(default_factory=dict)
    method: str = METHOD_RECORD
    named: tuple[tuple[str, str, str], ...] = ()   # (provider, op type, node name) of every node, when recorded

    @property
    def total(self) -> int:
        return sum(self.nodes.values())

    def runs_on(self, provider: str) -> bool:
        """Was ``provider`` given any node? (Registered-list method: was it registered at all.)"""
        if self.method == METHOD_PROVIDERS:
            return provider in self.nodes
        return self.nodes.get(provider, 0) > 0

    def share(self, provider: str) -> float | None:
        return None if not self.total else self.nodes.get(provider, 0) / self.total

    def describe(self) -> str:
        if not self.nodes:
            return "node placement unknown"
        parts = []
        for name, count in sorted(self.nodes.items(), key=lambda kv: -kv[1]):
            ops = self.op_types.get(name) or {}
            top = ", ".join(f"{op} {n}" for op, n in sorted(ops.items(), key=lambda kv: -kv[1])[:4])
            parts.append(f"{name} {count}" + (f" ({top})" if top and count < self.total else ""))
        return f"nodes: {' | '.join(parts)} of {self.total}"

    def off(self, provider: str) -> list[tuple[str, str, str]]:
        """(provider, op type, node name) of every node placed anywhere but ``provider``."""
        return [n for n in self.named if n[0] != provider]

    def label(self, provider: str) -> str:
        """``ON`` every node on ``provider``; ``SHAPES_ON_CPU`` only shape ops elsewhere; ``HYBRID`` compute
        ops elsewhere too; ``ELSEWHERE`` no node on it. (Registered-list method: ``ON`` or ``ELSEWHERE``.)"""
        if self.method == METHOD_PROVIDERS or not self.named:
            return ON if self.runs_on(provider) else ELSEWHERE
        if not self.nodes.get(provider):
            return ELSEWHERE
        off = self.off(provider)
        if not off:
            return ON
        return SHAPES_ON_CPU if all(op in SHAPE_OPS for _, op, _ in off) else HYBRID

    def compute_off(self, provider: str) -> dict[str, int]:
        """Compute ops (not shape ops) placed elsewhere than ``provider``: op type -> count."""
        return dict(Counter(op for _, op, _ in self.off(provider) if op not in SHAPE_OPS))

    def as_dict(self) -> dict[str, Any]:
        return {"nodes": dict(self.nodes), "op_types": {k: dict(v) for k, v in self.op_types.items()},
                "method": self.method, "total": self.total}


def placement_reasons(log_text: str) -> dict[str, str]:
    """Node name -> why onnxruntime did not give it to the preferred provider, read from its verbose log
    (``GetCpuPreferredNodes`` and the CUDA / TensorRT kernel lookup messages)."""
    reasons: dict[str, str] = {}
    for match in re.finditer(_NO_KERNEL, log_text):
        reasons[match.group(3)] = f"{REASON_NO_KERNEL} ({match.group(1)} lacks {match.group(2)})"
    for match in re.finditer(_FORCED_CPU, log_text):
        reasons.setdefault(match.group(1), REASON_CPU_PREFERRED)
    return reasons


def off_provider_table(placement: Placement, provider: str, reasons: dict[str, str]
                       ) -> list[dict[str, Any]]:
    """Nodes not on ``provider`` grouped by (where, op type, reason), with counts and up to 3 names each."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for where, op, name in placement.off(provider):
        why = reasons.get(name) or (REASON_CPU_PREFERRED + " (assumed: no log line)" if op in SHAPE_OPS
                                    else REASON_UNLOGGED)
        groups.setdefault((where, op, why), []).append(name)
    return [{"provider": k[0], "op_type": k[1], "count": len(v), "reason": k[2], "examples": v[:3],
             "compute": k[1] not in SHAPE_OPS} for k, v in sorted(groups.items(), key=lambda kv: -len(kv[1]))]

def read_placement(session: Any) -> Placement:
    """The placement of ``session`` (an ``onnxruntime.InferenceSession`` made with ``RECORD_CONFIG``)."""
    from edgebert.runtime.providers import short_name

    getter = getattr(session, "get_provider_graph_assignment_info", None)
    if getter is not None:
        try:
            subgraphs = list(getter())
        except Exception:  # noqa: BLE001  (recording was not enabled, or the build cannot)
            subgraphs = None
        if subgraphs:
            nodes: Counter = Counter()
            ops: dict[str, Counter] = {}
            named = []
            for sub in subgraphs:
                name = short_name(sub.ep_name)
                for node in sub.get_nodes():
                    nodes[name] += 1
                    ops.setdefault(name, Counter())[node.op_type] += 1
                    named.append((name, node.op_type, getattr(node, "name", "")))
            return Placement(dict(nodes), {k: dict(v) for k, v in ops.items()}, METHOD_RECORD, tuple(named))
    return Placement({short_name(p): 0 for p in session.get_providers()}, {}, METHOD_PROVIDERS)
