"""SmoothQuant-style scales folded into the LayerNorms (issue 68, "close the batch-1 gap"): does moving the
activation outliers of the LayerNorm outputs into the weights let the outlier split go, and is the graph faster?

    .venv/bin/python benchmarks/smoothquant_probe.py [--bundle runs/cpu_peers/bundle] [--alpha 0.5] [--rounds 12]

From the bundle's fused fp32 CPU graph (``onnx/model.onnx``), through the exporter's own maker, the ``--target``
recipe twice: smoothing off (alpha 0) and at ``--alpha`` (``quantization.smoothing``: the scales folded into the
LayerNorms, then the outlier split measured on the smoothed ranges). Each split graph is checked against the fused
one (largest output difference, padded batches), each INT8 graph is gated on the 200 built-in held-out texts, and
the two are timed: 1 x 128, 1 x 32 and 8 x 128, 2 threads, interleaved rounds with spinning off, then each in its
own blocks (alternating, a pause before each) with spinning on.

Writes ``benchmarks/results/int8_profile/smoothquant_<cpu kind>_<target>_alpha<alpha>.json``; graphs stay under
``--work``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from edgebert.quantization.config import Int8Config  # noqa: E402
from edgebert.quantization.int8_graphs import Int8Maker  # noqa: E402
from edgebert.quantization.targets import TARGETS  # noqa: E402
from edgebert.runtime.hostcpu import detect_host  # noqa: E402


def _session(path: Path, spinning: bool):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = 2, 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def _feeds(session, b: int, t: int, rng) -> dict:
    f = {"input_ids": rng.integers(1000, 20000, (b, t)).astype(np.int64), "attention_mask": np.ones((b, t), np.int64),
         "token_type_ids": np.zeros((b, t), np.int64)}
    return {i.name: f[i.name] for i in session.get_inputs()}


SHAPES = ((1, 128), (1, 32), (8, 128))


def _time(session, feeds: dict, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        session.run(None, feeds)
    return (time.perf_counter() - t0) / n * 1000


def side_by_side(graphs: dict[str, Path], rounds: int) -> dict:
    """Spinning off: all graphs open, interleaved rounds; p50 per shape of the per-round means (5 runs each)."""
    rng = np.random.default_rng(0)
    sessions = {k: _session(p, False) for k, p in graphs.items()}
    feeds = {k: {s: _feeds(sess, *s, rng) for s in SHAPES} for k, sess in sessions.items()}
    times = {k: {s: [] for s in SHAPES} for k in graphs}
    for k, sess in sessions.items():
        for s in SHAPES:
            _time(sess, feeds[k][s], 5)
    names = list(graphs)
    for r in range(rounds):
        for k in names[r % len(names):] + names[:r % len(names)]:
            for s in SHAPES:
                times[k][s].append(_time(sessions[k], feeds[k][s], 5 if s[0] == 1 else 1))
    return {k: {f"{b}x{t}": round(float(np.median(v)), 3) for (b, t), v in d.items()} for k, d in times.items()}


def blocks(graphs: dict[str, Path], rounds: int, pause: float = 3.0) -> dict:
    """Spinning on: each graph in its own block after a pause, alternating, ``rounds`` blocks each."""
    rng = np.random.default_rng(0)
    out = {k: {f"{b}x{t}": [] for b, t in SHAPES} for k in graphs}
    for r in range(rounds):
        for k in (list(graphs) if r % 2 == 0 else list(graphs)[::-1]):
            time.sleep(pause)
            sess = _session(graphs[k], True)
            for b, t in SHAPES:
                f = _feeds(sess, b, t, rng)
                _time(sess, f, 5)
                out[k][f"{b}x{t}"].append(_time(sess, f, 40 if b == 1 else 5))
            del sess
    return {k: {s: round(float(np.median(v)), 3) for s, v in d.items()} for k, d in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bundle", type=Path, default=ROOT / "runs/cpu_peers/bundle")
    ap.add_argument("--work", type=Path, default=ROOT / "runs/smoothquant")
    ap.add_argument("--alpha", type=float, default=0.75)
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--target", default="x86-vnni", help="the recipe (its weights' range) to quantize by")
    ap.add_argument("--no-time", action="store_true", help="accuracy only")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/int8_profile")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    host = detect_host()
    fused = args.bundle / "onnx/model.onnx"
    say = lambda m: print(f"[smoothquant] {m}", flush=True)  # noqa: E731
    qcfg = Int8Config(targets=(args.target,))
    maker = Int8Maker(qcfg, "embed", fused, tokenizer=args.bundle / "tokenizer.json", pad_id=0, work=args.work, say=say,
                      max_length=512)
    made, graphs = {}, {}
    for alpha in (0.0, args.alpha):
        recipe = TARGETS[args.target].replace(smooth_alpha=alpha)
        split = maker.outlier_split(recipe)
        diff = _float_diff(fused, split.path)
        graph = maker.target_graph(recipe, split, args.work / f"{args.target}.smooth-{alpha:g}.int8.onnx")
        name = f"{args.target} alpha {alpha:g}"
        graphs[name] = graph.path
        made[name] = {"fp32_max_abs_diff_after_split": diff, "smoothing": split.figures["smoothing"],
                      "split_nodes": split.figures.get("nodes", 0), "split_channels": split.figures.get("channels", 0),
                      "gate": {k: graph.accuracy[k] for k in ("mean", "min", "loss", "n")},
                      "excluded": graph.quantization["excluded_nodes"]}
        say(f"{name}: {made[name]}")
    result = {"cpu": host.summary(), "target": args.target, "graphs": made, "threads": 2,
              "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    if not args.no_time:
        load0 = os.getloadavg()
        result["p50_ms_spinning_off_side_by_side"] = side_by_side(graphs, args.rounds)
        result["p50_ms_spinning_on_blocks"] = blocks(graphs, max(4, args.rounds // 2))
        result["load_average"] = {"before": load0, "after": os.getloadavg()}
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"smoothquant_{host.kind}_{args.target}_alpha{args.alpha:g}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


def _float_diff(a: Path, b: Path) -> float:
    rng = np.random.default_rng(1)
    sa, sb = _session(a, False), _session(b, False)
    worst = 0.0
    for bsz, t in ((1, 7), (3, 64), (2, 200)):
        f = _feeds(sa, bsz, t, rng)
        f["attention_mask"][-1, t // 2:] = 0
        worst = max(worst, float(np.abs(sa.run(None, f)[0] - sb.run(None, f)[0]).max()))
    return worst


if __name__ == "__main__":
    main()
