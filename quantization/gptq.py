"""GPTQ for the small graph's 4-bit MatMuls (``--int4-algorithm gptq``): calibrated rounding on the exact grid
onnxruntime's symmetric ``MatMulNBits`` stores.

Round-to-nearest moves each weight to its nearest 4-bit level on its own. GPTQ (Frantar et al. 2022) rounds a
weight's input rows (K) one at a time and moves the rows not yet rounded to cancel the error so far on the
calibration inputs, through the inverse of ``H = sum x x^T`` over the MatMul's real (unpadded) input tokens. On
all-MiniLM-L6-v2 with every encoder MatMul 4-bit (block 32) it cuts the embedding loss from 0.035 to 0.012 for
the same bytes and the same kernel (``benchmarks/results/int4/gptq_minilm.md``).

* **The grid is onnxruntime's**: per block of ``block`` rows of one output column, the block's signed largest
  weight maps to -8 (MLAS' symmetric rule, as ``MatMulNBitsQuantizer`` with ``is_symmetric`` computes it), and
  that weight is kept at exactly -8 x scale; so the quantizer, which re-derives the scale from the largest
  weight, rounds the result to itself, and the graph it writes holds GPTQ's values (tested).
* **Each text counts once** (``PER_TEXT``): a text's tokens weigh 1 / its length in ``H``, so the error that is
  cancelled is the error per text (what a sentence vector or a label sees), not per token: long calibration
  paragraphs would otherwise outweigh the short texts, whose vectors 4-bit rounding moves most.
* **Act-order** (``ACT_ORDER``): rows are taken by falling ``H`` diagonal (the inputs that carry most first),
  each block's scale fixed beforehand from the original weights (static groups, so blocks stay contiguous in K
  as ``MatMulNBits`` stores them); without it, a block's scale is fixed when its first row is reached.
* **Sequential**: MatMuls are taken by the tensor they read, in graph order (query + key + value share one), and
  each group is calibrated on the inputs it sees with every group before it already rounded.
* The word table is float while calibrating (it is made 4-bit after), and a MatMul the gate keeps 8-bit is
  quantized from its original weights, not from GPTQ's.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
import onnx
from onnx import numpy_helper

from edgebert.errors import ConfigError
from edgebert.graph.ops import load
from edgebert.quantization.activations import Feeds, token_rows

LEVELS = (-8, 7)            # symmetric 4-bit: the block's largest magnitude maps to -8
DAMP = 0.01                 # of the mean diagonal of H, added to it (GPTQ's default)
ACT_ORDER = True            # MiniLM, block 32: cosine 0.9858 -> 0.9878 (gptq_minilm.md)
LAZY = 128                  # rows rounded before the rest of the weight is updated at once
PER_TEXT = True             # each calibration text weighs the same in H: MiniLM, block 128, 0.9827 -> 0.9841


def round_blocks(weight_kn: np.ndarray, block: int) -> np.ndarray:
    """Round-to-nearest on the same grid (a [K, N] MatMul weight, blocks along K): GPTQ with no calibration."""
    k, n = weight_kn.shape
    blocks = weight_kn.T.reshape(n, k // block, block)
    peak = np.take_along_axis(blocks, np.abs(blocks).argmax(-1)[..., None], -1)
    scale = np.where(peak == 0, np.float32(1), peak / np.float32(LEVELS[0])).astype(np.float32)
    q = np.clip(np.round(blocks / scale), *LEVELS) * scale
    return np.ascontiguousarray(q.reshape(n, k).T.astype(np.float32))


def gptq_weight(weight_kn: np.ndarray, hessian: np.ndarray, block: int, damp: float = DAMP,
                act_order: bool = False) -> np.ndarray:
    """``weight_kn`` [K, N] (a MatMul's B) rounded by GPTQ against ``hessian`` [K, K] (see the module docstring).
    ``act_order``: rows taken by falling ``H`` diagonal (the most used inputs first), each block's scale fixed
    beforehand from the original weights (static groups: blocks stay contiguous in K, as MatMulNBits stores them)."""
    w = weight_kn.T.astype(np.float64)                   # [N, K]: a row per output, K the rounding order
    h = hessian.astype(np.float64).copy()
    dead = np.diag(h) == 0                                # inputs never non-zero: their weights do not matter
    h[dead, dead] = 1
    w[:, dead] = 0
    h[np.diag_indices_from(h)] += damp * np.mean(np.diag(h))
    diag = np.diag(h).tolist()
    # Python's sort, not np.argsort: numpy 2.4's SIMD argsort gave wrong orders under the AVX2 emulator
    order = np.array(sorted(range(len(diag)), key=lambda i: -diag[i]) if act_order else range(len(diag)))
    back = np.empty_like(order)
    back[order] = np.arange(len(order))                  # the inverse permutation
    w, h = w[:, order], h[np.ix_(order, order)]
    hinv = np.linalg.cholesky(np.linalg.inv(h)).T         # upper Cholesky factor of H^-1
    q = np.zeros_like(w)
    static = _block_scales(w[:, back], block) if act_order else None
    lazy = max(LAZY, block)
    scale = anchor = None
    for i1 in range(0, w.shape[1], lazy):
        i2 = min(i1 + lazy, w.shape[1])
        w1, err1, hinv1 = w[:, i1:i2].copy(), np.zeros((w.shape[0], i2 - i1)), hinv[i1:i2, i1:i2]
        for i in range(i2 - i1):
            col = int(order[i1 + i])                       # the row of the original weight being rounded
            if static is not None:
                scale, anchor = static[0][:, col // block], static[1][:, col // block]
            elif col % block == 0:                         # the block's scale, from its weights as updated so far
                scale, anchor = (a[:, 0] for a in _block_scales(w1[:, i:i + block], block))
                anchor = anchor + col
            x = w1[:, i]
            qx = np.clip(np.round(x / scale), *LEVELS) * scale
            qx = np.where(anchor == col, LEVELS[0] * scale, qx)          # the block's largest weight stays -8 x scale
            q[:, i1 + i] = qx
            e = (x - qx) / hinv1[i, i]
            w1[:, i:] -= np.outer(e, hinv1[i, i:])
            err1[:, i] = e
        w[:, i2:] -= err1 @ hinv[i1:i2, i2:]
    return np.ascontiguousarray(q[:, back].T.astype(np.float32))


def _block_scales(w_nk: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray]:
    """Per block of ``block`` columns of ``w_nk`` [N, K]: the scale (the signed largest weight, as float32, / -8)
    and where that weight is (its column), each [N, K / block] (one block, K == block: [N, 1], never squeezed)."""
    n, k = w_nk.shape
    blocks = w_nk.reshape(n, k // block, block)
    arg = np.abs(blocks).argmax(-1)
    peak = np.take_along_axis(blocks, arg[..., None], -1)[..., 0].astype(np.float32).astype(np.float64)
    scale = np.where(peak == 0, 1.0, peak / LEVELS[0])
    anchor = arg + np.arange(0, k, block)
    return scale, anchor


def gptq_weights(graph: str | Path, nodes: Iterable[str], block: int, batches: Callable[[], Iterable[Feeds]],
                 say: Callable[[str], None] = lambda _: None) -> tuple[dict[str, np.ndarray], dict]:
    """GPTQ-rounded B weights of the MatMul ``nodes`` of ``graph``, by node name, and the figures for the
    manifest; ``batches()`` gives the calibration feeds (with ``attention_mask``) afresh for each group."""
    t0 = time.perf_counter()
    model = load(graph)
    inits = {i.name: i for i in model.graph.initializer}
    wanted = set(nodes)
    groups: dict[str, list[onnx.NodeProto]] = {}        # input tensor -> its MatMuls, in graph order
    for node in model.graph.node:
        if node.name in wanted:
            groups.setdefault(node.input[0], []).append(node)
    rounded: dict[str, np.ndarray] = {}
    weights = {node.name: numpy_helper.to_array(inits[node.input[1]]) for group in groups.values() for node in group}
    if all(np.array_equal(round_blocks(w, block), w) for w in weights.values()):
        say("GPTQ: every weight already lies on the 4-bit grid (a --int4-aware student): kept as it is")
        return weights, {"algorithm": "gptq", "skipped": "every weight already on the 4-bit grid", "groups": 0,
                         "seconds": round(time.perf_counter() - t0, 1)}
    tokens = 0
    for n_group, (tensor, members) in enumerate(groups.items(), 1):
        h, rows = calibration_hessian(model, tensor, batches())
        tokens = max(tokens, rows)                        # the encoder's tokens (the pooler sees one per text)
        for node in members:
            init = inits[node.input[1]]
            rounded[node.name] = gptq_weight(weights[node.name], h, block, act_order=ACT_ORDER)
            init.CopyFrom(numpy_helper.from_array(rounded[node.name], init.name))   # later groups see it rounded
        if n_group % 8 == 0 or n_group == len(groups):
            say(f"GPTQ: {n_group}/{len(groups)} input groups ({len(rounded)} MatMuls)")
    return rounded, {"algorithm": "gptq", "damp": DAMP, "act_order": ACT_ORDER, "sequential": True,
                     "hessian": "per text (a token weighs 1 / its text's length)" if PER_TEXT else "per token",
                     "calibration_tokens": tokens,
                     "groups": len(groups), "seconds": round(time.perf_counter() - t0, 1)}


def calibration_hessian(model: onnx.ModelProto, tensor: str,
                        batches: Iterable[Feeds]) -> tuple[np.ndarray, int]:
    """``sum x x^T`` of ``tensor``'s rows over the real tokens of ``batches`` (float64), each text's tokens weighted
    by 1 / its length (``PER_TEXT``), and how many rows."""
    h, rows = None, 0
    for real, rows_of in token_rows(model, [tensor], batches):
        x = rows_of[tensor].astype(np.float32)
        x = x * np.sqrt(text_weights(real, x.shape[0]))[:, None]
        part = (x.T @ x).astype(np.float64)               # a batch's sum in float32, the running sum in float64
        h = part if h is None else h + part
        rows += x.shape[0]
    if h is None:
        raise ConfigError("--int4-algorithm gptq has no calibration inputs", "give --calib a text file with lines")
    return h, rows


def text_weights(real: np.ndarray, rows: int) -> np.ndarray:
    """Each row's weight in ``H``: 1 / its text's real-token count (``real``: [texts, tokens] mask; the rows are the
    real tokens text by text), or 1 where there is one row per text (the pooler's first token) or not ``PER_TEXT``."""
    lengths = real.sum(1)
    if not PER_TEXT or rows != int(lengths.sum()):
        return np.ones(rows, dtype=np.float32)
    return np.repeat(1.0 / np.maximum(lengths, 1), lengths).astype(np.float32)
