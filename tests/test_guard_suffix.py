"""The INT8 guard's sensitivity ranking writes each one-node graph in the quantizer's own file kind: an
OpenVINO IR (``.xml``) is measured as an IR, not parsed as ONNX (which failed for the openvino target)."""

from __future__ import annotations

from pathlib import Path

from edgebert.quantization.accuracy import quantize_with_guard
from edgebert.runtime.fidelity import Fidelity


class FakeQuantizer:
    def __init__(self):
        self.paths = []

    def candidates(self):
        return ["a", "b"]

    def quantize(self, out_path, exclude=(), only=None):
        self.paths.append(Path(out_path))
        return Path(out_path)


class FakeProbe:
    metric = "agreement"

    def measure(self, path, max_sentences=None):
        loss = 0.0 if "one" not in Path(path).name and self.seen else 0.1
        self.seen = True
        return Fidelity(self.metric, 1.0 - loss, None, 200, loss, 0.1)

    seen = False


def test_ranking_writes_the_quantizers_file_kind(tmp_path):
    quantizer = FakeQuantizer()
    try:
        quantize_with_guard(quantizer, tmp_path / "model.int8-openvino.xml", FakeProbe(), 0.05, allow_miss=True)
    except Exception:   # the fake's figures are not a real search; only the paths matter here
        pass
    ranked = [p for p in quantizer.paths if p.stem == "one"]
    assert ranked and all(p.suffix == ".xml" for p in ranked)
