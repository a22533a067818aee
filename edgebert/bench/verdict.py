"""``speed_caveat``: the one line that says a bench report's speed figures should not be quoted as facts.

Two signs, read from the report (a ``BenchReport`` or a report.json's dict): other programs took a large
share of the CPU while timing (``environment.cpu_share_used_by_other_processes``), or a CPU path's speedup
over the reference points one way at the smallest batch x the longest fixed sequence and the other way on
the length mix at that batch (e.g. 0.65x and 9.66x in one run: a model cannot be both slower and nine
times faster than the same reference on one machine unless the machine changed under the timing). The bench's
printed summary, report.md and the pipeline summary show the line beside the speed figures.
"""

from __future__ import annotations

from typing import Any, Iterator

from edgebert.bench.rows import REFERENCE_PATH
from edgebert.bench.schema import BenchReport

# Other programs' share of ALL cores while timing above which the figures are called unreliable. The bench
# gives its timed paths every core (onnxruntime: one thread per physical core), so another program takes
# cores from the calls it overlaps. An idle machine measures ~0.01 (the stored reports: 0.005); 0.15 is
# 30% of one core held all the time on a 2-core machine, or a burst of a whole core for 15% of the timing:
# enough to move a p50 by tens of percent on the calls it lands on, more than the differences the tables
# are read for.
BUSY_SHARE = 0.15
# A speedup within 5% of 1 says neither faster nor slower (p50 noise on a steady machine): no direction.
SAME_SPEED = 0.05


def _direction(speedup: float) -> int:
    return 0 if abs(speedup - 1.0) <= SAME_SPEED else 1 if speedup > 1.0 else -1


def _label(path: str) -> str:
    """``onnx cpu int8`` -> ``INT8`` (as the pipeline summary names it), ``onnx cpu fp32`` -> ``fp32``."""
    precision = path.split()[-1]
    return "INT8" if precision == "int8" else precision


def speedup_pairs(report: BenchReport) -> Iterator[tuple[str, int, int, float, float]]:
    """(path, batch, seq, fixed-shape speedup, length-mix speedup) of each CPU path against the reference:
    at the smallest batch, the longest sequence it was timed at, and the mix at that batch (dynamic mode
    where it was replayed, else the mode there is)."""
    if not report.results:
        return
    batch = min(r.batch for r in report.results)
    mix = report.length_mix.results if report.length_mix else []
    for p in report.paths:
        if p.provider != "cpu" or p.path == REFERENCE_PATH:
            continue
        fixed = [r for r in report.results if r.path == p.path and r.batch == batch and r.speedup_vs_reference]
        replayed = sorted((r for r in mix if r.path == p.path and r.batch == batch and r.speedup_vs_reference),
                          key=lambda r: r.mode != "dynamic")
        if fixed and replayed:
            longest = max(fixed, key=lambda r: r.seq)
            yield p.path, batch, longest.seq, longest.speedup_vs_reference, replayed[0].speedup_vs_reference


def speed_caveat(report: BenchReport | dict[str, Any]) -> str | None:
    """One line (at most 80 columns for the usual paths) when the speed figures are unreliable, else None."""
    report = BenchReport.of(report)
    share = report.environment.cpu_share_used_by_other_processes
    if share is not None and share > BUSY_SHARE:
        return f"figures unreliable: other programs used {100 * share:.0f}% of the CPU while timing; rerun idle"
    for path, batch, seq, fixed, mixed in speedup_pairs(report):
        if _direction(fixed) * _direction(mixed) < 0:
            return (f"figures unreliable: {_label(path)} {fixed:.2f}x at batch {batch} x {seq}, {mixed:.2f}x "
                    "on the mix; rerun idle")
    return None
