#!/usr/bin/env bash
# `edgebert batch` on this machine, then the same job resumed and on Ray / Spark (pip install '.[cpu,batch]';
# '.[cpu,ray,spark]' for the other engines).
#
#   examples/scaleout_batch.sh BUNDLE [OUT]        (an embed, cls or token-cls bundle; qa reads two columns:
#                                                   --question-column / --context-column)
set -euo pipefail
BUNDLE=${1:?usage: examples/scaleout_batch.sh BUNDLE [OUT]}
OUT=${2:-runs/scaleout-batch}
mkdir -p "$OUT"
# the input: SST-2 dev sentences (any Parquet / JSONL / CSV with a text column will do)
DATA=${DATA:-../shared/data}
python - "$DATA/sst2/dev.tsv" "$OUT/texts.jsonl" <<'PY'
import json, sys
rows = [line.split("\t")[0] for line in open(sys.argv[1], encoding="utf-8").read().splitlines()[1:]]
with open(sys.argv[2], "w", encoding="utf-8") as fh:
    fh.writelines(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(rows))
PY
CORES=$(python -c "import os; print(len(os.sched_getaffinity(0)))")
# one worker per core, one onnxruntime thread each; parts of 200 rows (the unit a resumed run skips)
edgebert batch "$BUNDLE" --input "$OUT/texts.jsonl" --output "$OUT/local" --workers "$CORES" --threads 1 \
    --part-rows 200 --overwrite
# a run that stopped (Ctrl-C, a lost machine) continues where it was: written parts are checked and kept
edgebert batch "$BUNDLE" --input "$OUT/texts.jsonl" --output "$OUT/local" --workers "$CORES" --threads 1 \
    --part-rows 200 --resume
python -c "import pyarrow.parquet as pq, sys; t = pq.read_table(sys.argv[1]); print(t.num_rows, 'rows:', t.schema.names)" "$OUT/local"
if python -c "import ray" 2>/dev/null; then
  edgebert batch "$BUNDLE" --input "$OUT/texts.jsonl" --output "$OUT/ray" --engine ray --threads 1 --overwrite
fi
if python -c "import pyspark" 2>/dev/null; then
  edgebert batch "$BUNDLE" --input "$OUT/texts.jsonl" --output "$OUT/spark" --engine spark --overwrite
fi
