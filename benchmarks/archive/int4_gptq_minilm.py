"""Calibrated 4-bit (GPTQ, ``quantization.gptq``: what ``export --int4-algorithm gptq`` runs) for all-MiniLM-L6-v2's
encoder MatMuls, on the export's own grid (issue #50: <= 12 MB at embedding cosine vs fp32 mean >= 0.99, min >= 0.97).

    PYTHONPATH=benchmarks .venv/bin/python benchmarks/archive/int4_gptq_minilm.py [--calib 512] [--texts 400] [--blocks 32 64 128]

Round-to-nearest moves each weight to its nearest 4-bit level on its own; GPTQ (Frantar et al. 2022) rounds a
weight's inputs one at a time and moves the weights not yet rounded to cancel the error so far on calibration
inputs. Here in PyTorch (transformers' ``BertModel`` of the installed checkpoint, mean pooling, unit length), with
``quantization.gptq.gptq_weight`` doing the rounding:

* onnxruntime's symmetric ``MatMulNBits`` grid, each block's largest weight kept exact, so the export rounds the
  result to itself (checked for every weight: ``round_4bit(gptq) == gptq``); "act-order": inputs taken by falling
  ``H`` diagonal, each block's scale fixed beforehand (``act_order=True``);
* layer by layer, and inside a layer in the order the values flow (query + key + value, attention output, FFN
  in, FFN out), each MatMul calibrated on the inputs it sees with everything before it rounded, the word table
  included (4-bit block 128, the export's rule);
* calibration text: training splits only (WikiText-2 valid paragraphs, SST-2 and MRPC train sentences); cosine
  on the held-out texts of ``int4_aware_minilm.py`` (SST-2 dev, MRPC dev, WikiText-2 test).

Rows: round-to-nearest, GPTQ, GPTQ act-order (every calibration token weighs the same in ``H``) and act-order
per text (each text's tokens weigh 1 / its length: the export's) at each block, the word table 4-bit in all;
act-order with some kinds 8-bit at the last block. ``hessians`` and ``rounded_model`` serve ``int4_minilm_12mb.py``. Bytes are the weights' own (``int4_minilm_parts.weight_bytes``). Accuracy only, not
timed. Writes ``benchmarks/results/int4/gptq_minilm.{json,md}`` with the CPU, versions and load.
"""

from __future__ import annotations

import argparse
import copy
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
SHARED = ROOT.parent / "shared" / "data"
OUT = ROOT / "benchmarks" / "results" / "int4"
METHODS = ("rtn", "gptq", "gptq act-order", "gptq act-order per text")
STAGES = (r"attention\.self\.(query|key|value)$", r"attention\.output\.dense$", r"intermediate\.dense$",
          r"layer\.\d+\.output\.dense$")       # the order the values flow through a layer


def calibration_texts(n: int) -> list[str]:
    """``n`` training texts, a third each from WikiText-2 valid paragraphs, SST-2 train and MRPC train."""
    from edgebert.data.corpus import paragraphs, read_corpus
    from edgebert.data.tasks import read_task_tsv

    wiki = paragraphs(read_corpus(SHARED / "wikitext-2-raw" / "wiki.valid.raw", "wikitext"), 8)
    sst2 = [e.text_a for e in read_task_tsv(SHARED / "sst2" / "train.tsv", "sst2")[0] if len(e.text_a.split()) >= 4]
    mrpc = [e.text_a for e in read_task_tsv(SHARED / "mrpc" / "train.tsv", "mrpc")[0]]
    rng = np.random.default_rng(0)
    pick = lambda xs, k: [xs[i] for i in rng.choice(len(xs), size=min(k, len(xs)), replace=False)]  # noqa: E731
    return pick(wiki, n // 3) + pick(sst2, n // 3) + pick(mrpc, n - 2 * (n // 3))


@dataclass
class Setup:
    """What every MiniLM rounding benchmark starts from: the installed model and tokenizer, its word table (float and
    4-bit block 128, the export's rule, with its bytes), the calibration texts (tokenized one by one), the held-out
    batches and the unrounded model's sentence vectors of them, and the load before."""
    checkpoint: Path
    tok: object
    base: object
    table: np.ndarray
    table4: np.ndarray
    table_bytes: int
    calib: list
    held: list
    reference: np.ndarray
    load_before: list

    @classmethod
    def load(cls, calib: int, texts: int, max_len: int = 128) -> "Setup":
        import torch
        from transformers import AutoModel, AutoTokenizer

        from edgebert.pipeline.config import installed_teacher
        from edgebert.quantization.int4_tables import dequantize_blocks, quantize_blocks
        from int4_aware_minilm import held_out_sets
        from int4_minilm_parts import sentence_vectors, text_batches

        torch.manual_seed(0)
        torch.set_num_threads(2)
        load_before = [round(x, 2) for x in os.getloadavg()]
        checkpoint = installed_teacher()
        tok, base = AutoTokenizer.from_pretrained(checkpoint), AutoModel.from_pretrained(checkpoint).eval()
        table = base.embeddings.word_embeddings.weight.detach().numpy()
        packed = quantize_blocks(table, 128)
        held = text_batches(tok, [t for chunk in held_out_sets(texts).values() for t in chunk])
        return cls(checkpoint, tok, base, table, dequantize_blocks(*packed, 128).astype(np.float32),
                   sum(a.nbytes for a in packed), [tok(t, truncation=True, max_length=max_len, return_tensors="pt")
                                                   for t in calibration_texts(calib)],
                   held, sentence_vectors(base, held), load_before)


def hessians(model, names: list[str], calib: list, per_text: bool = False) -> dict:
    """sum of x x^T of the inputs of ``names``' Linears over the calibration tokens (one text at a time: no
    padding); ``per_text``: each text's tokens weigh 1 / its length (``quantization.gptq.PER_TEXT``)."""
    import torch

    mods = dict(model.named_modules())
    acc = {n: torch.zeros(mods[n].in_features, mods[n].in_features, dtype=torch.float64) for n in names}

    def add(name: str, inputs) -> None:          # a pre-hook that returns None leaves the input alone
        x = inputs[0].reshape(-1, inputs[0].shape[-1]).double()
        acc[name].add_((x.T @ x) / (x.shape[0] if per_text else 1))

    hooks = [mods[n].register_forward_pre_hook(lambda m, inp, n=n: add(n, inp)) for n in names]
    with torch.no_grad():
        for enc in calib:
            model(**enc)
    for hk in hooks:
        hk.remove()
    return acc


def rounded_model(base, table4, plan: list[tuple[str, str]], method: str, calib: list, keep_rows: int = 0,
                  rotate: bool = False):
    """A copy of ``base`` with the word table ``table4``; encoder MatMuls by plan ((pattern, "b32" | "b128" | "8"),
    first match wins), the 4-bit ones by ``method`` (one of METHODS). ``keep_rows``: each 4-bit MatMul's inputs with
    the largest ``H`` diagonal keep their weights' rows in float16 (an outlier split: those rows out of the 4-bit
    weight, which GPTQ then rounds on the other inputs). ``rotate``: each 4-bit weight rounded as ``export
    --int4-rotate`` rounds it (``quantization.rotate_inputs``: ``R^T W`` against ``R^T H R``, put back as ``R Q``, the
    weight the rotated graph multiplies by in effect). Returns the model and its encoder bytes."""
    import torch

    from edgebert.quantization.gptq import gptq_weight
    from edgebert.quantization.rotate_inputs import rotation_matrix
    from edgebert.stages.distill.int4_aware import round_4bit
    from int4_minilm_parts import eight_bit, weight_bytes

    model, nbytes = copy.deepcopy(base), 0
    with torch.no_grad():
        model.embeddings.word_embeddings.weight.copy_(table4)
    mods = dict(model.named_modules())
    how = {n: next((h for p, h in plan if re.search(p, n)), None) for n, m in mods.items()
           if isinstance(m, torch.nn.Linear) and n.startswith("encoder.")}
    for layer in range(model.config.num_hidden_layers):
        for stage in STAGES:
            names = [n for n in how if how[n] and n.startswith(f"encoder.layer.{layer}.") and re.search(stage, n)]
            four = [n for n in names if how[n] != "8"]
            hs = hessians(model, four, calib, method.endswith("per text")) if method != "rtn" and four else {}
            with torch.no_grad():
                for n in names:
                    w, blk = mods[n].weight.detach(), how[n]
                    if blk == "8":
                        new = eight_bit(w)
                    elif method == "rtn":
                        new = round_4bit(w, int(blk[1:]))
                    else:
                        h, w_kn = hs[n].numpy().copy(), w.numpy().T.copy()
                        if rotate:
                            r = rotation_matrix(len(h))
                            h, w_kn = r.T @ h @ r, (r.T @ w_kn).astype(np.float32)
                        kept = sorted(range(len(h)), key=lambda i: -h[i, i])[:keep_rows] if keep_rows else []
                        w4 = w_kn.copy()
                        w4[kept] = 0                       # out of the 4-bit weight and of GPTQ's H
                        h[kept, :], h[:, kept] = 0, 0
                        q = gptq_weight(w4, h, int(blk[1:]), act_order="act-order" in method)
                        assert np.array_equal(round_4bit(torch.from_numpy(q.T.copy()), int(blk[1:])).numpy(), q.T)
                        q[kept] = w_kn[kept].astype(np.float16).astype(np.float32)
                        nbytes += len(kept) * w_kn.shape[1] * 2
                        q = (r @ q).astype(np.float32) if rotate else q
                        new = torch.from_numpy(q.T.copy())
                    mods[n].weight.copy_(new)
                    nbytes += weight_bytes(w.numel(), blk, w.shape[0])
    return model, nbytes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calib", type=int, default=512, help="calibration texts")
    ap.add_argument("--texts", type=int, default=400, help="held-out texts per set")
    ap.add_argument("--blocks", type=int, nargs="+", default=[32, 128])
    ap.add_argument("--max-len", type=int, default=128, help="calibration texts' token cap")
    ap.add_argument("--save", type=Path, default=None, help="also save the model of every encoder MatMul GPTQ "
                    "act-order at the last block (word table float) as a model folder (e.g. for distill --init), "
                    "and stop")
    args = ap.parse_args()
    import torch

    from edgebert.runtime.hostcpu import detect_host
    from edgebert.system.environment import describe
    from int4_minilm_parts import KINDS, sentence_vectors, write_results

    setup = Setup.load(args.calib, args.texts, args.max_len)
    base, tok, calib, held, reference = setup.base, setup.tok, setup.calib, setup.held, setup.reference
    checkpoint, load_before, table_bytes = setup.checkpoint, setup.load_before, setup.table_bytes
    table4 = torch.from_numpy(setup.table4)
    vectors = lambda model: sentence_vectors(model, held)  # noqa: E731
    rows: list[dict] = []

    def row(name: str, plan, method: str) -> None:
        model, nbytes = rounded_model(base, table4, plan, method, calib)
        cos = (vectors(model) * reference).sum(-1)
        rows.append({"rounding": name, "method": method, "mean": float(cos.mean()), "min": float(cos.min()),
                     "p5": float(np.percentile(cos, 5)), "encoder_bytes": nbytes,
                     "total_mb_estimate": (nbytes + table_bytes + 0.3e6) / 1e6})
        print(f"{name:70s} {cos.mean():.4f} / {np.percentile(cos, 5):.4f} / {cos.min():.4f}  "
              f"{rows[-1]['total_mb_estimate']:.2f} MB", flush=True)

    if args.save:
        model, _ = rounded_model(base, table4, [(".", f"b{args.blocks[-1]}")], "gptq act-order", calib)
        with torch.no_grad():
            model.embeddings.word_embeddings.weight.copy_(base.embeddings.word_embeddings.weight)
        model.save_pretrained(args.save)
        tok.save_pretrained(args.save)
        print(f"saved {args.save}")
        return
    for block in args.blocks:
        for method in METHODS:
            row(f"every encoder MatMul 4-bit block {block}, {method}", [(".", f"b{block}")], method)
    for kept in (["value"], ["value", "FFN in"]):
        row(f"8-bit {' + '.join(kept)}; the rest 4-bit block {args.blocks[-1]}, gptq act-order",
            [(KINDS[k], "8") for k in kept] + [(".", f"b{args.blocks[-1]}")], "gptq act-order")
    result = {"checkpoint": str(checkpoint), "calibration_texts": len(calib), "held_out_texts": len(reference),
              "table_bytes": table_bytes, "rows": rows, "load_before": load_before,
              "load_after": [round(x, 2) for x in os.getloadavg()], "environment": describe(),
              "command": "python benchmarks/archive/int4_gptq_minilm.py " + " ".join(sys.argv[1:])}
    cpu = f"{result['environment']['cpu']} ({detect_host().kind})"
    write_results("gptq_minilm", result, "# all-MiniLM-L6-v2: GPTQ against round-to-nearest, on the export's 4-bit grid",
                  f"{len(calib)} calibration texts (training splits), {len(reference)} held-out texts (SST-2 dev, MRPC "
                  f"dev, WikiText-2 test); PyTorch, CPU {cpu}. Word table 4-bit block 128 in every row ({table_bytes:,} "
                  "B). Cosine with the unrounded model's sentence vectors. MB: weights' own bytes + table + 0.3 MB.",
                  ["| rounding | mean | p5 | min | encoder MB | about MB in all |", "|---|---|---|---|---:|---:|",
                   *[f"| {r['rounding']} | {r['mean']:.4f} | {r['p5']:.4f} | {r['min']:.4f} | "
                     f"{r['encoder_bytes'] / 1e6:.2f} | {r['total_mb_estimate']:.2f} |" for r in rows]])

if __name__ == "__main__":
    main()
