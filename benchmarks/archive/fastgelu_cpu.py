"""Issue 26, the GELU row of the op-by-op gap: BiasGelu (exact erf) -> onnxruntime's FastGelu (tanh approximation,
with bias) in an INT8 MiniLM graph. Times both at 1 x 128 side by side (``graphs_side_by_side``: interleaved,
2 threads, spinning off) and measures the output difference at four lengths.

    .venv/bin/python benchmarks/archive/fastgelu_cpu.py [INT8_GRAPH]     # default: the cpu_passes benchmark's bundle

Writes ``benchmarks/archive/results/fastgelu_cpu_<cpu kind>.{json,md}``.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # graphs_side_by_side
from graphs_side_by_side import REPO, random_feeds, record, session, time_graphs, write  # noqa: E402


def fast_gelu(src: Path, dst: Path) -> int:
    """``src`` with every BiasGelu made a FastGelu (same inputs: x, bias), saved to ``dst``; how many."""
    model = onnx.load(str(src))
    nodes = [n for n in model.graph.node if n.op_type == "BiasGelu"]
    for node in nodes:
        node.op_type, node.domain = "FastGelu", "com.microsoft"
    onnx.save(model, str(dst))
    return len(nodes)


def differences(a: Path, b: Path) -> list[dict]:
    """Largest |difference| and the smallest per-token cosine of the two graphs' first output."""
    sa, sb = session(a, 2, spin=False), session(b, 2, spin=False)
    names = {i.name for i in sa.get_inputs()}
    rows = []
    for seq in (17, 64, 128, 200):
        feeds = {k: v for k, v in random_feeds(seq)[0].items() if k in names}
        oa, ob = sa.run(None, feeds)[0], sb.run(None, feeds)[0]
        cos = (oa * ob).sum(-1) / np.linalg.norm(oa, axis=-1) / np.linalg.norm(ob, axis=-1)
        rows.append({"seq": seq, "max_abs_diff": float(np.abs(oa - ob).max()), "min_token_cosine": float(cos.min())})
    return rows


def main() -> None:
    from edgebert.runtime.hostcpu import detect_host

    src = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "runs" / "cpu_passes" / "after" / "model.int8.onnx"
    dst = Path(tempfile.mkdtemp()) / "model.int8.fastgelu.onnx"
    replaced = fast_gelu(src, dst)
    load_before = os.getloadavg()
    result = record(time_graphs([src, dst], random_feeds(128) * 100, rounds=6), load_before,
                    "1 x 128 random ids, 100 runs a round (first: BiasGelu, second: FastGelu)")
    result["replaced"], result["differences"] = replaced, differences(src, dst)
    extra = [f"{replaced} BiasGelu -> FastGelu. Output of the FastGelu graph against the BiasGelu graph:", "",
             "| tokens | max abs diff | min token cosine |", "|---:|---:|---:|",
             *(f"| {d['seq']} | {d['max_abs_diff']:.3g} | {d['min_token_cosine']:.5f} |" for d in result["differences"]), ""]
    print(write(result, f"fastgelu_cpu_{detect_host().kind}", "INT8 MiniLM: BiasGelu vs FastGelu (issue 26)", extra))


if __name__ == "__main__":
    main()
