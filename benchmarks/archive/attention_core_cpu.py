"""Why splitting ``Attention`` did not pay on the CPU (issue 26, part 2): onnxruntime's CPU kernels for one
all-MiniLM-L6-v2-sized attention layer (1 x 128 x 384, 12 heads), 1 and 2 threads, spinning off, 1,000 timed
runs after 50 warm-up runs:

- ``Attention`` (com.microsoft): the packed Q/K/V projection and the attention core in one op (what the
  fused graph holds; ``QAttention`` is its INT8 form);
- three ``MatMul`` + ``MultiHeadAttention``: the projections as plain MatMuls (INT8 would make them
  ``MatMulIntegerToFloat``), the core in MultiHeadAttention with the same raw 2-D key-padding mask;
- the attention core alone, three ways: ``MultiHeadAttention`` with the mask, without it, and standard
  ops (Reshape / Transpose, MatMul, Mul, Add mask, Softmax, MatMul).

    .venv/bin/python benchmarks/archive/attention_core_cpu.py

Prints p50 microseconds per call and the largest difference between the two full-layer forms (no file:
the figures and the CPU go into benchmarks/results/cpu_peers/cpu_int8_gap_x86-vnni.md).
"""

from __future__ import annotations

import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

H, T, N = 384, 128, 12
D = H // N
OPSETS = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]


def _vi(name: str, shape: list[int], dtype: int = TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def graphs(rng: np.random.Generator) -> dict[str, tuple]:
    """``{label: (graph, feed names)}``."""
    w = (rng.standard_normal((H, 3 * H)) * 0.05).astype(np.float32)
    b = (rng.standard_normal(3 * H) * 0.05).astype(np.float32)
    x, m, y = _vi("x", [1, T, H]), _vi("m", [1, T], TensorProto.INT32), _vi("y", [1, T, H])
    qkv = [_vi(n, [1, T, H]) for n in "qkv"]
    attention = helper.make_graph(
        [helper.make_node("Attention", ["x", "W", "b", "m"], ["y"], domain="com.microsoft", num_heads=N)],
        "attention", [x, m], [y], [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b")])
    split = helper.make_graph(
        [helper.make_node("MatMul", ["x", f"W{i}"], [f"p{i}"]) for i in range(3)]
        + [helper.make_node("MultiHeadAttention", ["p0", "p1", "p2", "b", "m"], ["y"], domain="com.microsoft",
                            num_heads=N)],
        "split", [x, m], [y],
        [numpy_helper.from_array(np.ascontiguousarray(w[:, i * H:(i + 1) * H]), f"W{i}") for i in range(3)]
        + [numpy_helper.from_array(b, "b")])
    core_mask = helper.make_graph([helper.make_node("MultiHeadAttention", ["q", "k", "v", "", "m"], ["y"],
                                                    domain="com.microsoft", num_heads=N)], "core", qkv + [m], [y])
    core_nomask = helper.make_graph([helper.make_node("MultiHeadAttention", ["q", "k", "v"], ["y"],
                                                      domain="com.microsoft", num_heads=N)], "core", qkv, [y])
    nodes = []
    for n in "qkv":
        nodes += [helper.make_node("Reshape", [n, "heads"], [n + "r"]),
                  helper.make_node("Transpose", [n + "r"], [n + "t"], perm=[0, 2, 3, 1] if n == "k" else [0, 2, 1, 3])]
    nodes += [helper.make_node("MatMul", ["qt", "kt"], ["s"]), helper.make_node("Mul", ["s", "scale"], ["s2"]),
              helper.make_node("Add", ["s2", "madd"], ["s3"]), helper.make_node("Softmax", ["s3"], ["p"], axis=-1),
              helper.make_node("MatMul", ["p", "vt"], ["o"]),
              helper.make_node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["ot", "hidden"], ["y"])]
    standard = helper.make_graph(nodes, "standard", qkv + [_vi("madd", [1, 1, 1, T])], [y], [
        numpy_helper.from_array(np.array([1, T, N, D], np.int64), "heads"),
        numpy_helper.from_array(np.array([1, T, H], np.int64), "hidden"),
        numpy_helper.from_array(np.array(1 / np.sqrt(D), np.float32), "scale")])
    return {"Attention (projection + core)": (attention, "xm"), "3 MatMul + MultiHeadAttention": (split, "xm"),
            "core: MultiHeadAttention, mask": (core_mask, "qkvm"),
            "core: MultiHeadAttention, no mask": (core_nomask, "qkv"),
            "core: standard ops": (standard, "qkvd")}


def main() -> None:
    rng = np.random.default_rng(0)
    values = {"x": rng.standard_normal((1, T, H)).astype(np.float32), "m": np.ones((1, T), np.int32),
              "d": np.zeros((1, 1, 1, T), np.float32)}
    values["m"][0, 100:] = 0                     # 28 padding positions
    values["d"][..., 100:] = -10000.0            # the same, as the standard ops' additive mask
    for n in "qkv":
        values[n] = rng.standard_normal((1, T, H)).astype(np.float32)
    names = {"x": "x", "m": "m", "q": "q", "k": "k", "v": "v", "d": "madd"}
    outputs = {}
    for label, (graph, feeds) in graphs(rng).items():
        feed = {names[f]: values[f] for f in feeds}
        model = helper.make_model(graph, opset_imports=OPSETS, ir_version=8).SerializeToString()
        for threads in (1, 2):
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = threads
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
            sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
            for _ in range(50):
                outputs[label] = sess.run(None, feed)[0]
            times = []
            for _ in range(1000):
                t0 = time.perf_counter()
                sess.run(None, feed)
                times.append((time.perf_counter() - t0) * 1e6)
            print(f"{label:36s} threads {threads}: p50 {np.percentile(times, 50):7.1f} us")
    a, b = outputs["Attention (projection + core)"], outputs["3 MatMul + MultiHeadAttention"]
    print(f"max |difference| of the two full-layer forms over unmasked rows {float(np.abs(a - b)[0, :100].max()):.2e}; "
          f"onnxruntime {ort.__version__}")


if __name__ == "__main__":
    main()
