"""Does the CPU graph pass pay? (issue 26) all-MiniLM-L6-v2 exported twice with the default
``edgebert export --int8``: once as it ships (``exporters.cpu_passes``: SkipLayerNormalization unfused into
Add + LayerNormalization after the fusion gate) and once with the pass switched off (the optimizer's graph
as it was before). Both bundles' fp32 and default INT8 graphs are then timed side by side, interleaved in
rounds (2 threads, spinning off), at batch 1 x 128 and 1 x 256, with the INT8 accuracy gate's figures and the
largest output difference between the two graphs of each precision.

    .venv/bin/python benchmarks/cpu_pass_gain.py [--rounds 15] [--runs 10] [--work runs/cpu_passes]

Writes ``benchmarks/results/cpu_pass_gain/cpu_passes_<cpu kind>.{json,md}`` with the CPU, versions, threads and the load
average before and after (the share of the CPU other programs used while timing beside it).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from edgebert.bundle import model_path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
RESULTS = REPO / "benchmarks" / "results" / "cpu_pass_gain"
FILES = ("fp32", "int8")          # the bundle's graphs compared, by precision


def export(model_dir: Path, out: Path, passes: bool) -> dict[str, Any]:
    """``export --int8`` of ``model_dir`` into ``out``; ``passes=False`` switches the CPU pass off."""
    import edgebert.exporters.fusion as fusion
    from edgebert.exporters import ExportConfig, export_bundle

    keep = fusion.cpu_graph_passes
    if not passes:
        fusion.cpu_graph_passes = lambda path: {}
    try:
        result = export_bundle(ExportConfig(model_dir=model_dir, out_dir=out, int8=True, overwrite=True))
    finally:
        fusion.cpu_graph_passes = keep
    models = result.manifest.models
    return {"cpu_passes": models["fp32"].get_extra("cpu_passes"), "int8_accuracy": models["int8"].get_extra("accuracy"),
            "int8_op_counts": models["int8"].get_extra("quantization")["op_counts"]}


def session(path: Path, threads: int):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def time_side_by_side(bundles: dict[str, Path], seqs: list[int], rounds: int, runs: int, threads: int):
    """p50 ms per (variant, precision, seq), every session timed ``runs`` times per round, rounds interleaved."""
    from edgebert.bench.measure import OtherCpuLoad

    sessions = {(v, p): session(model_path(b, p), threads) for v, b in bundles.items() for p in FILES}
    other, rows = OtherCpuLoad(), []
    rng = np.random.default_rng(0)
    for seq in seqs:
        ids = rng.integers(1000, 30000, size=(1, seq)).astype(np.int64)
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
        outputs, times = {}, {k: [] for k in sessions}
        for key, sess in sessions.items():
            outputs[key] = sess.run(None, feeds)[0]
            for _ in range(5):
                sess.run(None, feeds)
        with other.timing():
            for _ in range(rounds):
                for key, sess in sessions.items():
                    for _ in range(runs):
                        t0 = time.perf_counter()
                        sess.run(None, feeds)
                        times[key].append((time.perf_counter() - t0) * 1e3)
        for p in FILES:
            base = float(np.percentile(times[("before", p)], 50))
            for v in bundles:
                p50 = float(np.percentile(times[(v, p)], 50))
                rows.append({"seq": seq, "precision": p, "variant": v, "p50_ms": round(p50, 3),
                             "p90_ms": round(float(np.percentile(times[(v, p)], 90)), 3),
                             "vs_before": round(p50 / base, 3),
                             "max_abs_diff_vs_before": float(np.abs(outputs[(v, p)] - outputs[("before", p)]).max())})
    return rows, other.fraction()


def markdown(r: dict[str, Any]) -> str:
    env = r["environment"]
    out = [f"# CPU graph pass: SkipLayerNormalization -> Add + LayerNormalization ({r['host']})", "",
           f"- CPU: {env['cpu']}; {env.get('host_line', r['host'])}",
           f"- onnxruntime {env['onnxruntime']}, {r['threads']} threads, spinning "
           f"off; {r['rounds']} rounds x {r['runs']} runs per graph, interleaved; load average {r['load_before']} "
           f"before, {r['load_after']} after; other programs used {r['other_cpu']} of the CPU while timing", "",
           "| seq | precision | graph | p50 ms | p90 ms | vs before | max abs diff vs before |",
           "|---:|---|---|---:|---:|---:|---:|"]
    for row in r["rows"]:
        out.append(f"| {row['seq']} | {row['precision']} | {row['variant']} | {row['p50_ms']:.2f} "
                   f"| {row['p90_ms']:.2f} | {row['vs_before']:.3f} | {row['max_abs_diff_vs_before']:.2g} |")
    out += ["", "The INT8 graphs differ by whole quantization steps: their fp32 inputs differ by float rounding "
                "(the fp32 column), enough to move a few activations across a rounding boundary of the calibrated "
                "scales. What that costs is the gate's figure:", "",
            "INT8 accuracy gate (sentence-embedding cosine vs the fp32 graph, 200 held-out texts):", ""]
    for v, e in r["exports"].items():
        a = e["int8_accuracy"]
        out.append(f"- {v}: mean {a['mean']}, min {a['min']} (cpu_passes {e['cpu_passes']})")
    out += ["", f"Command: `{r['command']}`", ""]
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", type=Path, default=None, help="an edgebert model dir (default: import all-MiniLM-L6-v2)")
    ap.add_argument("--work", type=Path, default=REPO / "runs" / "cpu_passes")
    ap.add_argument("--seqs", default="128,256")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    from edgebert.files.atomic import write_json, write_text
    from edgebert.pipeline.config import installed_teacher
    from edgebert.runtime.hostcpu import detect_host
    from edgebert.stages.import_hf import convert_hf
    from edgebert.system.environment import describe

    model = args.model or args.work / "minilm"
    if args.model is None and not (model / "model.safetensors").is_file():
        convert_hf(installed_teacher(), model, overwrite=True)
    bundles = {"before": args.work / "before", "after": args.work / "after"}
    exports = {v: export(model, b, passes=v == "after") for v, b in bundles.items()}
    load_before = [round(x, 2) for x in os.getloadavg()]
    rows, other = time_side_by_side(bundles, [int(s) for s in args.seqs.split(",")], args.rounds, args.runs,
                                    args.threads)
    host = detect_host()
    report = {"benchmark": "cpu_passes", "host": host.kind, "environment": describe(), "threads": args.threads,
              "rounds": args.rounds, "runs": args.runs, "exports": exports, "rows": rows, "other_cpu": other,
              "load_before": load_before, "load_after": [round(x, 2) for x in os.getloadavg()],
              "date": time.strftime("%Y-%m-%d %H:%M:%S"),
              "command": "python benchmarks/cpu_pass_gain.py " + " ".join(sys.argv[1:])}
    report["environment"]["host_line"] = host.summary()
    stem = RESULTS / f"cpu_passes_{host.kind}"
    write_json(stem.with_suffix(".json"), report)
    write_text(stem.with_suffix(".md"), markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()
