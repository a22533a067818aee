"""Does a QA bundle's INT8 answer the same on an AVX2-only CPU? (bundles travel: built on one CPU kind, run on
another). ``EdgeSession.answer`` over the first N answerable questions of the SQuAD dev file, four ways:
natively with the fp32 graph, natively with each INT8 target graph (``portable``: 7-bit weights, exact on any
x86-64; ``x86-vnni``: 8-bit weights, exact where VNNI sums in int32), and under ``../shared/tools/avx2-python``
(QEMU as an AVX2-only Haswell, where onnxruntime's U8S8 kernel saturates; bit-identical to a real AVX2 CPU,
~60x slower: accuracy only, never timing) with the graph the runtime picks there. Reports EM / F1 of each
(SQuAD 1.1 scoring, ``edgebert.scores.squad``), the F1 each INT8 run loses against fp32, and how many answers
the emulated AVX2 host gives exactly as the native run of the same graph.

    .venv/bin/python benchmarks/avx2_qa_check.py BUNDLE [--questions 400] [--out benchmarks/results/NAME]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
DEV = SHARED / "data" / "squad" / "dev-v2.0-first10.json"
sys.path.insert(0, str(REPO))


def questions(n: int):
    from edgebert.qa.squad_file import read_squad

    return [e for e in read_squad(DEV) if e.has_answer][:n]


def answer(bundle: str, out: str, precision: str, target: str, n: int) -> None:
    """Child mode: answer the first ``n`` answerable dev questions; the answers to ``out`` (JSON)."""
    from edgebert.runtime import EdgeSession

    session = EdgeSession(bundle, provider="cpu", precision=precision, threads=2,
                          int8_target=None if target == "auto" else target)
    examples = questions(n)
    got = session.answer([e.question for e in examples], [e.context for e in examples], max_answer_len=30)
    Path(out).write_text(json.dumps({"answers": [a["answer"] for a in got], "graph": session.model_key,
                                     "reason": session.precision_reason, "host": session.host.summary()}))


def cpu_name() -> str:
    from edgebert.system.environment import cpuinfo

    f = cpuinfo()
    return f"{f.get('vendor_id')} {f.get('model name')}, family {f.get('cpu family')} model {f.get('model')}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bundle")
    ap.add_argument("--questions", type=int, default=400)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--native-only", action="store_true", help="skip the emulated AVX2 run (e.g. all 1,721 questions)")
    ap.add_argument("--child", nargs=3, metavar=("OUT", "PRECISION", "TARGET"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return answer(args.bundle, *args.child, args.questions)
    from edgebert.scores.squad import squad_scores

    examples = questions(args.questions)
    manifest = json.loads((Path(args.bundle) / "manifest.json").read_text())
    targets = [m.get("target") for k, m in manifest["models"].items() if k.startswith("int8")]
    plan = [("native fp32", [], "fp32", "auto")]
    plan += [(f"native int8 {t}", [], "int8", t) for t in targets if t]
    if not args.native_only:
        plan += [("avx2 int8 (runtime's pick)", [str(SHARED / "tools" / "avx2-python")], "int8", "auto")]
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, prefix, precision, target in plan:
            out = f"{tmp}/{len(runs)}.json"
            subprocess.run(prefix + [sys.executable, __file__, args.bundle, "--questions", str(args.questions),
                                     "--child", out, precision, target], check=True, capture_output=True, text=True)
            runs[name] = json.loads(Path(out).read_text())
            scores = squad_scores(examples, {e.id: a for e, a in zip(examples, runs[name]["answers"])})
            runs[name]["scores"] = {k: round(float(v), 4) for k, v in scores.items()}
            print(name, runs[name]["graph"], runs[name]["scores"], flush=True)
    fp32 = runs["native fp32"]["scores"]["f1"]
    avx2 = runs.get("avx2 int8 (runtime's pick)")
    same_graph = avx2 and next((n for n, r in runs.items() if n.startswith("native int8") and r["graph"] == avx2["graph"]),
                               None)
    report = {"bundle": args.bundle, "dev": DEV.name, "questions": len(examples),
              "runs": {n: {k: v for k, v in r.items() if k != "answers"} for n, r in runs.items()},
              "f1_minus_fp32": {n: round(r["scores"]["f1"] - fp32, 4) for n, r in runs.items() if n != "native fp32"},
              "avx2_vs_native_same_graph": None if same_graph is None else {
                  "native": same_graph, "answer_text_equal":
                      sum(a == b for a, b in zip(avx2["answers"], runs[same_graph]["answers"]))}}
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        from edgebert.files.atomic import write_json, write_text

        write_json(args.out.with_suffix(".json"), report)
        rows = [f"| {n} | {r['graph']} | {r['scores']['exact_match']:.2f} | {r['scores']['f1']:.2f} | "
                f"{report['f1_minus_fp32'].get(n, 0.0):+.2f} |" for n, r in runs.items()]
        title = "INT8 graphs through `EdgeSession.answer`, natively" if not avx2 else "INT8 on AVX2 (emulated) vs natively"
        md = [f"# A QA bundle's {title}", "",
              f"Bundle `{args.bundle}`, the first {len(examples)} answerable questions of {DEV.name}; native host: "
              f"{cpu_name()}, {runs['native fp32']['host']}" + (f"; emulated: {avx2['host']}" if avx2 else "") + ".", "",
              "| run | graph | EM | F1 | F1 - fp32 |", "|---|---|---:|---:|---:|", *rows, ""]
        if avx2:
            md += [f"AVX2 (emulated) vs native, same graph ({same_graph}): answer text equal on "
                   f"{(report['avx2_vs_native_same_graph'] or {}).get('answer_text_equal')} / {len(examples)}.", ""]
        write_text(args.out.with_suffix(".md"), "\n".join(md))


if __name__ == "__main__":
    main()
