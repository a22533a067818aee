"""Where OpenVINO's time goes (issue 26, part 2: the gap to the fastest peer, op by op): the NNCF INT8 and
fp32 OpenVINO models of all-MiniLM-L6-v2 that benchmarks/cpu_peers.py built (in ``--work``), profiled with
OpenVINO's per-node performance counters (``PERF_COUNT``) at batch 1 x 128, with the same settings as the
peers table (``--threads`` inference threads, one stream, latency hint, f32 inference precision).

    .venv-peers/bin/python benchmarks/openvino_profile.py [--threads 2] [--iters 50]

Per node type (OpenVINO's layer type after its own fusions: FullyConnected, ScaledDotProductAttention /
MatMul + Softmax, MVN (LayerNorm), Gelu, Eltwise, Subgraph, Reorder ...): the share of the summed node time,
nodes per run, microseconds per run; and the run time outside the nodes. Executed precision (``exec_type``,
e.g. ``brgemm_avx512_amx_I8`` / ``jit_avx512_vnni_I8``) is listed per type, so one sees which nodes ran in INT8.

Writes ``benchmarks/results/openvino_profile/openvino_profile_<cpu kind>.{json,md}`` with the CPU, versions and load average.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cpu_peers import ort_feeds, synthetic_ids, write_results  # noqa: E402  (benchmarks/cpu_peers.py)

MODELS = {"OpenVINO INT8 (NNCF)": "openvino-int8-calib256", "OpenVINO fp32": "openvino-fp32"}


def profile(xml: Path, threads: int, iters: int, feeds: dict) -> dict:
    import openvino as ov

    config = {"INFERENCE_NUM_THREADS": threads, "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY",
              "INFERENCE_PRECISION_HINT": "f32", "PERF_COUNT": True}
    request = ov.Core().compile_model(ov.Core().read_model(xml), "CPU", config).create_infer_request()
    for _ in range(10):
        request.infer(feeds)
    per_type: dict[str, dict] = defaultdict(lambda: {"us": 0.0, "nodes": 0, "exec": set()})
    walls = []
    for _ in range(iters):
        t0 = time.perf_counter()
        request.infer(feeds)
        walls.append((time.perf_counter() - t0) * 1e6)
        for info in request.get_profiling_info():
            if info.status != info.Status.EXECUTED:
                continue
            row = per_type[info.node_type]
            row["us"] += info.real_time.total_seconds() * 1e6
            row["nodes"] += 1
            row["exec"].add(info.exec_type)
    total = sum(r["us"] for r in per_type.values())
    rows = sorted(({"type": t, "share": r["us"] / total, "nodes_per_run": r["nodes"] / iters,
                    "us_per_run": r["us"] / iters, "exec": sorted(r["exec"])} for t, r in per_type.items()),
                  key=lambda r: -r["us_per_run"])
    return {"run_ms_p50": float(np.percentile(walls, 50)) / 1e3, "nodes_ms": total / iters / 1e3, "rows": rows}


def to_markdown(r: dict) -> str:
    out = [f"# OpenVINO profile, all-MiniLM-L6-v2 at batch 1 x 128 ({r['kind']})", "",
           f"- CPU: {r['cpu']}; {r['host']}", f"- openvino {r['openvino']}, {r['threads']} threads, one stream, "
           f"latency hint, f32 inference precision, {r['iters']} profiled runs after 10 warm-up; load average "
           f"before {r['load_before']}, after {r['load_after']}; other processes used {r['other_cpu']} of the CPU",
           ""]
    for name, p in r["models"].items():
        out += [f"## {name}: run p50 {p['run_ms_p50']:.3f} ms, nodes {p['nodes_ms']:.3f} ms", "",
                "| node type | share | nodes / run | us / run | executed as |", "|---|---:|---:|---:|---|"]
        out += [f"| {x['type']} | {100 * x['share']:.1f}% | {x['nodes_per_run']:.0f} | {x['us_per_run']:.1f} | "
                f"{', '.join(x['exec'])} |" for x in p["rows"]]
        out.append("")
    out += [f"Command: `{r['command']}`", ""]
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--work", type=Path, default=REPO / "runs" / "cpu_peers")
    ap.add_argument("--out", type=Path, default=None, help="default benchmarks/results/openvino_profile/openvino_profile_<cpu kind>")
    args = ap.parse_args()

    import openvino

    from edgebert.bench.measure import OtherCpuLoad
    from edgebert.runtime.hostcpu import detect_host
    from edgebert.system.environment import cpu_model

    missing = [d for d in MODELS.values() if not (args.work / d / "model.xml").is_file()]
    if missing:
        raise SystemExit(f"{args.work} lacks {', '.join(missing)}: run benchmarks/cpu_peers.py first")
    host, other = detect_host(), OtherCpuLoad()
    feeds = ort_feeds(synthetic_ids(1, 128))
    load_before = [round(x, 2) for x in os.getloadavg()]
    models = {}
    for name, folder in MODELS.items():
        with other.timing():
            models[name] = profile(args.work / folder / "model.xml", args.threads, args.iters, feeds)
    report = {"benchmark": "openvino_profile", "kind": host.kind, "cpu": cpu_model(), "host": host.summary(),
              "openvino": openvino.__version__, "threads": args.threads, "iters": args.iters, "models": models,
              "load_before": load_before, "load_after": [round(x, 2) for x in os.getloadavg()],
              "other_cpu": other.fraction(), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
              "command": "python benchmarks/openvino_profile.py " + " ".join(sys.argv[1:])}
    write_results(args.out or REPO / "benchmarks" / "results" / "openvino_profile" / f"openvino_profile_{host.kind}", report, to_markdown)


if __name__ == "__main__":
    main()
