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

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

RECORD_CONFIG = "session.record_ep_graph_assignment_info"
METHOD_RECORD = "onnxruntime graph assignment record (session.record_ep_graph_assignment_info)"
METHOD_PROVIDERS = "registered providers only (this onnxruntime has no graph assignment record)"


@dataclass(frozen=True)
class Placement:
    """Nodes per provider (short names) and the op types of each; ``method`` says how it was read."""

    nodes: dict[str, int]
    op_types: dict[str, dict[str, int]] = field(default_factory=dict)
    method: str = METHOD_RECORD

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

    def as_dict(self) -> dict[str, Any]:
        return {"nodes": dict(self.nodes), "op_types": {k: dict(v) for k, v in self.op_types.items()},
                "method": self.method, "total": self.total}


def read_placement(session: Any) -> Placement:
    """The placement of ``session`` (an ``onnxruntime.InferenceSession`` made with ``RECORD_CONFIG``)."""
    from .providers import short_name

    getter = getattr(session, "get_provider_graph_assignment_info", None)
    if getter is not None:
        try:
            subgraphs = list(getter())
        except Exception:  # noqa: BLE001  (recording was not enabled, or the build cannot)
            subgraphs = None
        if subgraphs:
            nodes: Counter = Counter()
            ops: dict[str, Counter] = {}
            for sub in subgraphs:
                name = short_name(sub.ep_name)
                for node in sub.get_nodes():
                    nodes[name] += 1
                    ops.setdefault(name, Counter())[node.op_type] += 1
            return Placement(dict(nodes), {k: dict(v) for k, v in ops.items()})
    return Placement({short_name(p): 0 for p in session.get_providers()}, {}, METHOD_PROVIDERS)
