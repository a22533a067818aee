"""What a bundle costs on the device: graph and one-device bundle size, peak memory and time to first result of
``EdgeSession`` against plain onnxruntime sessions.

    python benchmarks/footprint.py BUNDLE [--threads 1] [--repeats 5] [--name minilm] [--out-dir DIR] [--smoke]
        [--checkpoint DIR] [--child-python .venv-device/bin/python]

``--child-python``: the timed processes run this interpreter; a device-like install (``python -m venv .venv-device &&
.venv-device/bin/pip install '.[cpu]'``: plain onnxruntime, edgebert as a wheel, no torch) measures what an app on a
CPU device starts, without the GPU provider probes an onnxruntime-gpu install adds or an editable install's finder.

Three ways to get one result (one text, batch 1), each measured in a fresh Python process per repeat
(the kinds interleaved in a new seeded random order each round, so slow drift in the machine and the slot after
a heavier process hit them alike):

* ``edgebert``: ``EdgeSession(BUNDLE, threads=T)`` (defaults otherwise: the graph it picks for this host)
  and ``embed`` / ``classify`` / ``run`` of one text: imports, hash checks, tokenizer, session, the call; as
  an app opens it every time after the first (the files it loads hashed once and stamped, the CPU probe's
  verdict kept: the run's own ``EDGEBERT_CACHE``, filled by the parent's session first);
* ``edgebert-first``: the same with an empty cache in each child: the first open on a device (every file
  it loads hashed, the CPU probed);
* ``edgebert-checked``: the first open after ``edgebert check BUNDLE`` ran on the device (untimed, in the child's
  fresh cache): check hashes every byte and leaves the stamps, so the app's first open hashes nothing;
* ``edgebert-int4`` (only where the bundle has the small graph: ``edgebert export --int8 --int4``, manifest entry
  ``int4``, ``onnx/model_q4.onnx``): as ``edgebert`` with ``EdgeSession(BUNDLE, threads=T, precision="int4")``;
  the output then has the small graph's rows beside the default graph's: graph MB, one-device archive
  (``edgebert pack --target int4``), peak RSS, time to first result, accuracy. Without the graph it says
  "no small (int4) graph in the bundle";
* ``plain-same``: what a minimal app does by hand: ``tokenizers.Tokenizer.from_file`` of the bundle's
  tokenizer and ``onnxruntime.InferenceSession`` of the very graph file ``EdgeSession`` picked, same
  thread count (no hash check, no input checks, no CPU probe);
* ``plain-ort-int8``: the same with onnxruntime's own ``quantize_dynamic`` (its defaults) of the bundle's
  fp32 graph, made once by the parent (not timed);
* with ``--checkpoint DIR`` (the model the bundle was exported from), the peers' own INT8 of it, made the
  way their users make it: ``plain-optimum-int8`` (Optimum's export, then its ``AutoQuantizationConfig``
  preset for this CPU, dynamic, per channel: ``benchmarks/int8_targets.optimum_int8``) and
  ``plain-st-int8`` (``SentenceTransformer(DIR, backend="onnx")`` and sentence-transformers'
  ``export_dynamic_quantized_onnx_model`` with the same preset; embedding models only).

Accuracy (where ``../shared/data`` has the texts): for an embedding bundle, the cosine of each graph's sentence
vectors (the model's pooling, unit length) with the bundle's fp32 graph's on the first 300 SST-2 dev sentences; for
a classifier / tagger, the export gate's label / token-label agreement with the fp32 graph's output on the first
300 SST-2 dev / CoNLL-2003 test sentences (the peer then is Optimum's ``ORTModelFor...`` class of the task;
sentence-transformers' only for embedding models). Question answering: none here (``edgebert evaluate``'s F1).

Peak memory: the child's resident-set high-water mark (``VmHWM``; the interpreter included).
Time to first result: wall clock in the child from before its first import of onnxruntime / edgebert to
the first output (the interpreter's own start is the same for all and not counted). Medians and minima
over the repeats, ratios of medians; the goals of the issue are printed beside them (EdgeSession peak RSS
<= 1.15x plain-ort-int8; time to first result <= 1.2x plain-same). Also the paired ratios (``paired_ratios``): each
round's time over the plain session's of the same round, median over the rounds; on a machine whose speed drifts
between rounds (the 2-vCPU VMs: the plain session's median moved 0.16-0.31 s between runs) they move less than a
ratio of medians.

Also recorded: every graph file's MB, the one-device bundle (``edgebert pack`` of the target the session
picked, and of ``int4`` where the bundle has the small graph, as .tar.gz, and its files unpacked), the machine (CPU model and kind), versions, threads and the
load average before and after (other work on the cores skews every figure: run it on an idle machine).
Results: ``benchmarks/results/footprint/<name>_<cpu kind>.json`` and ``.md`` (accuracy and the Markdown:
``footprint_parts.py``). ``--smoke`` marks the run
as a smoke run (names end in ``_smoke``: a check that the script works, not figures to keep).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "footprint"
TEXT = "The quick brown fox jumps over the lazy dog near the river bank."
KINDS = ("edgebert", "edgebert-first", "edgebert-checked", "edgebert-int4", "plain-same", "plain-ort-int8",
         "plain-optimum-int8", "plain-st-int8")
GOALS = {"rss_vs_ort_int8": 1.15, "first_result_vs_plain_same": 1.2}
# the edgebert kinds timed against plain-same, and their ratios' names: first_result_vs_plain_same<suffix>
RATIO_SUFFIX = {"edgebert": "", "edgebert-first": "_first_open", "edgebert-checked": "_first_open_after_check"}


# --------------------------------------------------------------------------- the child: one measurement
def child(args: argparse.Namespace) -> None:
    """One fresh process: open, run once, print {rss_peak_mb, first_result_s, ...} as JSON."""
    start = time.perf_counter()
    if args.kind.startswith("edgebert"):
        from edgebert.runtime import EdgeSession

        t_import = time.perf_counter()
        session = EdgeSession(args.bundle, threads=args.threads, precision=args.precision)
        t_open = time.perf_counter()
        _first_result(session)
        extra = {"model": session.model_key, "graph": str(session.model_file)}
    else:
        import numpy as np
        import onnxruntime as ort
        from tokenizers import Tokenizer

        t_import = time.perf_counter()
        tokenizer = Tokenizer.from_file(args.tokenizer)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = args.threads
        opts.inter_op_num_threads = 1
        session = ort.InferenceSession(args.graph, sess_options=opts, providers=["CPUExecutionProvider"])
        t_open = time.perf_counter()
        enc = tokenizer.encode(TEXT)
        feeds = {"input_ids": np.asarray([enc.ids], np.int64),
                 "attention_mask": np.asarray([enc.attention_mask], np.int64),
                 "token_type_ids": np.asarray([enc.type_ids], np.int64)}
        names = {i.name for i in session.get_inputs()}
        session.run(None, {k: v for k, v in feeds.items() if k in names})
        extra = {"graph": args.graph, "tokens": len(enc.ids)}
    done = time.perf_counter()
    print(json.dumps({"rss_peak_mb": round(_peak_rss_kb() / 1024, 1), "first_result_s": round(done - start, 4),
                      "import_s": round(t_import - start, 4), "open_s": round(t_open - t_import, 4),
                      "first_run_s": round(done - t_open, 4), **extra}))


def _peak_rss_kb() -> int:
    """This process's resident-set high-water mark: ``VmHWM`` (Linux; ``ru_maxrss`` would also count the
    parent's memory at the fork before the exec), else ``ru_maxrss``."""
    import resource

    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak // 1024 if sys.platform == "darwin" else peak        # bytes on macOS, KiB elsewhere


def _first_result(session) -> None:
    method = {"embed": "embed", "cls": "classify"}.get(session.task)
    if method:
        getattr(session, method)([TEXT])
    else:
        from edgebert.runtime import pad_batch

        session.run(pad_batch(session.tokenize([TEXT]), session.pad_id))


# --------------------------------------------------------------------------- the parent
def _checked_cache(bundle: Path, threads: int, python: str) -> str:
    """A fresh cache in which ``edgebert check BUNDLE`` ran, as on a device after deployment: every file hashed
    and stamped, the graphs' I/O checked, the CPU probed. (Its PASS / FAIL verdict does not matter here.)"""
    env = {**os.environ, "EDGEBERT_CACHE": tempfile.mkdtemp(prefix="footprint-checked-")}
    check = [python, "-m", "edgebert.cli", "check", str(bundle), "--threads", str(threads)]
    subprocess.run(check, capture_output=True, text=True, timeout=600, cwd=REPO, env=env)
    return env["EDGEBERT_CACHE"]


def _measure(kind: str, bundle: Path, graph: Path | None, tokenizer: Path, threads: int, python: str,
             precision: str | None = None, cache: str | None = None) -> dict:
    cmd = [python, __file__, "--child", kind, "--threads", str(threads), str(bundle)]
    if precision:
        cmd += ["--precision", precision]
    if graph is not None:
        cmd += ["--graph", str(graph), "--tokenizer", str(tokenizer)]
    env = dict(os.environ)
    fresh = kind in ("edgebert-first", "edgebert-checked")
    if fresh:                               # first: nothing stamped, nothing probed; checked: `check` ran in it
        env["EDGEBERT_CACHE"] = cache or tempfile.mkdtemp(prefix="footprint-first-")
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO, env=env)
    finally:
        if fresh:
            shutil.rmtree(env["EDGEBERT_CACHE"], ignore_errors=True)
    if out.returncode != 0:
        raise SystemExit(f"{kind} failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _child_versions(python: str) -> dict:
    """What the timed children run: onnxruntime's package and version, edgebert's install, torch present or not."""
    code = ("import importlib.metadata as m, importlib.util as u, json, onnxruntime, edgebert; "
            "d = [x.metadata['Name'] for x in m.distributions() if x.metadata['Name'].startswith('onnxruntime')]; "
            "print(json.dumps({'onnxruntime': onnxruntime.__version__, 'onnxruntime_packages': d, "
            "'edgebert_from': edgebert.__file__, 'torch_installed': u.find_spec('torch') is not None}))")
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, cwd="/")
    return json.loads(out.stdout) if out.returncode == 0 else {"error": out.stderr[-300:]}


def _ort_int8(fp32: Path, work: Path) -> Path:
    """onnxruntime's quantize_dynamic of the fp32 graph, its defaults."""
    from onnxruntime.quantization import quantize_dynamic

    out = work / "ort_quantize_dynamic.onnx"
    quantize_dynamic(str(fp32), str(out))
    return out


def _one_device(bundle: Path, target: str, work: Path) -> dict:
    """``edgebert pack --target TARGET`` of the bundle (``int4``: its small graph) as .tar.gz and as a folder."""
    from edgebert.errors import ConfigError
    from edgebert.runtime.pack import pack_bundle

    try:
        result = pack_bundle(bundle, target, work / f"one_device_{target}.tar.gz")
    except ConfigError as exc:          # e.g. a graph over its accuracy budget is not packed without fp32
        return {"target": target, "refused": exc.one_line()}
    folder = work / f"one_device_{target}"
    pack_bundle(bundle, target, folder)
    unpacked = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.name.startswith("."))
    return {"target": target, "archive_mb": round(result.bytes / 1e6, 3), "files_mb": round(unpacked / 1e6, 3),
            "files": result.kept, "left_out": [e["file"] for e in result.left_out]}


def _st_int8(checkpoint: Path, work: Path, preset: str) -> Path:
    """sentence-transformers' own INT8: its ONNX backend's export, then ``export_dynamic_quantized_onnx_model``."""
    from sentence_transformers import SentenceTransformer, export_dynamic_quantized_onnx_model

    model = SentenceTransformer(str(checkpoint), backend="onnx", device="cpu")
    model.save(str(work / "st"))
    export_dynamic_quantized_onnx_model(model, preset, str(work / "st"))
    return work / "st" / "onnx" / f"model_qint8_{preset}.onnx"


def _peers(checkpoint: Path, work: Path, kind: str, task: str) -> dict[str, Path]:
    """Optimum's INT8 of the checkpoint (its class for the task); sentence-transformers' for an embedding model."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from int8_targets import optimum_int8

    optimum = optimum_int8(checkpoint, work, kind, task)
    peers = {"plain-optimum-int8": optimum["int8"]}
    if task == "embed":
        peers["plain-st-int8"] = _st_int8(checkpoint, work, optimum["preset"])
    return peers


def _summary(rows: list[dict]) -> dict:
    out = {}
    for key in ("rss_peak_mb", "first_result_s", "import_s", "open_s", "first_run_s"):
        values = [r[key] for r in rows]
        out[key] = {"median": round(statistics.median(values), 4), "min": round(min(values), 4), "all": values}
    return out


def paired_ratios(measured: dict[str, list[dict]]) -> dict[str, float]:
    """Time to first result of each ``edgebert`` kind over ``plain-same``'s, per round (the kinds of one round run back
    to back), median over the rounds: a machine that speeds up or slows down between rounds moves both sides of a
    round alike, where it moves a ratio of medians."""
    plain = [m["first_result_s"] for m in measured["plain-same"]]
    out = {}
    for kind, suffix in RATIO_SUFFIX.items():
        rounds = [m["first_result_s"] / p for m, p in zip(measured[kind], plain)]
        out[f"first_result_vs_plain_same{suffix}"] = round(statistics.median(rounds), 3)
    return out


def run(args: argparse.Namespace) -> dict:
    from edgebert.bundle import read_manifest
    from edgebert.runtime import EdgeSession
    from edgebert.runtime.archive import bundle_folder
    from edgebert.runtime.hostcpu import detect_host
    from edgebert.system.environment import versions
    from footprint_parts import NO_SMALL, SMALL_KIND, SMALL_PRECISION, accuracy, kind_precision

    cache = tempfile.mkdtemp(prefix="footprint-cache-")
    os.environ["EDGEBERT_CACHE"] = cache     # the children's ``edgebert``: stamped and probed by this session
    bundle = bundle_folder(Path(args.bundle))
    manifest = read_manifest(bundle)
    load_before = list(os.getloadavg())
    probe = EdgeSession(bundle, threads=args.threads, precision=args.precision)   # which graph it picks
    tokenizer = bundle / manifest.tokenizer.file
    host = detect_host()
    graphs = {k: {"file": e.file, "mb": round((bundle / e.file).stat().st_size / 1e6, 3)}
              for k, e in manifest.models.items() if (bundle / e.file).is_file()}
    with tempfile.TemporaryDirectory(prefix="footprint-") as tmp:
        work = Path(tmp)
        paths = {"edgebert": None, "edgebert-first": None, "edgebert-checked": None, "plain-same": probe.model_file}
        small = SMALL_PRECISION in manifest.models and (bundle / manifest.models[SMALL_PRECISION].file).is_file()
        if small:                                   # the small graph: EdgeSession(BUNDLE, precision="int4")
            paths[SMALL_KIND] = None
        else:
            print(f"footprint: {NO_SMALL}: no {SMALL_KIND} rows")
        if "fp32" in manifest.models:
            paths["plain-ort-int8"] = _ort_int8(bundle / manifest.models["fp32"].file, work)
            graphs["ort-quantize-dynamic"] = {"file": "(onnxruntime quantize_dynamic of fp32, defaults)",
                                              "mb": round(paths["plain-ort-int8"].stat().st_size / 1e6, 3)}
        if args.checkpoint:
            for kind, graph in _peers(args.checkpoint, work, host.kind, manifest.task).items():
                paths[kind] = graph
                graphs[kind.removeprefix("plain-")] = {"file": f"({kind} of {args.checkpoint.name})",
                                                       "mb": round(graph.stat().st_size / 1e6, 3)}
        same = ("edgebert-first", "edgebert-checked", "plain-same")       # the graph of `edgebert`: its figure
        vs_fp32 = accuracy(bundle, {k: v for k, v in paths.items() if k not in same}, args.threads,
                           args.precision) if not args.no_accuracy else None
        target = probe.int8_choice.target if probe.int8_choice and probe.precision == "int8" else None
        one_device = _one_device(bundle, target, work) if target and "fp32" in manifest.models else None
        small_graph = {"model": SMALL_PRECISION, "file": manifest.models[SMALL_PRECISION].file,
                       "one_device": _one_device(bundle, SMALL_PRECISION, work) if "fp32" in manifest.models else None
                       } if small else None
        del probe
        for kind in ("edgebert", SMALL_KIND) if small else ("edgebert",):             # its cache, as an app's
            _measure(kind, bundle, None, tokenizer, args.threads, args.child_python, kind_precision(kind, args.precision))
        checked = [_checked_cache(bundle, args.threads, args.child_python) for _ in range(args.repeats)]
        time.sleep(15)                                           # the checks' load settles before the timing
        load_timed = list(os.getloadavg())
        measured: dict[str, list[dict]] = {k: [] for k in paths}
        rng = random.Random(0)
        for i in range(args.repeats):   # interleaved, a new order each round: no kind always first or after another
            kinds = list(paths.items())
            rng.shuffle(kinds)
            for kind, graph in kinds:
                measured[kind].append(_measure(kind, bundle, graph, tokenizer, args.threads, args.child_python,
                                               kind_precision(kind, args.precision),
                                               checked[i] if kind == "edgebert-checked" else None))
    load_after = list(os.getloadavg())
    shutil.rmtree(cache, ignore_errors=True)
    summary = {k: _summary(v) for k, v in measured.items()}
    ratios = {}
    med = {k: {m: s[m]["median"] for m in ("rss_peak_mb", "first_result_s")} for k, s in summary.items()}
    if "plain-ort-int8" in med:
        ratios["rss_vs_ort_int8"] = round(med["edgebert"]["rss_peak_mb"] / med["plain-ort-int8"]["rss_peak_mb"], 3)
    ratios["rss_vs_plain_same"] = round(med["edgebert"]["rss_peak_mb"] / med["plain-same"]["rss_peak_mb"], 3)
    for kind, suffix in RATIO_SUFFIX.items():
        ratios[f"first_result_vs_plain_same{suffix}"] = round(med[kind]["first_result_s"]
                                                              / med["plain-same"]["first_result_s"], 3)
    paired = paired_ratios(measured)
    if SMALL_KIND in med:                   # the small graph against the graph the session picks by default
        for key, name in (("rss_peak_mb", "rss"), ("first_result_s", "first_result")):
            ratios[f"small_{name}_vs_edgebert"] = round(med[SMALL_KIND][key] / med["edgebert"][key], 3)
    return {"bundle": str(args.bundle), "name": args.name, "smoke": args.smoke, "task": manifest.task,
            "picked": {"model": measured["edgebert"][0].get("model"), "graph": measured["edgebert"][0].get("graph"),
                       "target": target},
            "machine": {"cpu": host.model, "kind": host.kind, "arch": host.arch, "u8s8": host.u8s8,
                        "usable_cpus": len(os.sched_getaffinity(0))},
            "versions": versions(), "threads": args.threads, "precision": args.precision or "(default)",
            "repeats": args.repeats, "text": TEXT,
            "child_python": args.child_python, "child_versions": _child_versions(args.child_python),
            "load_average": {"before": [round(x, 2) for x in load_before], "after": [round(x, 2) for x in load_after],
                             "timing_started": [round(x, 2) for x in load_timed]},
            "graphs_mb": graphs, "one_device_bundle": one_device, "small_graph": small_graph, "measured": summary,
            "ratios": ratios, "paired_ratios": paired, "accuracy": vs_fp32, "checkpoint": str(args.checkpoint) if args.checkpoint else None,
            "goals": GOALS, "method": __doc__.split("\n\n", 2)[2].split("Also recorded")[0].strip()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bundle")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--precision", default=None,
                        help="EdgeSession's precision (default: the session's own choice, e.g. fp32 where the "
                             "bundle's INT8 graphs missed their accuracy budget)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--name", default=None, help="results file name (default: the bundle folder's)")
    parser.add_argument("--out-dir", type=Path, default=RESULTS)
    parser.add_argument("--smoke", action="store_true", help="mark the output a smoke run (names end in _smoke)")
    parser.add_argument("--checkpoint", type=Path, default=None,
                        help="the model the bundle was exported from: adds Optimum's and sentence-transformers' INT8")
    parser.add_argument("--no-accuracy", action="store_true", help="skip the cosine table")
    parser.add_argument("--child-python", default=sys.executable,
                        help="the interpreter every timed child runs (e.g. a device-like `pip install .[cpu]` venv: "
                             "plain onnxruntime, edgebert installed, no torch); default: this one")
    parser.add_argument("--child", choices=KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--graph", help=argparse.SUPPRESS)
    parser.add_argument("--tokenizer", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.kind = args.child
        return child(args)
    args.name = args.name or Path(args.bundle).name.split(".")[0]
    args.child_python = os.path.abspath(args.child_python)   # not resolved: a venv's python is a link
    result = run(args)
    from edgebert.files.atomic import write_json, write_text
    from footprint_parts import markdown

    stem = f"{args.name}_{result['machine']['kind']}{'_smoke' if args.smoke else ''}"
    write_json(args.out_dir / f"{stem}.json", result)
    write_text(args.out_dir / f"{stem}.md", markdown(result))
    print(markdown(result))
    print(f"written: {args.out_dir / stem}.json / .md")


if __name__ == "__main__":
    main()
