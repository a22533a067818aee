"""Does a bundle's INT8 (or small, ``--precision int4``) graph give the same embeddings on an AVX2-only CPU? (bundles travel: built on one CPU
kind, run on another). Runs ``EdgeSession.embed`` (the runtime's own INT8 choice) on 120 SST-2 dev sentences
and 30 WikiText-2 test paragraphs twice: natively, and under ``../shared/tools/avx2-python`` (QEMU as an
AVX2-only Haswell, where onnxruntime's U8S8 kernel saturates; bit-identical to a real AVX2 CPU, ~60x
slower: accuracy only, never timing); then compares the two, and each with the bundle's fp32 graph.

    .venv/bin/python benchmarks/avx2_embed_check.py BUNDLE [--out benchmarks/results/NAME] [--precision int4]

Prints the figures (and writes ``--out``.json / .md when given), with the graph each host picked and why.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
sys.path.insert(0, str(REPO))


def texts(n: int = 120) -> list[str]:
    """``n`` SST-2 dev sentences and ``n // 4`` WikiText-2 test paragraphs."""
    from edgebert.bench.workloads import read_texts

    sst = [t for t in read_texts(str(SHARED / "data" / "sst2" / "dev.tsv"), n) if isinstance(t, str)]
    wiki = SHARED / "data" / "wikitext-2-raw" / "wiki.test.raw"
    paras = [line.strip() for line in wiki.open(encoding="utf-8") if len(line.strip()) > 200][:n // 4]
    return sst + paras


def embed(bundle: str, out: str, precision: str, n: int) -> None:
    """Child mode: embed ``texts()`` with the bundle at ``precision``, save to ``out`` (.npy) + a JSON line."""
    from edgebert.runtime import EdgeSession

    session = EdgeSession(bundle, provider="cpu", precision=precision, threads=2)
    np.save(out, session.embed(texts(n)))
    print(json.dumps({"graph": session.model_key, "reason": session.precision_reason,
                      "host": session.host.summary()}))


def cosines(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    from edgebert.scores.embeddings import pair_cosines

    cos = pair_cosines(a, b)
    return {"mean": round(float(cos.mean()), 6), "min": round(float(cos.min()), 6)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bundle")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--texts", type=int, default=120, help="SST-2 sentences (and a quarter as many paragraphs)")
    ap.add_argument("--precision", default="int8", help="the graph compared on both hosts: int8 | int4 (the small one)")
    ap.add_argument("--child", nargs=2, metavar=("OUT", "PRECISION"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return embed(args.bundle, *args.child, args.texts)
    with tempfile.TemporaryDirectory() as tmp:
        runs, arrays, q = {}, {}, args.precision
        for name, prefix, precision in ((f"native {q}", [], q), ("native fp32", [], "fp32"),
                                        (f"avx2 {q}", [str(SHARED / "tools" / "avx2-python")], q)):
            out = f"{tmp}/{name.replace(' ', '_')}.npy"
            done = subprocess.run(prefix + [sys.executable, __file__, args.bundle, "--child", out, precision,
                                            "--texts", str(args.texts)],
                                  check=True, capture_output=True, text=True)
            runs[name] = json.loads(done.stdout.strip().splitlines()[-1])
            arrays[name] = np.load(out)
    report = {"bundle": args.bundle, "texts": len(arrays[f"native {q}"]), "runs": runs,
              f"avx2_{q}_vs_native_{q}": cosines(arrays[f"avx2 {q}"], arrays[f"native {q}"]),
              f"native_{q}_vs_fp32": cosines(arrays[f"native {q}"], arrays["native fp32"]),
              f"avx2_{q}_vs_fp32": cosines(arrays[f"avx2 {q}"], arrays["native fp32"]),
              "max_abs_diff_avx2_vs_native": float(np.abs(arrays[f"avx2 {q}"] - arrays[f"native {q}"]).max())}
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        from edgebert.files.atomic import write_json, write_text

        write_json(args.out.with_suffix(".json"), report)
        title = f"# {'INT8' if q == 'int8' else 'Small-graph (' + q + ')'} embeddings on AVX2 (emulated) vs native"
        write_text(args.out.with_suffix(".md"), f"{title}\n\n```\n{text}\n```\n")


if __name__ == "__main__":
    main()
