"""The figures a bench report computes from the measured ones, once every path is timed: FLOPs of each
row (``edgebert.bench.flops``), achieved GFLOP/s and the fraction of the measured matmul peak (the
roofline column, ``edgebert.bench.peak``), and speedups against the PyTorch reference, PyTorch on the
same GPU and the padded replay of the length mix.
"""

from __future__ import annotations

from edgebert.bench.flops import ModelShape, forward_flops
from edgebert.bench.peak import peak_for
from edgebert.bench.rows import GPU_PROVIDERS, REFERENCE_PATH, TORCH_PROVIDERS
from edgebert.bench.schema import BenchReport


def _sig(value: float, digits: int = 4) -> float:
    """Round to significant digits (tiny models run at tiny GFLOP/s; 2 decimals would show 0.0)."""
    return float(f"{value:.{digits}g}")


def _ratio(base: float | None, value: float, digits: int = 3) -> float | None:
    return round(base / value, digits) if base else None


def derive(report: BenchReport, shape: ModelShape, task: str) -> None:
    """Fill FLOPs, roofline fraction and speedups of every row from the measured figures."""
    calibration = report.calibration
    ref = report.reference
    ref_shape = ModelShape.from_hf_dict(ref.config.to_dict()) if ref else shape      # e.g. the teacher
    ref_task = (ref.task if ref.task != "encoder" else "embed") if ref else task    # BertModel has a pooler

    def shape_of(provider: str) -> tuple[ModelShape, str]:
        """The torch rows time the reference model, which may be deeper than the bundle's."""
        return (ref_shape, ref_task) if provider in TORCH_PROVIDERS else (shape, task)

    ref_p50 = {(r.batch, r.seq): r.latency_ms.p50 for r in report.results if r.provider == "torch"}
    cuda_p50 = {(r.precision, r.batch, r.seq): r.latency_ms.p50 for r in report.results
                if r.provider == "torch-cuda"}
    for r in report.results:
        path_shape, path_task = shape_of(r.provider)
        flops = forward_flops(path_shape, r.batch, r.seq, path_task)["total"]
        p50 = r.latency_ms.p50
        achieved = flops / (p50 / 1e3) / 1e9
        r.peak_gflops = peak_for(calibration, r.provider, r.precision)
        r.gflop, r.achieved_gflops = _sig(flops / 1e9), _sig(achieved)
        r.fraction_of_peak = _sig(achieved / r.peak_gflops) if r.peak_gflops else None
        r.speedup_vs_reference = _ratio(ref_p50.get((r.batch, r.seq)), p50)
        if r.provider in GPU_PROVIDERS:   # against PyTorch on the same GPU: fp32 vs fp32, else vs fp16
            base = cuda_p50.get(("fp32" if r.precision == "fp32" else "fp16", r.batch, r.seq))
            r.speedup_vs_torch_cuda = _ratio(base, p50)
    if report.length_mix is None:
        return
    rows = report.length_mix.results
    totals = {(r.path, r.batch, r.mode): r.total_s for r in rows}
    for r in rows:
        path_shape, path_task = shape_of(r.provider)
        flops = sum(forward_flops(path_shape, b, s, path_task)["total"] for b, s in r.shapes)
        peak = peak_for(calibration, r.provider, r.precision)
        achieved = flops / r.total_s / 1e9
        r.gflop, r.achieved_gflops = _sig(flops / 1e9), _sig(achieved)
        r.fraction_of_peak = _sig(achieved / peak) if peak else None
        r.speedup_vs_reference = _ratio(totals.get((REFERENCE_PATH, r.batch, r.mode)), r.total_s)
        r.speedup_vs_padded = _ratio(totals.get((r.path, r.batch, "padded")), r.total_s)
