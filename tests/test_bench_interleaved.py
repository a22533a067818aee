"""Speed figures that hold on a busy machine (issue #22): the CPU paths are timed side by side in interleaved
rounds whose order rotates, their onnxruntime sessions do not spin, the share of the CPU other programs took
is measured over the timed calls, and ``speed_caveat`` says when the figures are not to be quoted."""

from __future__ import annotations

import copy
import json

import pytest

from conftest import REPO
from edgebert.bench import BenchConfig, run_bench
from edgebert.bench.measure import OtherCpuLoad, interleave
from edgebert.bench.verdict import BUSY_SHARE, speed_caveat
from edgebert.errors import RuntimeFault
from runtime_fixtures import tiny_bundle

STORED = REPO / "benchmarks" / "results" / "pipeline_wiki" / "report.json"     # an idle machine's run


class Recorder:
    """Fake paths: each call is logged as (path, index) and advances a fake clock by ``cost[path]`` seconds."""

    def __init__(self, cost: dict[str, float]):
        self.cost, self.calls, self.now = cost, [], 0.0

    def call(self, name: str):
        def run(i: int) -> None:
            self.calls.append((name, i))
            self.now += self.cost[name]
        return run

    def clock(self) -> float:
        return self.now


# --------------------------------------------------------------------------- the rounds
def test_rounds_rotate_and_every_path_gets_its_iters():
    rec = Recorder({"A": 1.0, "B": 2.0, "C": 4.0})
    samples = interleave([rec.call(n) for n in "ABC"], iters=7, per_round=3, clock=rec.clock)
    assert [len(s) for s in samples] == [7, 7, 7]
    # the timed samples are each path's own calls: 1, 2 and 4 fake seconds
    assert [sorted(set(s.tolist())) for s in samples] == [[1.0], [2.0], [4.0]]
    # 3 rounds (3 + 3 + 1 timed calls): each turn is one untimed call, then the timed ones, same indices
    turns = [("A", 0), ("B", 0), ("C", 0)], [("B", 3), ("C", 3), ("A", 3)], [("C", 6), ("A", 6), ("B", 6)]
    expected = [(n, i) for rnd in turns for n, start in rnd
                for i in [start] + list(range(start, min(start + 3, 7)))]
    assert rec.calls == expected
    # the order rotates: every path leads one round; each path's calls, untimed re-warm ones included
    assert [rec.calls[k][0] for k in (0, 12, 24)] == ["A", "B", "C"]
    for name in "ABC":
        assert [i for n, i in rec.calls if n == name] == [0, 0, 1, 2, 3, 3, 4, 5, 6, 6]


def test_rounds_stop_together_at_the_time_cap_with_at_least_three_calls_each():
    rec = Recorder({"fast": 1.0, "slow": 10.0})
    # a round costs (1 + 3) * 1 + (1 + 3) * 10 = 44 fake seconds; the cap is passed after the first round
    samples = interleave([rec.call("fast"), rec.call("slow")], iters=50, per_round=3, max_seconds=30.0,
                         clock=rec.clock)
    assert [len(s) for s in samples] == [3, 3]
    # min_iters: a round of 2 calls is not enough, a second round runs even past the cap
    rec = Recorder({"fast": 1.0, "slow": 10.0})
    samples = interleave([rec.call("fast"), rec.call("slow")], iters=50, per_round=2, max_seconds=1.0,
                         clock=rec.clock)
    assert [len(s) for s in samples] == [4, 4]


def test_one_path_alone_gets_no_rewarm_call_and_warmup_needs_none():
    rec = Recorder({"A": 1.0})
    assert len(interleave([rec.call("A")], iters=4, per_round=3, clock=rec.clock)[0]) == 4
    assert rec.calls == [("A", i) for i in range(4)]
    rec = Recorder({"A": 1.0, "B": 1.0})
    interleave([rec.call("A"), rec.call("B")], iters=2, per_round=3, rewarm=False, clock=rec.clock)
    assert rec.calls == [("A", 0), ("A", 1), ("B", 0), ("B", 1)]


def test_other_cpu_load_counts_only_inside_its_windows():
    load = OtherCpuLoad()
    assert load.fraction() is None                          # nothing timed yet: no figure
    with load.timing():
        sum(range(200_000))
    share = load.fraction()                                 # Linux: /proc/stat is there
    assert share is not None and 0.0 <= share <= 1.0


# --------------------------------------------------------------------------- a path failing in the rounds
class FakePath:
    provider, precision = "cpu", "fp32"

    def __init__(self, fail_at: int | None = None):
        self.fail_at, self.calls = fail_at, 0

    def run(self, feeds):
        self.calls += 1
        if self.fail_at is not None and self.calls >= self.fail_at:
            raise RuntimeFault("the graph gave NaN")
        return {}


class StepLog:
    def __init__(self):
        self.rows = []

    def step(self, what, row=None):
        self.rows.append(row)


def test_a_path_failing_in_the_rounds_is_dropped_and_the_others_timed_again(bundle):
    from edgebert.bench.timing import Waiting, time_side_by_side
    from edgebert.bundle import read_manifest

    _, bundle_dir = bundle
    config = BenchConfig(bundle_dir, batches=(1,), seqs=(8, 16), warmup=1, iters=4, progress=False)
    good, bad = Waiting(FakePath(), "good", {(1, 8): 1.0}), Waiting(FakePath(fail_at=3), "bad", {})
    failures = []
    time_side_by_side([good, bad], config, read_manifest(bundle_dir), [(1, 8), (1, 16)], None, 0, StepLog(),
                      lambda w, e: failures.append((w.name, e.one_line())))
    assert failures == [("bad", "the graph gave NaN")] and bad.failed and not bad.rows
    assert [(r.seq, r.iters, r.peak_rss_mb) for r in good.rows] == [(8, 4, 1.0), (16, 4, None)]


# --------------------------------------------------------------------------- spinning off
def test_cpu_sessions_timed_side_by_side_do_not_spin(bundle, tmp_path):
    from edgebert.bench.startup import open_path, session_kwargs
    from edgebert.bundle import read_manifest

    _, bundle_dir = bundle
    config = BenchConfig(bundle_dir, providers=("cpu",), batches=(1,), seqs=(8,), threads=1, progress=False)
    assert session_kwargs(config, "cpu", "int8", None)["allow_spinning"] is False
    assert session_kwargs(config, "cuda", "fp32", None)["allow_spinning"] is True      # GPU paths: as before
    session, _ = open_path(config, read_manifest(bundle_dir), "cpu", "int8", tmp_path)
    assert session.allow_spinning is False
    opts = session._session_options()
    assert opts.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert opts.get_session_config_entry("session.inter_op.allow_spinning") == "0"


# --------------------------------------------------------------------------- speed_caveat
@pytest.fixture()
def stored() -> dict:
    return json.loads(STORED.read_text(encoding="utf-8"))


def _set_speedups(report: dict, fixed: float, mixed: float) -> None:
    row = next(r for r in report["results"] if r["path"] == "onnx cpu int8" and r["batch"] == 1 and r["seq"] == 128)
    row["speedup_vs_reference"] = fixed
    mix = next(r for r in report["length_mix"]["results"]
               if r["path"] == "onnx cpu int8" and r["batch"] == 1 and r["mode"] == "dynamic")
    mix["speedup_vs_reference"] = mixed


def test_speed_caveat_on_a_steady_idle_run_is_none(stored):
    assert stored["environment"]["cpu_share_used_by_other_processes"] < BUSY_SHARE
    assert speed_caveat(stored) is None
    _set_speedups(stored, 0.97, 9.66)           # within 5% of 1: no direction, nothing to contradict
    assert speed_caveat(stored) is None


def test_speed_caveat_says_when_other_programs_were_busy(stored):
    stored["environment"]["cpu_share_used_by_other_processes"] = 0.46
    line = speed_caveat(stored)
    assert line == "figures unreliable: other programs used 46% of the CPU while timing; rerun idle"
    stored["environment"]["cpu_share_used_by_other_processes"] = 1.0
    assert len(speed_caveat(stored)) <= 80                  # fits the pipeline's one screen


def test_speed_caveat_says_when_fixed_shape_and_mix_disagree(stored):
    _set_speedups(stored, 0.65, 9.66)
    line = speed_caveat(stored)
    assert line == "figures unreliable: INT8 0.65x at batch 1 x 128, 9.66x on the mix; rerun idle"
    assert len(line) <= 80
    _set_speedups(stored, 3.2, 0.5)                          # the other way round too
    assert speed_caveat(stored) == "figures unreliable: INT8 3.20x at batch 1 x 128, 0.50x on the mix; rerun idle"


def test_speed_caveat_reaches_report_md_the_printed_summary_and_the_pipeline(stored):
    from rich.console import Console

    from edgebert.bench.report import print_report, to_markdown
    from edgebert.pipeline.summary import model_figures

    assert model_figures({}, stored)["speed_caveat"] is None
    busy = copy.deepcopy(stored)
    busy["environment"]["cpu_share_used_by_other_processes"] = 0.46
    line = speed_caveat(busy)
    assert f"\n**{line}**\n" in to_markdown(busy) and line not in to_markdown(stored)
    console = Console(width=80, record=True, color_system=None)
    print_report(busy, console)
    assert console.export_text().splitlines()[-1] == line
    assert model_figures({}, busy)["speed_caveat"] == line


# --------------------------------------------------------------------------- a tiny run, end to end
@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return tiny_bundle(tmp_path_factory.getbasetemp(), "embed")


def test_tiny_bench_times_the_cpu_paths_side_by_side_and_says_so(bundle, tmp_path):
    model_dir, bundle_dir = bundle
    (tmp_path / "texts.txt").write_text("the film was good .\na bad movie\nboring\nit is a fun film !\n")
    out = tmp_path / "report"
    data = run_bench(BenchConfig(bundle_dir, providers=("cpu",), precisions=("fp32", "int8"), batches=(1,),
                                 seqs=(8, 16), lengths_from=tmp_path / "texts.txt", mix_modes=("dynamic",),
                                 reference=model_dir, threads=1, warmup=1, iters=4, calibration_size=0,
                                 eval_texts=3, report_dir=out, progress=False))
    assert data["methods"]["timing"].startswith("interleaved rounds, 3 calls per path per round, spinning off")
    paths = ["torch fp32", "onnx cpu fp32", "onnx cpu int8"]
    assert [(r["path"], r["seq"], r["iters"]) for r in data["results"]] == \
        [(p, s, 4) for p in paths for s in (8, 16)]
    assert all(isinstance(r["peak_rss_mb"], float) for r in data["results"])
    assert [(r["path"], r["batches"]) for r in data["length_mix"]["results"]] == [(p, 4) for p in paths]
    share = data["environment"]["cpu_share_used_by_other_processes"]
    assert 0.0 <= share <= 1.0
    # the rows were measured shape by shape, every path at a shape before the next shape: side by side
    logged = [(r["path"], r.get("seq")) for r in map(json.loads, (out / "bench.jsonl").read_text().splitlines())]
    assert logged == [(p, 8) for p in paths] + [(p, 16) for p in paths] + [(p, None) for p in paths]
    md = (out / "report.md").read_text()
    assert f"- timing: {data['methods']['timing']}" in md
    caveat = speed_caveat(data)                             # this machine may be busy: then it says so
    assert (caveat is not None) == ("figures unreliable" in md) and (caveat is not None or share <= BUSY_SHARE)
    if share > BUSY_SHARE:
        assert f"**{caveat}**" in md and f"{100 * share:.0f}% of the CPU" in caveat
