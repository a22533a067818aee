"""What the outlier split costs and buys (issue 26's gap, op by op): the ``x86-vnni`` INT8 graph of
all-MiniLM-L6-v2 exported with the split on every weight MatMul it picks (the recipe), on the FFN
up-projections only, on the down-projections only, and on none.

    python benchmarks/archive/outlier_split_cost.py [--threads 2] [--rounds 5] [--iters 60]

The profiler says which kernels the split adds (``benchmarks/int8_profile.py``: float MatMul, Gather, Add);
this measures what removing them gives back, end to end, and what it costs in accuracy. Each variant is a
full ``export --int8 --target x86-vnni`` (edgebert's accuracy gate included: a variant whose held-out
cosine misses the budget gets nodes kept float, which the report lists), scored against transformers fp32
on the CPU-peers texts (300 SST-2 dev + 100 WikiText-2 test, one at a time) and timed at batch 1 x 128,
interleaved round by round (``int8_targets.latency``: each variant's ratio to the recipe is the median of the
per-round ratios, the figure to read on a noisy VM), with onnxruntime's spinning off (the side-by-side setting) and
on (EdgeSession's default; on a 2-vCPU VM its rounds are bimodal by thread placement, 7 or 12 ms). The variants are an experiment: ``split_candidates`` is narrowed here by a
node-name pattern; the exporter itself has no such option.

Three more variants rewrite the recipe's graph so that the FFN up-projections' outlier channels enter the
INT8 product itself instead of a float MatMul + Add (a "K extension"): each outlier channel ``c`` is fed
``r`` more times as ``x_c / r`` (``r`` = its calibration range over the tensor's, rounded up) against ``r``
copies of its weight row, so every copy fits the tensor's scale and the product stays exact in fp32:

  float-concat   ``T = x @ S`` (S picks and divides the channels), ``Concat(x, T)``, per-tensor QuantizeLinear
  uint8-concat   ``Gather`` of the channels, their own QuantizeLinear (scale ``r`` x the tensor's, one ``r`` a
                 layer), ``Concat`` of the two uint8 tensors
  per-axis       one ``Gather`` makes the wide tensor, QuantizeLinear with per-channel scales

Writes ``benchmarks/archive/results/outlier_split_cost_<cpu kind>.{json,md}`` with the CPU, versions, load averages.

Archived: written for the graphs exported before 2026-11-27, whose split stored the outlier rows as float
and zeroed them in the INT8 weight; the K-extension rewrites expect that form and do not apply to a graph
exported since (``quantization.outliers.fold_outlier_rows``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))   # cpu_peers, int8_targets

from cpu_peers import cpu_identity, cpu_words, minilm_dir, tokenized, versions, write_results  # noqa: E402
from int8_targets import cosines, embed_one_by_one, figures, latency, reference, session, texts  # noqa: E402

RECIPE = "all (the recipe)"
VARIANTS = {                       # name -> node-name pattern of the MatMuls the split may touch
    RECIPE: r".",
    "FFN up-projections only": r"/intermediate/dense/",
    "FFN down-projections only": r"layer\.\d+/output/dense/",
    "none": r"(?!)",
}


def export_variant(model_dir: Path, out: Path, pattern: str) -> None:
    """``export --int8 --target x86-vnni`` with the split narrowed to MatMuls matching ``pattern``."""
    import edgebert.quantization.outliers as outliers
    from edgebert.exporters import ExportConfig, export_bundle

    every = outliers.split_candidates
    outliers.split_candidates = lambda model: {k: v for k, v in every(model).items() if re.search(pattern, k)}
    try:
        export_bundle(ExportConfig(model_dir=model_dir, out_dir=out, int8=True, int8_targets=("x86-vnni",),
                                   overwrite=True))
    finally:
        outliers.split_candidates = every


def variant_figures(out: Path) -> dict:
    """The exported variant's INT8 graph and its manifest figures (split, gate, kept-float nodes)."""
    entry = json.loads((out / "manifest.json").read_text())["models"]["int8"]
    q = entry["quantization"]
    split = q["outlier_split"]
    return {"file": str(out / entry["file"]), "split_nodes": split.get("nodes", 0),
            "split_channels": split.get("channels", 0), "kept_float": q["excluded_nodes"],
            "op_counts": q["op_counts"],
            "gate": {k: entry["accuracy"][k] for k in ("mean", "min", "n")}}


K_EXTENSIONS = {"up-projections as K extension (float-concat)": "float-concat",
                "up-projections as K extension (uint8-concat)": "uint8-concat",
                "up-projections as K extension (per-axis QuantizeLinear)": "per-axis"}
K_EXTENDED = r"/intermediate/dense/"


def k_extended(int8_path: Path, fp32_path: Path, stats, mode: str, out: Path) -> dict:
    """The recipe's INT8 graph with the outlier split of MatMuls matching ``K_EXTENDED`` turned into a K
    extension (module docstring; ``mode`` one of ``K_EXTENSIONS``'s values), written to ``out``."""
    import onnx
    from onnx import helper, numpy_helper

    from edgebert.graph.ops import drop_unused_initializers

    model, fp32 = onnx.load(str(int8_path)), onnx.load(str(fp32_path))
    g = model.graph
    inits = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    float_w = {n.name: numpy_helper.to_array(next(i for i in fp32.graph.initializer if i.name == n.input[1]))
               for n in fp32.graph.node if n.op_type == "MatMul" and re.search(K_EXTENDED, n.name)}
    by_name = {n.name: n for n in g.node}
    by_output = {o: n for n in g.node for o in n.output}
    before, after, dropped, added_k = {}, {}, set(), {}
    for p in (p for p in float_w if p + "/outlier_Add" in by_name):     # the MatMuls the recipe split
        add, gather, mm = by_name[p + "/outlier_Add"], by_name[p + "/outlier_Gather"], by_name[p + "_quant_to_float"]
        ql, x, idx = by_output[mm.input[0]], gather.input[0], inits[p + "/outlier_index"]
        scale, zp = float(inits[ql.input[1]]), int(inits[ql.input[2]])
        low, high = -zp * scale, (255 - zp) * scale
        reps = [int(np.ceil(max(stats.high[x][c] / high, stats.low[x][c] / low, 1.0))) for c in idx]
        if mode == "uint8-concat":
            reps = [max(reps)] * len(reps)
        w = float_w[p].astype(np.float32)
        w_ext = np.concatenate([np.where(np.isin(np.arange(len(w)), idx)[:, None], 0.0, w)]
                               + [np.repeat(w[c][None], r, 0) for c, r in zip(idx, reps)]).astype(np.float32)
        w_scale = (np.abs(w_ext).max(0) / 127.0).astype(np.float32)       # per column, symmetric, as the recipe
        k, n = len(w), sum(reps)
        new = {"Wq": np.clip(np.round(w_ext / w_scale), -127, 127).astype(np.int8), "Ws": w_scale,
               "Wzp": np.zeros(w_scale.shape, np.int8)}
        if mode == "float-concat":
            pick = np.zeros((k, n), np.float32)
            pick[np.repeat(idx, reps), np.arange(n)] = np.repeat(1.0 / np.asarray(reps, np.float32), reps)
            new["S"] = pick
            before[ql.name] = [helper.make_node("MatMul", [x, f"{p}/kext_S"], [f"{p}/kext_T"], name=f"{p}/kext_MatMul"),
                               helper.make_node("Concat", [x, f"{p}/kext_T"], [f"{p}/kext_X"], name=f"{p}/kext_Concat",
                                                axis=-1)]
            ql.input[0] = f"{p}/kext_X"
        elif mode == "uint8-concat":
            new.update(idx=np.repeat(idx, reps).astype(np.int64), qs=np.array(scale * reps[0], np.float32),
                       qzp=np.array(zp, np.uint8))
            after[ql.name] = [
                helper.make_node("Gather", [x, f"{p}/kext_idx"], [f"{p}/kext_T"], name=f"{p}/kext_Gather", axis=-1),
                helper.make_node("QuantizeLinear", [f"{p}/kext_T", f"{p}/kext_qs", f"{p}/kext_qzp"], [f"{p}/kext_Tq"],
                                 name=f"{p}/kext_QuantizeLinear"),
                helper.make_node("Concat", [ql.output[0], f"{p}/kext_Tq"], [f"{p}/kext_Xq"], name=f"{p}/kext_Concat",
                                 axis=-1)]
            mm.input[0] = f"{p}/kext_Xq"
        else:
            new.update(idx=np.concatenate([np.arange(k), np.repeat(idx, reps)]).astype(np.int64),
                       qs=np.concatenate([np.full(k, scale), np.repeat(scale * np.asarray(reps), reps)]).astype(np.float32),
                       qzp=np.full(k + n, zp, np.uint8))
            before[ql.name] = [helper.make_node("Gather", [x, f"{p}/kext_idx"], [f"{p}/kext_X"], name=f"{p}/kext_Gather",
                                                axis=-1)]
            ql.input[:] = [f"{p}/kext_X", f"{p}/kext_qs", f"{p}/kext_qzp"]
            ql.attribute.append(helper.make_attribute("axis", -1))
        g.initializer.extend(numpy_helper.from_array(v, f"{p}/kext_{key}") for key, v in new.items())
        mm.input[1], mm.input[3], mm.input[5] = f"{p}/kext_Wq", f"{p}/kext_Ws", f"{p}/kext_Wzp"
        mm.output[0] = add.output[0]
        dropped |= {add.name, gather.name, p + "/outlier_float_MatMul"}
        added_k[p.replace("/model/", "")] = reps
    nodes = []
    for node in g.node:
        if node.name not in dropped:
            nodes += before.get(node.name, []) + [node] + after.get(node.name, [])
    del g.node[:]
    g.node.extend(nodes)
    drop_unused_initializers(g)
    onnx.save(model, str(out))
    return {"file": str(out), "copies": added_k}


def k_extension_inputs(int8_file: str | Path) -> list[str]:
    """The fp32 tensors the K-extended MatMuls read (the inputs of their outlier Gathers)."""
    import onnx

    return [n.input[0] for n in onnx.load(str(int8_file)).graph.node
            if n.name.endswith("/outlier_Gather") and re.search(K_EXTENDED, n.name)]


def calibration_ranges(bundle: Path, int8_file: str | Path, qcfg=None):
    """Per-channel ranges of the K-extended MatMuls' inputs on the calibration batches the export of ``bundle``
    used (``quantization.feeds``; ``qcfg``: that export's ``Int8Config``, default the built-in text)."""
    from edgebert.bundle import model_path, read_manifest
    from edgebert.quantization.activations import ChannelStats
    from edgebert.quantization.config import Int8Config
    from edgebert.quantization.feeds import task_feeds

    manifest = read_manifest(bundle)
    fp32 = model_path(bundle, "fp32", manifest)
    feeds = task_feeds(qcfg or Int8Config(), manifest.task, fp32, tokenizer=bundle / "tokenizer.json",
                       pad_id=manifest.tokenizer.pad_id, max_length=None, say=lambda *a, **k: None)
    return ChannelStats.collect(fp32, feeds.calibration(), k_extension_inputs(int8_file))


def _p50(lat: dict) -> str:
    return f"**{lat['p50_ms']:.2f}**, {lat['ratio_to_recipe']:.2f}x ({', '.join(f'{x:.1f}' for x in lat['per_round'])})"


def to_markdown(r: dict) -> str:
    lines = [f"# The outlier split's cost and what it buys: x86-vnni INT8, all-MiniLM-L6-v2 ({r['host_kind']})", "",
             f"- CPU: {r['cpu_words']}", f"- {r['threads']} threads, batch 1 x 128, {r['rounds']} interleaved rounds x "
             f"{r['iters']} runs; load average before {r['load_average_start']}, after {r['load_average_end']}; other "
             f"processes used {r['other_cpu']} of the CPU while timing; "
             f"onnxruntime {r['versions'].get('onnxruntime') or r['versions'].get('onnxruntime-gpu')}; {r['date']}",
             f"- command: `{r['command']}`", "",
             "| split on | nodes / channels | kept float by the gate | gate mean / min (200 held-out) | "
             "peer texts mean / min (400) | p50 ms spinning off, ratio to the recipe (rounds) | spinning on |",
             "|---|---|---|---|---|---|---|"]
    for name, v in r["variants"].items():
        if "rewrite_of" in v:
            split, kept, gate = "6 up-projections rewritten", "-", "not gated (a rewrite)"
        else:
            split = f"{v['split_nodes']} / {v['split_channels']}"
            kept = ", ".join(n.replace("/model/", "").replace("/MatMul", "") for n in v["kept_float"]) or "none"
            gate = f"{v['gate']['mean']:.5f} / {v['gate']['min']:.5f}"
        lines.append(f"| {name} | {split} | {kept} | {gate} | {v['peer_texts']['mean']:.5f} / {v['peer_texts']['min']:.5f} | "
                     f"{_p50(v['latency_spin_off'])} | {_p50(v['latency_spin_on'])} |")
    copies = {k: v["copies"] for k, v in r["variants"].items() if "copies" in v}
    lines += ["", "Copies per outlier channel (r) of each K-extended MatMul: " + "; ".join(
        f"{name.split('(')[1].rstrip(')')}: " + ", ".join(f"{n.split('/')[0]} {c}" for n, c in v.items())
        for name, v in copies.items())]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iters", type=int, default=60)
    parser.add_argument("--pause", type=float, default=60.0, help="seconds of rest before timing (the exports' load)")
    parser.add_argument("--reuse", action="store_true", help="time and score the variants already in --work")
    parser.add_argument("--work", type=Path, default=REPO / "runs" / "outlier_split_cost")
    parser.add_argument("--out", type=Path, default=None, help="default benchmarks/archive/results/outlier_split_cost_<kind>")
    args = parser.parse_args(argv)
    from edgebert.bench.measure import OtherCpuLoad
    from edgebert.bundle import model_path
    from edgebert.runtime.hostcpu import detect_host
    from edgebert.stages.import_hf import convert_hf

    host = detect_host()
    src = minilm_dir()
    model_dir = args.work / "minilm"
    if not (model_dir / "model.safetensors").is_file():
        convert_hf(src, model_dir, overwrite=True)
    variants = {}
    for i, (name, pattern) in enumerate(VARIANTS.items()):
        folder = args.work / f"variant{i}"
        if not (args.reuse and (folder / "manifest.json").is_file()):
            print(f"exporting: split on {name}", flush=True)
            export_variant(model_dir, folder, pattern)
        variants[name] = variant_figures(folder)
    recipe = args.work / "variant0"
    stats = calibration_ranges(recipe, variants[RECIPE]["file"])
    for name, mode in K_EXTENSIONS.items():
        variants[name] = {**k_extended(Path(variants[RECIPE]["file"]), model_path(recipe, "fp32"), stats, mode,
                                       args.work / f"kext-{mode}.onnx"), "rewrite_of": RECIPE}
    sst, wiki = texts()
    rows = tokenized(src / "tokenizer.json", sst[:300] + wiki[:100])
    ref = reference(src, rows)
    for v in variants.values():
        v["peer_texts"] = figures(cosines(embed_one_by_one(session(Path(v["file"]), args.threads), rows), ref), 300)
    report = {"benchmark": "outlier_split_cost", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
              "command": "python benchmarks/archive/outlier_split_cost.py " + " ".join(sys.argv[1:]),
              "cpu": cpu_identity(), "host_kind": host.kind, "host": host.summary(), "versions": versions(),
              "threads": args.threads, "rounds": args.rounds, "iters": args.iters, "pause_s": args.pause}
    report["cpu_words"] = cpu_words(report["cpu"])
    time.sleep(args.pause)
    report["load_average_start"] = [round(x, 2) for x in os.getloadavg()]
    graphs = {k: (Path(v["file"]), False) for k, v in variants.items()}
    other = OtherCpuLoad()
    with other.timing():
        for spin in (False, True):   # p50 at 1 x 128, interleaved round by round; ratios to the recipe's
            for name, lat in latency(graphs, args.threads, args.rounds, args.iters, RECIPE, spin=spin).items():
                variants[name]["latency_spin_" + ("on" if spin else "off")] = {
                    "p50_ms": lat["p50_ms"], "per_round": lat["per_round"],
                    "ratio_to_recipe": lat["ratio_to_fp32"]}     # latency's baseline here is the recipe
    report["other_cpu"] = other.fraction()
    report["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    report["variants"] = variants
    return write_results(args.out or REPO / "benchmarks" / "archive" / "results" / f"outlier_split_cost_{host.kind}", report,
                         to_markdown)


if __name__ == "__main__":
    raise SystemExit(main())
