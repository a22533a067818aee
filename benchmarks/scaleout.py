"""Scale-out (issue 51): texts/s of one bundle on ``local`` worker processes, Ray Data and Spark against one
in-process ``EdgeSession``, in the same run on the same texts; and the local engine's scaling on pinned cores.

    PYTHONPATH=. python benchmarks/scaleout.py BUNDLE [--engines local,ray,spark] [--workers 2] [--threads 1]
    PYTHONPATH=. python benchmarks/scaleout.py BUNDLE --scaling [--workers-list 1,2,4,8]
    PYTHONPATH=. python benchmarks/scaleout.py BUNDLE --quick --out /tmp/so     # end to end in seconds: no figures

Needs only numpy, onnxruntime, tokenizers and pyarrow (+ ray / pyspark for those engines; an engine whose package
is missing is reported as not measured, with the reason) and the repository on PYTHONPATH: nothing is installed
or exported here; BUNDLE is a folder (or archive) made beforehand. Texts: SST-2 dev sentences + WikiText-2 test
paragraphs from ``--data`` (a ``qa`` bundle: SQuAD dev questions and their paragraphs).

Per engine: start-up (pool / actors / Spark session and Python workers up, each session open) apart from steady
state (texts/s once warm; Ray's actors live for one execution: its start-up is the time until one block per actor
is back, its steady rate the rows after those over the time after them: give it many blocks, ``--texts``), time ratio to the single process (the goal on 2
cores: <= 1.15), memory per worker (RSS), and the outputs against the single process's (max abs diff of
embeddings; agreement of labels / entities / answers).
``--scaling``: the local engine with 1, 2, 4, 8 workers of one thread, each pinned to its own core
(``os.sched_setaffinity``), speed-up against 1 worker (the goal: >= 0.8 x linear at 8). The CPU, the cores and the
load average before and after are written with the results (``--out``: scaleout.json / .md, scaling.json / .md).
Triton: ``RUNNERS["triton"]`` is the hook (a runner takes the texts and returns its timings and outputs).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from edgebert.scaleout import engines  # noqa: E402
from edgebert.scaleout.batch import bundle_task_of  # noqa: E402
from edgebert.scaleout.tasks import run_task, task_columns  # noqa: E402
from edgebert.system.environment import cpu_model, usable_cpus  # noqa: E402

# Rows per call, the same for every engine and the single process (``--rows-per-call``): EdgeSession length-sorts
# the rows of one call into batches, so fewer rows per call pad more (MiniLM INT8, 1 thread, this repository's text
# mix: 89.7 texts/s at 1,200 rows a call, 41.9 at 150, 17.2 at 38); equal calls leave the engines' own overhead.
ROWS_PER_CALL = 600


class NotMeasured(Exception):
    """An engine that cannot run here (its package is missing): reported with the reason."""


# --------------------------------------------------------------------------- texts
def load_texts(data: Path, task: str, n: int) -> list[list[str]]:
    """Input columns: SST-2 dev sentences + WikiText-2 test paragraphs (about 3:1), or SQuAD (question, context)."""
    if task == "qa":
        squad = json.loads((data / "squad" / "dev-v2.0-first10.json").read_text(encoding="utf-8"))
        pairs = [(q["question"], p["context"]) for a in squad["data"] for p in a["paragraphs"] for q in p["qas"]]
        pairs = (pairs * (n // max(len(pairs), 1) + 1))[:n]
        return [[q for q, _ in pairs], [c for _, c in pairs]]
    lines = (data / "sst2" / "dev.tsv").read_text(encoding="utf-8").splitlines()[1:]
    sst = [line.split("\t")[0].strip() for line in lines if line.strip()]
    wiki = [p.strip() for p in (data / "wikitext-2-raw" / "wiki.test.raw").read_text(encoding="utf-8").splitlines()
            if len(p.split()) >= 20 and not p.strip().startswith("=")]
    k = n // 4
    texts = sst[:n - k] + wiki[:k]
    texts = (texts * (n // max(len(texts), 1) + 1))[:n]
    order = np.random.default_rng(0).permutation(n)          # long paragraphs spread over every part
    return [[texts[i] for i in order]]


def chunks(columns: list[list[str]], rows: int) -> list[tuple[int, list[list[str]]]]:
    n = len(columns[0])
    return [(i, [c[s:s + rows] for c in columns]) for i, s in enumerate(range(0, n, rows))]


def rss_mb(pid: int | str = "self") -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


# --------------------------------------------------------------------------- the single process
def run_single(bundle: str, spec, columns, threads: int, batch_size: int, repeats: int) -> dict:
    from edgebert.runtime import EdgeSession

    start = time.perf_counter()
    session = EdgeSession(bundle, provider="cpu", threads=threads, batch_size=batch_size)
    startup = time.perf_counter() - start
    run_task(session, spec, [c[:batch_size] for c in columns], batch_size)          # warm
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        parts = [run_task(session, spec, cols, batch_size) for _, cols in chunks(columns, ROWS_PER_CALL)]
        times.append(time.perf_counter() - start)
        out = {k: [v for part in parts for v in part[k]] for k in parts[0]}
    return {"layout": f"1 process x {threads} threads", "startup_s": startup, "steady_s": float(np.median(times)),
            "rss_mb": [rss_mb()], "outputs": out}


# --------------------------------------------------------------------------- local worker processes
def _ready(pause: float) -> tuple[int, float | None]:
    time.sleep(pause)             # long enough that every worker takes one
    return os.getpid(), rss_mb()


def run_local(bundle: str, spec, columns, workers: int, threads: int, batch_size: int, repeats: int,
              pin: bool = False, part_rows: int | None = None) -> dict:
    """``part_rows``: rows per part (default: 4 parts per worker). Scaling keeps it the same for every worker
    count, so that every count pads the same batches: smaller parts pad more (each part is length-sorted and
    batched on its own), which would be counted against the larger counts."""
    import multiprocessing

    options = {"bundle": bundle, "task": spec_task(spec), "batch_size": batch_size, "engine": "local",
               "workers": workers, "threads": threads}
    context = multiprocessing.get_context("spawn")
    cores = None
    if pin:
        cores = context.Queue()
        for core in physical_cores()[:workers]:
            cores.put(core)
    start = time.perf_counter()
    with ProcessPoolExecutor(workers, mp_context=context, initializer=engines._start_worker,
                             initargs=(options, cores)) as pool:
        list(pool.map(_ready, [0.3] * workers))
        startup = time.perf_counter() - start
        parts = chunks(columns, part_rows or ROWS_PER_CALL)
        times, results = [], {}
        for _ in range(repeats):
            start = time.perf_counter()
            futures = [pool.submit(engines._run_part, i, cols, spec) for i, cols in parts]
            results = dict(f.result() for f in futures)
            times.append(time.perf_counter() - start)
        memory = dict(pool.map(_ready, [0.3] * workers))
    outputs = {name: [v for i in sorted(results) for v in results[i].column(name).to_pylist()]
               for name in spec.outputs}
    return {"layout": f"{workers} workers x {threads} threads{' (pinned)' if pin else ''}", "startup_s": startup,
            "steady_s": float(np.median(times)), "rss_mb": sorted(memory.values()), "outputs": outputs}


def physical_cores() -> list[int]:
    """One usable logical CPU per physical core (the lowest of its hyper-thread siblings), so that pinned workers
    never share a core; then the siblings, where there are more workers than cores."""
    usable = sorted(os.sched_getaffinity(0))
    firsts, rest = [], []
    for cpu in usable:
        try:
            text = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list").read_text().strip()
            siblings = [int(x) for part in text.split(",") for x in
                        (range(int(part.split("-")[0]), int(part.split("-")[-1]) + 1))]
        except (OSError, ValueError):
            siblings = [cpu]
        (firsts if min(c for c in siblings if c in usable) == cpu else rest).append(cpu)
    return firsts + rest


def spec_task(spec) -> str:
    return {"embed": "embed", "classify": "cls", "tag": "token-cls", "answer": "qa"}[spec.method]


# --------------------------------------------------------------------------- Ray Data
def run_ray(bundle: str, spec, columns, workers: int, threads: int, batch_size: int, repeats: int) -> dict:
    try:
        import pyarrow as pa
        import ray
    except ImportError as exc:
        raise NotMeasured(f"ray is not installed ({exc.name}): pip install 'edgebert[ray]'") from exc
    from edgebert.scaleout.ray_data import PID_COLUMN, BundleMapper, map_kwargs

    class Measured(BundleMapper):
        def __call__(self, batch):
            out = super().__call__(batch)
            return out.append_column("rss_mb", pa.array([rss_mb()] * out.num_rows, pa.float64()))

    start = time.perf_counter()
    if not ray.is_initialized():
        ray.init(num_cpus=workers * threads, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    cluster = time.perf_counter() - start
    names = ["question", "context"] if spec.inputs == ("question", "context") else ["text"]
    kwargs = map_kwargs(bundle, workers=workers, threads=threads, columns=names, batch_size=batch_size,
                        task=spec_task(spec), with_pid=True, rows_per_call=ROWS_PER_CALL)

    def execute(cols) -> tuple[float, float, object]:
        """(start-up: until one block per actor is back, steady: the rows after those over the time after, table)"""
        n = len(cols[0])
        table = pa.table({"id": list(range(n)), **dict(zip(names, cols))})
        blocks = [table.slice(s, ROWS_PER_CALL) for s in range(0, n, ROWS_PER_CALL)]
        start = time.perf_counter()
        got, first, first_rows = [], None, 0
        for batch in ray.data.from_arrow(blocks).map_batches(Measured, **kwargs).iter_batches(
                batch_format="pyarrow", batch_size=None):
            got.append(batch)
            if len(got) <= workers:          # every actor's first block back: start-up over, all actors busy
                first, first_rows = time.perf_counter(), first_rows + batch.num_rows
        end = time.perf_counter()
        rate = (n - first_rows) / (end - first) if n > first_rows and end > first else n / (end - start)
        return first - start, n / rate, pa.concat_tables(got).sort_by("id")

    runs = [execute(columns) for _ in range(repeats)]
    tiny = float(np.median([r[0] for r in runs]))
    steady = float(np.median([r[1] for r in runs]))
    out = runs[-1][2]
    memory = {}
    for pid, rss in zip(out.column(PID_COLUMN).to_pylist(), out.column("rss_mb").to_pylist()):
        memory[pid] = max(memory.get(pid) or 0, rss or 0)
    return {"layout": f"{workers} actors x {threads} CPUs", "startup_s": cluster + tiny, "steady_s": steady,
            "rss_mb": sorted(memory.values()),
            "outputs": {name: out.column(name).to_pylist() for name in spec.outputs}}


# --------------------------------------------------------------------------- Spark
def run_spark(bundle: str, spec, columns, workers: int, threads: int, batch_size: int, repeats: int) -> dict:
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise NotMeasured(f"pyspark is not installed ({exc.name}): pip install 'edgebert[spark]'") from exc
    from edgebert.scaleout.spark import bundle_udf, rows_of, ship_bundle

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    start = time.perf_counter()
    spark = (SparkSession.builder.master(f"local[{workers * threads}]").config("spark.task.cpus", str(threads))
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.ui.enabled", "false").config("spark.python.worker.reuse", "true").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    names = ["question", "context"] if spec.inputs == ("question", "context") else ["text"]
    udf = bundle_udf(ship_bundle(spark, bundle), spec_task(spec), batch_size=batch_size, rows_per_call=ROWS_PER_CALL)

    def execute(cols) -> tuple[float, list]:
        rows = list(zip(range(len(cols[0])), *cols))
        start = time.perf_counter()
        frame = spark.createDataFrame(rows, ["id", *names]).repartition(max(workers, len(rows) // ROWS_PER_CALL))
        got = frame.select("id", udf(*names).alias("r")).collect()
        return time.perf_counter() - start, [rows_of(r["r"]) for r in sorted(got, key=lambda r: r["id"])]

    _, _ = execute([c[:workers * 2] for c in columns])                # Python workers up, sessions open
    startup = time.perf_counter() - start
    fulls = [execute(columns) for _ in range(repeats)]
    values = fulls[-1][1]
    memory = [rss_mb(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _is_spark_python(p)]
    spark.stop()
    outputs = ({"embedding": values} if spec.outputs == ("embedding",)
               else {n: [v[n] for v in values] for n in spec.outputs})
    return {"layout": f"local[{workers * threads}], {workers} tasks x {threads} CPUs", "startup_s": startup,
            "steady_s": float(np.median([t for t, _ in fulls])), "rss_mb": sorted(m for m in memory if m),
            "outputs": outputs}


def _is_spark_python(proc: Path) -> bool:
    try:
        return b"pyspark" in (proc / "cmdline").read_bytes() and b"daemon" in (proc / "cmdline").read_bytes()
    except OSError:
        return False


def run_triton(bundle: str, spec, columns, workers: int, threads: int, batch_size: int, repeats: int) -> dict:
    """The bundle behind a real Triton server (``edgebert triton-repo``, Python backend, ``workers`` instances x
    ``threads``; the server from ``.venv-triton``): the texts sent in requests of ``batch_size`` rows by as many
    client threads as instances (steady state, start-up = the server ready), then the load of one text per request
    at 1, 8 and 64 concurrent clients (``triton_load.measure``: requests/s, p50 / p99 ms). The client runs on the
    same cores as the server (named in the results)."""
    import tempfile
    import threading
    from concurrent.futures import ThreadPoolExecutor

    try:
        import tritonclient.http as http

        from edgebert.scaleout.triton_repo import write_triton_repo
        from triton_load import CONCURRENCY, TritonServer, TritonUnavailable, infer, measure
    except ImportError as exc:
        raise NotMeasured(f"{exc.name} is not installed (make test-scaleout's venv has it)") from exc
    from edgebert.runtime import EdgeSession

    names = ["question", "context"] if spec.method == "answer" else ["text"]
    here = EdgeSession(bundle, provider="cpu", threads=1)        # the graph the single process runs, served
    target = here.int8_choice.target if here.precision == "int8" and here.int8_choice else None
    with tempfile.TemporaryDirectory() as tmp:
        repo = write_triton_repo(bundle, Path(tmp) / "repo", instances=workers, threads=threads,
                                 cores=workers * threads, max_batch=max(batch_size, 64), target=target,
                                 precision=here.precision)
        model = repo.model
        start = time.perf_counter()
        try:
            server = TritonServer([Path(tmp) / "repo"]).__enter__()
        except TritonUnavailable as exc:
            raise NotMeasured(f"the Triton server did not start: {str(exc)[:200]}") from exc
        try:
            startup = time.perf_counter() - start
            n = len(columns[0])
            batches = [{name: col[s:s + batch_size] for name, col in zip(names, columns)}
                       for s in range(0, n, batch_size)]
            meta = http.InferenceServerClient(server.url).get_model_metadata(model)
            outputs = [o["name"] for o in meta["outputs"]]
            local = threading.local()        # tritonclient.http clients are gevent-based: one per thread

            def send(k: int) -> dict:
                if not hasattr(local, "client"):
                    local.client = http.InferenceServerClient(server.url, network_timeout=300)
                return infer(local.client, model, batches[k], outputs)

            times, got = [], []
            for _ in range(repeats):
                begin = time.perf_counter()
                with ThreadPoolExecutor(workers) as pool:
                    got = list(pool.map(send, range(len(batches))))
                times.append(time.perf_counter() - begin)
            texts = columns[0] if spec.method != "answer" else {"question": columns[0], "context": columns[1]}
            load = {str(c): measure(server.url, model, texts, c, seconds=8.0) for c in CONCURRENCY}
        finally:
            server.__exit__()
    joined = {o: [row for part in got for row in part[o]] for o in outputs}
    result = {"layout": f"{workers} instances x {threads} threads (Python backend)", "startup_s": startup,
              "steady_s": float(np.median(times)), "rss_mb": ["server"], "load": load}
    if spec.outputs == ("embedding",):
        result["outputs"] = {"embedding": [np.asarray(v, np.float32) for v in joined["embedding"]]}
    elif spec.method == "classify":
        result["outputs"] = {"label": [v.decode() if isinstance(v, bytes) else str(v)
                                       for v in np.asarray(joined["label"]).reshape(-1)]}
    else:
        result["outputs"] = {}
    return result


RUNNERS = {"local": run_local, "ray": run_ray, "spark": run_spark, "triton": run_triton}


# --------------------------------------------------------------------------- same outputs
def agreement(spec, got: dict, want: dict) -> dict:
    if spec.outputs == ("embedding",):
        diff = np.abs(np.stack(got["embedding"]) - np.stack(want["embedding"])).max()
        return {"max_abs_diff": float(diff)}
    key = {"classify": "label", "tag": "entities", "answer": "answer"}[spec.method]
    if spec.method == "tag":
        strip = lambda rows: [[(e["entity"], e["word"], e["start"], e["end"]) for e in r] for r in rows]  # noqa: E731
        same = np.mean([a == b for a, b in zip(strip(got[key]), strip(want[key]))])
    else:
        same = np.mean([a == b for a, b in zip(got[key], want[key])])
    return {"agreement": float(same)}


def topology() -> dict:
    """Logical CPUs, physical cores and sockets this process may use (from sysfs), for the scaling figures."""
    usable = sorted(os.sched_getaffinity(0))
    cores, sockets = set(), set()
    for cpu in usable:
        base = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            socket = (base / "physical_package_id").read_text().strip()
            cores.add((socket, (base / "core_id").read_text().strip()))
            sockets.add(socket)
        except OSError:
            pass
    return {"logical_cpus": len(usable), "physical_cores": len(cores) or None, "sockets": len(sockets) or None}


def host(load_before) -> dict:
    import onnxruntime

    return {"cpu": cpu_model(), "cores": usable_cpus(), "python": platform.python_version(),
            "onnxruntime": onnxruntime.__version__, "numpy": np.__version__,
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in os.getloadavg()]}


def write(out: Path, name: str, result: dict, table: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    (out / f"{name}.md").write_text("\n".join(table) + "\n", encoding="utf-8")
    print("\n".join(table))
    print(f"wrote {out / name}.json and .md")


def main(argv: list[str] | None = None) -> int:
    global ROWS_PER_CALL
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("bundle")
    parser.add_argument("--engines", default="local,ray,spark")
    parser.add_argument("--workers", type=int, default=None, help="default: the cores / --threads")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--texts", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "scaleout")
    parser.add_argument("--scaling", action="store_true")
    parser.add_argument("--rows-per-call", type=int, default=ROWS_PER_CALL,
                        help="rows per engine call (part, Ray batch, Spark Arrow batch) and per single-process call")
    parser.add_argument("--workers-list", default="1,2,4,8")
    parser.add_argument("--part-rows", type=int, default=None,
                        help="--scaling: rows per part, the same for every worker count (default: 4 parts per "
                             "worker at the largest count)")
    parser.add_argument("--parts-per-worker", type=int, default=None,
                        help="--scaling: give each worker count this many parts of --part-rows per worker (the same "
                             "work per worker at every count) instead of the same texts for every count")
    parser.add_argument("--quick", action="store_true", help="few texts, one repeat: checks the script, no figures")
    args = parser.parse_args(argv)
    ROWS_PER_CALL = args.rows_per_call
    if args.quick:
        args.texts, args.repeats = min(args.texts, 48), 1
    load_before = os.getloadavg()
    task = bundle_task_of(Path(args.bundle))
    spec = task_columns(task)
    columns = load_texts(args.data, task, args.texts)
    n = len(columns[0])
    cores = usable_cpus()
    if args.scaling:
        counts = [w for w in (int(x) for x in args.workers_list.split(",")) if w <= cores]
        part_rows = args.part_rows or -(-n // (4 * max(counts)))        # the same parts for every count
        if args.parts_per_worker:
            need = args.parts_per_worker * part_rows * max(counts)
            columns = load_texts(args.data, task, need) if need > n else columns
        rows, base = [], None
        for w in counts:
            cols = ([c[:args.parts_per_worker * part_rows * w] for c in columns] if args.parts_per_worker
                    else columns)
            r = run_local(args.bundle, spec, cols, w, 1, args.batch_size, args.repeats, pin=True,
                          part_rows=part_rows)
            rate = len(cols[0]) / r["steady_s"]
            base = base or rate
            rows.append({"workers": w, "texts": len(cols[0]), "texts_per_s": rate, "speedup": rate / base,
                         "efficiency": rate / base / w, "startup_s": r["startup_s"], "rss_mb": r["rss_mb"],
                         "cpus": physical_cores()[:w]})
            print(f"{w} workers: {rate:.1f} texts/s, {rate / base / w:.2f} x linear", flush=True)
        n = max(r["texts"] for r in rows)
        result = {"bundle": args.bundle, "task": task, "texts": n, "part_rows": part_rows, "host": host(load_before),
                  "batch_size": args.batch_size, "parts_per_worker": args.parts_per_worker,
                  "topology": topology(), "rows": rows,
                  "skipped": [int(x) for x in args.workers_list.split(",") if int(x) > cores], "quick": args.quick}
        work = (f"{args.parts_per_worker} parts of {part_rows} texts per worker" if args.parts_per_worker
                else f"{n} texts in parts of {part_rows}")
        table = [f"scaling, local engine, 1 thread per worker pinned to its own physical core: {work}, batch "
                 f"{args.batch_size}, {task}, "
                 f"{result['host']['cpu']} ({cores} cores), load {result['host']['load_average_before']}",
                 "", "| workers | texts/s | speed-up | x linear | start-up s | RSS MB per worker |",
                 "| ---: | ---: | ---: | ---: | ---: | --- |"]
        table += [f"| {r['workers']} | {r['texts_per_s']:.1f} | {r['speedup']:.2f} | {r['efficiency']:.2f} | "
                  f"{r['startup_s']:.2f} | {r['rss_mb']} |" for r in rows]
        table += ["", f"CPUs used: {rows[-1]['cpus']}; topology {result['topology']}"]
        write(args.out, "scaling", result, table)
        return 0
    threads = args.threads
    workers = args.workers or max(1, cores // threads)
    single = run_single(args.bundle, spec, columns, cores, args.batch_size, args.repeats)
    rows = [{"engine": "single process", **{k: v for k, v in single.items() if k != "outputs"}}]
    for engine in args.engines.split(","):
        try:
            r = RUNNERS[engine](args.bundle, spec, columns, workers, threads, args.batch_size, args.repeats)
        except NotMeasured as exc:
            rows.append({"engine": engine, "not_measured": str(exc)})
            continue
        except Exception as exc:  # noqa: BLE001  (one engine failing keeps the others' figures)
            rows.append({"engine": engine, "not_measured": f"failed: {type(exc).__name__}: {str(exc)[:200]}"})
            continue
        same = agreement(spec, r.pop("outputs"), single["outputs"])
        rows.append({"engine": engine, **r, **same, "ratio": r["steady_s"] / single["steady_s"]})
    result = {"bundle": args.bundle, "task": task, "texts": n, "batch_size": args.batch_size,
              "rows_per_call": ROWS_PER_CALL,
              "host": host(load_before), "rows": rows, "quick": args.quick}
    table = [f"{n} texts ({'SQuAD' if task == 'qa' else 'SST-2 dev + WikiText-2'}) in calls of {ROWS_PER_CALL} rows, "
             f"{task}, {result['host']['cpu']} "
             f"({cores} cores), load {result['host']['load_average_before']} -> {result['host']['load_average_after']}",
             "", "| engine | layout | start-up s | steady texts/s | time / single | RSS MB per worker | same outputs |",
             "| --- | --- | ---: | ---: | ---: | --- | --- |"]
    for r in rows:
        if "not_measured" in r:
            table.append(f"| {r['engine']} | not measured: {r['not_measured']} | | | | | |")
            continue
        same = (f"max diff {r['max_abs_diff']:.1e}" if "max_abs_diff" in r
                else f"agreement {r['agreement']:.3f}" if "agreement" in r else "(reference)")
        table.append(f"| {r['engine']} | {r['layout']} | {r['startup_s']:.2f} | {n / r['steady_s']:.1f} | "
                     f"{r.get('ratio', 1.0):.2f} | {r['rss_mb']} | {same} |")
    for r in rows:
        for c, m in (r.get("load") or {}).items():
            table.append(f"\n{r['engine']}, one text per request, {c} concurrent clients: {m['requests_per_s']:.1f} "
                         f"requests/s, p50 {m['p50_ms']:.1f} ms, p99 {m['p99_ms']:.1f} ms (client on the same "
                         f"{m.get('client_cpus', '?')} cores)")
    write(args.out, "scaleout", result, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
