"""How sure is a retention figure? Re-score saved embedding students on more of WikiText-2 test and put a
95% interval on every student / teacher ratio (issue #22).

``benchmarks/embed_students.py`` scores retrieval on the first 300 WikiText-2 test paragraphs: recall@1
there is about 63 hits, so one student's R@1 retention moves by several points between two equally good
students (a hit is 1.6% of the teacher's). This script takes the bundles that script saved
(``RUNS/<recipe>/bundle``), scores the teacher and each bundle (fp32 and INT8) on the same three tasks
with retrieval over ``--paragraphs`` (default: every paragraph of two sentences or more, 1,633), and
draws 2,000 paired bootstrap resamples of the scored items (MRPC dev pairs, SST-2 dev sentences with the
probe fixed, retrieval queries against the whole corpus) to give each retention a 95% percentile
interval. The point figures are ``edgebert.stages.embed_eval``'s (scikit-learn's ROC-AUC, probe and MRR).

    .venv/bin/python benchmarks/embed_rescore.py --recipes long-256-2800,long-256-pool [--paragraphs 300]
    .venv/bin/python benchmarks/embed_rescore.py --bundles small=runs/q4/bundle --precisions int8,int4

``--bundles NAME=DIR,...`` scores bundles saved anywhere (beside or instead of ``--recipes``); ``--precisions``
the graphs of each (default fp32,int8; ``int4``: the small graph of ``export --int8 --int4``), each row with its
graph's bytes.

Writes ``benchmarks/results/embed_rescore/embed_rescore.{json,md}`` (``--stem`` to change), with the CPU and the load.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
RESULTS = REPO / "benchmarks" / "results" / "embed_rescore"
SHARED = REPO.parent / "shared" / "data"
ALL_PARAGRAPHS = 100_000          # more than WikiText-2 test has: every paragraph
RESAMPLES, SEED = 2000, 0
METRICS = ("mrpc_auc", "sst2_probe_accuracy", "retrieval_recall_at_1", "retrieval_recall_at_10", "retrieval_mrr")
LABELS = dict(zip(METRICS, ("MRPC AUC", "SST-2 probe", "R@1", "R@10", "MRR")))


def per_item(vectors: dict[str, np.ndarray], data) -> dict[str, np.ndarray]:
    """What each bootstrap resample needs of one model: pair cosines, probe correctness per dev sentence,
    the right document's rank per query."""
    from edgebert.scores.embeddings import cosine_matrix, pair_cosines, probe_predictions, right_document_ranks

    of = lambda items: np.stack([vectors[t] for t in items])  # noqa: E731
    predicted = probe_predictions(of(data.probe_train), data.probe_train_labels, of(data.probe_dev))
    return {"cos": pair_cosines(of([a for a, _ in data.pairs]), of([b for _, b in data.pairs])),
            "correct": (predicted == data.probe_dev_labels).astype(np.float64),
            "ranks": right_document_ranks(cosine_matrix(of(data.queries), of(data.documents))).astype(np.float64)}


def bootstrap(student: dict[str, np.ndarray], teacher: dict[str, np.ndarray], labels: np.ndarray,
              resamples: int = RESAMPLES, seed: int = SEED) -> dict[str, list[float]]:
    """95% percentile interval of student / teacher per metric, items resampled in pairs (same items
    for both models)."""
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(seed)
    ratios: dict[str, list[float]] = {k: [] for k in METRICS}
    n_pairs, n_dev, n_q = len(labels), len(student["correct"]), len(student["ranks"])
    for _ in range(resamples):
        p = rng.integers(0, n_pairs, n_pairs)
        if len(np.unique(labels[p])) == 2:
            auc_s, auc_t = roc_auc_score(labels[p], student["cos"][p]), roc_auc_score(labels[p], teacher["cos"][p])
            ratios["mrpc_auc"].append(auc_s / auc_t)
        d = rng.integers(0, n_dev, n_dev)
        ratios["sst2_probe_accuracy"].append(student["correct"][d].mean() / teacher["correct"][d].mean())
        q = rng.integers(0, n_q, n_q)
        rs, rt = student["ranks"][q], teacher["ranks"][q]
        for k, name in ((1, "retrieval_recall_at_1"), (10, "retrieval_recall_at_10")):
            ratios[name].append((rs <= k).mean() / max((rt <= k).mean(), 1e-12))
        ratios["retrieval_mrr"].append((1 / rs).mean() / (1 / rt).mean())
    return {k: [float(np.percentile(v, 2.5)), float(np.percentile(v, 97.5))] for k, v in ratios.items()}


def embed_all(path: Path, data, precision: str | None) -> tuple[dict[str, float], dict[str, np.ndarray], float]:
    from edgebert.stages.embed_eval import MAX_SEQ_LEN, embedder, scores_of

    t0 = time.perf_counter()
    embed, _ = embedder(path, precision, MAX_SEQ_LEN)
    texts = data.texts()
    vectors = dict(zip(texts, np.asarray(embed(texts), dtype=np.float64)))
    scores = scores_of(lambda items: np.stack([vectors[t] for t in items]), data)
    return scores, vectors, time.perf_counter() - t0


def markdown(result: dict[str, Any]) -> str:
    env = result["environment"]
    out = ["# Embedding students: retention with 95% intervals", "",
           f"Retrieval over {result['data']['paragraphs']} WikiText-2 test paragraphs (first sentence -> the rest), "
           f"MRPC dev {result['data']['mrpc_pairs']} pairs, SST-2 probe on {result['data']['sst2_train']} train / "
           f"{result['data']['sst2_dev']} dev sentences; texts cut at 256 tokens. Intervals: {RESAMPLES} paired "
           "bootstrap resamples of the scored items, 2.5th-97.5th percentile of student / teacher.", "",
           f"CPU: {env.get('cpu')} ({env.get('cpu_count')} CPUs), onnxruntime {env.get('onnxruntime')}; load average "
           f"{result['load_before']} before, {result['load_after']} after.", "",
           "| model | " + " | ".join(LABELS[k] for k in METRICS) + " |", "|---|" + "---|" * len(METRICS),
           "| teacher (PyTorch fp32) | " + " | ".join(f"{result['teacher'][k]:.3f}" for k in METRICS) + " |"]
    for name, row in result["students"].items():
        for precision in row:
            s, r, ci = row[precision]["scores"], row[precision]["retention"], row[precision]["interval"]
            size = f" ({row[precision]['graph_bytes'] / 1e6:.2f} MB)" if row[precision].get("graph_bytes") else ""
            out.append(f"| {name} {precision.upper() if precision == 'int8' else precision}{size} | " + " | ".join(
                f"{s[k]:.3f} ({100 * r[k]:.1f}%, {100 * ci[k][0]:.0f}-{100 * ci[k][1]:.0f}%)" for k in METRICS) + " |")
    out += ["", f"Total {result['wall_s']:.0f} s. Command: `{result['command']}`", ""]
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--recipes", default="", help="comma-separated recipe names with a saved RUNS/<name>/bundle")
    ap.add_argument("--bundles", default="", help="comma-separated NAME=DIR of bundles saved elsewhere")
    ap.add_argument("--precisions", default="fp32,int8", help="the graphs of each bundle to score")
    ap.add_argument("--runs", type=Path, default=REPO / "runs" / "embed_students")
    ap.add_argument("--teacher", type=Path, default=None, help="default: the installed all-MiniLM-L6-v2")
    ap.add_argument("--data", type=Path, default=SHARED)
    ap.add_argument("--paragraphs", type=int, default=ALL_PARAGRAPHS, help="default: all of WikiText-2 test")
    ap.add_argument("--stem", default="embed_rescore")
    args = ap.parse_args()

    from edgebert.files.atomic import write_json, write_text
    from edgebert.pipeline.config import installed_teacher
    from edgebert.stages.embed_eval import DownstreamData, retention
    from edgebert.system.environment import describe

    t0, load_before = time.perf_counter(), [round(x, 2) for x in os.getloadavg()]
    data = DownstreamData.load(args.data, paragraphs=args.paragraphs)
    teacher_scores, teacher_vectors, _ = embed_all(args.teacher or installed_teacher(), data, None)
    teacher_items = per_item(teacher_vectors, data)
    print(f"teacher on {data.describe()}: {teacher_scores}", flush=True)
    students: dict[str, Any] = {}
    bundles = {n.strip(): args.runs / n.strip() / "bundle" for n in args.recipes.split(",") if n.strip()}
    bundles.update({n.split("=", 1)[0]: Path(n.split("=", 1)[1]) for n in args.bundles.split(",") if "=" in n})
    if not bundles:
        raise SystemExit("name --recipes or --bundles")
    for name, bundle in bundles.items():
        if not (bundle / "manifest.json").is_file():
            raise SystemExit(f"{bundle} has no bundle: run benchmarks/embed_students.py --recipes {name} first")
        models = json.loads((bundle / "manifest.json").read_text())["models"]
        students[name] = {}
        for precision in [p.strip() for p in args.precisions.split(",") if p.strip()]:
            scores, vectors, seconds = embed_all(bundle, data, precision)
            interval = bootstrap(per_item(vectors, data), teacher_items, data.pair_labels)
            key = precision                      # the manifest entry: fp32, int8 (the portable graph), int4
            students[name][precision] = {"scores": scores, "retention": retention(scores, teacher_scores),
                                         "interval": interval, "seconds": round(seconds, 1),
                                         "graph_bytes": (bundle / models[key]["file"]).stat().st_size
                                         if key in models else None}
            print(name, precision, {k: round(v, 3) for k, v in students[name][precision]["retention"].items()},
                  flush=True)
    result = {"benchmark": "embed_rescore", "data": data.describe(), "teacher": teacher_scores, "students": students,
              "resamples": RESAMPLES, "wall_s": round(time.perf_counter() - t0, 1), "load_before": load_before,
              "load_after": [round(x, 2) for x in os.getloadavg()], "environment": describe(),
              "command": "python benchmarks/embed_rescore.py " + " ".join(sys.argv[1:])}
    write_json(RESULTS / f"{args.stem}.json", result)
    write_text(RESULTS / f"{args.stem}.md", markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
