"""Student vs teacher: parameter counts and CPU PyTorch latency at batch 1, sequence 128.

Both models are loaded from their directories, put in eval mode and run under ``torch.inference_mode``
on the same seeded input (batch 1, 128 real tokens). Classifiers run whole (encoder + pooler + head);
masked LMs run their encoder (``model.bert``), the part an application embeds or fine-tunes. After
warmup, timed runs alternate in blocks between teacher and student (swapping which goes first) so
a change in machine load hits both alike; the median of all runs is reported, with the thread count
and the load average seen at the start and end (the 2-core machine is shared).

    .venv/bin/python benchmarks/distill_latency.py --teacher runs/sst2-teacher \\
        --student runs/sst2-student --name sst2 [--threads 2] [--runs 300]

Writes ``benchmarks/results/distill_latency/distill_latency_<name>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch

from edgebert.files.atomic import write_json, write_text
from edgebert.model import count_parameters, encoder_of, load_model
from edgebert.system.environment import describe

RESULTS = Path(__file__).resolve().parent / "results" / "distill_latency"


def runnable(model: torch.nn.Module):
    """What is timed: classifiers whole, MLM/pretraining models' encoder."""
    if type(model).__name__ in ("BertForSequenceClassification", "BertForTokenClassification", "BertModel"):
        return model, "whole model"
    return encoder_of(model), "encoder (model.bert)"


def non_embedding_parameters(model: torch.nn.Module) -> int:
    emb = encoder_of(model).embeddings
    return count_parameters(model) - sum(p.numel() for p in emb.parameters())


def time_block(fn, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000.0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--teacher", type=Path, required=True)
    ap.add_argument("--student", type=Path, required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--runs", type=int, default=300, help="timed runs per model")
    ap.add_argument("--block", type=int, default=25)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    models = {"teacher": load_model(args.teacher), "student": load_model(args.student)}
    g = torch.Generator().manual_seed(0)
    vocab = models["teacher"].config.vocab_size
    ids = torch.randint(1000 if vocab > 2000 else 5, vocab, (args.batch, args.seq), generator=g)
    mask = torch.ones_like(ids)
    calls, what = {}, {}
    for name, model in models.items():
        model.eval()
        fn, what[name] = runnable(model)
        calls[name] = (lambda f=fn: f(ids, attention_mask=mask))
    times: dict[str, list[float]] = {"teacher": [], "student": []}
    load_start = os.getloadavg()
    with torch.inference_mode():
        for name in calls:
            time_block(calls[name], args.warmup)
        order = ["teacher", "student"]
        while min(len(v) for v in times.values()) < args.runs:
            for name in order:
                times[name] += time_block(calls[name], args.block)
            order.reverse()
    load_end = os.getloadavg()
    result = {
        "benchmark": "distill_latency",
        "name": args.name,
        "batch": args.batch, "seq": args.seq, "runs_per_model": len(times["teacher"]),
        "torch_threads": torch.get_num_threads(),
        "loadavg_start": load_start, "loadavg_end": load_end,
        "environment": describe(),
        "models": {},
    }
    for name, model in models.items():
        t = sorted(times[name])
        result["models"][name] = {
            "dir": str(getattr(args, name)),
            "architecture": type(model).__name__,
            "layers": model.config.num_hidden_layers,
            "hidden_size": model.config.hidden_size,
            "parameters": count_parameters(model),
            "non_embedding_parameters": non_embedding_parameters(model),
            "timed": what[name],
            "median_ms": statistics.median(t),
            "p10_ms": t[len(t) // 10], "p90_ms": t[(9 * len(t)) // 10],
        }
    s, te = result["models"]["student"], result["models"]["teacher"]
    result["speedup_median"] = te["median_ms"] / s["median_ms"]
    result["parameter_ratio"] = s["parameters"] / te["parameters"]
    result["non_embedding_parameter_ratio"] = s["non_embedding_parameters"] / te["non_embedding_parameters"]
    RESULTS.mkdir(parents=True, exist_ok=True)
    base = RESULTS / f"distill_latency_{args.name}"
    write_json(base.with_suffix(".json"), result)
    md = [f"# Student vs teacher latency: {args.name}", "",
          f"CPU PyTorch, batch {args.batch}, seq {args.seq}, {result['torch_threads']} threads, median of "
          f"{result['runs_per_model']} runs each (interleaved blocks); load average "
          f"{load_start[0]:.2f} -> {load_end[0]:.2f}; {describe().get('cpu')}", "",
          "| model | layers | parameters | non-embedding | timed | median ms | p10 | p90 |",
          "|---|---|---|---|---|---|---|---|"]
    for name in ("teacher", "student"):
        m = result["models"][name]
        md.append(f"| {name} | {m['layers']} | {m['parameters'] / 1e6:.2f}M | "
                  f"{m['non_embedding_parameters'] / 1e6:.2f}M | {m['timed']} | {m['median_ms']:.2f} | "
                  f"{m['p10_ms']:.2f} | {m['p90_ms']:.2f} |")
    md += ["", f"Speedup (median): {result['speedup_median']:.2f}x; parameters: "
               f"{result['parameter_ratio']:.2f}x of the teacher (non-embedding "
               f"{result['non_embedding_parameter_ratio']:.2f}x).", ""]
    write_text(base.with_suffix(".md"), "\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
