"""Rerank 100 passages for one query: the cross-encoder teacher in sentence-transformers' ``CrossEncoder`` (PyTorch)
against edgebert's bundles (``EdgeSession.rank``: the teacher's fp32 graph, the 4-layer student's fp32 and INT8
graphs) and onnxruntime's default dynamic INT8 of the same student graph (``quantize_dynamic``, its defaults),
with each path's ranking quality on the SQuAD dev questions (MRR@10 / NDCG@10, torchmetrics) and, for the INT8
graphs, their order against the student's fp32 graph (NDCG@10 vs fp32 and top-1 agreement on the 100 built-in
held-out queries: the export gate's measure).

The query is the first dev question; the passages the first 100 sentences of the dev file (SQuAD length: 31 tokens
on average with the question, up to 97). Every path scores the same 100 pairs in batches of 32 (sentence-transformers'
default; EdgeSession's too: length-sorted, padded per batch), 2 intra-op threads, onnxruntime spinning off; the
paths run in rounds, each in its own block after a pause, the order rotating; p50 / p90 over all rounds. Run it on
an idle machine (nothing else of yours): the load average before and after is recorded.

    .venv/bin/python benchmarks/rerank_latency.py --teacher runs/rerank-teacher --teacher-bundle bundles/rerank-teacher \\
        --student-bundle bundles/rerank --retriever $MINILM --data ../shared/data/squad/dev-v2.0-first10.json

Writes ``benchmarks/results/rerank/rerank_latency.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from edgebert.files.atomic import write_json, write_text
from edgebert.system.environment import describe

RESULTS = Path(__file__).resolve().parent / "results" / "rerank"
BATCH = 32


def plain_session(path: Path, threads: int):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--teacher", type=Path, required=True, help="the fine-tuned cross-encoder (a model folder)")
    ap.add_argument("--teacher-bundle", type=Path, required=True)
    ap.add_argument("--student-bundle", type=Path, required=True, help="the student's bundle with its INT8 graph")
    ap.add_argument("--retriever", type=Path, required=True)
    ap.add_argument("--data", type=Path, required=True, help="SQuAD dev file")
    ap.add_argument("--queries", type=int, default=300, help="dev questions for the quality figures")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--pause", type=float, default=0.5)
    args = ap.parse_args()
    load_before = os.getloadavg()

    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from sentence_transformers import CrossEncoder

    from edgebert.data.rerank_data import dev_groups
    from edgebert.qa.rank_groups import builtin_rank_groups, sentences
    from edgebert.qa.squad_file import read_squad
    from edgebert.runtime import EdgeSession
    from edgebert.runtime.fidelity import FidelityTracker
    from edgebert.runtime.text import length_sorted_batches, pad_batch
    from edgebert.stages.rerank_metrics import ranking_figures, split_scores
    from edgebert.stages.retriever import bi_encoder

    torch.set_num_threads(args.threads)
    examples = read_squad(args.data)
    query = next(e.question for e in examples if e.has_answer)
    contexts = list(dict.fromkeys(e.context for e in examples))
    passages = [c[a:b] for c in contexts for a, b in sentences(c)][:100]
    pairs = [(query, p) for p in passages]

    work = Path(tempfile.mkdtemp(prefix="rerank-bench-"))
    ort_default = work / "ort_default_int8.onnx"
    quantize_dynamic(str(args.student_bundle / "onnx" / "model.onnx"), str(ort_default), weight_type=QuantType.QInt8)

    st_model = CrossEncoder(str(args.teacher), device="cpu")
    sessions = {
        "teacher fp32 bundle (EdgeSession)": EdgeSession(args.teacher_bundle, "cpu", "fp32", args.threads,
                                                          allow_spinning=False),
        "student fp32 bundle (EdgeSession)": EdgeSession(args.student_bundle, "cpu", "fp32", args.threads,
                                                          allow_spinning=False),
        "student INT8 bundle (EdgeSession)": EdgeSession(args.student_bundle, "cpu", "int8", args.threads,
                                                          allow_spinning=False),
    }
    student = sessions["student fp32 bundle (EdgeSession)"]
    plain = plain_session(ort_default, args.threads)
    names = [i.name for i in plain.get_inputs()]
    encoder = student.encoder.with_max_length(student.cross_encoder_max_length)

    def ort_logits(items: list[tuple[str, str]]) -> np.ndarray:
        rows = encoder.encode(items, True, True)
        out = np.zeros(len(rows), np.float32)
        for idx in length_sorted_batches(rows, BATCH, student.batch_tokens):
            feeds = pad_batch([rows[i] for i in idx], student.pad_id)
            out[idx] = plain.run(["logits"], {k: feeds[k] for k in names})[0][:, 0]
        return out

    paths = {"sentence-transformers CrossEncoder, teacher (PyTorch)":
             lambda: st_model.predict(pairs, batch_size=BATCH, show_progress_bar=False),
             **{name: (lambda s=s: s.rank(query, passages, batch_size=BATCH)) for name, s in sessions.items()},
             "onnxruntime quantize_dynamic (defaults) of the student graph": lambda: ort_logits(pairs)}
    for fn in paths.values():           # warm up
        for _ in range(3):
            fn()
    times: dict[str, list[float]] = {name: [] for name in paths}
    order = list(paths)
    for r in range(args.rounds):
        for name in order[r % len(order):] + order[:r % len(order)]:
            time.sleep(args.pause)
            t0 = time.perf_counter()
            paths[name]()
            times[name].append((time.perf_counter() - t0) * 1000)
    load_after = os.getloadavg()

    # quality: dev MRR@10 / NDCG@10 (torchmetrics); the INT8 graphs' order against the student's fp32 graph
    groups = dev_groups(examples, bi_encoder(args.retriever), args.queries)
    quality: dict[str, dict] = {}
    scorers = {"sentence-transformers CrossEncoder, teacher (PyTorch)":
               lambda items: st_model.predict(items, batch_size=64, show_progress_bar=False),
               **{name: (lambda items, s=s: s.predict(items, batch_size=64)) for name, s in sessions.items()},
               "onnxruntime quantize_dynamic (defaults) of the student graph": ort_logits}
    for name, score in scorers.items():
        row = {}
        for setting, found in groups.items():
            flat = score([p for g in found for p in g.pairs()])
            row.update({f"{setting}_{k}": round(v, 4) for k, v in
                        ranking_figures(found, split_scores(found, np.asarray(flat))).items() if k != "queries"})
        quality[name] = row
    held = builtin_rank_groups()
    for name, score in (("student INT8 bundle (EdgeSession)", None),
                        ("onnxruntime quantize_dynamic (defaults) of the student graph", ort_logits)):
        tracker = FidelityTracker("rerank")
        for g in held:
            ref = student.predict(g.pairs())
            got = sessions[name].predict(g.pairs()) if score is None else score(g.pairs())
            tracker.add({"scores": np.asarray(ref, np.float64)}, {"scores": np.asarray(got, np.float64)}, len(ref))
        f = tracker.result()
        quality[name].update({"ndcg10_vs_fp32": round(f.mean, 5), "top1_vs_fp32": round(f.top1, 4),
                              "held_out_queries": f.n})

    rows = {name: {"p50_ms": round(float(np.percentile(t, 50)), 2), "p90_ms": round(float(np.percentile(t, 90)), 2),
                   "runs": len(t), **quality[name]} for name, t in times.items()}
    sizes = {"student INT8 bundle (EdgeSession)": student.bundle_dir / sessions["student INT8 bundle (EdgeSession)"]
             .model_file.relative_to(student.bundle_dir),
             "onnxruntime quantize_dynamic (defaults) of the student graph": ort_default,
             "student fp32 bundle (EdgeSession)": student.model_file,
             "teacher fp32 bundle (EdgeSession)": sessions["teacher fp32 bundle (EdgeSession)"].model_file}
    for name, path in sizes.items():
        rows[name]["graph_mb"] = round(Path(path).stat().st_size / 1e6, 2)
    lengths = [len(r) for r in encoder.encode(pairs, True, True)]
    record = {"query": query, "passages": len(passages), "tokens_mean": round(float(np.mean(lengths)), 1),
              "tokens_max": int(max(lengths)), "batch": BATCH, "threads": args.threads, "rounds": args.rounds,
              "load_average_before": load_before, "load_average_after": load_after,
              "environment": describe(), "int8_choice": sessions["student INT8 bundle (EdgeSession)"].describe()["int8"],
              "paths": rows, "dev": {k: len(v) for k, v in groups.items()}}
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_json(RESULTS / "rerank_latency.json", record)
    host = sessions["student INT8 bundle (EdgeSession)"].host.summary()
    lines = [f"# Rerank 100 passages for one query ({args.threads} threads, batch {BATCH})", "",
             f"CPU: {record['environment']['cpu']} ({host}). Load average before {load_before}, after {load_after}.",
             f"Pairs: {record['tokens_mean']} tokens on average, {record['tokens_max']} at most. Dev: "
             f"{record['dev']} queries (SQuAD dev, retriever {args.retriever.name}).", "",
             "| path | p50 ms | p90 ms | graph MB | paragraph MRR@10 | retrieved MRR@10 | retrieved NDCG@10 | "
             "NDCG@10 / top-1 vs student fp32 |", "|---|---:|---:|---:|---:|---:|---:|---|"]
    for name, r in rows.items():
        vs = f"{r['ndcg10_vs_fp32']} / {r['top1_vs_fp32']}" if "ndcg10_vs_fp32" in r else "-"
        lines.append(f"| {name} | {r['p50_ms']} | {r['p90_ms']} | {r.get('graph_mb', '-')} | "
                     f"{r.get('paragraph_mrr@10', '-')} | {r.get('retrieved_mrr@10', '-')} | "
                     f"{r.get('retrieved_ndcg@10', '-')} | {vs} |")
    write_text(RESULTS / "rerank_latency.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
