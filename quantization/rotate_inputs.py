"""Rotate the 4-bit MatMuls' inputs before rounding (``--int4-rotate``): a float-equivalent graph whose weights
4 bits round with less error (incoherence processing, as QuIP and QuaRot do for LLMs).

A 4-bit block's scale is set by its largest weight; a few large rows of a weight (the inputs that carry outliers)
stretch every block they sit in, and the other weights of those blocks round coarsely. Rotating the input by an
orthogonal ``R`` (``x @ W == (x @ R) @ (R^T @ W)``) spreads each large row over the rows of its block, so the rotated
weight ``R^T @ W`` has its outliers spread thin, and GPTQ then rounds it calibrated on the rotated inputs it will see.

* ``R = blockdiag(M, ..., M)``, ``M = (S_a H_a) (x) (S_b H_b)`` of order ``ORDER`` (128 = 8 x 16; the largest
  power of two dividing K when smaller): ``H_n`` the normalised Sylvester-Hadamard matrix (so ``H_a (x) H_b`` is
  ``H_128``), ``S_n`` a diagonal of seeded random signs (randomised Hadamard, as QuaRot uses: no input direction
  is favoured). The graph holds the two factors (a + b squared floats, under 2 KB) and builds ``M`` from them
  when the session loads (a broadcast ``Mul`` and ``Reshape`` of constants, which onnxruntime folds), not a
  K x K matrix per MatMul; each rotated input costs ``Reshape`` to rows of 128, ``MatMul`` by ``M``, ``Reshape``
  back (to the input's own ``Shape``: any batch, sequence and rank).
* MatMuls that read the same tensor (query, key and value) share one rotation.
* The nodes it adds are named ``rotation/...``: they are not 4-bit or 8-bit candidates (``ROTATION_PREFIX``).

Same arithmetic up to float rounding: checked on the graph written (``TOLERANCE``; 5e-7 on all-MiniLM-L6-v2) and
tested against the unrotated graph at padded shapes. On all-MiniLM-L6-v2 (every encoder MatMul 4-bit, block 128,
GPTQ) it cuts the small graph's gate loss from 0.0170 to 0.0129 and lifts held-out cosine from 0.9789-0.9800 to
0.9842-0.9848, for 12 KB and 11-19% more time per call at one thread (``benchmarks/results/int4/README.md``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from edgebert.errors import ValidationError
from edgebert.graph.ops import load, replace_nodes

ORDER = 128                 # largest Hadamard order: the rotation mixes inputs within blocks of this many
SEED = 0
ROTATION_PREFIX = "rotation/"
TOLERANCE = 1e-3            # the rotated float graph's largest output difference, relative to the output's largest


def order_for(width: int, order: int = ORDER) -> int:
    """The Hadamard order a width-``width`` input is rotated by: ``order``, or the largest power of two dividing
    ``width`` when smaller (a tiny model's 64)."""
    return min(order, width & -width)


def hadamard(order: int = ORDER) -> np.ndarray:
    """The normalised Sylvester-Hadamard matrix (symmetric, orthogonal) of ``order``, a power of two."""
    h = np.ones((1, 1))
    while h.shape[0] < order:
        h = np.block([[h, h], [h, -h]])
    return (h / np.sqrt(order)).astype(np.float32)


def factors(order: int, seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """``S_a H_a`` and ``S_b H_b`` (a x a and b x b, ``a * b = order``, ``a <= b``): ``M``'s Kronecker factors."""
    a = 1 << (order.bit_length() - 1) // 2
    rng = np.random.default_rng(seed + order)
    return tuple(rng.choice(np.array([-1.0, 1.0], np.float32), size=n)[:, None] * hadamard(n) for n in (a, order // a))


def block_rotation(order: int = ORDER, seed: int = SEED) -> np.ndarray:
    """``M`` [order, order] (orthogonal): what each block of ``order`` inputs is multiplied by."""
    left, right = factors(order, seed)
    return np.kron(left.astype(np.float64), right.astype(np.float64))


def rotated_weight(weight_kn: np.ndarray, order: int = ORDER, seed: int = SEED) -> np.ndarray:
    """``R^T @ W`` for a MatMul weight [K, N]: each block of rows multiplied by ``M^T``."""
    k, n = weight_kn.shape
    order = order_for(k, order)
    blocks = weight_kn.astype(np.float64).reshape(k // order, order, n)
    return np.einsum("ji,bjn->bin", block_rotation(order, seed), blocks).reshape(k, n).astype(np.float32)


def rotation_matrix(width: int, order: int = ORDER, seed: int = SEED) -> np.ndarray:
    """``R`` itself [width, width] (float64; for checks and PyTorch benchmarks: the graph never holds it)."""
    o = order_for(width, order)
    return np.kron(np.eye(width // o), block_rotation(o, seed))


def rotate_inputs(src: str | Path | onnx.ModelProto, dst: str | Path, matmuls: list[str], order: int = ORDER,
                  seed: int = SEED) -> dict:
    """Write ``src`` to ``dst`` with the inputs of ``matmuls`` (MatMuls with a [K, N] initializer weight, K even;
    others are left alone) rotated and their weights counter-rotated. Returns the manifest's record: how many
    MatMuls and inputs were rotated, the Hadamard orders and the seed."""
    model = load(src)
    inits = {i.name: i for i in model.graph.initializer}
    wanted = set(matmuls)
    fits = {n.name for n in model.graph.node if n.name in wanted and n.op_type == "MatMul" and len(n.input) == 2
            and n.input[1] in inits and len(inits[n.input[1]].dims) == 2 and order_for(inits[n.input[1]].dims[0]) > 1}
    rotated: dict[str, str] = {}            # input tensor -> its rotated name
    orders: set[int] = set()

    def rewrite(node: onnx.NodeProto, known: dict) -> tuple[list, list] | None:
        if node.name not in fits:
            return None
        weight = numpy_helper.to_array(known[node.input[1]])
        k = weight.shape[0]
        nodes, new_inits = [], [numpy_helper.from_array(rotated_weight(weight, order, seed), f"{node.input[1]}/rotated")]
        if node.input[0] not in rotated:
            # short names: the graph file holds each one (a tensor's full name costs MiniLM about 20 KB)
            x, base, o, p = node.input[0], f"{ROTATION_PREFIX}{len(rotated)}", order_for(k, order), ROTATION_PREFIX
            if o not in orders:
                orders.add(o)
                parts = _rotation_nodes(o, seed)
                nodes += parts[0]
                new_inits += parts[1]
            nodes += [helper.make_node("Reshape", [x, f"{p}rows_{o}"], [f"{base}/rows"], name=f"{base}/Reshape"),
                      helper.make_node("MatMul", [f"{base}/rows", f"{p}block_{o}"], [f"{base}/mixed"],
                                       name=f"{base}/MatMul"),
                      helper.make_node("Shape", [x], [f"{base}/shape"], name=f"{base}/Shape"),
                      helper.make_node("Reshape", [f"{base}/mixed", f"{base}/shape"], [f"{base}/out"],
                                       name=f"{base}/Reshape_back")]
            rotated[x] = f"{base}/out"
        nodes.append(helper.make_node("MatMul", [rotated[node.input[0]], f"{node.input[1]}/rotated"], list(node.output),
                                      name=node.name))
        return nodes, new_inits

    source = model.SerializeToString()
    count = replace_nodes(model, dst, rewrite)
    diff = _max_difference(source, dst) if count else 0.0
    if diff > TOLERANCE:
        raise ValidationError(f"rotating the 4-bit MatMuls' inputs changed the float graph's outputs by {diff:.3g} "
                              f"(relative; tolerance {TOLERANCE:g})", "export with --no-int4-rotate, and report this "
                              "graph", {"max_rel_diff": diff, "tolerance": TOLERANCE})
    return {"applied": count > 0, "matmuls": count, "inputs": len(rotated), "orders": sorted(orders), "seed": seed,
            "max_rel_diff": diff,
            "what": "each rotated input x @ blockdiag(M), M a randomised Hadamard; its weights counter-rotated"}


def _max_difference(source: bytes, rotated: str | Path) -> float:
    """Largest output difference of the rotated float graph from ``source``, relative to the output's largest value,
    on seeded token ids at two shapes, one row padded (graphs whose inputs are not token ids: not measured, 0)."""
    import onnxruntime as ort

    runs = [ort.InferenceSession(g, providers=["CPUExecutionProvider"]) for g in (source, str(rotated))]
    rng, worst = np.random.default_rng(SEED), 0.0
    for batch, seq in ((1, 5), (3, 23)):
        feeds = {}
        for i in runs[0].get_inputs():
            if "int" not in i.type:
                return 0.0
            shape = (batch, seq)
            feeds[i.name] = (np.ones(shape, np.int64) if "mask" in i.name else np.zeros(shape, np.int64)
                             if "type" in i.name else rng.integers(5, 90, shape).astype(np.int64))
            if "mask" in i.name and batch > 1:
                feeds[i.name][1, seq // 2:] = 0
        for want, got in zip(*(r.run(None, feeds) for r in runs)):
            worst = max(worst, float(np.abs(want - got).max() / max(np.abs(want).max(), 1e-6)))
    return worst


def _rotation_nodes(order: int, seed: int) -> tuple[list, list]:
    """Nodes that make ``M`` of ``order`` (``rotation/block_<order>``) from its two factors when the session loads
    (``kron(A, B)[i*b + j, k*b + l] = A[i, k] * B[j, l]``: a broadcast ``Mul`` of [a, 1, a, 1] by [1, b, 1, b],
    reshaped), so the file holds a + b squared floats, not ``order`` squared (64 KB at 128: a tiny model's whole
    small graph is about 90 KB)."""
    left, right = factors(order, seed)
    a, b = len(left), len(right)
    p, name = ROTATION_PREFIX, f"{ROTATION_PREFIX}block_{order}"
    inits = [numpy_helper.from_array(left.reshape(a, 1, a, 1), f"{name}/left"),
             numpy_helper.from_array(right.reshape(1, b, 1, b), f"{name}/right"),
             numpy_helper.from_array(np.array([order, order], np.int64), f"{name}/square"),
             numpy_helper.from_array(np.array([-1, order], np.int64), f"{p}rows_{order}")]
    nodes = [helper.make_node("Mul", [f"{name}/left", f"{name}/right"], [f"{name}/blocks"], name=f"{name}/Mul"),
             helper.make_node("Reshape", [f"{name}/blocks", f"{name}/square"], [name], name=f"{name}/Reshape")]
    return nodes, inits


def rotation_nodes(model: str | Path | onnx.ModelProto) -> list[str]:
    """The names of the nodes ``rotate_inputs`` added (to keep them off 4 and 8 bits)."""
    return [n.name for n in load(model).graph.node if n.name.startswith(ROTATION_PREFIX)]
