"""Rendering a ``BenchReport`` (``edgebert.bench.schema``): rich tables on the terminal, report.json,
report.md and latency.png (drawn by ``edgebert.bench.plot``), each with the speed caveat when the figures
are unreliable (``edgebert.bench.verdict``). Every function also takes a report.json's dict read back
(``BenchReport.of``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgebert.bench.gpu import gpu_summary
from edgebert.bench.plot import latency_figure, plot_latency, plot_title  # noqa: F401  (latency.png; re-exported)
from edgebert.bench.rows import Accuracy, PathRow
from edgebert.bench.schema import BenchReport
from edgebert.bench.verdict import speed_caveat
from edgebert.files.atomic import write_json, write_text

Report = BenchReport | dict[str, Any]


def _mb(value: float | None) -> str:
    return "-" if value is None else f"{value / 1e6:.1f}"


def _fmt(value: Any, spec: str = ".2f", suffix: str = "") -> str:
    if value is None:
        return "-"
    return f"{value:{spec}}{suffix}"


def provider_lines(report: Report) -> list[tuple[str, str, str]]:
    """(provider, status, detail) for every requested provider."""
    report = BenchReport.of(report)
    lines = []
    for status in report.providers:
        name = status.provider
        if not status.available:
            lines.append((name, "NOT MEASURED (unavailable)", status.reason or ""))
            continue
        paths = [p for p in report.paths if p.provider == name]
        ok = [p for p in paths if p.available]
        if ok:
            lines.append((name, "measured", ", ".join(dict.fromkeys(ok[0].providers))))
        for p in paths:
            lines += [(name, what, detail) for what, detail in _path_lines(p, name != "cpu")]
    if report.reference:
        threads = report.reference.torch_threads
        lines.append(("torch", "measured (reference)", f"PyTorch fp32 on CPU, {threads} thread{'s' if threads != 1 else ''}"))
    return lines


def _path_lines(p: PathRow, placement: bool) -> list[tuple[str, str]]:
    """(status, detail) lines of one ONNX path in the providers table."""
    if not p.available:
        return [(f"{p.precision}: NOT MEASURED", p.reason or "")]
    lines = [(f"{p.precision}: FAILED", p.failed)] if p.failed else []
    if p.placement and placement:
        lines.append((f"{p.precision}: graph {p.model}", _placement_text(p.placement)))
    if p.int8_graph:
        lines.append((f"int8 graph: {p.int8_graph.get('target')}", p.int8_graph.get("reason") or ""))
    return lines


def _placement_text(placement: dict[str, Any]) -> str:
    """A ``runtime.placement.Placement.as_dict()`` in a few words."""
    nodes = placement.get("nodes") or {}
    names = ", ".join(f"{k} {v}" for k, v in sorted(nodes.items(), key=lambda kv: -kv[1]))
    total = placement.get("total")
    return f"nodes {names} of {total}" if total else f"registered: {names}"


def _accuracy_cells(acc: Accuracy | None, failed: str | None = None) -> tuple[str, str]:
    """(agreement, max abs diff) cells: a path whose outputs are not all numbers is a FAIL, never 0."""
    if acc is None:
        return ("FAILED (why: under not measured)", "-") if failed else ("-", "-")
    if acc.comparable is False:
        return "not comparable", "-"
    if acc.non_finite:
        return f"FAIL: non-finite outputs for {acc.non_finite} texts", "non-finite"
    diff = _fmt(acc.max_abs_diff, ".2e")
    if acc.metric == "cosine":
        return f"cosine mean {_fmt(acc.cosine_mean, '.6f')} / min {_fmt(acc.cosine_min, '.6f')}", diff
    return f"{acc.metric.replace('_', ' ')} {_fmt(acc.agreement, '.4f')}", diff


def _header_lines(report: BenchReport) -> list[str]:
    """The report.md bullets on the machine, the bundle, the reference and the calibration."""
    env, bundle, cal = report.environment, report.bundle, report.calibration
    cfg = bundle.config
    threads = report.threads
    out = [f"- created: {report.created}",
           f"- machine: {env.cpu} ({env.machine}), {env.cpu_count} logical CPUs, "
           f"flags {' '.join(env.cpu_flags or []) or '-'}",
           f"- INT8 kernels here: {env.int8_summary}",
           f"- versions: onnxruntime {env.onnxruntime}, torch {env.torch}, tokenizers {env.tokenizers}, "
           f"python {env.python}",
           f"- GPU: {gpu_summary(env.gpu)}",
           f"- threads: {threads if threads else 'library defaults (onnxruntime: one per physical core)'}",
           f"- other processes used {_fmt(_pct(env.cpu_share_used_by_other_processes), '.1f', '%')} "
           f"of the CPUs while timing (load average at start {env.load_average_at_start}, at end "
           f"{env.load_average_at_end}); other work on these cores inflates latencies",
           f"- bundle: task `{bundle.task}`, {cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}, "
           f"{cfg.num_attention_heads} heads, FFN {cfg.intermediate_size}, vocab {cfg.vocab_size}; "
           + ", ".join(f"{key} {_mb(m.bytes)} MB" for key, m in bundle.models.items())]
    ref = report.reference
    if ref:
        out.append(f"- reference: `{ref.dir}` ({ref.architecture}, {ref.config.num_hidden_layers} layers, hidden "
                   f"{ref.config.hidden_size}), PyTorch fp32, timed in this run. {ref.note}")
    else:
        out.append("- reference: none (no --reference): no speedup or accuracy columns")
    if cal.method:
        out.append(f"- matmul peak (calibration): fp32 {_fmt(cal.fp32_gflops, '.1f')} GFLOP/s, "
                   f"int8 {_fmt(cal.int8_gops, '.1f')} GOP/s ({cal.method}); numpy fp32 "
                   f"{_fmt(cal.numpy_fp32_gflops, '.1f')} GFLOP/s")
    return out


def _startup_lines(report: BenchReport) -> list[str]:
    if not report.startup:
        return []
    out = ["", "## Start-up (apart from latency)", "",
           "| path | graph | engine cache | session s | first run s | cold start s | engine build s |",
           "|---|---|---|---:|---:|---:|---:|"]
    for r in report.startup:
        out.append(f"| {r.path} | {r.model} | {r.engine_cache or '-'} | {r.session_s:.3f} | {r.first_run_s:.3f} | "
                   f"{r.cold_start_s:.3f} | {_fmt(r.engine_build_s, '.2f')} |")
    return out


def _latency_lines(report: BenchReport) -> list[str]:
    sizes = report.path_sizes()
    out = ["", "## Latency and throughput (fixed shapes, no padding)", "",
           "| path | batch | seq | p50 ms | p90 ms | p99 ms | seq/s | tokens/s | peak RSS MB | model MB | "
           "GFLOP | GFLOP/s | % of peak | speedup vs torch | GPU MB | vs torch cuda |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(report.results, key=lambda r: (r.batch, r.seq, r.path)):
        lat = r.latency_ms
        out.append(f"| {r.path} | {r.batch} | {r.seq} | {lat.p50:.2f} | {lat.p90:.2f} | {lat.p99:.2f} | "
                   f"{r.sequences_per_s:.1f} | {r.tokens_per_s:.0f} | {_fmt(r.peak_rss_mb, '.0f')} | "
                   f"{_mb(sizes.get(r.path))} | {_fmt(r.gflop, '.3g')} | {_fmt(r.achieved_gflops, '.3g')} | "
                   f"{_fmt(_pct(r.fraction_of_peak), '.1f', '%')} | {_fmt(r.speedup_vs_reference, '.2f', 'x')} | "
                   f"{_fmt(r.gpu_mem_mb, '.0f')} | {_fmt(r.speedup_vs_torch_cuda, '.2f', 'x')} |")
    return out


def _mix_lines(report: BenchReport) -> list[str]:
    mix = report.length_mix
    if not mix:
        return []
    out = ["", f"## Real length mix: `{mix.file}`", "",
           f"{mix.texts} texts in file order; tokens per text mean {mix.tokens_mean}, median {mix.tokens_p50}, "
           f"p90 {mix.tokens_p90}, max {mix.tokens_max}; texts longer than {mix.pad_to} tokens are cut to that "
           f"({mix.truncated} texts); replayed {' and '.join(report.mix_modes)} (padded: every batch padded to "
           f"{mix.pad_to}).", "",
           "| path | batch | mode | p50 ms/batch | p99 ms/batch | total s | seq/s | real tokens/s | "
           "padding % | dynamic vs padded | speedup vs torch |",
           "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(mix.results, key=lambda r: (r.batch, r.path, r.mode)):
        out.append(f"| {r.path} | {r.batch} | {r.mode} | {r.latency_ms.p50:.2f} | {r.latency_ms.p99:.2f} | "
                   f"{r.total_s:.2f} | {r.sequences_per_s:.1f} | {r.real_tokens_per_s:.0f} | "
                   f"{100 * r.padding_fraction:.1f} | {_fmt(r.speedup_vs_padded, '.2f', 'x')} | "
                   f"{_fmt(r.speedup_vs_reference, '.2f', 'x')} |")
    return out


def _compared(report: BenchReport) -> list[PathRow]:
    """The paths compared with the reference (loaded, not the reference itself)."""
    return [p for p in report.paths if p.available and not p.reference]


def _accuracy_lines(report: BenchReport) -> list[str]:
    out = ["", "## Accuracy against the PyTorch reference", ""]
    if not report.reference:
        return out + ["No reference given."]
    out += [report.reference.note, "", "| path | agreement | max abs diff | load RSS MB | notes |",
            "|---|---|---:|---:|---|"]
    skipped = ("tensorrt: not used", "cuda: not used")   # already in the providers table
    for p in _compared(report):
        agree, diff = _accuracy_cells(p.accuracy, p.failed)
        notes = "; ".join(n for n in p.notes if not n.startswith(skipped))
        out.append(f"| {p.path} | {agree} | {diff} | {_fmt(p.load_rss_mb, '.0f')} | {notes} |")
    return out


def _entity_lines(report: BenchReport) -> list[str]:
    ents = report.entities
    if not ents:
        return []
    out = ["", f"## Entity F1 on `{ents.file}`", "",
           f"{ents.sentences} sentences ({ents.words} words), scored by {ents.entities_scored_by}; {ents.through}.",
           "", "| path | F1 | precision | recall | F1 per type | word accuracy |", "|---|---:|---:|---:|---|---:|"]
    for name, r in ents.results.items():
        types = ", ".join(f"{t} {v:.4f}" for t, v in sorted(r.f1_per_type.items()))
        out.append(f"| {name} | {r.f1:.4f} | {r.precision:.4f} | {r.recall:.4f} | {types} | {r.word_accuracy:.4f} |")
    return out


def _answer_lines(report: BenchReport) -> list[str]:
    ans = report.answers
    if not ans:
        return []
    return ["", f"## SQuAD EM / F1 on `{ans.file}`", "",
            f"{ans.answerable} answerable of {ans.questions} questions, {ans.windows} windows of {ans.max_length} tokens "
            f"(stride {ans.doc_stride}), scored by {ans.scored_by}; {ans.through}.", "", "| path | EM | F1 |",
            "|---|---:|---:|", *(f"| {n} | {r.exact_match:.2f} | {r.f1:.2f} |" for n, r in ans.results.items())]


def to_markdown(report: Report) -> str:
    """report.md."""
    report = BenchReport.of(report)
    out = [f"# edgebert bench: `{report.bundle.dir}`", "", *_header_lines(report)]
    if caveat := speed_caveat(report):
        out += ["", f"**{caveat}**"]
    out += ["", "## Providers", "", "| provider | status | detail |", "|---|---|---|"]
    out += [f"| {a} | {b} | {c} |" for a, b, c in provider_lines(report)]
    if report.unavailable:
        out += ["", "**Not measured:** " + "; ".join(f"{u.name}: {u.reason}" for u in report.unavailable)
                + ". No figures are reported for these paths."]
    for gap in report.not_measured:
        out.append(f"\n**Not measured: {gap.what}** ({gap.reason}).")
    out += _startup_lines(report) + _latency_lines(report) + _mix_lines(report) + _accuracy_lines(report)
    out += _entity_lines(report) + _answer_lines(report)
    out += ["", "## Methods", ""] + [f"- {k}: {v}" for k, v in report.methods.items()]
    return "\n".join(out) + "\n"


def _pct(fraction: float | None) -> float | None:
    return None if fraction is None else 100 * fraction


def write_reports(report: Report, out_dir: str | Path) -> dict[str, Path]:
    """report.json + report.md + latency.png in ``out_dir`` (each written atomically)."""
    report = BenchReport.of(report)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / "report.json", "markdown": out_dir / "report.md"}
    write_json(paths["json"], report.to_dict())
    write_text(paths["markdown"], to_markdown(report))
    if report.results:
        try:
            import matplotlib  # noqa: F401  (the runtime install has no matplotlib: edgebert[train] does)
        except ImportError:
            return paths
        paths["plot"] = plot_latency(report, out_dir / "latency.png")
    return paths


def _ms(value: float) -> str:
    """A latency in at most 5 characters: 0.38, 53.2, 1235."""
    return f"{value:.2f}" if value < 10 else f"{value:.1f}" if value < 100 else f"{value:.0f}"


def _rate(value: float) -> str:
    return f"{value:.1f}" if value < 1000 else f"{value:.0f}"


def _table(title: str, columns: tuple[str, ...], left: tuple[str, ...] = ("path",)):
    """A rich table that fits an 80-column terminal: no side borders, one space between columns,
    a header of several words on two lines (never cut), cells never wrapped."""
    from rich import box
    from rich.table import Table

    table = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, padding=0)
    for col in columns:
        table.add_column(col.replace(" ", "\n", 1), justify="left" if col in left else "right", no_wrap=True)
    return table


def print_report(report: Report, console) -> None:
    """Rich tables: providers, fixed-shape figures, length mix, accuracy (each fits 80 columns)."""
    from rich.table import Table

    report = BenchReport.of(report)
    providers = Table(title="providers")
    for col in ("provider", "status", "detail"):
        providers.add_column(col, overflow="fold")
    for a, b, c in provider_lines(report):
        providers.add_row(a, f"[red]{b}[/red]" if "NOT" in b or "FAILED" in b else b, c)
    console.print(providers)

    table = _table(f"latency / throughput: {report.bundle.dir}",
                   ("path", "batch", "seq", "p50 ms", "p90 ms", "p99 ms", "seq/s", "tok/s", "peak MB",
                    "% peak", "vs torch"))
    for r in sorted(report.results, key=lambda r: (r.batch, r.seq, r.path)):
        lat = r.latency_ms
        table.add_row(r.path, str(r.batch), str(r.seq), _ms(lat.p50), _ms(lat.p90), _ms(lat.p99),
                      _rate(r.sequences_per_s), f"{r.tokens_per_s:.0f}", _fmt(r.peak_rss_mb, ".0f"),
                      _fmt(_pct(r.fraction_of_peak), ".1f", "%"), _fmt(r.speedup_vs_reference, ".2f", "x"))
    console.print(table)
    for part in (_mix_table, _entity_table, _answer_table, _accuracy_table, _startup_table):
        part(report, console)
    for u in report.unavailable:
        console.print(f"[red]not measured[/red] {u.name}: {u.reason}", highlight=False)
    for gap in report.not_measured:
        console.print(f"[red]not measured[/red] {gap.what}: {gap.reason}", highlight=False)
    if caveat := speed_caveat(report):
        console.print(caveat, style="bold red", highlight=False, markup=False)


def _mix_table(report: BenchReport, console) -> None:
    mix = report.length_mix
    if not mix:
        return
    padded = f", padded mode pads to {mix.pad_to}" if "padded" in report.mix_modes else ""
    t = _table(f"length mix: {mix.texts} texts from {Path(mix.file).name}, mean {mix.tokens_mean} tokens{padded}",
               ("path", "batch", "mode", "p50 ms", "total s", "seq/s", "real tok/s", "padding %",
                "vs padded", "vs torch"), left=("path", "mode"))
    for r in sorted(mix.results, key=lambda r: (r.batch, r.path, r.mode)):
        t.add_row(r.path, str(r.batch), r.mode, _ms(r.latency_ms.p50), f"{r.total_s:.2f}",
                  _rate(r.sequences_per_s), f"{r.real_tokens_per_s:.0f}", f"{100 * r.padding_fraction:.1f}",
                  _fmt(r.speedup_vs_padded, ".2f", "x"), _fmt(r.speedup_vs_reference, ".2f", "x"))
    console.print(t)


def _entity_table(report: BenchReport, console) -> None:
    ents = report.entities
    if not ents:
        return
    et = _table(f"entity F1 on {ents.sentences} sentences of {Path(ents.file).name} (seqeval)",
                ("path", "F1", "precision", "recall", "word acc"))
    for name, r in ents.results.items():
        et.add_row(name, f"{r.f1:.4f}", f"{r.precision:.4f}", f"{r.recall:.4f}", f"{r.word_accuracy:.4f}")
    console.print(et)


def _answer_table(report: BenchReport, console) -> None:
    if report.answers:
        t = _table(f"SQuAD EM / F1 on {report.answers.answerable} questions of {Path(report.answers.file).name}",
                   ("path", "EM", "F1"))
        for name, r in report.answers.results.items():
            t.add_row(name, f"{r.exact_match:.2f}", f"{r.f1:.2f}")
        console.print(t)


def _accuracy_table(report: BenchReport, console) -> None:
    if not report.reference:
        return
    acc = _table("accuracy vs PyTorch reference", ("path", "agreement", "max abs diff"), left=("path", "agreement"))
    for p in _compared(report):
        acc.add_row(p.path, *_accuracy_cells(p.accuracy, p.failed))
    console.print(acc)
    console.print(report.reference.note, highlight=False)


def _startup_table(report: BenchReport, console) -> None:
    if not report.startup:
        return
    st = _table("start-up (not in the latency figures)", ("path", "cache", "session s", "first run s",
                                                          "cold start s"), left=("path", "cache"))
    for r in report.startup:
        st.add_row(r.path, r.engine_cache or "-", f"{r.session_s:.3f}", f"{r.first_run_s:.3f}",
                   f"{r.cold_start_s:.3f}")
    console.print(st)
