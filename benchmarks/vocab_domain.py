"""What ``export --vocab-from`` keeps and what it changes (issue #50, 4): all-MiniLM-L6-v2's vocabulary cut to
a domain corpus, and the sentence vectors of texts inside and outside that domain against the full vocabulary.

    python benchmarks/vocab_domain.py [--corpus sst2-train|student] [--texts 400]

Corpora: ``sst2-train`` (the 67k SST-2 train sentences: movie reviews) or ``student`` (the embedding
student's training text, ``runs/embed_students/train_sentences.txt``: WikiText-2 valid + SST-2 and MRPC train
sentences). Held-out texts: SST-2 dev sentences, MRPC dev sentences, the first sentence of WikiText-2 test
paragraphs (``--texts`` each). PyTorch fp32 on both sides (no quantization: the vocabulary's effect alone),
mean pooling, unit vectors; tokens per text with each tokenizer. Bytes: the word table's rows at fp32, INT8 (one
byte + a float16 scale per row) and 4-bit (block 32: half a byte + a float16 scale and a 4-bit zero point per
block). Writes ``benchmarks/results/vocab_domain/<corpus>.{json,md}``. Accuracy only, not timed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATA = ROOT.parent / "shared" / "data"
OUT = ROOT / "benchmarks" / "results" / "vocab_domain"


def sst2_train() -> list[str]:
    lines = (DATA / "sst2" / "train.tsv").read_text(encoding="utf-8").splitlines()[1:]
    return [line.split("\t")[0].strip() for line in lines if line.strip()]


def embed(model, tok, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(unit mean-pooled vectors, tokens per text)."""
    import torch

    tok.enable_truncation(256)
    tok.enable_padding()
    vectors, lengths = [], []
    with torch.no_grad():
        for start in range(0, len(texts), 32):
            enc = tok.encode_batch(texts[start:start + 32])
            ids = torch.tensor([e.ids for e in enc])
            mask = torch.tensor([e.attention_mask for e in enc])
            hidden = model(ids, attention_mask=mask).last_hidden_state
            pooled = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
            vectors.append(torch.nn.functional.normalize(pooled, dim=-1).numpy())
            lengths.extend(int(m.sum()) for m in mask)
    return np.concatenate(vectors), np.array(lengths)


def table_bytes(rows: int, hidden: int) -> dict[str, int]:
    blocks = hidden // 32
    return {"fp32": rows * hidden * 4, "int8": rows * (hidden + 2),
            "int4": rows * (hidden // 2 + 2 * blocks + (blocks + 1) // 2)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default="sst2-train", choices=("sst2-train", "student"))
    ap.add_argument("--texts", type=int, default=400)
    args = ap.parse_args()
    from tokenizers import Tokenizer

    from edgebert.exporters.vocab_prune import prune_vocabulary
    from edgebert.files.atomic import work_dir, write_json, write_text
    from edgebert.model import load_model
    from edgebert.pipeline.config import installed_teacher
    from edgebert.stages.embed_eval import DownstreamData
    from edgebert.system.environment import describe

    teacher = installed_teacher()
    load_before = [round(x, 2) for x in os.getloadavg()]
    data = DownstreamData.load(DATA, paragraphs=args.texts)
    held = {"SST-2 dev (in the SST-2 domain)": data.probe_dev[:args.texts],
            "MRPC dev (news)": [a for a, _ in data.pairs][:args.texts],
            "WikiText-2 test, first sentences": data.queries[:args.texts]}
    with work_dir("vocabdomain") as tmp:
        if args.corpus == "sst2-train":
            corpus = Path(tmp) / "sst2_train.txt"
            corpus.write_text("\n".join(sst2_train()) + "\n", encoding="utf-8")
        else:
            corpus = ROOT / "runs" / "embed_students" / "train_sentences.txt"
        pruned = prune_vocabulary(teacher, corpus, Path(tmp) / "pruned")
        full_model, small_model = load_model(teacher), load_model(Path(tmp) / "pruned")
        full_tok = Tokenizer.from_file(str(teacher / "tokenizer.json"))
        small_tok = Tokenizer.from_file(str(Path(tmp) / "pruned" / "tokenizer.json"))
        hidden = full_model.config.hidden_size
        rows = {}
        for name, texts in held.items():
            a, la = embed(full_model, full_tok, texts)
            b, lb = embed(small_model, small_tok, texts)
            cos = (a * b).sum(-1)
            rows[name] = {"texts": len(texts), "tokens_full": float(la.mean()), "tokens_pruned": float(lb.mean()),
                          "texts_changed": int((la != lb).sum()), "cosine_mean": float(cos.mean()),
                          "cosine_min": float(cos.min()), "cosine_p5": float(np.percentile(cos, 5))}
            print(name, rows[name], flush=True)
    result = {"corpus": args.corpus, "vocabulary": pruned.as_dict(),
              "table_bytes": {"full": table_bytes(pruned.original, hidden), "pruned": table_bytes(pruned.kept, hidden)},
              "held_out": rows, "model": str(teacher), "load_before": load_before,
              "load_after": [round(x, 2) for x in os.getloadavg()], "environment": describe()}
    OUT.mkdir(parents=True, exist_ok=True)
    write_json(OUT / f"{args.corpus}.json", result)
    lines = [f"# `--vocab-from {args.corpus}` on all-MiniLM-L6-v2 (fp32, the vocabulary's effect alone)", "",
             f"Kept {pruned.kept:,} of {pruned.original:,} pieces ({pruned.from_corpus:,} from {pruned.corpus_lines:,} "
             f"corpus lines, {pruned.characters:,} characters and ## characters, {pruned.special} special).", "",
             "| word table | fp32 | INT8 | 4-bit |", "|---|---:|---:|---:|"]
    for key in ("full", "pruned"):
        b = result["table_bytes"][key]
        lines.append(f"| {key} | {b['fp32']:,} | {b['int8']:,} | {b['int4']:,} |")
    lines += ["", "| held-out texts | n | tokens / text, full -> pruned | texts tokenized differently | cosine vs full, "
              "mean / p5 / min |", "|---|---:|---|---:|---|"]
    for name, r in rows.items():
        lines.append(f"| {name} | {r['texts']} | {r['tokens_full']:.1f} -> {r['tokens_pruned']:.1f} | "
                     f"{r['texts_changed']} | {r['cosine_mean']:.4f} / {r['cosine_p5']:.4f} / {r['cosine_min']:.4f} |")
    write_text(OUT / f"{args.corpus}.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    print(json.dumps({"load_after": result["load_after"]}))


if __name__ == "__main__":
    main()
