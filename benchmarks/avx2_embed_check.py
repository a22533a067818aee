"""Does a bundle's INT8 graph give the same embeddings on an AVX2-only CPU? (bundles travel: built on one CPU
kind, run on another). Runs ``EdgeSession.embed`` (the runtime's own INT8 choice) on 120 SST-2 dev sentences
and 30 WikiText-2 test paragraphs twice: natively, and under ``../shared/tools/avx2-python`` (QEMU as an
AVX2-only Haswell, where onnxruntime's U8S8 kernel saturates; bit-identical to a real AVX2 CPU, ~60x
slower: accuracy only, never timing); then compares the two, and each with the bundle's fp32 graph.

    .venv/bin/python benchmarks/avx2_embed_check.py BUNDLE [--out benchmarks/results/NAME]

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


def texts() -> list[str]:
    from edgebert.bench.workloads import read_texts

    sst = [t for t in read_texts(str(SHARED / "data" / "sst2" / "dev.tsv"), 120) if isinstance(t, str)]
    wiki = SHARED / "data" / "wikitext-2-raw" / "wiki.test.raw"
    paras = [line.strip() for line in wiki.open(encoding="utf-8") if len(line.strip()) > 200][:30]
    return sst + paras


def embed(bundle: str, out: str, precision: str) -> None:
    """Child mode: embed ``texts()`` with the bundle at ``precision``, save to ``out`` (.npy) + a JSON line."""
    from edgebert.runtime import EdgeSession

    session = EdgeSession(bundle, provider="cpu", precision=precision, threads=2)
    np.save(out, session.embed(texts()))
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
    ap.add_argument("--child", nargs=2, metavar=("OUT", "PRECISION"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return embed(args.bundle, *args.child)
    with tempfile.TemporaryDirectory() as tmp:
        runs, arrays = {}, {}
        for name, prefix, precision in (("native int8", [], "int8"), ("native fp32", [], "fp32"),
                                        ("avx2 int8", [str(SHARED / "tools" / "avx2-python")], "int8")):
            out = f"{tmp}/{name.replace(' ', '_')}.npy"
            done = subprocess.run(prefix + [sys.executable, __file__, args.bundle, "--child", out, precision],
                                  check=True, capture_output=True, text=True)
            runs[name] = json.loads(done.stdout.strip().splitlines()[-1])
            arrays[name] = np.load(out)
    report = {"bundle": args.bundle, "texts": len(arrays["native int8"]), "runs": runs,
              "avx2_int8_vs_native_int8": cosines(arrays["avx2 int8"], arrays["native int8"]),
              "native_int8_vs_fp32": cosines(arrays["native int8"], arrays["native fp32"]),
              "avx2_int8_vs_fp32": cosines(arrays["avx2 int8"], arrays["native fp32"])}
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        from edgebert.files.atomic import write_json, write_text

        write_json(args.out.with_suffix(".json"), report)
        title = "# INT8 embeddings on AVX2 (emulated) vs native"
        write_text(args.out.with_suffix(".md"), f"{title}\n\n```\n{text}\n```\n")


if __name__ == "__main__":
    main()
