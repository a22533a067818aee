"""Two or more ONNX graphs of one model timed side by side on the CPU: batch 1, in interleaved blocks (the order
reversed every other round), 2 threads, spinning off, on random ids of one length (``--seq``) or on SQuAD dev
windows at their own lengths (``--squad-windows N``: every k-th dev question's windows). For A/B checks of one
graph change (issues 26, 27): the outlier split on or off, one op for another.

    .venv/bin/python benchmarks/graphs_side_by_side.py A.onnx B.onnx [--seq 128 | --squad-windows 300] --out NAME

Writes ``benchmarks/results/NAME.{json,md}``: p50 / p90 / mean ms per graph and its ratio to the first, with the
CPU (vendor, family/model, INT8 kind), versions, threads, the load average before and after and the share of the
CPU other programs used while timing.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "graphs_side_by_side"
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from int8_targets import session  # noqa: E402


def random_feeds(seq: int) -> list[dict[str, np.ndarray]]:
    ids = np.random.default_rng(0).integers(1000, 20000, (1, seq)).astype(np.int64)
    return [{"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}]


def squad_feeds(tokenizer_dir: Path, n: int) -> list[dict[str, np.ndarray]]:
    """The windows of about ``n`` dev questions spread over the file, each at its own length."""
    from edgebert.data.tokenizer import load_tokenizer
    from edgebert.qa.squad_file import read_squad
    from edgebert.qa.windows import squad_windows

    examples = read_squad(REPO.parent / "shared" / "data" / "squad" / "dev-v2.0-first10.json")
    windows = squad_windows(examples[::max(1, len(examples) // n)], load_tokenizer(tokenizer_dir))
    return [{"input_ids": ids[None].astype(np.int64), "attention_mask": np.ones((1, len(ids)), np.int64),
             "token_type_ids": types[None].astype(np.int64)} for ids, types in zip(windows.input_ids, windows.token_type_ids)]


def _shown(path: Path) -> str:
    path = Path(path).resolve()
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else f"(temporary) {path.name}"


def time_graphs(paths: list[Path], feeds: list[dict[str, np.ndarray]], rounds: int = 3, threads: int = 2) -> dict:
    """p50 / p90 / mean ms of every graph over ``rounds`` passes of ``feeds``, graphs interleaved."""
    from edgebert.bench.measure import OtherCpuLoad

    sessions = [session(p, threads, spin=False) for p in paths]
    names = [{i.name for i in s.get_inputs()} for s in sessions]
    times: list[list[float]] = [[] for _ in sessions]
    other = OtherCpuLoad()
    for r in range(rounds):
        order = range(len(sessions)) if r % 2 == 0 else reversed(range(len(sessions)))
        for k in order:
            run = lambda f: sessions[k].run(None, {n: v for n, v in f.items() if n in names[k]})  # noqa: E731
            for f in feeds[:5]:
                run(f)
            with other.timing():
                for f in feeds:
                    t0 = time.perf_counter()
                    run(f)
                    times[k].append((time.perf_counter() - t0) * 1e3)
    first = float(np.median(times[0]))
    rows = [{"graph": _shown(p), "p50_ms": round(float(np.median(t)), 3), "p90_ms": round(float(np.percentile(t, 90)), 3),
             "mean_ms": round(float(np.mean(t)), 3), "p50_vs_first": round(float(np.median(t)) / first, 3)}
            for p, t in zip(paths, times)]
    return {"rows": rows, "other_cpu": other.fraction(), "threads": threads, "rounds": rounds, "inputs": len(feeds)}


def record(timing: dict, load_before, what: str) -> dict:
    """``timing`` with the machine, versions and load averages (the result file's content)."""
    from edgebert.runtime.hostcpu import detect_host
    from edgebert.system.environment import cpuinfo, describe

    fields = cpuinfo()
    named = f"{fields.get('vendor_id')} family {fields.get('cpu family')} model {fields.get('model')}"
    return {**timing, "what": what, "cpu": f"{named}; {detect_host().summary()}", "environment": describe(),
            "load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in os.getloadavg()],
            "date": time.strftime("%Y-%m-%d %H:%M:%S"), "command": "python " + " ".join(sys.argv)}


def markdown(result: dict, title: str, extra: list[str] = ()) -> str:
    env = result["environment"]
    lines = [f"# {title}", "", f"- CPU: {env['cpu']}; {result['cpu']}",
             f"- onnxruntime {env.get('onnxruntime')}, {result['threads']} threads, spinning off; {result['what']}; "
             f"{result['rounds']} interleaved rounds; load average {result['load_before']} before, "
             f"{result['load_after']} after; other programs used {result['other_cpu']} of the CPU while timing", "",
             "| graph | p50 ms | p90 ms | mean ms | p50 vs the first |", "|---|---:|---:|---:|---:|"]
    lines += [f"| `{r['graph']}` | {r['p50_ms']:.2f} | {r['p90_ms']:.2f} | {r['mean_ms']:.2f} | {r['p50_vs_first']:.3f} |"
              for r in result["rows"]]
    return "\n".join([*lines, "", *extra, f"Command: `{result['command']}`", ""])


def write(result: dict, name: str, title: str, extra: list[str] = ()) -> str:
    from edgebert.files.atomic import write_json, write_text

    text = markdown(result, title, extra)
    write_json(RESULTS / f"{name}.json", result)
    write_text(RESULTS / f"{name}.md", text)
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("graphs", nargs="+", type=Path)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--squad-windows", type=int, default=0, help="time on the windows of about N dev questions")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", required=True, help="results file stem under benchmarks/results/")
    ap.add_argument("--title", default="ONNX graphs side by side")
    args = ap.parse_args()
    load_before = os.getloadavg()
    if args.squad_windows:
        feeds, what = squad_feeds(args.graphs[0].parent, args.squad_windows), "SQuAD dev windows at their own lengths"
    else:
        feeds, what = random_feeds(args.seq), f"1 x {args.seq} random ids, 100 runs a round"
        feeds = feeds * 100
    result = record(time_graphs(args.graphs, feeds, args.rounds), load_before, what)
    result["what"] = f"{what} ({result['inputs']} inputs)"
    print(write(result, args.out, args.title))


if __name__ == "__main__":
    main()
