"""edgebert pipeline: pretrain -> distill -> export --int8 -> bench, end to end on a tiny model, plus its
config checks and one-line CLI errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgebert.corpus import builtin_corpus
from edgebert.errors import ConfigError
from edgebert.pipeline import PipelineConfig, run_pipeline

from distill_helpers import assert_one_line_error, run_cli


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("pipeline_corpus") / "docs.txt"
    path.write_text("\n\n".join(d.replace("\n", " ") for d in builtin_corpus()[:60]), encoding="utf-8")
    return path


def tiny_config(out: Path, corpus: Path, **changes) -> PipelineConfig:
    base = dict(corpus=(corpus,), pretrain_preset="tiny", pretrain_steps=6, student_layers=1,
                distill_preset="tiny", distill_steps=4, calib_size=24, bench_seqs=(8, 16), bench_iters=3,
                bench_max_texts=12, threads=1, progress=False)
    return PipelineConfig(out=out, **{**base, **changes})


@pytest.fixture(scope="module")
def run(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("pipeline") / "run"
    lines: list[str] = []
    return run_pipeline(tiny_config(out, corpus), say=lines.append), lines


def test_every_stage_runs_and_lands_in_one_report(run):
    result, lines = run
    out = result.out
    for path in ("teacher/model.safetensors", "student/model.safetensors", "calib.txt", "bundle/model.onnx",
                 "bundle/model.int8.onnx", "bundle/manifest.json", "report/report.json", "report/latency.png",
                 "pipeline.json", "pipeline.md", "pipeline.jsonl"):
        assert (out / path).is_file(), path
    summary = json.loads((out / "pipeline.json").read_text())
    assert summary == json.loads(json.dumps(result.summary))
    st = summary["stages"]
    assert st["pretrain"]["steps"] == 6 and 0 <= st["pretrain"]["eval"]["mlm_accuracy"] <= 1
    assert st["distill"]["steps"] == 4 and st["distill"]["teacher_layers"] == 2 and len(st["distill"]["layer_map"]) == 1
    assert st["distill"]["student_parameters"] < st["distill"]["teacher_parameters"]
    assert st["export"]["fp32_max_abs_diff"] < 1e-4 and st["export"]["fused_ops"]["Attention"] == 1
    calib_lines = (out / "calib.txt").read_text().splitlines()        # held-out documents, never training text
    train_text = (out / "data" / "train.txt").read_text()
    held = [d for d in (out / "data" / "heldout.txt").read_text().split("\n\n") if d.strip()]
    assert len(held) == 6 and not any(d.strip() in train_text for d in held)        # 10% of 60 documents
    assert all(line in (out / "data" / "heldout.txt").read_text() for line in calib_lines)
    for stage in ("teacher/pretrain_config.json", "student/distill_config.json"):   # every stage, one split
        cfg = json.loads((out / stage).read_text())
        assert cfg["eval_corpus"] == [str(out / "data" / "heldout.txt")], stage
    # 6 held-out lines all calibrate; too few are left to hold out, so the gate used the built-in text
    assert calib_lines and st["export"]["int8_accuracy"]["n"] == 200
    assert 0.9 < st["export"]["int8_accuracy"]["mean"] <= 1
    headline = summary["headline"]
    assert set(headline) == {"cpu_fp32_b1_s16_vs_reference", "cpu_int8_b1_s16_vs_reference",
                             "cpu_int8_length_mix_b1_vs_reference"}
    assert all(v > 0 for v in headline.values())
    # the benchmark's reference is the teacher (2 layers), timed as a different, deeper model
    report = json.loads((out / "report" / "report.json").read_text())
    assert report["reference"]["dir"] == str(out / "teacher") and report["reference"]["same_model"] is False
    assert report["reference"]["config"]["num_hidden_layers"] == 2
    md = (out / "pipeline.md").read_text()
    assert "| distill | 4 steps" in md and "Speedups over the fp32 PyTorch teacher" in md and "| onnx cpu int8 |" in md
    stages = [json.loads(x)["stage"] for x in (out / "pipeline.jsonl").read_text().splitlines()]
    order = [s for i, s in enumerate(stages) if i == 0 or stages[i - 1] != s]
    assert order == ["data", "pretrain", "distill", "export", "bench", "pipeline"]
    assert len(lines) == len(stages)


def test_existing_teacher_skips_pretraining(run, corpus, tmp_path):
    result, _ = run
    summary = run_pipeline(tiny_config(tmp_path / "again", corpus, teacher=result.out / "teacher",
                                       pretrain_steps=None)).summary
    assert "skipped" in summary["stages"]["pretrain"] and not (tmp_path / "again" / "teacher").exists()
    assert summary["stages"]["distill"]["teacher_layers"] == 2


def test_config_rejects_bad_combinations(corpus, run, tmp_path):
    with pytest.raises(ConfigError, match="not smaller than its 2-layer teacher"):
        tiny_config(tmp_path / "x", corpus, student_layers=2)
    with pytest.raises(ConfigError, match="needs --corpus"):
        PipelineConfig.preset("wiki", tmp_path / "x")
    with pytest.raises(ConfigError, match="no effect with --teacher"):
        tiny_config(tmp_path / "x", corpus, teacher=run[0].out / "teacher", pretrain_steps=6)
    with pytest.raises(ConfigError, match="not an MLM distillation"):
        tiny_config(tmp_path / "x", corpus, distill_preset="task")
    with pytest.raises(ConfigError, match="unknown pipeline preset"):
        PipelineConfig.preset("huge", tmp_path / "x")
    assert PipelineConfig.preset("demo", tmp_path / "x").teacher_layers == 12
    # stage settings that would only fail after minutes of training are rejected up front
    with pytest.raises(ConfigError, match="seq 2 is too short"):
        tiny_config(tmp_path / "x", corpus, bench_seqs=(2, 16))
    with pytest.raises(ConfigError, match="max accuracy loss"):
        tiny_config(tmp_path / "x", corpus, max_accuracy_loss=1.5)
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("case", ["non-empty out", "missing corpus", "unknown preset"])
def test_cli_errors_are_one_line_and_write_nothing(case, corpus, tmp_path, capsys):
    out = tmp_path / "out"
    if case == "non-empty out":
        out.mkdir()
        (out / "keep.txt").write_text("mine")
    args = {"non-empty out": ["--corpus", str(corpus)], "missing corpus": ["--corpus", str(tmp_path / "nope.txt")],
            "unknown preset": ["--preset", "giant"]}[case]
    code, _, err = run_cli(capsys, "pipeline", "--out", str(out), *args)
    assert_one_line_error(code, err, {"non-empty out": "not empty", "missing corpus": "not found",
                                      "unknown preset": "unknown pipeline preset"}[case])
    if case == "non-empty out":
        assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]
    else:
        assert not out.exists()
