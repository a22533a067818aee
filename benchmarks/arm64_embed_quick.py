"""The INT8 graphs of a bundle on an emulated aarch64, quickly: sentence vectors of the first N SST-2 dev sentences,
one at a time, through ``EdgeSession`` with ``int8_target`` portable and arm64, saved to an .npz for comparison
with the same graphs run natively (accuracy only: emulated time means nothing).

    PYTHONPATH=.venv/arm64-site-XXXX:$PWD ../shared/tools/arm64-python benchmarks/arm64_embed_quick.py BUNDLE OUT.npz N
"""
import sys, platform, numpy as np
from edgebert.runtime import EdgeSession
bundle, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
lines = open("/work/shared/data/sst2/dev.tsv").read().splitlines()[1:n + 1]
texts = [l.split("\t")[0] for l in lines]
res = {}
for target in ("portable", "arm64"):
    s = EdgeSession(bundle, provider="cpu", precision="int8", int8_target=target, threads=2)
    res[target] = np.stack([s.embed([t])[0] for t in texts])
    print(platform.machine(), target, s.describe().get("int8_target", ""), flush=True)
np.savez(out, **res)
