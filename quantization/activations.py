"""Per-channel activation ranges of a graph's tensors on calibration text: one pass, two uses.

The outlier split (``quantization.outliers``) needs each MatMul input's per-channel max |x|; calibrated
activation scales (``quantization.scales``) need each quantized tensor's min and max over the channels
that stay INT8. Both come from the same per-channel min/max over the real (unpadded) tokens.
``token_rows`` (the real tokens' rows of named tensors, batch by batch, with the real-token mask) also feeds GPTQ's
``sum x x^T``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

from edgebert.graph.ops import load

Feeds = dict[str, np.ndarray]


@dataclass
class ChannelStats:
    """``{tensor: per-channel min}`` and ``{tensor: per-channel max}`` (last axis = channels)."""

    low: dict[str, np.ndarray] = field(default_factory=dict)
    high: dict[str, np.ndarray] = field(default_factory=dict)
    texts: int = 0

    @classmethod
    def collect(cls, fp32_path: str | Path, batches: Iterable[Feeds], tensors: Sequence[str]) -> "ChannelStats":
        """Per-channel min/max of ``tensors`` over the real tokens of ``batches`` (``token_rows``)."""
        stats = cls()
        for real, rows_of in token_rows(load(fp32_path), tensors, batches):
            stats.texts += real.shape[0]
            for name, rows in rows_of.items():
                lo, hi = rows.min(0), rows.max(0)
                stats.low[name] = lo if name not in stats.low else np.minimum(stats.low[name], lo)
                stats.high[name] = hi if name not in stats.high else np.maximum(stats.high[name], hi)
        return stats

    def absmax(self, tensor: str) -> np.ndarray:
        """Per-channel max |x|."""
        return np.maximum(np.abs(self.low[tensor]), np.abs(self.high[tensor]))

    def range(self, tensor: str, skip_channels: Sequence[int] = ()) -> tuple[float, float]:
        """(min, max) over all channels but ``skip_channels``, always including 0 (as
        DynamicQuantizeLinear does: zero must be exactly representable)."""
        keep = np.ones(len(self.low[tensor]), dtype=bool)
        keep[list(skip_channels)] = False
        return min(0.0, float(self.low[tensor][keep].min())), max(0.0, float(self.high[tensor][keep].max()))


def token_rows(model: onnx.ModelProto, tensors: Sequence[str],
               batches: Iterable[Feeds]) -> Iterator[tuple[np.ndarray, dict[str, np.ndarray]]]:
    """Run ``model`` (not modified) over ``batches`` with ``tensors`` as its outputs (no graph optimizations, so
    every named tensor exists); per batch, its real-token mask [texts, tokens] (bool) and ``{tensor: [rows,
    channels]}`` over the real tokens, text by text."""
    tensors = sorted(set(tensors))
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    del probe.graph.output[:]
    for name in tensors:
        probe.graph.output.append(helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(probe.SerializeToString(), so, providers=["CPUExecutionProvider"])
    inputs = {i.name for i in sess.get_inputs()}
    for feeds in batches:
        real = feeds["attention_mask"].astype(bool)
        values = sess.run(tensors, {k: v for k, v in feeds.items() if k in inputs})
        # [batch, tokens, channels]: the real tokens; [batch, channels] (the pooler's first token) as it is,
        # also when channels == the padded length (a 2-D shape matched [batch, tokens] there)
        yield real, {name: value[real] if value.ndim == 3 and value.shape[:2] == real.shape
                                   else value.reshape(-1, value.shape[-1]) for name, value in zip(tensors, values)}
