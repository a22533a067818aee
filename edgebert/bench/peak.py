"""Measured matmul peak of this machine: the ceiling the roofline column divides by.

A big square GEMM through onnxruntime itself (``MatMul`` fp32, ``MatMulInteger`` uint8 x int8, the
kernel family dynamic INT8 models use) with the benchmark's thread count, so the ceiling is what the
same kernels reach on the same cores. numpy's fp32 GEMM (its own BLAS and threads) is recorded too.
"""

from __future__ import annotations

import time

import numpy as np

from edgebert.bench.schema import Calibration


def _best_seconds(fn, repeats: int, budget_s: float) -> float:
    fn()  # warm up: first call allocates and packs
    best = float("inf")
    start = time.perf_counter()
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
        if time.perf_counter() - start > budget_s:
            break
    return best


def _ort_gemm(size: int, int8: bool, threads: int | None):
    import onnxruntime as ort
    from onnx import TensorProto, helper

    if int8:
        a_type, b_type, out_type, op = TensorProto.UINT8, TensorProto.INT8, TensorProto.INT32, "MatMulInteger"
    else:
        a_type = b_type = out_type = TensorProto.FLOAT
        op = "MatMul"
    graph = helper.make_graph(
        [helper.make_node(op, ["a", "b"], ["c"])], "gemm",
        [helper.make_tensor_value_info("a", a_type, [size, size]),
         helper.make_tensor_value_info("b", b_type, [size, size])],
        [helper.make_tensor_value_info("c", out_type, [size, size])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    if threads:
        opts.intra_op_num_threads = threads
    session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    if int8:
        feeds = {"a": rng.integers(0, 255, (size, size), dtype=np.uint8),
                 "b": rng.integers(-127, 127, (size, size), dtype=np.int8)}
    else:
        feeds = {"a": rng.standard_normal((size, size), dtype=np.float32),
                 "b": rng.standard_normal((size, size), dtype=np.float32)}
    return lambda: session.run(None, feeds)


def calibrate(size: int = 1024, threads: int | None = None, repeats: int = 10, budget_s: float = 3.0) -> Calibration:
    """GFLOP/s (GOP/s for int8) of an ``size``-cubed GEMM; an empty ``Calibration`` when ``size`` is 0."""
    if size <= 0:
        return Calibration()
    flops = 2 * size ** 3
    result = Calibration(method=f"best of up to {repeats} runs of a {size}x{size}x{size} GEMM on the CPU "
                                "(onnxruntime MatMul fp32 / MatMulInteger u8xs8, benchmark threads; numpy fp32 "
                                "with its own BLAS threads)", size=size, threads=threads)
    for key, int8 in (("fp32_gflops", False), ("int8_gops", True)):
        try:
            gemm = _ort_gemm(size, int8, threads)
            setattr(result, key, round(flops / _best_seconds(gemm, repeats, budget_s) / 1e9, 2))
        except Exception as exc:  # an onnxruntime build without the kernel: say so, keep going
            setattr(result, f"{key}_error", " ".join(str(exc).split())[:200])
    rng = np.random.default_rng(0)
    a = rng.standard_normal((size, size), dtype=np.float32)
    b = rng.standard_normal((size, size), dtype=np.float32)
    result.numpy_fp32_gflops = round(flops / _best_seconds(lambda: a @ b, repeats, budget_s) / 1e9, 2)
    return result


def peak_for(calibration: Calibration, provider: str, precision: str) -> float | None:
    """The ceiling (GFLOP/s) for one path: CPU int8 -> int8 peak, CPU fp32/fp16 -> fp32 peak.

    GPU providers get None: this calibration measures the CPU only.
    """
    if provider not in ("cpu", "torch"):
        return None
    value = calibration.int8_gops if precision == "int8" else calibration.fp32_gflops
    return float(value) if value else None
