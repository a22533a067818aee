"""What an OpenVINO IR file (``.xml``, the ``openvino`` INT8 target's graph) declares, read with the
standard library: its inputs (name, element type), its output names and its layer types. The bundle
reader checks a manifest against it; the exporter records its op counts. No openvino needed."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass
from pathlib import Path


class NotIr(ValueError):
    """The file is not a readable OpenVINO IR .xml."""


@dataclass(frozen=True)
class IrGraph:
    inputs: dict[str, str | None]      # Parameter name -> element type ("i64" ...), None if unsaid
    outputs: frozenset[str]            # the tensor names the Result layers give
    op_counts: dict[str, int]          # layer type -> count, most frequent first


def read_ir(path: str | Path) -> IrGraph:
    """``path``'s inputs, outputs and layer types; ``NotIr`` if it cannot be parsed."""
    try:
        layers = list(ET.parse(path).getroot().iter("layer"))
    except (ET.ParseError, OSError) as exc:
        raise NotIr(str(exc)) from exc
    inputs = {str(layer.get("name")): (layer.find("data").get("element_type") if layer.find("data") is not None
                                       else None)
              for layer in layers if layer.get("type") == "Parameter"}
    outputs = frozenset(name for layer in layers if layer.get("type") == "Result"
                        for name in (layer.get("output_names") or "").split(",") if name)
    counts = dict(Counter(str(layer.get("type", "?")) for layer in layers).most_common())
    return IrGraph(inputs, outputs, counts)
