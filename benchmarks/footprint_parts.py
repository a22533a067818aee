"""Parts of ``benchmarks/footprint.py`` (a helper, not a suite): the accuracy figures (cosine / the export gate's
agreement with the bundle's fp32 graph), the small graph's rows (``edgebert-int4``) and the Markdown report."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SST2_DEV = REPO.parent / "shared" / "data" / "sst2" / "dev.tsv"
CONLL_TEST = REPO.parent / "shared" / "data" / "conll2003" / "test.txt"
SMALL_KIND = "edgebert-int4"        # EdgeSession(BUNDLE, precision="int4"): the bundle's small graph
SMALL_PRECISION = "int4"            # its manifest key, its precision and its `edgebert pack --target`
NO_SMALL = "no small (int4) graph in the bundle (export with --int8 --int4)"


def kind_precision(kind: str, precision: str | None) -> str | None:
    """The precision an ``edgebert*`` kind opens its session with: the small graph's for ``SMALL_KIND``, else
    the run's ``--precision``."""
    return SMALL_PRECISION if kind == SMALL_KIND else precision


def task_texts(task: str) -> tuple[list[str], str] | None:
    """The first 300 texts the accuracy figure uses: SST-2 dev sentences (embed, cls), CoNLL-2003 test
    sentences (token-cls); None where the data is absent or the task takes pairs (qa: its F1 comes from
    ``edgebert evaluate``)."""
    if task in ("embed", "cls") and SST2_DEV.is_file():
        lines = SST2_DEV.read_text(encoding="utf-8").splitlines()[1:301]
        return [line.split("\t")[0] for line in lines], "SST-2 dev, first 300 sentences"
    if task == "token-cls" and CONLL_TEST.is_file():
        sentences, words = [], []
        for line in CONLL_TEST.read_text(encoding="utf-8").splitlines():
            if not line.strip() or line.startswith("-DOCSTART-"):
                if words:
                    sentences.append(" ".join(words))
                words = [] if not line.strip() else words
                continue
            words.append(line.split()[0])
        return sentences[:300], "CoNLL-2003 test, first 300 sentences"
    return None


def _task_agreement(bundle: Path, task: str, paths: dict[str, Path | None], threads: int,
                    precision: str | None = None) -> dict | None:
    """The export gate's metric (label / token-label agreement) of each graph's task output against the
    bundle's fp32 graph's, one text at a time."""
    import onnxruntime as ort

    from edgebert.runtime import EdgeSession, pad_batch
    from edgebert.runtime.fidelity import OUTPUT, FidelityTracker

    texts = task_texts(task)
    if texts is None or task not in OUTPUT:
        return None
    texts, what = texts
    reference = EdgeSession(bundle, precision="fp32", threads=threads)
    feeds = [pad_batch(reference.tokenize([t]), reference.pad_id) for t in texts]
    fp32 = [reference.run(f, [OUTPUT[task]])[OUTPUT[task]] for f in feeds]
    out = {}
    for kind, graph in paths.items():
        tracker = FidelityTracker(task)
        if graph is None:
            session = EdgeSession(bundle, threads=threads, precision=kind_precision(kind, precision))
            runs = [session.run(f, [OUTPUT[task]])[OUTPUT[task]] for f in feeds]
        else:
            session = ort.InferenceSession(str(graph), providers=["CPUExecutionProvider"])
            names = {i.name for i in session.get_inputs()}
            runs = [session.run([OUTPUT[task]], {k: v for k, v in f.items() if k in names})[0] for f in feeds]
        for f, ref, got in zip(feeds, fp32, runs):
            tracker.add_outputs(ref, got, f["attention_mask"])
        result = tracker.result()
        out[kind] = {"mean": round(result.mean, 5), "min": None}
    return {"texts": len(texts), "data": what, "metric": FidelityTracker(task).metric, "vs_fp32": out}


def accuracy(bundle: Path, paths: dict[str, Path | None], threads: int, precision: str | None = None) -> dict | None:
    """Cosine with the fp32 graph's sentence vectors on the first 300 SST-2 dev sentences, per way (embedding
    bundles); the gate's agreement metric for classifiers and taggers (``_task_agreement``)."""
    import numpy as np
    import onnxruntime as ort

    from edgebert.bundle import read_manifest
    from edgebert.runtime import EdgeSession, pad_batch

    task = read_manifest(bundle).task
    if task != "embed":
        return _task_agreement(bundle, task, paths, threads, precision)
    if not SST2_DEV.is_file():
        return None
    texts = [line.split("\t")[0] for line in SST2_DEV.read_text(encoding="utf-8").splitlines()[1:301]]
    reference = EdgeSession(bundle, precision="fp32", threads=threads)
    pooling = reference.manifest.pooling
    if pooling is None or pooling.mode != "mean":
        return None
    fp32 = reference.embed(texts)
    out = {}
    for kind, graph in paths.items():
        if graph is None:
            vectors = EdgeSession(bundle, threads=threads, precision=kind_precision(kind, precision)).embed(texts)
        else:
            session = ort.InferenceSession(str(graph), providers=["CPUExecutionProvider"])
            names = {i.name for i in session.get_inputs()}
            rows = []
            for text in texts:     # one at a time: no padding question between the ways
                feeds = pad_batch(reference.tokenize([text]), reference.pad_id)
                hidden = session.run(None, {k: v for k, v in feeds.items() if k in names})[0]
                mask = feeds["attention_mask"][..., None].astype(np.float32)
                rows.append((hidden * mask).sum(1)[0] / mask.sum())
            vectors = np.stack(rows)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        cos = (vectors * fp32).sum(1) / np.linalg.norm(vectors, axis=1) / np.linalg.norm(fp32, axis=1)
        out[kind] = {"mean": round(float(cos.mean()), 5), "min": round(float(cos.min()), 5)}
    return {"texts": len(texts), "data": "SST-2 dev, first 300 sentences", "metric": "cosine", "vs_fp32": out}


def markdown(r: dict) -> str:
    m, goals = r["machine"], r.get("goals", {})
    lines = [f"# Footprint: {r['name']}{' (SMOKE RUN: not figures to keep)' if r['smoke'] else ''}", "",
             f"Machine: {m['cpu']} ({m['kind']}, {m['usable_cpus']} usable CPUs), threads {r['threads']}, "
             f"{r['repeats']} fresh processes per kind; load average before {r['load_average']['before']}, "
             f"as the timing started {r['load_average'].get('timing_started', '-')}, after {r['load_average']['after']}.",
             f"Timed children: {r.get('child_python')} ({r.get('child_versions')}).",
             "Versions: " + ", ".join(f"{k} {v}" for k, v in r["versions"].items() if v), "",
             f"EdgeSession (precision {r.get('precision', '(default)')}) picked {r['picked']['model']} "
             f"({Path(r['picked']['graph'] or '?').name}).", "",
             "| way | peak RSS MB (median / min) | first result s (median / min) | import s | open s | first run s |",
             "|---|---|---|---|---|---|"]
    for kind, s in r["measured"].items():
        lines.append(f"| {kind} | {s['rss_peak_mb']['median']} / {s['rss_peak_mb']['min']} | "
                     f"{s['first_result_s']['median']} / {s['first_result_s']['min']} | {s['import_s']['median']} | "
                     f"{s['open_s']['median']} | {s['first_run_s']['median']} |")
    lines += ["", "Ratios (medians): " + ", ".join(f"{k} {v}" + (f" (goal <= {goals[k]})" if k in goals else "")
                                                 for k, v in r["ratios"].items()), ""]
    if r.get("paired_ratios"):
        lines += ["Paired ratios (each round's time over the plain session's of that round, median over the rounds): "
                  + ", ".join(f"{k} {v}" for k, v in r["paired_ratios"].items()), ""]
    lines += ["| graph | file | MB |", "|---|---|---|"]
    lines += [f"| {k} | {g['file']} | {g['mb']} |" for k, g in r["graphs_mb"].items()]
    if r.get("accuracy"):
        a = r["accuracy"]
        what = ("cosine with the fp32 graph's sentence vectors" if a.get("metric", "cosine") == "cosine" else
                f"{a['metric']} with the fp32 graph's task output")
        lines += ["", f"Accuracy: {what}, {a['data']} ({a['texts']} texts), {m['kind']}:", "",
                  "| way | mean | min |", "|---|---|---|"]
        lines += [f"| {k} | {v['mean']} | {v['min'] if v['min'] is not None else '-'} |"
                  for k, v in a.get("vs_fp32", a.get("cosine_vs_fp32", {})).items()]
    d = r["one_device_bundle"]
    if d and d.get("refused"):
        lines += ["", f"One-device bundle ({d['target']}): not made: {d['refused']}"]
    elif d:
        lines += ["", f"One-device bundle ({d['target']}): {d['archive_mb']} MB as .tar.gz, {d['files_mb']} MB of "
                      f"files; left out: {', '.join(d['left_out'])}"]
    return "\n".join(lines + small_lines(r)) + "\n"


def small_lines(r: dict) -> list[str]:
    """The small graph beside the graph ``EdgeSession`` picks by default: size, one-device archive, peak RSS,
    time to first result, accuracy (the rows issue #50 asks for); a line saying so when the bundle has none."""
    s = r.get("small_graph")
    if not s:
        return ["", f"Small graph: {NO_SMALL}."]
    measured, acc = r["measured"], (r.get("accuracy") or {}).get("vs_fp32", {})
    default, small = r["graphs_mb"].get(r["picked"]["model"] or "", {}), r["graphs_mb"].get(SMALL_PRECISION, {})

    def archive(d: dict | None) -> str:
        if not d:
            return "-"
        return f"not made: {d['refused']}" if d.get("refused") else f"{d['archive_mb']} ({d['files_mb']} unpacked)"

    def timed(kind: str, key: str) -> str:
        return f"{measured[kind][key]['median']} / {measured[kind][key]['min']}" if kind in measured else "-"

    def accuracy(kind: str) -> str:
        a = acc.get(kind)
        return "-" if a is None else f"{a['mean']} / {a['min'] if a['min'] is not None else '-'}"

    metric = (r.get("accuracy") or {}).get("metric", "accuracy")
    rows = [("graph MB", default.get("mb", "-"), small.get("mb", "-")),
            ("one-device archive MB (.tar.gz)", archive(r.get("one_device_bundle")), archive(s.get("one_device"))),
            ("peak RSS MB (median / min)", timed("edgebert", "rss_peak_mb"), timed(SMALL_KIND, "rss_peak_mb")),
            ("first result s (median / min)", timed("edgebert", "first_result_s"), timed(SMALL_KIND, "first_result_s")),
            (f"{metric} vs fp32 (mean / min)", accuracy("edgebert"), accuracy(SMALL_KIND))]
    return ["", f"Small graph ({SMALL_KIND}: EdgeSession precision {SMALL_PRECISION!r}, {small.get('file', '?')}; "
                f"one-device archive: `edgebert pack --target {SMALL_PRECISION}`) beside the default "
                f"({r['picked']['model']}):", "",
            f"| | edgebert ({r['picked']['model']}) | {SMALL_KIND} |", "|---|---|---|",
            *(f"| {name} | {a} | {b} |" for name, a, b in rows)]
