"""The bench report on a narrow terminal and in latency.png: readable at 80 columns, titles never cut.

Rendered from a real report (``benchmarks/results/pipeline_wiki/report.json``: two batch sizes, a
length mix, a reference, unavailable providers)."""

from __future__ import annotations

import copy
import json

import pytest
from rich.console import Console

from conftest import REPO
from edgebert.bench.report import latency_figure, plot_title, print_report

REPORT = REPO / "benchmarks" / "results" / "pipeline_wiki" / "report.json"
HEADERS = ("path", "batch", "seq", "p50", "p90", "p99", "ms", "seq/s", "tok/s", "peak", "MB", "vs", "torch",
           "mode", "total", "real", "padding", "padded", "agreement", "max", "abs", "diff")


@pytest.fixture(scope="module")
def report() -> dict:
    return json.loads(REPORT.read_text(encoding="utf-8"))


def test_tables_fit_80_columns_with_every_header_whole(report):
    console = Console(width=80, record=True, color_system=None)
    print_report(report, console)
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text                                  # nothing cut: headers, paths or figures
    words = {w for line in text.splitlines() for w in line.split()}
    assert set(HEADERS) <= words, set(HEADERS) - words
    assert "onnx cpu int8     1 128 1.55 1.59 1.71 643.2 82327   24 32.0% 10.86x" in text


@pytest.mark.parametrize("batches", [(1,), (1, 8)])
def test_plot_title_is_wrapped_inside_the_figure(report, batches):
    report = copy.deepcopy(report)
    report["results"] = [r for r in report["results"] if r["batch"] in batches]
    report["unavailable"] += [{"provider": p, "precision": "fp16", "reason": "-"} for p in ("cuda", "tensorrt")]
    title = plot_title(report, chars=40)
    assert all(len(line) <= 40 for line in title.splitlines()) and "tensorrt fp16" in title.replace("\n", " ")
    fig = latency_figure(report)
    fig.canvas.draw()
    box, page = fig._suptitle.get_window_extent(), fig.bbox
    assert page.x0 <= box.x0 and box.x1 <= page.x1 and box.y1 <= page.y1, (box, page)
    assert len(fig._suptitle.get_text().splitlines()) >= 2
