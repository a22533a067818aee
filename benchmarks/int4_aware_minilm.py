"""all-MiniLM-L6-v2 trained 4-bit-aware against itself (issue #50, goal: <= 12 MB at embedding cosine vs the fp32
model mean >= 0.99, min >= 0.97 on held-out texts).

    python benchmarks/int4_aware_minilm.py [--block 128] [--steps 1500] [--lr 1e-4] [--skip-distill]

1. ``distill`` the 6-layer model into a 6-layer student that starts as the model itself (layer map 0..5), with
   ``--int4-aware BLOCK`` (``edgebert.stages.distill.int4_aware``: encoder weights trained through their 4-bit
   rounding, the frozen word table replaced by its 4-bit round trip), the embed-long loss (+ the pooled-vector
   cosine), on the embedding students' training text (``runs/embed_students/train_sentences.txt``: WikiText-2
   valid + SST-2 and MRPC *train* sentences; made by ``embed_students.py``);
2. ``export --int8 --int4 --int4-block BLOCK`` of the (baked) student;
3. sentence vectors (the model's mean pooling, unit length) of held-out texts from the small, INT8 and fp32 graphs
   of that bundle, against the *original* model's fp32 graph (``--reference``, default ``runs/minilm_ort``):
   SST-2 dev sentences 100-199 (the held-out half of ``int4_minilm.py``), the rest of SST-2 dev, MRPC dev first
   sentences, WikiText-2 test first sentences. None of them is training text.

Writes ``benchmarks/results/int4/aware_minilm_b<BLOCK>_<STEPS>steps_lr<LR>.{json,md}`` with the CPU, versions and load. Accuracy and
bytes only (not timed); CPU-heavy (the distillation): run nothing else meanwhile if wall times matter.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATA = ROOT.parent / "shared" / "data"
OUT = ROOT / "benchmarks" / "results" / "int4"
TRAIN_TEXT = ROOT / "runs" / "embed_students" / "train_sentences.txt"


def held_out_sets(n: int) -> dict[str, list[str]]:
    from edgebert.stages.embed_eval import DownstreamData

    data = DownstreamData.load(DATA, paragraphs=n)
    dev = data.probe_dev
    return {"SST-2 dev 100-199 (int4_minilm's held-out)": dev[100:200], "SST-2 dev, the rest": dev[200:200 + n],
            "MRPC dev, first sentences": [a for a, _ in data.pairs][:n], "WikiText-2 test, first sentences":
            data.queries[:n]}


def distill_student(args) -> float:
    from edgebert.pipeline.config import installed_teacher
    from edgebert.stages.distill import DistillConfig, distill

    if not TRAIN_TEXT.is_file():
        raise SystemExit(f"{TRAIN_TEXT} not found: run benchmarks/embed_students.py once (it writes it)")
    t0 = time.perf_counter()
    cfg = DistillConfig.preset("embed-long", installed_teacher(), args.out / "student", layers=6,
                               int4_block=args.block, corpus=(TRAIN_TEXT,), corpus_format="lines",
                               alpha_pool=args.alpha_pool, overwrite=True,
                               **({"student_init": str(args.init)} if args.init else {}),
                               train={"max_steps": args.steps, "batch_size": 16, "lr": args.lr, "eval_every": args.steps,
                                      "save_every": args.steps, "log_every": 50, "progress": False, "seed": 0})
    result = distill(cfg)
    print(f"distilled {result.steps} steps in {time.perf_counter() - t0:.0f} s: {result.eval_metrics}", flush=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--block", type=int, default=128)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--alpha-pool", type=float, default=1.0)
    ap.add_argument("--texts", type=int, default=400)
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "minilm_q4aware")
    ap.add_argument("--reference", type=Path, default=None,
                    help="a bundle of the original model (needed, except with --model: then the exported bundle's own "
                         "fp32 graph)")
    ap.add_argument("--model", type=Path, default=None,
                    help="export this model instead of OUT/student (with --skip-distill: e.g. the installed MiniLM)")
    ap.add_argument("--algorithm", default="rtn", help="--int4-algorithm (rtn | gptq | hqq)")
    ap.add_argument("--table-block", type=int, default=None, help="--int4-table-block (default: --block)")
    ap.add_argument("--budget", type=float, default=None, help="--int4-max-accuracy-loss (default: the INT8 budget)")
    ap.add_argument("--skip-distill", action="store_true", help="reuse OUT/student")
    ap.add_argument("--init", type=Path, default=None, help="continue from this 4-bit-aware student (distill --init)")
    ap.add_argument("--label", default="", help="appended to the result file names")
    ap.add_argument("--level", type=int, default=4, help="--int4-accuracy-level (1: float activations)")
    ap.add_argument("--max-len", type=int, default=None, help="--max-seq-len of the export (crops the position rows)")
    ap.add_argument("--no-rotate", action="store_true", help="--no-int4-rotate (4-bit inputs not rotated first)")
    args = ap.parse_args()

    from edgebert.exporters import ExportConfig, export_bundle
    from edgebert.files.atomic import write_json, write_text
    from edgebert.runtime import EdgeSession
    from edgebert.system.environment import describe

    if args.reference is None and args.model is None:
        raise SystemExit("give --reference: a bundle of the original model (the student's own fp32 graph is not it)")
    load_before = [round(x, 2) for x in os.getloadavg()]
    distill_s = None if args.skip_distill else round(distill_student(args), 1)
    tag = ((f"_level{args.level}" if args.level != 4 else "") + (f"_len{args.max_len}" if args.max_len else "")
           + (f"_{args.algorithm}" if args.algorithm != "rtn" else "")
           + (f"_t{args.table_block}" if args.table_block else "") + (f"_budget{args.budget:g}" if args.budget else ""))
    model_dir = args.model or args.out / "student"
    bundle = args.out / f"bundle_b{args.block}{tag}"
    exported = export_bundle(ExportConfig(model_dir=model_dir, out_dir=bundle, task="embed", int8=True,
                                          int4=True, int4_block_size=args.block, overwrite=True,
                                          int4_algorithm=args.algorithm, int4_table_block=args.table_block,
                                          int4_max_accuracy_loss=args.budget,
                                          int4_accuracy_level=args.level, max_sequence_length=args.max_len,
                                          int4_rotate=False if args.no_rotate else None,
                                          validation_batch_sizes=(1, 3)))
    manifest = exported.manifest
    reference = EdgeSession(args.reference or bundle, provider="cpu", precision="fp32", threads=2)
    graphs = {p: EdgeSession(bundle, provider="cpu", precision=p, threads=2) for p in ("int4", "int8", "fp32")}
    sizes = {p: (bundle / manifest.models[p].file).stat().st_size for p in graphs}
    rows = {}
    for name, texts in held_out_sets(args.texts).items():
        want = reference.embed(texts)
        rows[name] = {"texts": len(texts)}
        for precision, session in graphs.items():
            cos = (want * session.embed(texts)).sum(-1)
            rows[name][precision] = {"mean": float(cos.mean()), "min": float(cos.min()),
                                     "p5": float(np.percentile(cos, 5))}
        print(name, {p: round(rows[name][p]["mean"], 4) for p in graphs}, flush=True)
    entry = manifest.models["int4"]
    result = {"model": str(model_dir), "algorithm": args.algorithm, "block": args.block,
              "table_block": args.table_block, "budget": args.budget, "init": str(args.init) if args.init else None,
              "level": args.level, "max_len": args.max_len, "rotate": entry.get_extra("quantization").get("rotate"), "steps": args.steps, "lr": args.lr,
              "alpha_pool": args.alpha_pool,
              "distill_s": distill_s, "bytes": sizes, "int4": {"eight_bit": entry.get_extra("quantization")["eight_bit"],
                                                               "gate": entry.get_extra("accuracy")},
              "held_out": rows, "reference": str(args.reference or bundle), "bundle": str(bundle), "load_before": load_before,
              "load_after": [round(x, 2) for x in os.getloadavg()], "environment": describe(),
              "command": "python benchmarks/int4_aware_minilm.py " + " ".join(sys.argv[1:])}
    stem = (f"export_{args.model.name}_b{args.block}{tag}{args.label}" if args.skip_distill and args.model else
            f"aware_minilm_b{args.block}_{args.steps}steps_lr{args.lr:g}" + (f"_pool{args.alpha_pool:g}" if
            args.alpha_pool != 1.0 else "") + ("_cont" if args.init else "") + tag + args.label)
    write_json(OUT / f"{stem}.json", result)
    lines = [(f"# {model_dir}" if args.model else "# all-MiniLM-L6-v2 trained 4-bit-aware against itself") +
             f", 4-bit {args.algorithm} block {args.block}, accuracy level {args.level}"
             + (f", positions cropped to {args.max_len}" if args.max_len else ""), "",
             ("not trained (--skip-distill)" if args.skip_distill else
              f"{args.steps} steps, lr {args.lr}, alpha_pool {args.alpha_pool}" + (f", continued from {args.init}" if
              args.init else "") + f"; distill {distill_s} s") + ". Cosine of each "
             f"graph's sentence vectors with the original fp32 model's ({args.reference or bundle}).", "",
             "| graph | bytes |", "|---|---:|", *[f"| {p} | {b:,} |" for p, b in sizes.items()], "",
             "| held-out texts | n | small (int4): mean / p5 / min | INT8 | fp32 (the trained model) |",
             "|---|---:|---|---|---|"]
    for name, r in rows.items():
        cells = [f"{r[p]['mean']:.4f} / {r[p]['p5']:.4f} / {r[p]['min']:.4f}" for p in graphs]
        lines.append(f"| {name} | {r['texts']} | " + " | ".join(cells) + " |")
    lines += ["", f"Load average {load_before} before, {result['load_after']} after. `{result['command']}`", ""]
    write_text(OUT / f"{stem}.md", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
