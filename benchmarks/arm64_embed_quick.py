"""The INT8 graphs of a bundle on an emulated aarch64, quickly: sentence vectors of the first N SST-2 dev sentences,
one at a time, through ``EdgeSession`` with ``int8_target`` portable and arm64, saved to an .npz for comparison
with the same graphs run natively (accuracy only: emulated time means nothing; the full check is
``benchmarks/arm64_check.py``).

    PYTHONPATH=.venv/arm64-site-XXXX:$PWD ../shared/tools/arm64-python benchmarks/arm64_embed_quick.py BUNDLE OUT.npz N
"""

from __future__ import annotations

import platform
import sys
from pathlib import Path

import numpy as np

from edgebert.runtime import EdgeSession

SST2_DEV = Path(__file__).resolve().parents[2] / "shared" / "data" / "sst2" / "dev.tsv"


def main(bundle: str, out: str, n: int) -> None:
    lines = SST2_DEV.read_text(encoding="utf-8").splitlines()[1:n + 1]
    texts = [line.split("\t")[0] for line in lines]
    vectors = {}
    for target in ("portable", "arm64"):
        session = EdgeSession(bundle, provider="cpu", precision="int8", int8_target=target, threads=2)
        vectors[target] = np.stack([session.embed([t])[0] for t in texts])
        print(platform.machine(), target, flush=True)
    np.savez(out, **vectors)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
