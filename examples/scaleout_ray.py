"""A bundle on Ray Data:  python examples/scaleout_ray.py BUNDLE [WORKERS] [THREADS]   (pip install '.[cpu,ray]')

Starts a local Ray cluster (or joins the one in RAY_ADDRESS), embeds / classifies / tags the texts below with an
actor pool of WORKERS actors of THREADS CPUs each (onnxruntime gets THREADS threads in each), and prints a few
rows. On a cluster: the bundle (a folder or its `export --archive` file) at a path every node reads, e.g. on
shared storage; WORKERS x THREADS = the cluster's CPUs; read and write your own Parquet instead of from_items.
A qa bundle reads two columns: map_kwargs(..., columns=("question", "context")).
"""
import os
import sys

import ray

from edgebert.scaleout.ray_data import BundleMapper, map_kwargs

bundle = os.path.abspath(sys.argv[1])
workers = int(sys.argv[2]) if len(sys.argv) > 2 else 2
threads = int(sys.argv[3]) if len(sys.argv) > 3 else 1
ray.init(address=os.environ.get("RAY_ADDRESS"), include_dashboard=False, log_to_driver=False)
texts = ["The cat sits on the mat.", "Stocks fell sharply on Monday.", "A kitten is asleep on a rug.",
         "The central bank raised interest rates.", "Heavy rain is expected tomorrow."] * 20
dataset = ray.data.from_items([{"id": i, "text": t} for i, t in enumerate(texts)], override_num_blocks=workers * 2)
mapped = dataset.map_batches(BundleMapper, **map_kwargs(bundle, workers=workers, threads=threads, column="text"))
rows = sorted(mapped.take_all(), key=lambda r: r["id"])
for row in rows[:5]:
    shown = {k: (v[:4] if k == "embedding" else v) for k, v in row.items()}
    print(shown)
print(f"{len(rows)} rows on {workers} actors x {threads} threads")   # mapped.write_parquet("out/") for files
