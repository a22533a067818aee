"""Training throughput: edgebert ``BertForPreTraining`` vs ``transformers.BertForPreTraining``.

Both models get the same config, the same initial weights (edgebert's, copied into transformers),
the same batches (seeded MLM + NSP) and the same AdamW settings. One training step is
forward + MLM/NSP loss + backward + AdamW step + zero_grad. After a few warmup steps each, the
timed steps alternate between the two models step by step (swapping which goes first) so that
a change in machine load hits both alike. The whole measurement is repeated ``--repeats``
times; each repetition is recorded with the load average seen when it started.

Writes ``benchmarks/results/train_throughput/train_throughput.json`` (machine, versions, threads, tokens/s of both,
ratio edgebert/transformers) and a short ``.md`` beside it.

    .venv/bin/python benchmarks/train_throughput.py                 # small (+ MiniLM-sized), B16 T128
    .venv/bin/python benchmarks/train_throughput.py --configs small --steps 12 --repeats 1 --threads 1
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch

from edgebert.files.atomic import write_json, write_text
from edgebert.model import BertConfig, BertForPreTraining
from edgebert.system.environment import describe

RESULTS = Path(__file__).resolve().parent / "results" / "train_throughput"

# Benchmark configs: the ``small`` preset, and one shaped like all-MiniLM-L6-v2 (6 x 384, 12 heads).
CONFIGS = {
    "small": lambda: BertConfig.preset("small"),
    "minilm": lambda: BertConfig(hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                                 intermediate_size=1536),
}


def make_batches(cfg: BertConfig, n: int, batch: int, seq: int, seed: int) -> list[dict[str, torch.Tensor]]:
    """``n`` seeded MLM+NSP batches with some padding (every 4th row is half padding)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ids = torch.randint(5, cfg.vocab_size, (batch, seq), generator=g)
        mask = torch.ones(batch, seq, dtype=torch.long)
        mask[::4, seq // 2:] = 0
        ids[mask == 0] = cfg.pad_token_id
        types = torch.zeros(batch, seq, dtype=torch.long)
        types[:, seq // 2:] = 1
        picked = (torch.rand(batch, seq, generator=g) < 0.15) & mask.bool()
        labels = torch.where(picked, ids, torch.full_like(ids, -100))
        ids = torch.where(picked, torch.full_like(ids, 4), ids)   # a stand-in [MASK] id
        nsp = torch.randint(0, 2, (batch,), generator=g)
        out.append(dict(input_ids=ids, attention_mask=mask, token_type_ids=types, labels=labels,
                        next_sentence_label=nsp))
    return out


def build_pair(cfg: BertConfig, seed: int):
    """edgebert and transformers BertForPreTraining with identical weights."""
    import transformers

    torch.manual_seed(seed)
    eb = BertForPreTraining(cfg)
    hf = transformers.BertForPreTraining(transformers.BertConfig(**cfg.to_hf_dict()))
    missing, unexpected = hf.load_state_dict(eb.state_dict(), strict=False)
    # transformers' decoder.bias is the same tensor as cls.predictions.bias (tied), so it is filled too
    missing = [k for k in missing if k != "cls.predictions.decoder.bias"]
    if missing or unexpected or hf.cls.predictions.decoder.bias is not hf.cls.predictions.bias:
        raise RuntimeError(f"weights do not line up: missing={missing} unexpected={unexpected}")
    return eb, hf


def loss_of(model, batch) -> torch.Tensor:
    out = model(**batch)
    return out.loss if not isinstance(out, dict) or "loss" not in out else out["loss"]


def same_loss_check(eb, hf, batch) -> dict[str, float]:
    """Eval-mode loss of both on one batch: shows the two models really are the same network."""
    eb.eval(), hf.eval()
    with torch.no_grad():
        a, b = float(loss_of(eb, batch)), float(loss_of(hf, batch))
    eb.train(), hf.train()
    return {"edgebert": a, "transformers": b, "abs_diff": abs(a - b)}


def train_step(model, opt, batch) -> None:
    loss = loss_of(model, batch)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def measure(cfg: BertConfig, args, seed: int) -> dict[str, object]:
    eb, hf = build_pair(cfg, seed)
    batches = make_batches(cfg, args.warmup + args.steps, args.batch, args.seq, seed)
    check = same_loss_check(eb, hf, batches[0])
    models = {"edgebert": eb, "transformers": hf}
    opts = {k: torch.optim.AdamW(m.parameters(), lr=1e-4, weight_decay=0.01) for k, m in models.items()}
    for name, m in models.items():
        m.train()
        torch.manual_seed(seed)
        for b in batches[:args.warmup]:
            train_step(m, opts[name], b)
    # Alternate every step (swapping which model goes first) so load from other processes hits both.
    step_s: dict[str, list[float]] = {k: [] for k in models}
    timed = batches[args.warmup:]
    for i, b in enumerate(timed):
        for name in (("edgebert", "transformers") if i % 2 == 0 else ("transformers", "edgebert")):
            t0 = time.perf_counter()
            train_step(models[name], opts[name], b)
            step_s[name].append(time.perf_counter() - t0)
    seconds = {k: sum(v) for k, v in step_s.items()}
    tokens = args.batch * args.seq * len(timed)
    tps = {k: tokens / s for k, s in seconds.items()}
    return {
        "config": {k: getattr(cfg, k) for k in ("vocab_size", "hidden_size", "num_hidden_layers",
                                                 "num_attention_heads", "intermediate_size")},
        "parameters": sum(p.numel() for p in {id(p): p for p in eb.parameters()}.values()),
        "transformers_attn_implementation": getattr(hf.config, "_attn_implementation", None),
        "eval_loss_check": check,
        "timed_steps": len(timed),
        "tokens_per_step": args.batch * args.seq,
        "tokens_per_s": tps,
        "step_s": step_s,
        "ratio_edgebert_over_transformers": tps["edgebert"] / tps["transformers"],
        # median over adjacent step pairs: robust to bursts of load from other processes
        "ratio_median_of_pairs": statistics.median(
            t / e for e, t in zip(step_s["edgebert"], step_s["transformers"])),
    }


def to_markdown(result: dict) -> str:
    a = result["args"]
    lines = [
        "# Training throughput: edgebert vs transformers BertForPreTraining",
        "",
        f"forward + backward + AdamW step, batch {a['batch']} x seq {a['seq']}, {a['warmup']} warmup + "
        f"{a['steps']} timed steps per model, alternating step by step, "
        f"torch threads {result['torch_threads']}, CPU: {result['environment']['cpu']} "
        f"({result['environment']['cpu_count']} cores), torch {result['environment']['torch']}, "
        f"transformers {result['environment']['transformers']}.",
        "",
        "| repeat | config | load avg (1 min) at start | edgebert tokens/s | transformers tokens/s | ratio "
        "| median ratio of step pairs |",
        "|---|---|---|---|---|---|---|",
    ]
    for r, rep in enumerate(result["repeats"]):
        for name, m in rep["configs"].items():
            t = m["tokens_per_s"]
            lines.append(f"| {r + 1} | {name} | {rep['loadavg_1min']:.2f} | {t['edgebert']:.0f} | "
                         f"{t['transformers']:.0f} | {m['ratio_edgebert_over_transformers']:.3f} | "
                         f"{m['ratio_median_of_pairs']:.3f} |")
    cores = result["environment"]["cpu_count"] or 1
    busiest = max(max(rep["loadavg_1min"], rep["loadavg_1min_end"]) for rep in result["repeats"])
    if busiest > 0.5 * cores:
        lines += ["", f"Caveat: the CPU was shared with other work (1-min load average up to "
                      f"{busiest:.1f} on {cores} cores); alternating steps keep the ratio fair, "
                      "the absolute tokens/s are lower than on an idle machine."]
    lines += ["", "Ratio = edgebert tokens/s / transformers tokens/s (> 1: edgebert trains faster).",
              "Summary (mean over repeats of the median ratio of step pairs): " + ", ".join(
                  f"{k} {v:.3f}" for k, v in result["summary_ratio"].items()),
              "", "Reproduce: `.venv/bin/python benchmarks/train_throughput.py`", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--configs", nargs="+", default=["small", "minilm"], choices=sorted(CONFIGS))
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=RESULTS / "train_throughput.json")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    repeats = []
    for r in range(args.repeats):
        rep = {"loadavg_1min": os.getloadavg()[0], "configs": {}}
        for name in args.configs:
            m = measure(CONFIGS[name](), args, args.seed)
            rep["configs"][name] = m
            print(f"repeat {r + 1} {name}: edgebert {m['tokens_per_s']['edgebert']:.0f} tok/s, "
                  f"transformers {m['tokens_per_s']['transformers']:.0f} tok/s, "
                  f"ratio {m['ratio_edgebert_over_transformers']:.3f}, "
                  f"median ratio of step pairs {m['ratio_median_of_pairs']:.3f} "
                  f"(eval loss diff {m['eval_loss_check']['abs_diff']:.2e})", flush=True)
        rep["loadavg_1min_end"] = os.getloadavg()[0]
        repeats.append(rep)
    result = {
        "benchmark": "train_throughput",
        "environment": describe(),
        "torch_threads": torch.get_num_threads(),
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "repeats": repeats,
        "summary_ratio": {name: statistics.mean(rep["configs"][name]["ratio_median_of_pairs"]
                                                for rep in repeats) for name in args.configs},
    }
    write_json(args.out, result)
    write_text(args.out.with_suffix(".md"), to_markdown(result))
    print(f"wrote {args.out} and {args.out.with_suffix('.md')}")
    return result


if __name__ == "__main__":
    main()
