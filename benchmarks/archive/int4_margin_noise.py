"""Where a classifier's label flips under 4-bit rounding come from (issue #50: SST-2 at label agreement >= 0.99).

    PYTHONPATH=benchmarks .venv/bin/python benchmarks/archive/int4_margin_noise.py --student runs/q4_tasks/sst2-student [--trained DIR ...]

In PyTorch, on SST-2 dev (872 sentences): the float student's logit margin (positive - negative) and, for each way
of rounding its weights as the small graph does (``distill.int4_aware.round_4bit``: onnxruntime's symmetric
``MatMulNBits`` rounding; the word table, and the MatMuls of the asymmetric rows, by ``quantization.int4_tables``:
the export's asymmetric block rule), how far the margin moves (std of the change) and how many labels flip.
Rounding one part at a time (the word table; the encoder's MatMuls, all or one kind; symmetric or asymmetric;
block 128, 64 or 32) says which part costs the flips.
``--trained``: students already on the 4-bit grid (``distill --int4-aware``, saved rounded) compared the same way.

Accuracy only, not timed. Writes ``benchmarks/results/int4/margin_noise_<student>.{json,md}`` with the CPU,
versions and load.
"""

from __future__ import annotations

import argparse
import copy
import os
import re
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATA = ROOT.parent / "shared" / "data"
OUT = ROOT / "benchmarks" / "results" / "int4"
KINDS = {"query + key": r"query|key", "value": r"value", "attention output": r"attention\.output",
         "FFN in": r"intermediate", "FFN out": r"layer\.\d+\.output\.dense", "pooler + classifier": r"pooler|classifier"}


def margins(model, batches) -> np.ndarray:
    import torch

    out = []
    with torch.no_grad():
        for feeds in batches:
            logits = model(**feeds).logits
            out.append((logits[:, 1] - logits[:, 0]).float().numpy())
    return np.concatenate(out)


def rounded(base, table_block: int | None, linear_block: int | None, symmetric: bool = True, which: str | None = None):
    import torch

    from edgebert.model.bert import encoder_of
    from edgebert.quantization.int4_tables import dequantize_blocks, quantize_blocks
    from edgebert.stages.distill.int4_aware import four_bit_linears, round_4bit

    def asymmetric(weight, block: int):     # the word table's rule (per row = per output, blocks of inputs)
        back = dequantize_blocks(*quantize_blocks(weight.numpy(), block), block)
        return torch.from_numpy(np.ascontiguousarray(back, dtype=np.float32))

    model = copy.deepcopy(base)
    with torch.no_grad():
        if table_block:
            table = encoder_of(model).embeddings.word_embeddings.weight
            table.copy_(asymmetric(table, table_block))
        if linear_block:
            for name, layer in four_bit_linears(model).items():
                if which is None or re.search(which, name):
                    layer.weight.copy_(round_4bit(layer.weight, linear_block) if symmetric
                                       else asymmetric(layer.weight, linear_block))
    return model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--student", type=Path, required=True, help="the float SST-2 student (a model folder)")
    ap.add_argument("--trained", type=Path, nargs="*", default=[], help="students trained --int4-aware (rounded)")
    ap.add_argument("--max-len", type=int, default=128)
    args = ap.parse_args()
    import torch

    from edgebert.data.tasks import read_task_tsv
    from edgebert.data.tokenizer import load_tokenizer
    from edgebert.files.atomic import write_json, write_text
    from edgebert.model import load_model
    from edgebert.runtime.hostcpu import detect_host
    from edgebert.system.environment import describe

    torch.manual_seed(0)
    load_before = [round(x, 2) for x in os.getloadavg()]
    examples, _ = read_task_tsv(DATA / "sst2" / "dev.tsv", "sst2")
    tok = load_tokenizer(args.student)
    tok.enable_truncation(args.max_len)
    tok.enable_padding()
    batches = []
    for i in range(0, len(examples), 64):
        enc = tok.encode_batch([e.text_a for e in examples[i:i + 64]])
        batches.append({"input_ids": torch.tensor([e.ids for e in enc]),
                        "attention_mask": torch.tensor([e.attention_mask for e in enc]),
                        "token_type_ids": torch.tensor([e.type_ids for e in enc])})
    base = load_model(args.student).eval()
    reference = margins(base, batches)
    rows: list[dict] = []

    def row(name: str, model) -> None:
        got = margins(model, batches)
        change = got - reference
        rows.append({"rounding": name, "flips": int(((got > 0) != (reference > 0)).sum()),
                     "agreement": float(((got > 0) == (reference > 0)).mean()), "margin_change_std": float(change.std())})
        print(f"{name:52s} flips {rows[-1]['flips']:3d}  margin change std {change.std():.3f}", flush=True)

    for block in (128, 32):
        row(f"word table, block {block}", rounded(base, block, None))
    for block in (128, 64, 32):
        for symmetric in (True, False):
            row(f"encoder + heads, {'symmetric' if symmetric else 'asymmetric'}, block {block}",
                rounded(base, None, block, symmetric))
    for kind, pattern in KINDS.items():
        row(f"{kind} only, symmetric, block 128", rounded(base, None, 128, True, pattern))
    row("all (table + encoder + heads), symmetric, block 128", rounded(base, 128, 128))
    for trained in args.trained:
        row(f"trained 4-bit-aware: {trained}", load_model(trained).eval())
    quantiles = {str(q): float(np.quantile(np.abs(reference), q)) for q in (0.005, 0.01, 0.02, 0.05)}
    result = {"student": str(args.student), "texts": len(examples), "abs_margin_quantiles": quantiles, "rows": rows,
              "load_before": load_before, "load_after": [round(x, 2) for x in os.getloadavg()],
              "environment": describe(), "command": "python benchmarks/archive/int4_margin_noise.py " + " ".join(sys.argv[1:])}
    stem = f"margin_noise_{args.student.name}"
    write_json(OUT / f"{stem}.json", result)
    cpu = f"{result['environment']['cpu']} ({detect_host().kind})"
    lines = [f"# Label flips under 4-bit rounding: `{args.student}`", "",
             f"SST-2 dev ({len(examples)} sentences), PyTorch, CPU {cpu}. The float student's |logit margin| quantiles: "
             + ", ".join(f"{float(q):.1%}: {v:.3f}" for q, v in quantiles.items()) + ".", "",
             "| rounding | flips | agreement | margin change, std |", "|---|---:|---|---|"]
    lines += [f"| {r['rounding']} | {r['flips']} | {r['agreement']:.4f} | {r['margin_change_std']:.3f} |" for r in rows]
    lines += ["", f"Load average {load_before} before, {result['load_after']} after. `{result['command']}`", ""]
    write_text(OUT / f"{stem}.md", "\n".join(lines))


if __name__ == "__main__":
    main()
