"""Would learned 4-bit scales lift the 4-bit-aware all-MiniLM-L6-v2 past its 0.983 plateau? (issue #50: <= 12 MB at
embedding cosine vs fp32 mean >= 0.99, min >= 0.97; ``int4_aware_minilm.py``'s recipe stops at 0.983.)

    PYTHONPATH=benchmarks .venv/bin/python benchmarks/archive/int4_learned_scales.py [--student runs/minilm_q4aware4/student] [--steps 600]

In PyTorch, before any export work: the plateaued 4-bit-aware student (its weights already on onnxruntime's
symmetric block-128 grid) trains on, against the original fp32 model, in two arms from the same start, seed and
batches:

* **absmax** (the control, ``distill.int4_aware.round_4bit``): each block's scale is its largest weight / -8, the
  rounding straight-through, as ``distill --int4-aware`` trains;
* **learned** (LSQ, Esser et al. 2020): each block's scale is a parameter, started at the absmax scale; the weight
  is ``clamp(round(w / s), -8, 7) * s`` with a straight-through ``round``, so the scale learns where to clip.

Loss: 10 x (1 - cosine of the mean-pooled sentence vectors) + (1 - cosine of each token's last hidden state), the
``int4_aware_minilm.py`` continuation's weights. The word table is the export's 4-bit round trip (block 128) in
both arms and in the evaluation. Evaluation: cosine of the sentence vectors (mean pooling, unit length) with the
original model's on the 1,300 held-out texts of ``int4_aware_minilm.py`` (none of them training text), before and
after each arm. Accuracy only, not timed. Writes ``benchmarks/results/int4/learned_scales.{json,md}`` with the CPU,
versions and load.
"""

from __future__ import annotations

import argparse
import copy
import os
import random
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
OUT = ROOT / "benchmarks" / "results" / "int4"
TRAIN_TEXT = ROOT / "runs" / "embed_students" / "train_sentences.txt"
LEVELS = (-8, 7)


def rel(path: Path) -> str:
    """``path`` relative to the repository where it is inside it (results name no machine's folders)."""
    path = path.resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--student", type=Path, default=ROOT / "runs" / "minilm_q4aware4" / "student")
    ap.add_argument("--block", type=int, default=128)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--scale-lr", type=float, default=1e-3, help="Adam rate of the learned scales (log space)")
    ap.add_argument("--texts", type=int, default=400, help="texts per held-out set")
    args = ap.parse_args()
    import torch
    from torch.nn import functional as F
    from transformers import AutoModel, AutoTokenizer

    from edgebert.files.atomic import write_json, write_text
    from edgebert.pipeline.config import installed_teacher
    from edgebert.quantization.int4_tables import dequantize_blocks, quantize_blocks
    from edgebert.runtime.hostcpu import detect_host
    from edgebert.stages.distill.int4_aware import CANDIDATE, round_4bit
    from edgebert.system.environment import describe
    from int4_aware_minilm import held_out_sets

    torch.manual_seed(0)
    torch.set_num_threads(os.cpu_count() or 2)
    load_before = [round(x, 2) for x in os.getloadavg()]
    checkpoint = installed_teacher()
    tok, teacher = AutoTokenizer.from_pretrained(checkpoint), AutoModel.from_pretrained(checkpoint).eval()
    start = AutoModel.from_pretrained(args.student).eval()
    with torch.no_grad():
        table = start.embeddings.word_embeddings.weight.detach().numpy()
        back = dequantize_blocks(*quantize_blocks(table, args.block), args.block)
        start.embeddings.word_embeddings.weight.copy_(torch.from_numpy(np.ascontiguousarray(back, dtype=np.float32)))
    texts = [t for chunk in held_out_sets(args.texts).values() for t in chunk]
    eval_batches = [tok(texts[i:i + 64], padding=True, truncation=True, max_length=256, return_tensors="pt")
                    for i in range(0, len(texts), 64)]

    def pooled(hidden, mask):
        m = mask.unsqueeze(-1).float()
        return (hidden * m).sum(1) / m.sum(1)

    def vectors(model) -> np.ndarray:
        with torch.no_grad():
            return np.concatenate([F.normalize(pooled(model(**b).last_hidden_state, b["attention_mask"]), dim=-1).numpy()
                                   for b in eval_batches])

    reference = vectors(teacher)

    def measure(model) -> dict:
        cos = (vectors(model) * reference).sum(-1)
        return {"mean": float(cos.mean()), "p5": float(np.percentile(cos, 5)), "min": float(cos.min())}

    lines = [s.strip() for s in TRAIN_TEXT.read_text(encoding="utf-8").splitlines() if s.strip()]
    rng = random.Random(0)
    train_batches = [rng.sample(lines, 16) for _ in range(args.steps)]

    def run(arm: str) -> tuple[dict, dict]:
        model = copy.deepcopy(start).train()
        model.embeddings.word_embeddings.weight.requires_grad_(False)
        linears = {n: m for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and CANDIDATE.search(n)}
        scales = []
        for layer in linears.values():
            out_f, in_f = layer.weight.shape
            if arm == "absmax":
                layer.forward = (lambda x, m=layer: F.linear(
                    x, m.weight + (round_4bit(m.weight.detach(), args.block) - m.weight).detach(), m.bias))
                continue
            blocks = layer.weight.detach().reshape(out_f, in_f // args.block, args.block)
            peak = blocks.abs().amax(-1, keepdim=True).clamp_min(1e-8)
            log_s = torch.nn.Parameter(torch.log(peak / -LEVELS[0]))
            scales.append(log_s)

            def forward(x, m=layer, log_s=log_s, shape=(out_f, in_f)):
                s = log_s.exp()
                w = m.weight.reshape(shape[0], shape[1] // args.block, args.block) / s
                q = torch.clamp(w + (torch.round(w) - w).detach(), *LEVELS)      # round straight-through
                return F.linear(x, (q * s).reshape(shape), m.bias)
            layer.forward = forward
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=args.lr, weight_decay=0.0)
        opt_s = torch.optim.Adam(scales, lr=args.scale_lr) if scales else None
        for step, batch in enumerate(train_batches):
            enc = tok(batch, padding=True, truncation=True, max_length=128, return_tensors="pt")
            with torch.no_grad():
                t_last = teacher(**enc).last_hidden_state
            s_last = model(**enc).last_hidden_state
            mask = enc["attention_mask"].bool()
            loss = 10 * (1 - F.cosine_similarity(pooled(s_last, enc["attention_mask"]),
                                                 pooled(t_last, enc["attention_mask"]), dim=-1)).mean()
            loss = loss + (1 - F.cosine_similarity(s_last[mask], t_last[mask], dim=-1)).mean()
            opt.zero_grad()
            if opt_s:
                opt_s.zero_grad()
            loss.backward()
            opt.step()
            if opt_s:
                opt_s.step()
            if step % 100 == 0:
                print(f"{arm} step {step} loss {loss.item():.5f}", flush=True)
        model.eval()
        moved = {}
        if scales:
            ratios = torch.cat([(log_s.detach().exp() * -LEVELS[0] / lay.weight.detach().reshape(
                lay.weight.shape[0], -1, args.block).abs().amax(-1, keepdim=True).clamp_min(1e-8)).flatten()
                for log_s, lay in zip(scales, linears.values())]).numpy()
            moved = {"scale_ratio_p5_p50_p95": [float(np.percentile(ratios, p)) for p in (5, 50, 95)]}
        return measure(model), moved

    before = measure(start)
    print("start", before, flush=True)
    arms = {}
    for arm in ("absmax", "learned"):
        arms[arm], extra = run(arm)
        arms[arm].update(extra)
        print(arm, arms[arm], flush=True)
    result = {"student": rel(args.student), "block": args.block, "steps": args.steps, "lr": args.lr,
              "scale_lr": args.scale_lr, "texts": len(texts), "start": before, "arms": arms,
              "load_before": load_before, "load_after": [round(x, 2) for x in os.getloadavg()],
              "environment": describe(), "command": "python benchmarks/archive/int4_learned_scales.py " + " ".join(sys.argv[1:])}
    write_json(OUT / "learned_scales.json", result)
    cpu = f"{result['environment']['cpu']} ({detect_host().kind})"
    fmt = lambda r: f"{r['mean']:.4f} | {r['p5']:.4f} | {r['min']:.4f}"  # noqa: E731
    md = ["# 4-bit-aware all-MiniLM-L6-v2: learned block scales against absmax scales", "",
          f"From `{rel(args.student)}` (block {args.block}), {args.steps} more steps of 16 sentences, lr {args.lr} "
          f"(scales {args.scale_lr}), PyTorch, CPU {cpu}. Cosine with the original fp32 model's sentence vectors on "
          f"{len(texts)} held-out texts.", "", "| student | mean | p5 | min |", "|---|---|---|---|",
          f"| start (the plateaued student) | {fmt(before)} |", f"| absmax scales, trained on | {fmt(arms['absmax'])} |",
          f"| learned scales (LSQ), trained on | {fmt(arms['learned'])} |", ""]
    md += ["Learned scale / its block's absmax scale after training, p5 / median / p95: "
           + ", ".join(f"{x:.3f}" for x in arms["learned"]["scale_ratio_p5_p50_p95"]), ""]
    md += [f"Load average {load_before} before, {result['load_after']} after. `{result['command']}`", ""]
    write_text(OUT / "learned_scales.md", "\n".join(md))


if __name__ == "__main__":
    main()
