"""Latency of the small (int4) graph against the INT8 graph of the same model, natively on this CPU, one
onnxruntime thread (issue #50): one batch of 1 x 128 tokens, and the short-text mix (SST-2 dev sentences one at a
time, each at its own length). Sessions are timed in turns (rotated repeats, spinning off), median per call.

    .venv/bin/python benchmarks/int4_minilm.py --algorithm hqq --keep /tmp/minilm_q4.onnx      # makes the graph
    .venv/bin/python benchmarks/int4_latency.py --bundle runs/minilm_ort --small /tmp/minilm_q4.onnx
    .venv/bin/python benchmarks/int4_latency.py --small b32=/tmp/b32.onnx --small b128=/tmp/b128.onnx --levels 4,0 \
        --label _blocks        # several small graphs in the same turns; each also with MatMulNBits accuracy_level 0

``--levels``: each small graph is also timed as a copy whose ``MatMulNBits`` nodes carry that ``accuracy_level``
(4: int8 activations per block, the exporter's; 0: unset, float activations), to choose block and level per CPU.

Writes benchmarks/results/int4/latency_<cpu kind>.json / .md with the CPU, versions, threads and the load average
before and after. Measure on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tokenizers import Tokenizer  # noqa: E402

from edgebert.files.atomic import atomic_path  # noqa: E402
from edgebert.runtime.hostcpu import detect_host  # noqa: E402
from edgebert.system.environment import cpu_model  # noqa: E402

SST2 = ROOT.parent / "shared" / "data" / "sst2" / "dev.tsv"


def session(path: Path) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def with_level(path: Path, level: int, out: Path) -> Path:
    """A copy of the graph at ``path`` whose MatMulNBits nodes carry ``accuracy_level`` ``level``."""
    import onnx
    from onnx import helper

    model = onnx.load(str(path))
    for node in model.graph.node:
        if node.op_type == "MatMulNBits":
            kept = [a for a in node.attribute if a.name != "accuracy_level"]
            del node.attribute[:]
            node.attribute.extend([*kept, helper.make_attribute("accuracy_level", level)])
    onnx.save(model, str(out))
    return out


def feeds_of(ids: list[int]) -> dict[str, np.ndarray]:
    row = np.asarray([ids], np.int64)
    return {"input_ids": row, "attention_mask": np.ones_like(row), "token_type_ids": np.zeros_like(row)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bundle", type=Path, default=ROOT / "runs/minilm_ort")
    ap.add_argument("--small", action="append", required=True, help="PATH or NAME=PATH; repeat for several")
    ap.add_argument("--levels", default="", help="also time copies at these accuracy_levels, e.g. 4,0")
    ap.add_argument("--texts", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--label", default="", help="suffix of the result files (e.g. the 4-bit algorithm)")
    args = ap.parse_args()
    load_before = os.getloadavg()
    manifest = json.loads((args.bundle / "manifest.json").read_text())
    graphs = {"int8": args.bundle / manifest["models"]["int8"]["file"]}
    for item in args.small:
        name, _, path = item.rpartition("=")
        graphs[name or "int4"] = Path(path)
    scratch = Path(tempfile.mkdtemp(prefix="int4lat"))
    for level in [int(v) for v in args.levels.split(",") if v.strip()]:
        for name in [n for n in graphs if n != "int8"]:
            graphs[f"{name} level {level}"] = with_level(graphs[name], level, scratch / f"{len(graphs)}.onnx")
    tok = Tokenizer.from_file(str(args.bundle / "tokenizer.json"))
    lines = SST2.read_text(encoding="utf-8").splitlines()[1:]
    short = [tok.encode(line.split("\t")[0]).ids[:128] for line in lines[:args.texts]]
    long_text = " ".join(line.split("\t")[0] for line in lines[:40])
    one_128 = tok.encode(long_text).ids[:127] + [tok.token_to_id("[SEP]")]
    sessions = {name: session(path) for name, path in graphs.items()}
    workloads = {"1 x 128": [feeds_of(one_128)] * 20, "short-text mix (batch 1)": [feeds_of(i) for i in short]}
    times: dict[str, dict[str, list[float]]] = {w: {n: [] for n in sessions} for w in workloads}
    for name, s in sessions.items():          # warm
        for f in workloads["1 x 128"][:3] + workloads["short-text mix (batch 1)"][:10]:
            s.run(None, f)
    for r in range(args.repeats):
        order = list(sessions) if r % 2 == 0 else list(sessions)[::-1]
        for w, calls in workloads.items():
            for name in order:
                start = time.perf_counter()
                for f in calls:
                    sessions[name].run(None, f)
                times[w][name].append((time.perf_counter() - start) / len(calls) * 1000)
    rows = {w: {n: float(np.median(v)) for n, v in by.items()} for w, by in times.items()}
    host = detect_host()
    result = {"cpu": cpu_model(), "kind": host.kind, "threads": 1, "onnxruntime": ort.__version__,
              "python": platform.python_version(), "load_average_before": [round(x, 2) for x in load_before],
              "load_average_after": [round(x, 2) for x in os.getloadavg()], "repeats": args.repeats,
              "bytes": {n: p.stat().st_size for n, p in graphs.items()}, "median_ms": rows,
              "graphs": {n: str(p) for n, p in graphs.items()}}
    small = [n for n in graphs if n != "int8"]
    model = "/".join(Path(manifest.get("source", {}).get("model_dir", args.bundle)).parts[-2:])
    result["model"] = f"{model} ({manifest['config']['num_hidden_layers']} layers, hidden {manifest['config']['hidden_size']})"
    table = [f"int4 (small{', ' + args.label.strip('_') if args.label else ''}) vs INT8, {result['model']}, "
             f"{result['cpu']} ({host.kind}), 1 thread, onnxruntime {ort.__version__}, load "
             f"{result['load_average_before']} -> {result['load_average_after']}", "",
             "| workload | INT8 ms | " + " | ".join(f"{n} ms (/ INT8)" for n in small) + " |",
             "|---|---:|" + "---:|" * len(small)]
    table += [f"| {w} | {r['int8']:.2f} | " + " | ".join(f"{r[n]:.2f} ({r[n] / r['int8']:.2f}x)" for n in small) + " |"
              for w, r in rows.items()]
    table += ["", "| graph | bytes |", "|---|---:|", *[f"| {n} | {b:,} |" for n, b in result["bytes"].items()]]
    out = ROOT / "benchmarks/results/int4"
    with atomic_path(out / f"latency_{host.kind}{args.label}.json") as path:
        path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    with atomic_path(out / f"latency_{host.kind}{args.label}.md") as path:
        path.write_text("\n".join(table) + "\n", encoding="utf-8")
    print("\n".join(table))


if __name__ == "__main__":
    main()
