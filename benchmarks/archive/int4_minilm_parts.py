"""Where all-MiniLM-L6-v2's embedding cosine goes under 4-bit rounding, part by part, and what a word table below
4 bits would cost (issue #50: <= 12 MB at cosine vs fp32 mean >= 0.99, min >= 0.97).

    PYTHONPATH=benchmarks .venv/bin/python benchmarks/archive/int4_minilm_parts.py [--texts 400] [--skip-pq]

In PyTorch (transformers' ``BertModel`` of the installed checkpoint, mean pooling, unit length), one part of the
model rounded at a time, cosine of the sentence vectors with the unrounded model's on the held-out texts of
``int4_aware_minilm.py`` (SST-2 dev, MRPC dev, WikiText-2 test; none of them training text):

* the encoder's MatMuls by kind (query + key, value, attention output, FFN in, FFN out) and by layer, 4 bits in
  blocks of 32 and 128 (``distill.int4_aware.round_4bit``: onnxruntime's symmetric ``MatMulNBits`` rule; and
  every MatMul asymmetric, the word table's rule: ``MatMulNBits`` with zero points);
  every MatMul 8-bit (per output channel, symmetric, ``quantize_rows``; activations stay float);
* the word table: 4 bits (``quantization.int4_tables``: the export's asymmetric block rule) and product
  quantization (scikit-learn k-means per group of ``sub`` columns, one code per group: 8-bit codes of 256
  centroids are 2 bits per value at ``sub`` 4; 1,024 centroids need 16-bit codes in a graph, so 4 bits per value);
* mixes: some kinds 8-bit, the rest 4-bit (what the export's gate can choose), with the bytes each costs.

Bytes are the weights' own (packed values + float16 scales, + zero points for the asymmetric table); the graph adds
about 0.3 MB (positions, biases, LayerNorms). Accuracy only, not timed. Writes
``benchmarks/results/int4/minilm_parts.{json,md}`` with the CPU, versions and load.
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
sys.path.insert(0, str(ROOT / "benchmarks"))
OUT = ROOT / "benchmarks" / "results" / "int4"
KINDS = {"query + key": r"attention\.self\.(query|key)$", "value": r"attention\.self\.value$",
         "attention output": r"attention\.output\.dense$", "FFN in": r"intermediate\.dense$",
         "FFN out": r"layer\.\d+\.output\.dense$"}
PQ = ((2, 256), (4, 256), (4, 1024))       # (columns per code, centroids)


def eight_bit(weight):
    """Per-output-channel symmetric int8 round trip (``quantization.embedding_tables.quantize_rows``: a row of the
    weight [out, in] is an output channel; float16 scales, rounded up)."""
    import torch

    from edgebert.quantization.embedding_tables import quantize_rows

    q, scale = quantize_rows(weight.numpy())
    return torch.from_numpy(q.astype(np.float32) * scale.astype(np.float32))


def product_quantized(table: np.ndarray, sub: int, centroids: int) -> np.ndarray:
    from sklearn.cluster import KMeans

    out = np.empty_like(table)
    for col in range(0, table.shape[1], sub):
        part = table[:, col:col + sub]
        km = KMeans(n_clusters=centroids, n_init=1, max_iter=50, random_state=0).fit(part)
        out[:, col:col + sub] = km.cluster_centers_[km.labels_]
    return out


def weight_bytes(params: int, how: str, rows: int = 0) -> int:
    """Bytes of ``params`` weights stored as ``how``: "b32"/"b128" (4-bit, float16 scale per block; "a32"/"a128":
    asymmetric, + a 4-bit zero point per block), "8" (int8,
    a float scale per output row of ``rows``)."""
    if how == "8":
        return params + 4 * rows
    blocks = params // int(how[1:])
    return params // 2 + blocks * 2 + (blocks // 2 if how.startswith("a") else 0)     # a: + 4-bit zero points


def text_batches(tok, texts: list[str], size: int = 64) -> list:
    """``texts`` tokenized in padded batches of ``size`` (at most 256 tokens), as PyTorch tensors."""
    return [tok(texts[i:i + size], padding=True, truncation=True, max_length=256, return_tensors="pt")
            for i in range(0, len(texts), size)]


def sentence_vectors(model, batches: list) -> np.ndarray:
    """The model's sentence vectors (mean over real tokens, unit length) of ``batches``."""
    import torch

    out = []
    with torch.no_grad():
        for b in batches:
            mask = b["attention_mask"].unsqueeze(-1).float()
            pooled = (model(**b).last_hidden_state * mask).sum(1) / mask.sum(1)
            out.append(torch.nn.functional.normalize(pooled, dim=-1).numpy())
    return np.concatenate(out)


def write_results(stem: str, result: dict, title: str, intro: str, table: list[str]) -> None:
    """``OUT/stem.json`` (``result``, which carries the load and command) and ``OUT/stem.md``: title, intro, table
    lines, then the load averages and the command."""
    from edgebert.files.atomic import write_json, write_text

    write_json(OUT / f"{stem}.json", result)
    lines = [title, "", intro, "", *table, "",
             f"Load average {result['load_before']} before, {result['load_after']} after. `{result['command']}`", ""]
    write_text(OUT / f"{stem}.md", "\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--texts", type=int, default=400, help="texts per held-out set")
    ap.add_argument("--skip-pq", action="store_true", help="leave out the product-quantized tables (slowest rows)")
    args = ap.parse_args()
    import torch
    from transformers import AutoModel, AutoTokenizer

    from edgebert.pipeline.config import installed_teacher
    from edgebert.quantization.int4_tables import dequantize_blocks, quantize_blocks
    from edgebert.runtime.hostcpu import detect_host
    from edgebert.stages.distill.int4_aware import round_4bit
    from edgebert.system.environment import describe
    from int4_aware_minilm import held_out_sets

    torch.manual_seed(0)
    load_before = [round(x, 2) for x in os.getloadavg()]
    checkpoint = installed_teacher()
    tok, base = AutoTokenizer.from_pretrained(checkpoint), AutoModel.from_pretrained(checkpoint).eval()
    texts = [t for chunk in held_out_sets(args.texts).values() for t in chunk]
    batches = text_batches(tok, texts)
    vectors = lambda model: sentence_vectors(model, batches)  # noqa: E731
    reference = vectors(base)
    linears = {n: m for n, m in base.named_modules() if isinstance(m, torch.nn.Linear) and n.startswith("encoder.")}
    table = base.embeddings.word_embeddings.weight.detach().numpy()
    rows: list[dict] = []

    def rounded(weight, how: str):
        if how == "8":
            return eight_bit(weight)
        if how.startswith("a"):             # asymmetric: the word table's rule (scale and zero point per block)
            back = dequantize_blocks(*quantize_blocks(weight.numpy(), int(how[1:])), int(how[1:]))
            return torch.from_numpy(np.ascontiguousarray(back, dtype=np.float32))
        return round_4bit(weight, int(how[1:]))

    def row(name: str, plan: list[tuple[str, str]] = (), new_table: np.ndarray | None = None,
            table_bytes: int | None = None) -> None:
        """plan: (pattern, "b32" | "b128" | "a32" | "a128" | "8") for the encoder MatMuls, first match wins
        (b: symmetric 4-bit, a: asymmetric 4-bit, 8: 8-bit)."""
        model, encoder_bytes = copy.deepcopy(base), 0
        with torch.no_grad():
            for name_, layer in {n: m for n, m in model.named_modules() if n in linears}.items():
                how = next((h for p, h in plan if re.search(p, name_)), None)
                if how:
                    layer.weight.copy_(rounded(layer.weight, how))
                    encoder_bytes += weight_bytes(layer.weight.numel(), how, layer.weight.shape[0])
            if new_table is not None:
                model.embeddings.word_embeddings.weight.copy_(torch.from_numpy(new_table))
        cos = (vectors(model) * reference).sum(-1)
        rows.append({"rounding": name, "mean": float(cos.mean()), "min": float(cos.min()),
                     "p5": float(np.percentile(cos, 5)), "encoder_bytes": encoder_bytes or None,
                     "table_bytes": table_bytes})
        print(f"{name:60s} {cos.mean():.4f} / {cos.min():.4f}", flush=True)

    for block in ("b32", "b128"):
        row(f"every encoder MatMul 4-bit, block {block[1:]}", [(".", block)])
        for kind, pattern in KINDS.items():
            row(f"{kind} only, 4-bit block {block[1:]}", [(pattern, block)])
    for block in ("a32", "a128"):
        row(f"every encoder MatMul 4-bit asymmetric, block {block[1:]}", [(".", block)])
    for layer in range(base.config.num_hidden_layers):
        row(f"layer {layer} only, 4-bit block 32", [(rf"layer\.{layer}\.", "b32")])
    row("every encoder MatMul 8-bit", [(".", "8")])
    packed = quantize_blocks(table, 128)
    row("word table 4-bit, block 128 (the export's rule)", new_table=dequantize_blocks(*packed, 128).astype(np.float32),
        table_bytes=sum(a.nbytes for a in packed))
    if not args.skip_pq:
        for sub, k in PQ:
            code_bytes = table.shape[0] * (table.shape[1] // sub) * (1 if k <= 256 else 2)
            row(f"word table product-quantized, {sub} columns per code, {k} centroids",
                new_table=product_quantized(table, sub, k), table_bytes=code_bytes + table.shape[1] * k * 2)
    for kept in (["value"], ["value", "attention output"], ["value", "FFN in"],
                 ["value", "attention output", "FFN in"], ["value", "attention output", "FFN in", "FFN out"]):
        for block in ("b32", "b128"):
            row(f"8-bit {' + '.join(kept)}; the rest 4-bit block {block[1:]}",
                [(KINDS[k], "8") for k in kept] + [(".", block)])
    result = {"checkpoint": str(checkpoint), "texts": len(texts), "rows": rows, "load_before": load_before,
              "load_after": [round(x, 2) for x in os.getloadavg()], "environment": describe(),
              "command": "python benchmarks/archive/int4_minilm_parts.py " + " ".join(sys.argv[1:])}
    cpu = f"{result['environment']['cpu']} ({detect_host().kind})"
    mb = lambda b: f"{b / 1e6:.2f}" if b else ""  # noqa: E731
    write_results("minilm_parts", result, "# all-MiniLM-L6-v2: embedding cosine under rounding, part by part",
                  f"{len(texts)} held-out texts (SST-2 dev, MRPC dev, WikiText-2 test), PyTorch, CPU {cpu}. Cosine with "
                  "the unrounded model's sentence vectors. MB: the rounded weights' own bytes.",
                  ["| rounding | mean | p5 | min | encoder MB | table MB |", "|---|---|---|---|---:|---:|",
                   *[f"| {r['rounding']} | {r['mean']:.4f} | {r['p5']:.4f} | {r['min']:.4f} | "
                     f"{mb(r['encoder_bytes'])} | {mb(r['table_bytes'])} |" for r in rows]])

if __name__ == "__main__":
    main()
