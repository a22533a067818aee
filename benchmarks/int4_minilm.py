"""The small (int4) graph of all-MiniLM-L6-v2 (issue #50, goal: <= 12 MB at embedding cosine vs fp32 mean
>= 0.99, min >= 0.97 on held-out texts): bytes and cosine vs the fused fp32 graph on SST-2 dev sentences.

    python benchmarks/int4_minilm.py [--bundle runs/minilm_ort] [--texts 200] [--block 32] [--algorithm rtn]
                                     [--budget 0.01] [--no-table] [--sensitivity 64]
                                     [--attention split|packed] [--table-block 32]

The gate's held-out texts are the first half of the SST-2 dev sentences, the reported figures the second
half (not seen by the gate). Writes benchmarks/results/int4/<name>.json. CPU-heavy: one run at a time.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tokenizers import Tokenizer  # noqa: E402

from edgebert.files.atomic import atomic_path, work_dir  # noqa: E402
from edgebert.quantization.accuracy import AccuracyProbe  # noqa: E402
from edgebert.quantization.calibration import TextBatches  # noqa: E402
from edgebert.quantization.int4 import Int4Config, small_graph  # noqa: E402
from edgebert.runtime.hostcpu import detect_host  # noqa: E402

SST2 = Path("/work/shared/data/sst2/dev.tsv")


def sentences(n: int) -> list[str]:
    lines = SST2.read_text(encoding="utf-8").splitlines()[1:]
    return [line.split("\t")[0].strip() for line in lines if line.strip()][:n]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bundle", type=Path, default=ROOT / "runs/minilm_ort")
    ap.add_argument("--texts", type=int, default=200)
    ap.add_argument("--block", type=int, default=32)
    ap.add_argument("--algorithm", default="rtn")
    ap.add_argument("--budget", type=float, default=0.01)
    ap.add_argument("--no-table", action="store_true")
    ap.add_argument("--attention", default="split", help="split: QKV 4-bit candidates; packed: fused Attention 8-bit")
    ap.add_argument("--table-block", type=int, default=32)
    ap.add_argument("--sensitivity", type=int, default=64)
    ap.add_argument("--keep", type=Path, default=None, help="copy the small graph here (for int4_latency.py)")
    args = ap.parse_args()
    texts = sentences(args.texts)
    gate, held = texts[: len(texts) // 2], texts[len(texts) // 2:]
    manifest = json.loads((args.bundle / "manifest.json").read_text())
    fused = args.bundle / manifest["models"]["fp32"]["file"]
    int8 = args.bundle / manifest["models"]["int8"]["file"]
    tok = Tokenizer.from_file(str(args.bundle / "tokenizer.json"))
    cfg = Int4Config(block_size=args.block, algorithm=args.algorithm, word_table=not args.no_table,
                     attention=args.attention, table_block=args.table_block)
    # "_perbyte": the gate ranks by loss per byte saved (results without it were ranked by loss alone)
    # "_split": QKV projections 4-bit candidates (quantization.split_attention) and float16 block scales
    name = (f"minilm_b{args.block}_{args.algorithm}{'_notable' if args.no_table else ''}_budget{args.budget:g}"
            f"_perbyte{'_split' if args.attention == 'split' else ''}"
            f"{f'_t{args.table_block}' if args.table_block != 32 else ''}")
    out_dir = ROOT / "benchmarks/results/int4"
    out_dir.mkdir(parents=True, exist_ok=True)
    with work_dir("int4bench") as tmp:
        files = {}
        for part, rows in (("gate", gate), ("held", held)):
            files[part] = Path(tmp) / f"{part}.txt"
            files[part].write_text("\n".join(rows) + "\n", encoding="utf-8")
        probe = AccuracyProbe("embed", fused, TextBatches(files["gate"], tok, batch_size=32, max_length=128))
        held_probe = AccuracyProbe("embed", fused, TextBatches(files["held"], tok, batch_size=32, max_length=128))
        small = Path(tmp) / "model_q4.onnx"
        graph = small_graph(fused, small, cfg, probe, args.budget, print, args.sensitivity)
        measured = {"small": held_probe.measure(small).as_dict(), "int8": held_probe.measure(int8).as_dict()}
        result = {"config": cfg.as_dict(), "budget": args.budget, "texts": {"gate": len(gate), "held_out": len(held),
                                                                             "source": str(SST2)},
                  "bytes": {"small": graph.bytes, "int8": int8.stat().st_size, "fp32": fused.stat().st_size},
                  "gate_order": "loss per byte saved", "held_out": measured, "gate": graph.accuracy, "eight_bit": graph.quantization["eight_bit"],
                  "op_counts": graph.quantization["op_counts"], "host": detect_host().as_dict()}
        with atomic_path(out_dir / f"{name}.json") as path:
            path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        if args.keep:
            import shutil

            args.keep.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(small, args.keep)
    print(json.dumps({k: result[k] for k in ("bytes", "held_out", "eight_bit")}, indent=1))


if __name__ == "__main__":
    main()
