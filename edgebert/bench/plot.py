"""latency.png: p50 latency against sequence length, one panel per batch size, one line per path (matplotlib,
which only ``edgebert[train]`` installs). Every function also takes a report.json's dict read back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgebert.bench.schema import BenchReport
from edgebert.files.atomic import atomic_path

Report = BenchReport | dict[str, Any]


def plot_title(report: Report, chars: int) -> str:
    """The plot's title, wrapped to ``chars`` per line: the bundle, then what was not measured."""
    import textwrap

    report = BenchReport.of(report)
    missing = [u.name for u in report.unavailable]
    lines = textwrap.wrap(f"edgebert bench: {Path(report.bundle.dir).name}", chars)
    if missing:
        lines += textwrap.wrap(f"not measured (unavailable): {', '.join(missing)}", chars)
    return "\n".join(lines)


def latency_figure(report: Report):
    """p50 latency vs sequence length, one panel per batch size, one line per path (a matplotlib figure)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    report = BenchReport.of(report)
    batches = sorted({r.batch for r in report.results}) or [1]
    width = max(5.2, 4.2 * len(batches))
    fig, axes = plt.subplots(1, len(batches), figsize=(width, 3.8), squeeze=False, layout="constrained")
    paths = list(dict.fromkeys(r.path for r in report.results))
    for ax, batch in zip(axes[0], batches):
        for name in paths:
            rows = sorted((r for r in report.results if r.path == name and r.batch == batch), key=lambda r: r.seq)
            if rows:
                ax.plot([r.seq for r in rows], [r.latency_ms.p50 for r in rows], marker="o",
                        label=name, linestyle="--" if name.startswith("torch") else "-")
        ax.set_title(f"batch {batch}", fontsize=9)
        ax.set_xlabel("sequence length (tokens)")
        ax.set_ylabel("p50 latency (ms)")
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(plot_title(report, chars=int(11 * width)), fontsize=9)
    return fig


def plot_latency(report: Report, target: str | Path) -> Path:
    """latency.png: ``latency_figure``, written atomically."""
    import matplotlib.pyplot as plt

    fig = latency_figure(report)
    target = Path(target)
    with atomic_path(target) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
    return target
