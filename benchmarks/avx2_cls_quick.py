"""A classifier bundle's labels, one sentence at a time, for fp32 and the portable and x86-vnni INT8 graphs, saved
to an .npz: run natively and under ``../shared/tools/avx2-python`` (an AVX2-only CPU, ~60x slower: accuracy only)
and compare the two files (labels, probabilities, agreement with fp32 and with the dataset's labels).

    .venv/bin/python benchmarks/avx2_cls_quick.py BUNDLE native.npz 200
    ../shared/tools/avx2-python .venv/bin/python benchmarks/avx2_cls_quick.py BUNDLE avx2.npz 200
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from edgebert.runtime import EdgeSession

SST2_DEV = Path(__file__).resolve().parents[2] / "shared" / "data" / "sst2" / "dev.tsv"
GRAPHS = {"fp32": {"precision": "fp32"}, "portable": {"precision": "int8", "int8_target": "portable"},
          "x86-vnni": {"precision": "int8", "int8_target": "x86-vnni"}}


def main(bundle: str, out: str, n: int) -> None:
    rows = [line.split("\t") for line in SST2_DEV.read_text(encoding="utf-8").splitlines()[1:n + 1]]
    texts = [r[0] for r in rows]
    found = {"gold": np.array([int(r[1]) for r in rows])}
    for key, options in GRAPHS.items():
        session = EdgeSession(bundle, provider="cpu", threads=2, **options)
        results = [session.classify([t]) for t in texts]
        found[key] = np.array([r.label_ids[0] for r in results])
        found[f"{key}_prob"] = np.stack([r.probabilities[0] for r in results])
    np.savez(out, **found)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
