"""What a pipeline run showed, in figures (``pipeline.json``), on one screen, and as ``pipeline.md``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgebert.bench.verdict import speed_caveat

REFERENCE = "torch fp32"


def _row(rows: list[dict], path: str, **match: Any) -> dict | None:
    return next((r for r in rows if r["path"] == path and all(r.get(k) == v for k, v in match.items())), None)


def _mb(n: float | None) -> float | None:
    return None if n is None else round(n / 1e6, 1)


def model_figures(stages: dict[str, Any], report: dict[str, Any]) -> dict[str, Any]:
    """Size, batch 1 x longest-seq latency and speedups of the teacher (PyTorch fp32) and the student
    bundle (ONNX fp32, INT8) on the CPU, from the benchmark report."""
    seq = max(r["seq"] for r in report["results"])
    mix = (report.get("length_mix") or {}).get("results", [])
    models = report["bundle"]["models"]
    reference = report.get("reference") or {}
    out: dict[str, Any] = {"seq": seq, "mix_texts": (report.get("length_mix") or {}).get("texts")}
    for name, path, size in (("teacher", REFERENCE, reference.get("size_bytes")),
                             ("student_fp32", "onnx cpu fp32", models.get("fp32", {}).get("bytes")),
                             ("student_int8", "onnx cpu int8", models.get("int8", {}).get("bytes"))):
        fixed = _row(report["results"], path, batch=1, seq=seq)
        dynamic = _row(mix, path, batch=1, mode="dynamic")
        out[name] = {"size_mb": _mb(size), "p50_ms": fixed and fixed["latency_ms"]["p50"],
                     "speedup": fixed and fixed["speedup_vs_reference"],
                     "mix_sequences_per_s": dynamic and dynamic["sequences_per_s"],
                     "mix_speedup": dynamic and dynamic["speedup_vs_reference"]}
    out["speed_caveat"] = speed_caveat(report)           # None, or why the speed figures are not facts
    return out


def summarize(config: dict, stages: dict[str, Any], report: dict[str, Any], seconds: float) -> dict[str, Any]:
    """The figures that say what the run achieved (the rest is in ``stages`` and the bench report)."""
    dis, exp = stages["distill"], stages["export"]
    acc = exp["int8_accuracy"]
    return {"seconds": round(seconds, 1),
            "stage_seconds": {k: v.get("seconds", 0.0) for k, v in stages.items() if "skipped" not in v},
            "teacher": {"dir": stages["pretrain"]["dir"], "name": stages["pretrain"].get("name", "teacher/"),
                        "layers": dis["teacher_layers"],
                        "parameters": dis["teacher_parameters"], "pretrained_here": "skipped" not in stages["pretrain"]},
            "student": {"layers": len(dis["layer_map"]), "layer_map": dis["layer_map"],
                        "parameters": dis["student_parameters"], "steps": dis["steps"], "mode": dis["mode"]},
            "student_vs_teacher": {"after": dis["eval"], "before": dis["before"]},
            "int8_vs_fp32": {"metric": acc.get("metric"), "mean": acc.get("mean"), "min": acc.get("min"),
                             "texts": acc.get("n")},
            "models": model_figures(stages, report),
            "downstream": stages.get("downstream") or {"skipped": "not run"}}


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _f(v: float | None, spec: str = ".1f") -> str:
    return "-" if v is None else format(v, spec)


def summary_lines(summary: dict[str, Any], out: Path) -> list[str]:
    """The one-screen summary (at most 80 columns)."""
    t, s, m = summary["teacher"], summary["student"], summary["models"]
    stages = ", ".join(f"{k} {v:.0f}" for k, v in summary["stage_seconds"].items())
    lines = [f"edgebert pipeline: {summary['seconds']:.0f} s ({stages} s)",
             f"teacher  {t['name']}: {t['layers']} layers, {t['parameters'] / 1e6:.1f}M parameters"
             f"{', pretrained here' if t['pretrained_here'] else ''}",
             f"student  {s['layers']} layers {s['layer_map']}, {s['parameters'] / 1e6:.1f}M parameters, "
             f"{s['mode']} distillation, {s['steps']} steps", "",
             f"{'':26}{'teacher':>10}{'student fp32':>15}{'student INT8':>15}"]
    cols = ("teacher", "student_fp32", "student_int8")
    rows = [("size (MB)", lambda c: _f(m[c]["size_mb"])),
            (f"p50 ms, batch 1 x {m['seq']}", lambda c: _f(m[c]["p50_ms"], ".2f")),
            (f"speedup, batch 1 x {m['seq']}", lambda c: _x(m[c]["speedup"])),
            (f"speedup, {m['mix_texts']} held-out texts", lambda c: _x(m[c]["mix_speedup"]))]
    for label, cell in rows:
        lines.append(f"{label:<26}{cell(cols[0]):>10}{cell(cols[1]):>15}{cell(cols[2]):>15}")
    lines += [m["speed_caveat"]] if m.get("speed_caveat") else []      # bench.verdict: busy or unsteady machine
    lines.append("")
    after, before = summary["student_vs_teacher"]["after"], summary["student_vs_teacher"]["before"]
    if s["mode"] == "embed":
        pct = lambda m, k: f"{100 * m.get(k, 0):.0f}%"  # noqa: E731
        lines += [f"student vs teacher on {after.get('texts', 0):.0f} held-out paragraphs (mean-pooled "
                  "embeddings),", "after distillation (before):",
                  f"  cosine mean {after.get('embedding_cosine_mean', 0):.3f} ({before.get('embedding_cosine_mean', 0):.3f}),"
                  f" min {after.get('embedding_cosine_min', 0):.3f} ({before.get('embedding_cosine_min', 0):.3f})",
                  f"  rank correlation of pairwise similarities {after.get('similarity_spearman', 0):.3f} "
                  f"({before.get('similarity_spearman', 0):.3f})",
                  f"  nearest neighbour the teacher's: {pct(after, 'neighbour_agreement')} "
                  f"({pct(before, 'neighbour_agreement')}), in its top 5: {pct(after, 'neighbour_in_top5')} "
                  f"({pct(before, 'neighbour_in_top5')})"]
    else:
        lines.append(f"held-out MLM accuracy: student {after.get('mlm_accuracy', 0):.4f}, teacher "
                     f"{after.get('teacher_mlm_accuracy', 0):.4f} ({after.get('masked_tokens', 0):.0f} masked tokens)")
    lines += downstream_lines(summary.get("downstream") or {"skipped": "not run"})
    q = summary["int8_vs_fp32"]
    if q.get("mean") is not None:
        lines.append(f"INT8 vs fp32 student, {q['texts']} held-out texts: {q['metric']} mean {q['mean']:.5f} "
                     f"(min {q['min']:.4f})")
    lines.append(f"report: {out / 'pipeline.md'}")
    return lines


DOWNSTREAM_ROWS = (("MRPC paraphrase ROC-AUC", "mrpc_auc"), ("SST-2 probe accuracy", "sst2_probe_accuracy"),
                   ("retrieval recall@1", "retrieval_recall_at_1"), ("retrieval recall@10", "retrieval_recall_at_10"),
                   ("retrieval MRR", "retrieval_mrr"))


def downstream_lines(figures: dict[str, Any]) -> list[str]:
    """Teacher / student fp32 / student INT8 on the held-out downstream sets, the student's share of the
    teacher's score in parentheses (``edgebert.stages.embed_eval.compare_downstream``); one line when
    they were skipped."""
    if "skipped" in figures:
        return [f"downstream scores skipped: {figures['skipped']}"]
    kept = figures.get("retention", {})

    def cell(column: str, key: str) -> str:
        if column not in figures:
            return "-"
        share = kept.get(column, {}).get(key)
        return f"{figures[column][key]:.3f}" + ("" if share is None else f" ({100 * share:.0f}%)")

    lines = ["", f"{'held out (student/teacher)':<26}{'teacher':>10}{'student fp32':>15}{'student INT8':>15}"]
    for label, key in DOWNSTREAM_ROWS:
        lines.append(f"{label:<26}{cell('teacher', key):>10}{cell('student_fp32', key):>15}"
                     f"{cell('student_int8', key):>15}")
    return lines


def pipeline_markdown(summary: dict[str, Any], stages: dict[str, Any], lines: list[str], bench_md: Path) -> str:
    """The one report: the summary, each stage's figures, then the full benchmark report."""
    pre, dis, exp = stages["pretrain"], stages["distill"], stages["export"]
    acc = exp["int8_accuracy"]
    out = ["# edgebert pipeline", "", f"Total {summary['seconds']:.0f} s. Every figure below was measured in this run.",
           "", "```", *lines, "```", "", "| stage | result |", "|---|---|"]
    data = stages["data"]
    held = data["split"]["heldout"] if "split" in data else ", ".join(data["eval_corpus"] or [])
    corpus = data["corpus"] if isinstance(data["corpus"], str) else ", ".join(data["corpus"])
    out.append(f"| data | train: {corpus}; held out (evaluation, calibration): {held} |")
    if "skipped" in pre:
        out.append(f"| pretrain | skipped ({pre['skipped']}) |")
    else:
        ev = pre["eval"]
        out.append(f"| pretrain | {pre['steps']} steps, {pre['parameters'] / 1e6:.2f}M parameters, "
                   f"{pre['seconds']:.0f} s; held-out MLM acc {ev.get('mlm_accuracy', 0):.4f} "
                   f"(unigram {ev.get('unigram_mlm_accuracy', 0):.4f}), NSP {ev.get('nsp_accuracy', 0):.3f} |")
    ev = dis["eval"]
    figure = (f"held-out embedding cosine {ev.get('embedding_cosine_mean', 0):.4f}, nearest-neighbour agreement "
              f"{ev.get('neighbour_agreement', 0):.3f}" if dis["mode"] == "embed" else
              f"held-out MLM acc {ev.get('mlm_accuracy', 0):.4f} (teacher {ev.get('teacher_mlm_accuracy', 0):.4f})")
    out.append(f"| distill | {dis['steps']} steps ({dis['mode']}), teacher layers {dis['layer_map']} of "
               f"{dis['teacher_layers']}, {dis['student_parameters'] / 1e6:.2f}M vs {dis['teacher_parameters'] / 1e6:.2f}M "
               f"parameters, {dis['seconds']:.0f} s; {figure} |")
    out.append(f"| export | fused {', '.join(f'{k}={v}' for k, v in exp['fused_ops'].items())}; fp32 max diff "
               f"{exp['fp32_max_abs_diff']:.2g}; INT8 {exp['int8_quantized_nodes']}/{exp['int8_candidate_nodes']} "
               f"nodes, {exp['outlier_channels']} outlier channels float, cosine mean {acc.get('mean')} "
               f"min {acc.get('min')}; {exp['seconds']:.0f} s |")
    down = stages.get("downstream") or {"skipped": "not run"}
    out.append(f"| downstream | skipped ({down['skipped']}) |" if "skipped" in down else
               f"| downstream | MRPC dev {down['data']['mrpc_pairs']} pairs, SST-2 probe {down['data']['sst2_train']} "
               f"train / {down['data']['sst2_dev']} dev, WikiText-2 test {down['data']['paragraphs']} paragraphs; "
               f"{down['seconds']:.0f} s (table above) |")
    out += ["", "Speedups over the fp32 PyTorch teacher (same run, same threads):", ""]
    out += [f"- {k}: **{v}x**" if v is not None else f"- {k}: not measured"
            for k, v in stages["bench"]["headline"].items()]
    out += ["", "---", ""]
    if bench_md.is_file():
        out.append(bench_md.read_text(encoding="utf-8"))
    return "\n".join(out) + "\n"
