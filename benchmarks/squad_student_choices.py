"""Issue 27, the 4-layer SQuAD student: what was tried to bring it nearer its teacher, from the runs' own logs.

Collects the dev F1 after every evaluation of each ``edgebert distill --task squad`` run named below (their
``metrics.jsonl`` and ``distill_config.json``), and measures ``--layer-map closest``'s table on the teacher:
every 4-of-6 choice of its layers as an untrained student, KD of the start/end distributions (T=2) on 128
training windows (``edgebert.stages.distill.layer_choice``).

    .venv/bin/python benchmarks/squad_student_choices.py RUN_DIR... [--teacher runs/squad/teacher]

Writes ``benchmarks/results/squad_student_choices/squad_student_choices.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
RESULTS = REPO / "benchmarks" / "results" / "squad_student_choices"
TRAIN = REPO.parent / "shared" / "data" / "squad" / "train-v1.1-first11.json"
KEYS = ("layer_map", "context_edits", "alpha_hidden", "alpha_attn", "alpha_cos", "epochs", "temperature")


def run_record(run: Path) -> dict:
    """One distillation run: its settings and dev scores by step (from its own files)."""
    config = json.loads((run / "distill_config.json").read_text())
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    evals = [{"step": x["step"], "exact_match": round(x["eval_exact_match"], 2), "f1": round(x["eval_f1"], 2)}
             for x in lines if "eval_f1" in x]
    last = max((x.get("elapsed_s", 0) for x in lines), default=None)
    return {"run": str(run.relative_to(REPO) if run.is_relative_to(REPO) else run),
            "settings": {k: config.get(k) for k in KEYS}, "steps": config["train"]["max_steps"],
            "bf16": config["train"]["bf16"],
            "teacher_f1": round(next(x["eval_teacher_f1"] for x in lines if "eval_teacher_f1" in x), 2),
            "evals": evals, "train_elapsed_s": last}


def layer_table(teacher: Path) -> dict:
    from edgebert.data.tokenizer import load_tokenizer
    from edgebert.stages.distill import DistillConfig, load_teacher
    from edgebert.stages.distill.layer_choice import closest_layer_map
    from edgebert.stages.distill.stage import layer_probe, mode_data

    cfg = DistillConfig.preset("squad", teacher, REPO / "runs" / "unused", train_file=TRAIN, layer_map="closest")
    model = load_teacher(cfg.teacher, "squad")
    tok = load_tokenizer(cfg.teacher)
    data = mode_data(cfg, model, tok)
    t0 = time.perf_counter()
    choice = closest_layer_map(model, cfg.layers, *layer_probe(cfg, data, tok))
    return {**choice.as_dict(), "seconds": round(time.perf_counter() - t0, 1)}


def markdown(result: dict) -> str:
    rows = ["| run | layers | other settings | steps | dev F1 by evaluation | last F1 (% of teacher) |",
            "|---|---|---|---:|---|---:|"]
    for r in result["runs"]:
        s = r["settings"]
        other = ", ".join(f"{k} {s[k]}" for k in ("context_edits", "alpha_hidden", "alpha_attn") if s.get(k))
        f1s = ", ".join(f"{e['f1']:.2f}" for e in r["evals"])
        last = r["evals"][-1]["f1"]
        rows.append(f"| `{r['run']}` | {s['layer_map']} | {other or '-'} (epochs {s['epochs']}) | {r['steps']} | "
                    f"{f1s} | {last:.2f} ({100 * last / r['teacher_f1']:.1f}%) |")
    table = result["layer_choice"]
    choices = sorted(table["tried"], key=lambda t: t["distance"])
    layer_rows = ["| layers | KD before training |", "|---|---:|",
                  *(f"| {c['layer_map']} | {c['distance']:.4f} |" for c in choices)]
    return "\n".join([
        "# The 4-layer SQuAD student: what was tried (issue 27)", "",
        f"Teacher: `{result['teacher']}` (dev F1 {result['runs'][0]['teacher_f1']}); every run `edgebert distill "
        "--task squad` from it, lr 2e-4, batch 16, T=2, KD + hard CE, `--bf16`, on the 3,807 training questions; dev "
        "F1 over the 1,721 answerable dev questions at each evaluation (the run's own `metrics.jsonl`).",
        f"CPU: {result['cpu']}; 2 threads.", "", *rows, "",
        "## `--layer-map closest` on this teacher", "",
        f"Each 4-of-6 choice as an untrained student: {table['measure']} on {table['examples']} training windows "
        f"({table['seconds']} s for all {len(table['tried'])}); chosen: {table['layer_map']}.", "", *layer_rows, "",
        *result.get("notes", []), ""])


def main() -> None:
    from edgebert.system.environment import cpuinfo, describe

    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--teacher", type=Path, default=REPO / "runs" / "squad" / "teacher")
    ap.add_argument("--notes", type=Path, help="a text file of notes to append to the markdown")
    args = ap.parse_args()
    fields = cpuinfo()
    result = {"teacher": str(args.teacher.relative_to(REPO) if args.teacher.is_relative_to(REPO) else args.teacher),
              "runs": [run_record(r.resolve()) for r in args.runs], "layer_choice": layer_table(args.teacher),
              "cpu": f"{fields.get('vendor_id')} {fields.get('model name')} family {fields.get('cpu family')} "
                     f"model {fields.get('model')}",
              "environment": describe(), "threads": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
              "notes": args.notes.read_text().splitlines() if args.notes else []}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "squad_student_choices.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "squad_student_choices.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
