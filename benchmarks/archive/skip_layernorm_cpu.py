"""Why SkipLayerNormalization costs 17% of the default INT8 graph on the CPU (issue 26, part 2): onnxruntime's
CPU ``SkipLayerNormalization`` (com.microsoft) against the same arithmetic as standard ops, ``Add`` (+ bias
``Add``) + ``LayerNormalization``, on one all-MiniLM-L6-v2-sized tensor (1 x 128 x 384), 1 and 2 threads,
spinning off, 2,000 timed runs after 50 warm-up runs; the outputs are compared.

    .venv/bin/python benchmarks/archive/skip_layernorm_cpu.py

Prints p50 microseconds per call (no file: the figures and the CPU go into the closing note / results).
"""

from __future__ import annotations

import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

H, T = 384, 128


def models():
    rng = np.random.default_rng(0)
    init = [numpy_helper.from_array(rng.standard_normal(H).astype(np.float32), n) for n in ("g", "b", "bias")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, T, H])
    s = helper.make_tensor_value_info("s", TensorProto.FLOAT, [1, T, H])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, T, H])
    fused = helper.make_graph([helper.make_node("SkipLayerNormalization", ["x", "s", "g", "b", "bias"], ["y"],
                                                domain="com.microsoft", epsilon=1e-12)], "fused", [x, s], [y], init)
    plain = helper.make_graph([helper.make_node("Add", ["x", "s"], ["t"]), helper.make_node("Add", ["t", "bias"], ["u"]),
                               helper.make_node("LayerNormalization", ["u", "g", "b"], ["y"], axis=-1, epsilon=1e-12)],
                              "plain", [x, s], [y], init)
    ops = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return {"SkipLayerNormalization": helper.make_model(fused, opset_imports=ops, ir_version=8),
            "Add + Add + LayerNormalization": helper.make_model(plain, opset_imports=ops[:1], ir_version=8)}


def main() -> None:
    rng = np.random.default_rng(1)
    feeds = {"x": rng.standard_normal((1, T, H)).astype(np.float32), "s": rng.standard_normal((1, T, H)).astype(np.float32)}
    outputs = {}
    for name, model in models().items():
        for threads in (1, 2):
            so = ort.SessionOptions()
            so.intra_op_num_threads = threads
            so.add_session_config_entry("session.intra_op.allow_spinning", "0")
            sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
            for _ in range(50):
                sess.run(None, feeds)
            times = []
            for _ in range(2000):
                t0 = time.perf_counter()
                outputs[name] = sess.run(None, feeds)[0]
                times.append((time.perf_counter() - t0) * 1e6)
            print(f"{name:32s} threads {threads}: p50 {np.percentile(times, 50):7.1f} us")
    a, b = outputs.values()
    print(f"max |difference| {float(np.abs(a - b).max()):.2e}; onnxruntime {ort.__version__}")


if __name__ == "__main__":
    main()
