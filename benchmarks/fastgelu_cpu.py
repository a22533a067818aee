"""Issue 26, the GELU row of the op-by-op gap: BiasGelu (exact erf) -> onnxruntime's FastGelu (tanh approximation,
with bias) in an INT8 MiniLM graph. Times both at 1 x 128, interleaved (2 threads, spinning off, 6 blocks of 100
runs) and prints the output difference at four lengths.

    .venv/bin/python benchmarks/fastgelu_cpu.py [INT8_GRAPH]     # default: the cpu_passes benchmark's bundle
"""
import os
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort

src = sys.argv[1] if len(sys.argv) > 1 else "runs/cpu_passes/after/model.int8.onnx"
dst = os.path.join(tempfile.mkdtemp(), "int8_fastgelu.onnx")
m = onnx.load(src); n = 0
for node in m.graph.node:
    if node.op_type == "BiasGelu":
        node.op_type = "FastGelu"; node.domain = "com.microsoft"; n += 1
onnx.save(m, dst)
print("replaced", n, "load", os.getloadavg())
def sess(p):
    o = ort.SessionOptions(); o.intra_op_num_threads = 2
    o.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(p, o, providers=["CPUExecutionProvider"])
a, b = sess(src), sess(dst)
rng = np.random.default_rng(0)
names = [i.name for i in a.get_inputs()]
def feeds(T):
    f = {"input_ids": rng.integers(1000, 20000, (1, T)).astype(np.int64), "attention_mask": np.ones((1, T), np.int64),
         "token_type_ids": np.zeros((1, T), np.int64)}
    return {k: v for k, v in f.items() if k in names}
diffs = []
for T in (17, 64, 128, 200):
    f = feeds(T); oa, ob = a.run(None, f)[0], b.run(None, f)[0]
    diffs.append(float(np.abs(oa - ob).max()))
    cos = (oa * ob).sum(-1) / np.linalg.norm(oa, axis=-1) / np.linalg.norm(ob, axis=-1)
    print(T, "max|diff|", diffs[-1], "min token cos", float(cos.min()))
f = feeds(128); ta, tb = [], []
for r in range(6):
    for s, t in ((a, ta), (b, tb)) if r % 2 == 0 else ((b, tb), (a, ta)):
        for _ in range(10): s.run(None, f)
        for _ in range(100):
            t0 = time.perf_counter(); s.run(None, f); t.append(time.perf_counter() - t0)
print("BiasGelu p50 %.3f ms, FastGelu p50 %.3f ms, ratio %.3f" % (np.median(ta)*1e3, np.median(tb)*1e3, np.median(tb)/np.median(ta)))
print("load", os.getloadavg())
