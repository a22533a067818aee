"""What 12 MB can buy all-MiniLM-L6-v2 (issue #50: <= 12 MB at embedding cosine vs fp32 mean >= 0.99, min >= 0.97):
the ways past GPTQ that spend bytes where the loss is, measured before any of them is built into ``export``.

    PYTHONPATH=benchmarks .venv/bin/python benchmarks/archive/int4_minilm_12mb.py [--calib 512] [--texts 400] [--top 8000] [--rotated | --ceiling]

In PyTorch, as ``int4_gptq_minilm.py`` (same calibration and held-out texts, same rounding code: its
``rounded_model``), block 128 unless named:

* **GPTQ's ``H`` per text** (the export's now) against per token, at blocks 128 and 32;
* **outlier rows**: each 4-bit MatMul's 8 inputs with the largest ``H`` diagonal keep their weight rows in
  float16 (an LLM.int8()-style split: a float MatMul of 8 columns beside the 4-bit one);
* **8-bit kinds** (value + FFN in; value + attention output + FFN in), the rest GPTQ per text, with
  * the word table 4-bit (block 128) without its 994 ``[unused]`` rows, which no text reaches (lossless);
  * **a two-precision table**: the ``--top`` pieces the training splits use most 4-bit, the rest product-quantized
    at 2 bits a value (``int4_minilm_parts.product_quantized``: 4 columns per 8-bit code, 256 centroids).

``--rotated``: instead, the same ways with each 4-bit MatMul's input rotated first (``export --int4-rotate``,
``quantization.rotate_inputs``): every MatMul at blocks 128 and 64 (the latter with the ``[unused]`` rows dropped, to
fit 12 MB), and 8-bit value + FFN in with the two-precision table; files ``minilm_12mb_rotated.{json,md}``.

``--ceiling``: where the goal's min (0.97) is first met, rotated: value + attention output + FFN in 8-bit in every
layer (with the 4-bit and the two-precision tables, ``--top`` and 4,000 pieces 4-bit) and with FFN out too; and the
mixes that keep only the last layers' kinds 8-bit, near 12 MB. Each row also gives its bytes with the word pieces
no text can reach taken out of the table (``unreachable_rows``: lossless, not built into ``export``); files
``minilm_12mb_ceiling.{json,md}``.

Bytes: the weights' own (4-bit values + float16 block scales; table blocks + zero points; 8-bit values + a float
scale per row; PQ codes + float16 centroids) + 0.28 MB for the rest of the graph (positions, biases, LayerNorms:
the exported small graph's). Accuracy only, not timed. Writes ``benchmarks/results/int4/minilm_12mb.{json,md}`` with
the CPU, versions and load.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
SHARED = ROOT.parent / "shared" / "data"
REST_OF_GRAPH = 280_000          # bytes outside the MatMuls and the table in the exported small graph
KEEP_ROWS = 8


def training_piece_counts(tok) -> Counter:
    """How often each piece occurs in the training splits (WikiText-2 valid, SST-2 train, MRPC train)."""
    from edgebert.data.corpus import read_corpus
    from edgebert.data.tasks import read_task_tsv

    texts = list(read_corpus(SHARED / "wikitext-2-raw" / "wiki.valid.raw", "wikitext"))
    for task in ("sst2", "mrpc"):
        texts += [e.text_a for e in read_task_tsv(SHARED / task / "train.tsv", task)[0]]
    counts: Counter = Counter()
    for i in range(0, len(texts), 512):
        for ids in tok(texts[i:i + 512], add_special_tokens=False)["input_ids"]:
            counts.update(ids)
    return counts


def unreachable_rows(tok) -> np.ndarray:
    """Ids of the pieces no text can produce: after the tokenizer's own normalizer and pre-tokenizer, the piece
    (a ``##`` piece: glued to a letter) is not one whole word. ``[unusedN]`` (the pre-tokenizer splits off its
    brackets), ``##`` + a punctuation or CJK character (always a word of its own), "..."."""
    backend = tok.backend_tokenizer

    def one_word(s: str) -> bool:
        return [w for w, _ in backend.pre_tokenizer.pre_tokenize_str(backend.normalizer.normalize_str(s))] == [s]

    special = set(tok.all_special_tokens)
    return np.array(sorted(i for piece, i in tok.get_vocab().items() if piece not in special and not (
        one_word("a" + piece[2:]) if piece.startswith("##") and len(piece) > 2 else one_word(piece))))


def table_variants(tok, table: np.ndarray, four: np.ndarray, top: int) -> dict[str, tuple[np.ndarray, int]]:
    """{name: (table as the graph would hold it, its bytes)}: 4-bit (``four``, the round trip of ``table``) without the
    [unused] rows; and the ``top`` most used pieces 4-bit, the other reachable rows product-quantized (2 bits a value)."""
    from edgebert.quantization.int4_tables import quantize_blocks
    from int4_minilm_parts import product_quantized

    unused = np.array([t.startswith("[unused") for t in tok.convert_ids_to_tokens(list(range(len(table))))])
    row4 = sum(a.nbytes for a in quantize_blocks(table[:1], 128))             # one row: values, scales, zero points
    special = np.zeros(len(table), bool)
    special[tok.all_special_ids] = True
    frequent = special.copy()
    frequent[[i for i, _ in training_piece_counts(tok).most_common(top)]] = True
    rare = ~frequent & ~unused
    split = four.copy()
    split[rare] = product_quantized(table[rare], 4, 256)
    return {f"4-bit, {int(unused.sum())} [unused] rows dropped": (four, int((~unused).sum()) * row4),
            f"{top:,} most used pieces 4-bit, the other {int(rare.sum()):,} 2-bit PQ":
                (split, int((frequent & ~unused).sum()) * row4 + int(rare.sum()) * table.shape[1] // 4
                 + table.shape[1] * 256 * 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calib", type=int, default=512, help="calibration texts")
    ap.add_argument("--texts", type=int, default=400, help="held-out texts per set")
    ap.add_argument("--top", type=int, default=8000, help="most used pieces the two-precision table keeps 4-bit")
    ap.add_argument("--rotated", action="store_true", help="the rotated rows only (minilm_12mb_rotated.*)")
    ap.add_argument("--ceiling", action="store_true", help="rotated 8-bit mixes up to min 0.97 (minilm_12mb_ceiling.*)")
    ap.add_argument("--threads", type=int, default=2, help="PyTorch threads (1 beside other work)")
    args = ap.parse_args()
    import torch

    from edgebert.runtime.hostcpu import detect_host
    from edgebert.system.environment import describe
    from int4_gptq_minilm import Setup, rounded_model
    from int4_minilm_parts import KINDS, sentence_vectors, write_results

    setup = Setup.load(args.calib, args.texts)
    torch.set_num_threads(args.threads)
    base, tok, calib, held, reference = setup.base, setup.tok, setup.calib, setup.held, setup.reference
    tables = {"4-bit, every row": (setup.table4, setup.table_bytes), **table_variants(tok, setup.table, setup.table4, args.top)}
    if args.ceiling:
        tables.update(list(table_variants(tok, setup.table, setup.table4, 4000).items())[1:])
    unreachable = unreachable_rows(tok)
    rows: list[dict] = []

    def row(encoder: str, plan, method: str, table_name: str = "4-bit, every row", keep_rows: int = 0, model=None,
            encoder_bytes: int = 0, rotate: bool = False):
        if model is None:
            model, encoder_bytes = rounded_model(base, torch.from_numpy(tables[table_name][0]), plan, method, calib,
                                                 keep_rows, rotate)
        else:
            with torch.no_grad():
                model.embeddings.word_embeddings.weight.copy_(torch.from_numpy(tables[table_name][0]))
        cos = (sentence_vectors(model, held) * reference).sum(-1)
        total = encoder_bytes + tables[table_name][1] + REST_OF_GRAPH
        rows.append({"encoder": encoder, "table": table_name, "mean": float(cos.mean()), "min": float(cos.min()),
                     "p5": float(np.percentile(cos, 5)), "below_0.97": int((cos < 0.97).sum()),
                     "encoder_bytes": encoder_bytes, "table_bytes": tables[table_name][1], "total_mb": total / 1e6,
                     "trimmed_mb": (total - trim_bytes(table_name)) / 1e6})
        print(f"{encoder:55s} {table_name:45s} {cos.mean():.4f} / {np.percentile(cos, 5):.4f} / {cos.min():.4f}  "
              f"{total / 1e6:.2f} MB", flush=True)
        return model, encoder_bytes

    def trim_bytes(table_name: str) -> int:
        """Bytes the unreachable rows hold in this table: 4-bit rows, or PQ codes where the rare pieces are (every
        unreachable one is rare); the [unused] ones, already out of every table but the first, count once."""
        n_unused = sum(t.startswith("[unused") for t in tok.get_vocab())
        rows = len(unreachable) - (0 if table_name == "4-bit, every row" else n_unused)
        per_row = setup.table.shape[1] // 4 if "PQ" in table_name else tables["4-bit, every row"][1] // len(setup.table)
        return rows * per_row

    unused, two = list(tables)[1:3]
    if args.ceiling:
        kinds = r"(attention\.self\.value|attention\.output\.dense|intermediate\.dense)$"
        mixes = {"8-bit value + attention output + FFN in": [(kinds, "8")],
                 "8-bit value + attention output + FFN in + FFN out": [(kinds, "8"), (KINDS["FFN out"], "8")],
                 "layer 5: 8-bit value + attention output + FFN in": [(r"layer\.5\." + kinds, "8")],
                 "layer 5: 8-bit value + FFN in": [(r"layer\.5\.(attention\.self\.value|intermediate\.dense)$", "8")],
                 "layers 4, 5: 8-bit value + attention output + FFN in": [(r"layer\.[45]\." + kinds, "8")]}
        for i, (name, plan) in enumerate(mixes.items()):
            name = f"{name}, the rest 4-bit per text, rotated"
            model, nbytes = row(name, plan + [(".", "b128")], "gptq act-order per text", rotate=True)
            for table_name in (list(tables)[2:] if i == 0 else ()):      # the two-precision tables
                row(name, None, "", table_name, model=model, encoder_bytes=nbytes)
    if args.rotated:
        for block, table_name in ((128, "4-bit, every row"), (64, unused)):
            row(f"every MatMul 4-bit block {block}, per text, rotated", [(".", f"b{block}")], "gptq act-order per text",
                table_name, rotate=True)
        row("8-bit value + FFN in, the rest 4-bit per text, rotated", [(KINDS[k], "8") for k in ("value", "FFN in")]
            + [(".", "b128")], "gptq act-order per text", two, rotate=True)
    unrotated = not (args.rotated or args.ceiling)         # the first table's rows (minilm_12mb.*)
    for block in ((128, 32) if unrotated else ()):
        for method in ("gptq act-order", "gptq act-order per text"):
            row(f"every MatMul 4-bit block {block}, {method}", [(".", f"b{block}")], method)
    if unrotated:
        row(f"every MatMul 4-bit, per text, {KEEP_ROWS} outlier rows float16", [(".", "b128")],
            "gptq act-order per text", keep_rows=KEEP_ROWS)
    for kept in ((["value", "FFN in"], ["value", "attention output", "FFN in"]) if unrotated else ()):
        name = f"8-bit {' + '.join(kept)}, the rest 4-bit per text"
        model, nbytes = row(name, [(KINDS[k], "8") for k in kept] + [(".", "b128")], "gptq act-order per text")
        for table_name in list(tables)[1:]:
            row(name, None, "", table_name, model=model, encoder_bytes=nbytes)
    result = {"checkpoint": str(setup.checkpoint), "calibration_texts": len(calib), "held_out_texts": len(reference),
              "top": args.top, "rotated": args.rotated, "ceiling": args.ceiling,
              "unreachable_rows": len(unreachable), "threads": args.threads, "rows": rows, "load_before": setup.load_before,
              "load_after": [round(x, 2) for x in os.getloadavg()], "environment": describe(),
              "command": "python benchmarks/archive/int4_minilm_12mb.py " + " ".join(sys.argv[1:])}
    cpu = f"{result['environment']['cpu']} ({detect_host().kind})"
    write_results("minilm_12mb" + ("_ceiling" if args.ceiling else "_rotated" if args.rotated else ""), result, "# all-MiniLM-L6-v2: what 12 MB can buy",
                  f"{len(calib)} calibration texts (training splits), {len(reference)} held-out texts (SST-2 dev, MRPC "
                  f"dev, WikiText-2 test); PyTorch, CPU {cpu}. Encoder MatMuls block 128 unless named. Cosine with "
                  "the unrounded model's sentence vectors. MB: weights' own bytes + table + 0.28 MB.",
                  ["| encoder | word table | mean | p5 | min | texts < 0.97 | encoder MB | table MB | MB in all | "
                   f"without the {len(unreachable):,} unreachable rows |", "|---|---|---|---|---|---:|---:|---:|---:|---:|",
                   *[f"| {r['encoder']} | {r['table']} | {r['mean']:.4f} | {r['p5']:.4f} | {r['min']:.4f} | "
                     f"{r['below_0.97']} | {r['encoder_bytes'] / 1e6:.2f} | {r['table_bytes'] / 1e6:.2f} | "
                     f"{r['total_mb']:.2f} | {r['trimmed_mb']:.2f} |" for r in rows]])


if __name__ == "__main__":
    main()
