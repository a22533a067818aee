"""Per-channel activation ranges of a graph's tensors on calibration text: one pass, two uses.

The outlier split (``quantization.outliers``) needs each MatMul input's per-channel max |x|; calibrated
activation scales (``quantization.scales``) need each quantized tensor's min and max over the channels
that stay INT8. Both come from the same per-channel min/max over the real (unpadded) tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

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
        """Run ``fp32_path`` over ``batches`` with ``tensors`` as extra outputs (no graph optimizations,
        so every named tensor exists) and keep per-channel min/max over real tokens."""
        tensors = sorted(set(tensors))
        model = load(fp32_path)
        del model.graph.output[:]
        for name in tensors:
            model.graph.output.append(helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        inputs = {i.name for i in sess.get_inputs()}
        stats = cls()
        for feeds in batches:
            real = feeds["attention_mask"].astype(bool)
            stats.texts += int(real.shape[0])
            for name, value in zip(tensors, sess.run(tensors, {k: v for k, v in feeds.items() if k in inputs})):
                # [batch, tokens, channels]: the real tokens; [batch, channels] (the pooler's first token) as it is,
                # also when channels == the padded length (a 2-D shape matched [batch, tokens] there)
                per_token = value.ndim == 3 and value.shape[:2] == real.shape
                rows = value[real] if per_token else value.reshape(-1, value.shape[-1])
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
