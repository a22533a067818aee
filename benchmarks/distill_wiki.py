"""From-scratch path: distil the WikiText-2 pretrained teacher into a shallower student, and compare
it with the teacher and with a same-size model trained from scratch for the same steps.

The teacher (``--teacher``, default ``runs/wiki-small``) comes from ``edgebert pretrain --preset
wiki-small`` on wiki.valid.raw (4 layers, hidden 256), so the student has 2 layers (the teacher has
only 4). Both runs below use
the same data (wiki.valid.raw, the same sentence-pair examples and the same dynamic masks: the
pretraining masking collator keyed by stream position), the same steps, batch size and lr schedule:

- ``wiki-student``: DistilBERT distillation (teacher layers [0, 3] + embeddings + MLM head;
  5*KD + 2*MLM + 1*cosine),
- ``wiki-scratch``: random initialisation, MLM loss only (``--init random --alpha-kd 0 --alpha-cos 0
  --alpha-mlm 1``; the teacher is not run),
- with ``--ablation`` also ``wiki-teacher-init-mlm``: the teacher's layers, MLM loss only (which part
  of the gain is the initialisation and which the distillation loss).

All models are then scored with ``edgebert evaluate --task mlm`` on wiki.test.raw (the same 2000
examples and fixed masks as pretraining's own evaluation). Writes ``benchmarks/results/distill_wiki/distill_wiki.json``
and ``.md``.

    .venv/bin/python benchmarks/distill_wiki.py --steps 300 [--ablation] [--reuse]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from distill_stages import REPO, RESULTS, SHARED, run_stage  # noqa: E402

SUITE = RESULTS / "distill_wiki"

WIKI = SHARED / "wikitext-2-raw"


def stages(runs: Path, teacher: Path, steps: int, warmup: int, lr: float, layers: int,
           ablation: bool) -> list[tuple[str, list, Path]]:
    common = ["--corpus", WIKI / "wiki.valid.raw", "--eval-corpus", WIKI / "wiki.test.raw", "--layers", str(layers),
              "--max-steps", str(steps), "--warmup-steps", str(warmup), "--lr", str(lr), "--batch-size", "32",
              "--eval-every", str(steps), "--save-every", str(steps), "--log-every", "20"]
    out = [("wiki-student", ["distill", teacher, "--out", runs / "wiki-student", *common], runs / "wiki-student"),
           ("wiki-scratch", ["distill", teacher, "--out", runs / "wiki-scratch", *common, "--init", "random",
                             "--alpha-kd", "0", "--alpha-cos", "0", "--alpha-mlm", "1"], runs / "wiki-scratch")]
    if ablation:
        out.append(("wiki-teacher-init-mlm", ["distill", teacher, "--out", runs / "wiki-teacher-init-mlm", *common,
                                              "--alpha-kd", "0", "--alpha-cos", "0", "--alpha-mlm", "1"],
                    runs / "wiki-teacher-init-mlm"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=Path, default=REPO / "runs")
    ap.add_argument("--teacher", type=Path, default=REPO / "runs" / "wiki-small")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--layers", type=int, default=None, help="student layers (default: 4, or 2 for a "
                                                            "teacher of <= 4 layers)")
    ap.add_argument("--ablation", action="store_true")
    ap.add_argument("--reuse", action="store_true", help="use finished stages found under --runs")
    args = ap.parse_args()
    from edgebert.files.atomic import write_json, write_text
    from edgebert.model import BertConfig, count_parameters, load_model
    from edgebert.stages.evaluate import evaluate
    from edgebert.system.environment import describe

    depth = BertConfig.load(args.teacher).num_hidden_layers
    layers = args.layers or (4 if depth > 4 else 2)
    done = {name: run_stage(name, argv, out, args.runs, args.reuse)
            for name, argv, out in stages(args.runs, args.teacher, args.steps, args.warmup, args.lr, layers,
                                          args.ablation)}
    scores = {}
    for name, path in [("teacher", args.teacher)] + [(n, args.runs / n) for n in done]:
        r = evaluate(path, "mlm", WIKI / "wiki.test.raw", max_seq_len=128, max_examples=2000)
        model = load_model(path)
        scores[name] = {**{k: r.metrics[k] for k in ("mlm_accuracy", "mlm_perplexity", "mlm_loss", "masked_tokens")},
                        "layers": model.config.num_hidden_layers, "parameters": count_parameters(model),
                        "eval_examples": r.num_examples}
    s, z, t = scores["wiki-student"], scores["wiki-scratch"], scores["teacher"]
    result = {"benchmark": "distill_wiki", "teacher": str(args.teacher), "teacher_layers": depth,
              "student_layers": layers, "steps": args.steps, "warmup_steps": args.warmup, "lr": args.lr,
              "stages": done, "test": scores,
              "distillation_beats_scratch": s["mlm_accuracy"] > z["mlm_accuracy"]
              and s["mlm_perplexity"] < z["mlm_perplexity"],
              "student_over_teacher_accuracy": s["mlm_accuracy"] / t["mlm_accuracy"],
              "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "environment": describe()}
    SUITE.mkdir(parents=True, exist_ok=True)
    write_json(SUITE / "distill_wiki.json", result)
    names = {"teacher": f"teacher (pretrained, {args.teacher.name})",
             "wiki-student": "student, distilled (teacher init + KD/MLM/cos)",
             "wiki-scratch": "same size from scratch (random init, MLM)",
             "wiki-teacher-init-mlm": "ablation: teacher init, MLM only"}
    md = [f"# WikiText-2: {depth}-layer teacher -> {layers}-layer student ({args.steps} steps each)", "",
          "MLM on wiki.test.raw (2000 sentence-pair examples, fixed masks as in pretraining's evaluation).", "",
          "| model | layers | parameters | MLM accuracy | MLM perplexity | training wall time |",
          "|---|---|---|---|---|---|"]
    for name, m in scores.items():
        wall = done.get(name, {}).get("wall_s")
        md.append(f"| {names.get(name, name)} | {m['layers']} | {m['parameters'] / 1e6:.2f}M | "
                  f"{m['mlm_accuracy']:.4f} | {m['mlm_perplexity']:.1f} | {f'{wall:.0f} s' if wall else '-'} |")
    md += ["", f"Distillation beats training from scratch: {result['distillation_beats_scratch']}.", "",
           "Commands:", ""] + [f"    {v['command']}" for v in done.values()] + [""]
    write_text(SUITE / "distill_wiki.md", "\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
