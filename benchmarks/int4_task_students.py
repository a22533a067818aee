"""The SST-2 and CoNLL-2003 students' small graphs (issue #50 goal: <= 10 MB at label agreement >= 0.99 with the fp32
graph / entity F1 within 0.5 point of it). Accuracy and bytes, not timed.

    .venv/bin/python benchmarks/int4_task_students.py --task sst2 --student runs/q4_tasks/sst2-student --level 1
    .venv/bin/python benchmarks/int4_task_students.py --task ner --student runs/q4_tasks/ner-student --level 1

1. ``export --int8 --int4 [--int4-accuracy-level L] [--max-seq-len N]`` of the student (the gate and its budget are
   the exporter's defaults for the task: the graph stays all 4-bit only if it is within them);
2. the one-device archive (``pack --target int4``, .tar.gz) and its bytes;
3. every graph of the bundle (fp32, INT8, small) on the task's held-out split: SST-2 dev (872 sentences: label
   agreement with the fp32 graph, accuracy) or CoNLL-2003 test (3,453 sentences: entity F1, seqeval).

The students come from the recipes of ``distill_sst2.py`` and ``ner_conll.py`` (the commands are in the result
file). Writes ``benchmarks/results/int4/task_<student>_level<L>[...].{json,md}`` with the CPU, versions and load.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATA = ROOT.parent / "shared" / "data"
OUT = ROOT / "benchmarks" / "results" / "int4"
PRECISIONS = ("fp32", "int8", "int4")
GOAL_BYTES = 10_000_000


def _graphs(bundle: Path, reference: Path | None) -> dict[str, tuple[Path, str]]:
    """Row name -> (bundle, precision); the first row is the fp32 reference the others are compared with."""
    rows = {"fp32 (float student)": (reference, "fp32")} if reference else {}
    return rows | {p: (bundle, p) for p in PRECISIONS}


def sst2_scores(graphs: dict[str, tuple[Path, str]]) -> dict:
    from edgebert.data.tasks import read_task_tsv
    from edgebert.runtime import EdgeSession

    examples, _ = read_task_tsv(DATA / "sst2" / "dev.tsv", "sst2")
    texts, labels = [e.text_a for e in examples], np.array([e.label for e in examples])
    predicted = {name: EdgeSession(b, provider="cpu", precision=p, threads=2).logits(texts).argmax(-1)
                 for name, (b, p) in graphs.items()}
    want = next(iter(predicted.values()))
    return {name: {"accuracy": float((got == labels).mean()), "agreement_with_fp32": float((got == want).mean())}
            for name, got in predicted.items()}


def ner_scores(graphs: dict[str, tuple[Path, str]]) -> dict:
    from edgebert.stages.evaluate import evaluate

    test = DATA / "conll2003" / "test.txt"
    out = {name: evaluate(b, "ner", test, precision=p).metrics for name, (b, p) in graphs.items()}
    want = next(iter(out.values()))["f1"]
    return {name: {"f1": m["f1"], "precision": m["precision"], "recall": m["recall"],
                   "f1_points_vs_fp32": 100 * (m["f1"] - want)} for name, m in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--task", choices=("sst2", "ner"), required=True)
    ap.add_argument("--student", type=Path, required=True)
    ap.add_argument("--block", type=int, default=None, help="--int4-block (default: the student's --int4-aware block, "
                    "else 32)")
    ap.add_argument("--level", type=int, default=4, help="--int4-accuracy-level (1: float activations)")
    ap.add_argument("--max-len", type=int, default=None, help="--max-seq-len (crops the position rows)")
    ap.add_argument("--reference", type=Path, default=None,
                    help="a bundle whose fp32 graph is the reference (the float student of a --int4-aware one)")
    ap.add_argument("--int4-budget", type=float, default=None, help="--int4-max-accuracy-loss (default: the task's)")
    args = ap.parse_args()
    from edgebert.bundle import read_manifest
    from edgebert.exporters import ExportConfig, export_bundle
    from edgebert.files.atomic import write_json, write_text
    from edgebert.runtime.hostcpu import detect_host
    from edgebert.runtime.pack import pack_bundle
    from edgebert.system.environment import describe

    load_before = [round(x, 2) for x in os.getloadavg()]
    tag = (f"b{args.block}_" if args.block else "") + f"level{args.level}" + (f"_len{args.max_len}" if args.max_len else "") + (
        f"_budget{args.int4_budget:g}" if args.int4_budget is not None else "")
    bundle = args.student.parent / f"{args.student.name}-bundle-{tag}"
    manifest = export_bundle(ExportConfig(model_dir=args.student, out_dir=bundle, int8=True, int4=True, overwrite=True,
                                          int4_accuracy_level=args.level, max_sequence_length=args.max_len,
                                          int4_block_size=args.block,
                                          int4_max_accuracy_loss=args.int4_budget,
                                          validation_batch_sizes=(1, 3))).manifest
    entry = manifest.models["int4"]
    within = entry.get_extra("accuracy")["within_budget"]
    # pack refuses a small graph over its budget (a one-device bundle would serve it with no fp32 to fall back on)
    packed = pack_bundle(bundle, "int4", bundle.parent / f"{bundle.name}.tar.gz", overwrite=True) if within else None
    int8_target = manifest.models["int8"].target or "portable"     # the INT8 graph's own one-device archive
    packed8 = pack_bundle(bundle, int8_target, bundle.parent / f"{bundle.name}-int8.tar.gz", overwrite=True)
    graphs = _graphs(bundle, args.reference)
    sizes = {name: (b / read_manifest(b).models[p].file).stat().st_size for name, (b, p) in graphs.items()}
    scores = (sst2_scores if args.task == "sst2" else ner_scores)(graphs)
    quant = entry.get_extra("quantization")
    result = {"task": args.task, "student": str(args.student), "level": args.level, "max_len": args.max_len,
              "reference": str(args.reference) if args.reference else None,
              "bytes": sizes, "archive_bytes": packed.bytes if packed else None,
              "int8_archive": {"target": int8_target, "bytes": packed8.bytes}, "goal_bytes": GOAL_BYTES, "scores": scores,
              "int4": {"eight_bit": quant["eight_bit"], "four_bit": len(quant["four_bit"]),
                       "op_counts": quant["op_counts"], "gate": entry.get_extra("accuracy"),
                       "requires": entry.requires},
              "load_before": load_before, "load_after": [round(x, 2) for x in os.getloadavg()],
              "environment": describe(), "command": "python benchmarks/int4_task_students.py " + " ".join(sys.argv[1:])}
    stem = f"task_{args.student.name}_{tag}"
    write_json(OUT / f"{stem}.json", result)
    cpu = f"{result['environment']['cpu']} ({detect_host().kind})"
    lines = [f"# {args.task} student: the small graph (accuracy level {args.level}"
             + (f", positions cropped to {args.max_len}" if args.max_len else "") + ")", "",
             f"Student `{args.student}`; CPU {cpu}. Small graph: {result['int4']['four_bit']} candidates 4-bit, "
             f"kept 8-bit: {quant['eight_bit'] or 'none'}; requires u8s8_exact {entry.requires.get('u8s8_exact')}.", "",
             "| graph | bytes | " + ("accuracy | label agreement with fp32 |" if args.task == "sst2" else
                                      "entity F1 | F1 points vs fp32 |"), "|---|---:|---|---|"]
    for name, s in scores.items():
        cells = (f"{s['accuracy']:.4f} | {s['agreement_with_fp32']:.4f}" if args.task == "sst2" else
                 f"{s['f1']:.4f} | {s['f1_points_vs_fp32']:+.2f}")
        lines.append(f"| {name} | {sizes[name]:,} | {cells} |")
    gate = {k: v for k, v in entry.get_extra("accuracy").items() if k != "sensitivity"}
    archive = (f"{packed.bytes:,} bytes" if packed else "not made: `pack` refuses a small graph over its budget")
    lines += ["", f"One-device archive (`pack --target int4`, .tar.gz): {archive}. Goal: <= {GOAL_BYTES:,} bytes.",
              f"The INT8 graph's (`pack --target {int8_target}`, .tar.gz): {packed8.bytes:,} bytes.", "",
              f"Gate: {gate}", "",
              f"Load average {load_before} before, {result['load_after']} after. `{result['command']}`", ""]
    write_text(OUT / f"{stem}.md", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
