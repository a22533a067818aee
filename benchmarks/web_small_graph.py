"""Latency of the small graph (``onnx/model_q4.onnx``, ``export --int8 --int4``) against the INT8 graph
(``onnx/model_quantized.onnx``) of the same model in onnxruntime-web (WASM) under Node, 1 thread (issue #50).

    .venv/bin/python benchmarks/web_small_graph.py [--model MODEL_DIR | --bundle BUNDLE] [--builds plain,jsep]
        [--texts 200] [--rounds 5] [--rounds-128 30] [--repeats 3] [--wait-load 1.0] [--work /tmp/edgebert-web-q4]
        [--out benchmarks/results/browser]
    .venv/bin/python benchmarks/web_small_graph.py --quick --bundle BUNDLE     # checks the script works; no figures

Needs ``make web-deps`` (examples/web/node_modules, onnxruntime-web) and Node. Without ``--bundle`` the model
(default: the installed all-MiniLM-L6-v2) is exported by this checkout's code with ``--int8 --int4``. Every
figure is the model call alone at batch 1 (examples/web/ort_web_run.mjs: token ids made here, attention mask
all ones): p50 over the SST-2 dev length mix (``--texts`` sentences x ``--rounds``) and at 1 x 128
(``--rounds-128``), each graph in its own Node process, ``--repeats`` processes per graph in an order rotated
each time. ``--builds``: onnxruntime-web's WASM builds (plain: what Node loads; jsep; asyncify, which
transformers.js' browser bundle loads, lacks the GatherBlockQuantized kernel in onnxruntime-web
1.31.0-dev.20260914: that row is written with the error). Writes ``web_small_graph.json`` (machine, versions,
load average before and after each process, every timing) and ``web_small_graph.md``. Run it on an idle
machine: it waits (up to 10 minutes) for the 1-minute load average to drop below ``--wait-load``.
``--quick``: 8 texts, 1 round, 3 rounds at 128, 1 repeat, no waiting, written under ``--work`` only.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from browser_wasm import inputs, minilm_dir, stats, wait_for_quiet  # noqa: E402
from edgebert.files.atomic import atomic_path  # noqa: E402

WEB = REPO / "examples" / "web"
GRAPHS = ("int4", "int8")      # manifest keys: the small graph and the default (portable) INT8 graph


def export(model_dir: Path, work: Path) -> Path:
    """The model exported with --int8 --int4 by this checkout's code (every run: an earlier bundle may come
    from other code)."""
    from edgebert.exporters import ExportConfig, export_bundle

    out = work / "edgebert-q4"
    export_bundle(ExportConfig(model_dir=model_dir, out_dir=out, int8=True, int4=True, overwrite=True), on_step=print)
    return out


def node_run(spec: dict, work: Path) -> dict:
    path = work / "ort_web_spec.json"
    path.write_text(json.dumps(spec))
    done = subprocess.run(["node", str(WEB / "ort_web_run.mjs"), str(path)], cwd=WEB, capture_output=True, text=True,
                          timeout=3600)
    if done.returncode:
        sys.exit(f"web_small_graph: ort_web_run.mjs failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(args) -> dict:
    from edgebert.runtime.hostcpu import detect_host

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    bundle = Path(args.bundle).resolve() if args.bundle else export(Path(args.model), work)
    manifest = json.loads((bundle / "manifest.json").read_text())
    if "int4" not in manifest["models"]:
        sys.exit(f"web_small_graph: {bundle} has no small graph (export it with --int8 --int4)")
    files = {key: bundle / manifest["models"][key]["file"] for key in GRAPHS}
    mix, long = inputs(bundle, args.texts)
    host = detect_host()
    small = manifest["models"]["int4"]
    report = {"machine": {"cpu": host.model, "kind": host.kind, "flags": host.flags(), "logical_cpus": os.cpu_count(),
                          "system": platform.platform()},
              "bundle": str(bundle), "quick": args.quick, "threads": 1, "texts": len(mix),
              "mix_tokens_mean": float(np.mean([len(r) for r in mix])), "rounds": args.rounds,
              "rounds_128": args.rounds_128, "repeats": args.repeats,
              "graph_bytes": {key: path.stat().st_size for key, path in files.items()},
              "int4_accuracy": {k: v for k, v in small.get("accuracy", {}).items() if k != "sensitivity"},
              "versions": {}, "rows": []}
    for build in args.builds:
        rows = {}
        for repeat in range(args.repeats):
            order = list(GRAPHS[repeat % 2:]) + list(GRAPHS[:repeat % 2])
            for key in order:
                load_before = wait_for_quiet(args.wait_load) if args.wait_load else os.getloadavg()[0]
                calls = [{"name": "mix", "path": str(files[key]), "rows": mix, "rounds": args.rounds, "warmup": 1},
                         {"name": "128", "path": str(files[key]), "rows": [long], "rounds": args.rounds_128,
                          "warmup": 3}]
                out = node_run({"threads": 1, "build": build, "graphs": calls}, work)
                report["versions"] = {**out["versions"], "python": platform.python_version()}
                row = rows.setdefault(key, {"graph": key, "file": manifest["models"][key]["file"], "build": build,
                                            "threads": out["threads"], "loads": [], "mix_times": [],
                                            "times_128": [], "repeat_p50_mix": [], "repeat_p50_128": [],
                                            "errors": []})
                row["loads"].append([load_before, os.getloadavg()[0]])
                b_mix, b_128 = out["graphs"]
                errors = [g["error"] for g in (b_mix, b_128) if "error" in g]
                if errors:
                    row["errors"] += errors
                    print(f"{key} ({build} build): {errors[0]['stage']} failed: {errors[0]['message']}", flush=True)
                    continue
                row["mix_times"] += sum(b_mix["times"], [])
                row["times_128"] += sum(b_128["times"], [])
                row["repeat_p50_mix"].append(stats(sum(b_mix["times"], []))["p50_ms"])
                row["repeat_p50_128"].append(stats(sum(b_128["times"], []))["p50_ms"])
                print(f"{key} ({build} build), repeat {repeat + 1}: p50 mix {row['repeat_p50_mix'][-1]:.2f} ms, "
                      f"1x128 {row['repeat_p50_128'][-1]:.2f} ms", flush=True)
        for key in GRAPHS:
            row = rows[key]
            mix_times, times_128 = row.pop("mix_times"), row.pop("times_128")
            row.update(mix=stats(mix_times) if mix_times else None, at_128=stats(times_128) if times_128 else None)
            report["rows"].append(row)
    return report


def markdown(report: dict) -> str:
    m, v = report["machine"], report["versions"]
    lines = [f"# The small graph vs INT8 in onnxruntime-web (WASM, Node, 1 thread){' (quick: no figures)' if report['quick'] else ''}",
             "", f"onnxruntime-web {v.get('onnxruntime-web')}, Node {v.get('node')}; CPU {m['cpu']} (kind {m['kind']}, "
             f"{m['logical_cpus']} logical CPUs). Batch 1, the model call alone; mix: {report['texts']} SST-2 dev "
             f"sentences (mean {report['mix_tokens_mean']:.1f} tokens) x {report['rounds']} rounds; 1 x 128: "
             f"{report['rounds_128']} rounds; each graph in {report['repeats']} Node processes, the order rotated.",
             "", "| graph | WASM build | p50 mix (ms) | p50 1x128 (ms) | int4 / int8 (mix, 1x128) | graph MB | "
             "load before / after |", "|---|---|---|---|---|---|---|"]
    by = {(r["build"], r["graph"]): r for r in report["rows"]}
    for r in report["rows"]:
        ref = by.get((r["build"], "int8"))
        if r["mix"] is None:
            lines.append(f"| {r['graph']} | {r['build']} | failed: {r['errors'][0]['message'][:160]} | | | "
                         f"{report['graph_bytes'][r['graph']] / 1e6:.3f} | |")
            continue
        ratio = (f"{r['mix']['p50_ms'] / ref['mix']['p50_ms']:.2f}, {r['at_128']['p50_ms'] / ref['at_128']['p50_ms']:.2f}"
                 if ref and ref["mix"] else "-")
        lines.append(f"| {r['graph']} | {r['build']} | {r['mix']['p50_ms']:.2f} | {r['at_128']['p50_ms']:.2f} | "
                     f"{ratio} | {report['graph_bytes'][r['graph']] / 1e6:.3f} | "
                     f"{r['loads'][0][0]:.2f} / {r['loads'][-1][1]:.2f} |")
    acc = report["int4_accuracy"]
    if acc:
        lines += ["", f"The small graph's export gate: {acc.get('metric')} mean {acc.get('mean')} (min {acc.get('min')}) "
                      f"vs fp32 on {acc.get('n')} held-out texts, budget {acc.get('max_accuracy_loss')}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="model folder (default: the installed all-MiniLM-L6-v2)")
    parser.add_argument("--bundle", default=None, help="an existing bundle with the small graph (skips the export)")
    parser.add_argument("--builds", default="plain", help="onnxruntime-web WASM builds: plain, jsep, asyncify")
    parser.add_argument("--texts", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rounds-128", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3, help="Node processes per graph, in rotated order")
    parser.add_argument("--wait-load", type=float, default=1.0)
    parser.add_argument("--work", default="/tmp/edgebert-web-q4")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "browser"))
    parser.add_argument("--quick", action="store_true", help="check that it works: tiny settings, no figures kept")
    args = parser.parse_args(argv)
    if args.quick:
        args.texts, args.rounds, args.rounds_128, args.repeats, args.wait_load = 8, 1, 3, 1, 0.0
        args.out = str(Path(args.work) / "quick")
    if not args.bundle:
        args.model = args.model or str(minilm_dir())
    args.builds = [b.strip() for b in args.builds.split(",") if b.strip()]
    report = run(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, text in (("web_small_graph.json", json.dumps(report, indent=2) + "\n"),
                       ("web_small_graph.md", markdown(report))):
        with atomic_path(out / name) as path:          # a killed run leaves the previous results whole
            path.write_text(text, encoding="utf-8")
    print(markdown(report))


if __name__ == "__main__":
    main()
