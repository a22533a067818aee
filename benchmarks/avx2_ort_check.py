"""Why a saved ``.ort`` graph gives other numbers than its ``.onnx`` graph on a CPU whose U8S8 kernel saturates,
and what the runtime does about it (issue #49, item 1).

Run it under ``../shared/tools/avx2-python`` (QEMU as an AVX2-only Haswell: onnxruntime's U8S8 kernel
saturates there, bit-identical to a real AVX2 CPU; ~60x slower: accuracy only) and natively, on a bundle
exported with ``--target portable,x86-vnni --ort-format``. For the ``x86-vnni`` graph (8-bit weights) it
measures, with plain onnxruntime sessions (the runtime's guard bypassed on purpose):

1. the ``.onnx`` graph loaded with ``session.x64quantprecision=1`` (what ``EdgeSession`` does on such a CPU);
2. the ``.ort`` graph loaded with the same option;
3. the ``.onnx`` graph without it (the raw saturating kernel);

each against the bundle's fp32 graph (cosine of mean-pooled, normalized vectors), and which weight types
onnxruntime's optimized graph holds in cases 1 and 3 (``optimized_model_filepath``): the option's
``Avx2WeightS8ToU8Transformer`` rewrites int8 weights to uint8 when it optimizes a ``.onnx`` graph at load;
a ``.ort`` graph is loaded as saved, with no graph transformer run, so its int8 weights meet the saturating
kernel. Then it opens the ``.ort`` form through ``EdgeSession`` and records what the user sees.

    ../shared/tools/avx2-python .venv/bin/python benchmarks/avx2_ort_check.py BUNDLE --out benchmarks/results/avx2_ort_check/avx2
    .venv/bin/python benchmarks/avx2_ort_check.py BUNDLE --out benchmarks/results/avx2_ort_check/native
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
sys.path.insert(0, str(REPO))
OPTION = "session.x64quantprecision"
INT8_OPS = ("MatMulInteger", "MatMulIntegerToFloat", "DynamicQuantizeMatMul", "QAttention", "QGemm")


def texts(n: int) -> list[str]:
    from edgebert.bench.workloads import read_texts

    return [t for t in read_texts(str(SHARED / "data" / "sst2" / "dev.tsv"), n) if isinstance(t, str)]


def session(path: Path, fix: bool, saved: Path | None = None):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.intra_op_num_threads = 2
    if fix:
        opts.add_session_config_entry(OPTION, "1")
    if saved is not None:
        opts.optimized_model_filepath = str(saved)
    return ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])


def weight_types(optimized: Path) -> dict[str, int]:
    """Element types of the constant weight inputs of the integer products in an optimized .onnx graph."""
    import onnx

    model = onnx.load(str(optimized))
    inits = {i.name: onnx.helper.tensor_dtype_to_np_dtype(i.data_type).name for i in model.graph.initializer}
    kinds: Counter[str] = Counter()
    for node in model.graph.node:
        if node.op_type in INT8_OPS:
            for name in node.input[1:2] if node.op_type != "QAttention" else node.input[1:2]:
                if name in inits:
                    kinds[f"{node.op_type}:{inits[name]}"] += 1
    return dict(kinds)


def pooled(sess, feeds: dict[str, np.ndarray], mask: np.ndarray) -> np.ndarray:
    names = {i.name for i in sess.get_inputs()}
    out = sess.run(["last_hidden_state"], {k: v for k, v in feeds.items() if k in names})[0]
    m = mask[..., None].astype(np.float32)
    vec = (out * m).sum(1) / m.sum(1)
    return vec / np.linalg.norm(vec, axis=1, keepdims=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bundle", type=Path)
    ap.add_argument("--texts", type=int, default=40)
    ap.add_argument("--out", type=Path, default=None, help="write OUT.json")
    args = ap.parse_args()

    from edgebert.errors import EdgebertError
    from edgebert.runtime import EdgeSession, pad_batch
    from edgebert.runtime.hostcpu import detect_host

    host = detect_host()
    manifest = json.loads((args.bundle / "manifest.json").read_text())
    entry = manifest["models"]["int8-x86-vnni"]
    onnx_file, ort_file = args.bundle / entry["file"], args.bundle / entry["ort"]["file"]
    fp32 = EdgeSession(args.bundle, "cpu", "fp32", threads=2)
    rows = fp32.tokenize(texts(args.texts))
    feeds = pad_batch(rows, fp32.pad_id)
    mask = feeds["attention_mask"]
    reference = pooled(fp32._session, feeds, mask)
    result: dict = {"host": host.summary(), "kind": host.kind, "u8s8": host.u8s8, "texts": len(rows),
                    "bundle": str(args.bundle), "graph": entry["file"], "ort_form": entry["ort"]["file"]}
    with tempfile.TemporaryDirectory() as tmp:
        for name, path, fix in (("onnx + x64quantprecision=1", onnx_file, True), ("ort + x64quantprecision=1",
                                                                                  ort_file, True),
                                ("onnx, no option", onnx_file, False), ("ort, no option", ort_file, False)):
            saved = Path(tmp) / f"{len(result)}.onnx" if path.suffix == ".onnx" else None
            vectors = pooled(session(path, fix, saved), feeds, mask)
            cos = (vectors * reference).sum(1)
            row = {"cosine_vs_fp32_mean": round(float(cos.mean()), 5), "cosine_vs_fp32_min": round(float(cos.min()), 5)}
            if saved is not None:
                row["optimized_weight_types"] = weight_types(saved)
            result[name] = row
            print(name, row, flush=True)
    try:
        EdgeSession(args.bundle, "cpu", "int8", int8_target="x86-vnni", graph_format="ort")
        result["edgesession_ort"] = "opened"
    except EdgebertError as exc:
        result["edgesession_ort"] = f"refused: {exc.one_line()}"
    print("EdgeSession(graph_format='ort'):", result["edgesession_ort"])
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
