"""``edgebert pipeline``: text -> teacher -> 4-layer student -> validated INT8 bundle -> benchmark report.

One call chains the library stages, each into its own folder under ``out``::

    data/      without --eval-corpus: one held-out split of the corpus shared by every stage
    teacher/   pretrain (MLM + NSP) a 12-layer teacher, or use --teacher DIR
    student/   distil it into a 4-layer student (DistilBERT: KD + MLM + cosine, teacher-layer init)
    calib.txt  held-out text (calibration, INT8 accuracy guard, length mix) unless --calib is given
    bundle/    export the student: fused fp32 + guarded dynamic INT8, validated against PyTorch
    report/    bench the bundle (CPU, CUDA, TensorRT; fp32, INT8) against the fp32 *PyTorch teacher*
    pipeline.json / pipeline.md   every stage's figures and the headline speedups in one place

Presets: ``demo`` (``make demo``: the built-in corpus, minutes on 2 CPU cores) and ``wiki`` (the
checked-in benchmark: WikiText-2 with a 12 x 256 teacher; needs ``--corpus``).
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .errors import ConfigError
from .fileio import jsonable, write_json, write_text

PIPELINE_FILE = "pipeline.json"
STAGE_LOG = "pipeline.jsonl"


@dataclass(frozen=True)
class PipelineConfig:
    """Everything ``run_pipeline`` needs; validated at construction. See ``PIPELINE_PRESETS``."""

    out: Path
    corpus: tuple[Path, ...] = ()            # empty: the built-in corpus (Python's documentation)
    eval_corpus: tuple[Path, ...] = ()       # empty: hold out part of the corpus
    teacher: Path | None = None              # an existing teacher: skip pretraining
    pretrain_preset: str = "demo-12l"
    pretrain_steps: int | None = None        # None: the preset's
    student_layers: int = 4
    distill_preset: str = "distilbert"
    distill_steps: int = 120
    distill_batch_size: int = 16
    calib: Path | None = None                # None: held-out corpus text, written to out/calib.txt
    calib_size: int = 256
    max_accuracy_loss: float | None = 0.01   # INT8 budget (1 - mean cosine of sentence embeddings)
    lengths_from: Path | None = None         # the length mix to replay; None: the calibration text
    bench_batches: tuple[int, ...] = (1,)
    bench_seqs: tuple[int, ...] = (16, 64, 128)
    bench_iters: int = 30
    bench_max_texts: int | None = 256
    threads: int | None = None
    progress: bool = True

    def __post_init__(self) -> None:
        from .pretrain import PRETRAIN_PRESETS
        from .distill import DISTILL_PRESETS

        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731  (frozen)
        set_("out", Path(self.out))
        set_("corpus", tuple(Path(p) for p in self.corpus))
        set_("eval_corpus", tuple(Path(p) for p in self.eval_corpus))
        for key in ("teacher", "calib", "lengths_from"):
            if getattr(self, key) is not None:
                set_(key, Path(getattr(self, key)))
        for path in (*self.corpus, *self.eval_corpus, self.calib, self.lengths_from):
            if path is not None and not path.is_file():
                raise ConfigError(f"{path} not found", "pass an existing text file")
        if self.teacher is not None:
            if not (self.teacher / "config.json").is_file():
                raise ConfigError(f"teacher {self.teacher} is not a model directory (no config.json)",
                                  "pass a directory written by edgebert or a Hugging Face BERT directory")
            if self.pretrain_steps is not None:
                raise ConfigError("--pretrain-steps has no effect with --teacher", "drop one of the two")
        if self.pretrain_preset not in PRETRAIN_PRESETS:
            raise ConfigError(f"unknown pretraining preset {self.pretrain_preset!r}",
                              f"use one of {', '.join(PRETRAIN_PRESETS)}")
        if self.distill_preset not in DISTILL_PRESETS or DISTILL_PRESETS[self.distill_preset]["task"] != "mlm":
            raise ConfigError(f"distillation preset {self.distill_preset!r} is not an MLM distillation",
                              "use distilbert or tinybert")
        for name in ("student_layers", "distill_steps", "distill_batch_size", "bench_iters", "calib_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name}={value!r} must be a positive integer")
        if self.pretrain_steps is not None and self.pretrain_steps < 1:
            raise ConfigError(f"pretrain_steps={self.pretrain_steps!r} must be a positive integer")
        if self.student_layers >= self.teacher_layers:
            raise ConfigError(f"a {self.student_layers}-layer student is not smaller than its "
                              f"{self.teacher_layers}-layer teacher", "use fewer --student-layers")
        if self.max_accuracy_loss is not None and not 0.0 <= self.max_accuracy_loss < 1.0:
            raise ConfigError(f"max accuracy loss {self.max_accuracy_loss!r} must be in [0, 1)",
                              "e.g. 0.01 = mean cosine at least 0.99")
        bench = self.bench_config(self.out / "bundle")    # bad bench settings fail now, not after training
        set_("bench_batches", bench.batches)
        set_("bench_seqs", bench.seqs)

    @property
    def teacher_layers(self) -> int:
        from .config import BertConfig
        from .pretrain import PRETRAIN_PRESETS

        if self.teacher is not None:
            return BertConfig.load(self.teacher).num_hidden_layers
        recipe = PRETRAIN_PRESETS[self.pretrain_preset]
        return BertConfig.preset(recipe["model_preset"], **recipe.get("model_overrides", {})).num_hidden_layers

    def bench_config(self, bundle: Path, teacher: Path | None = None, lengths: Path | None = None):
        """The benchmark stage's ``BenchConfig``: every provider, fp32 + INT8, against the teacher."""
        from .bench import BenchConfig

        return BenchConfig(bundle, providers=("cpu", "cuda", "tensorrt"), precisions=("fp32", "int8"),
                           batches=self.bench_batches, seqs=self.bench_seqs, lengths_from=lengths,
                           max_texts=self.bench_max_texts, reference=teacher, threads=self.threads,
                           iters=self.bench_iters, report_dir=self.out / "report", progress=self.progress)

    @classmethod
    def preset(cls, name: str, out: str | Path, **overrides: Any) -> "PipelineConfig":
        if name not in PIPELINE_PRESETS:
            raise ConfigError(f"unknown pipeline preset {name!r}", f"use one of {', '.join(PIPELINE_PRESETS)}")
        recipe = dict(PIPELINE_PRESETS[name])
        if recipe.pop("needs_corpus", False) and not overrides.get("corpus"):
            raise ConfigError(f"the {name} pipeline needs --corpus (and --eval-corpus)",
                              "e.g. --corpus wiki.valid.raw --eval-corpus wiki.test.raw")
        return cls(out=Path(out), **{**recipe, **overrides})

    def replace(self, **changes: Any) -> "PipelineConfig":
        return dataclasses.replace(self, **changes)


PIPELINE_PRESETS: dict[str, dict[str, Any]] = {
    # `make demo`: built-in corpus, 12 x 128 teacher (120 steps x 16), 4-layer student (120 x 16), minutes
    "demo": {},
    # benchmarks/results/pipeline_wiki: WikiText-2, 12 x 256 teacher (400 steps), student 300 steps
    "wiki": dict(needs_corpus=True, pretrain_preset="wiki-12l", distill_steps=300, distill_batch_size=32,
                 calib_size=256,
                 max_accuracy_loss=0.01, bench_batches=(1, 8), bench_seqs=(16, 32, 64, 128), bench_iters=100,
                 bench_max_texts=None),
}


# =========================================================================== the stages
class _StageLog:
    """Prints one line per stage and appends it, with its figures, to ``out/pipeline.jsonl``."""

    def __init__(self, out: Path, say: Callable[[str], None]):
        self.path = out / STAGE_LOG
        self.say = say
        self.start = time.perf_counter()

    def __call__(self, stage: str, message: str, **figures: Any) -> None:
        record = {"t": round(time.perf_counter() - self.start, 1), "stage": stage, "message": message, **figures}
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(jsonable(record)) + "\n")
        self.say(f"[{record['t']:7.1f}s] {stage}: {message}")


def _check_out(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"--out {out} already exists and is not empty",
                          "choose a new --out or remove the old run")


def split_corpus(cfg: PipelineConfig, folder: Path, fraction: float = 0.1, seed: int = 0) -> tuple[Path, Path]:
    """No --eval-corpus: hold out ``fraction`` of the documents once, so that pretraining, distillation and
    the calibration text all see the same held-out set (written as plain text: train.txt, heldout.txt)."""
    from .corpus import read_corpora, split_documents
    from .pretraining_data import regroup_documents

    train, held = split_documents(regroup_documents(read_corpora(cfg.corpus)), fraction, seed)
    paths = folder / "train.txt", folder / "heldout.txt"
    for path, docs in zip(paths, (train, held)):
        write_text(path, "\n\n".join(docs) + "\n")
    return paths


def write_calibration_text(eval_corpus: tuple[Path, ...], path: Path, max_lines: int = 4000) -> Path:
    """Held-out text for calibration, the INT8 guard and the length mix: one text per line of the held-out
    documents with at least 3 words (never training text)."""
    from .corpus import read_corpora

    lines = [line.strip() for doc in read_corpora(eval_corpus) for line in doc.splitlines()
             if len(line.split()) >= 3]
    write_text(path, "\n".join(lines[:max_lines]) + "\n")
    return path


def _pretrain(cfg: PipelineConfig, log: _StageLog, console) -> tuple[Path, dict]:
    """``cfg.corpus`` / ``cfg.eval_corpus`` are the resolved files here (see ``run_pipeline``)."""
    from .pretrain import build_pretrain_config, pretrain

    train = {"max_steps": cfg.pretrain_steps, "progress": cfg.progress}
    pcfg = build_pretrain_config(cfg.out / "teacher", cfg.pretrain_preset, train=train, corpus=cfg.corpus,
                                 eval_corpus=cfg.eval_corpus)
    log("pretrain", f"{cfg.pretrain_preset}: {pcfg.bert_config(pcfg.vocab_size, 0).num_hidden_layers}-layer "
                    f"teacher, {pcfg.train.max_steps} steps")
    r = pretrain(pcfg, console=console)
    figures = {"dir": str(r.out_dir), "steps": r.step, "parameters": r.num_parameters, "seconds": round(r.wall_s, 1),
               "tokens_per_s": round(r.tokens_per_s), "eval": r.eval_metrics}
    log("pretrain", f"done in {r.wall_s:.0f} s: eval MLM acc {r.eval_metrics.get('mlm_accuracy', 0):.4f} "
                    f"(unigram {r.eval_metrics.get('unigram_mlm_accuracy', 0):.4f})", **figures)
    return r.out_dir, figures


def _distill(cfg: PipelineConfig, teacher: Path, log: _StageLog, console) -> tuple[Path, dict]:
    from .distill import DistillConfig, distill

    steps = cfg.distill_steps
    train = {"max_steps": steps, "batch_size": cfg.distill_batch_size, "warmup_steps": max(1, steps // 10), "eval_every": steps, "save_every": steps,
             "log_every": min(20, steps), "progress": cfg.progress}
    dcfg = DistillConfig.preset(cfg.distill_preset, teacher, cfg.out / "student", layers=cfg.student_layers,
                                corpus=cfg.corpus, eval_corpus=cfg.eval_corpus, train=train)
    log("distill", f"{cfg.distill_preset}: {cfg.student_layers}-layer student, {steps} steps")
    r = distill(dcfg, console=console)
    figures = {"dir": str(r.out_dir), "steps": r.steps, "layer_map": r.layer_map, "seconds": round(r.wall_s, 1),
               "student_parameters": r.student_parameters, "teacher_parameters": r.teacher_parameters,
               "teacher_layers": r.teacher_layers, "eval": r.eval_metrics}
    ev = r.eval_metrics
    log("distill", f"done in {r.wall_s:.0f} s: layers {r.layer_map} of {r.teacher_layers}; eval MLM acc "
                   f"{ev.get('mlm_accuracy', 0):.4f} (teacher {ev.get('teacher_mlm_accuracy', 0):.4f})", **figures)
    return r.out_dir, figures


def _export(cfg: PipelineConfig, student: Path, calib: Path, log: _StageLog) -> tuple[Path, dict]:
    from exporters import ExportConfig, export_bundle

    ecfg = ExportConfig(model_dir=student, out_dir=cfg.out / "bundle", task="embed", int8=True, calib=calib,
                        calib_size=cfg.calib_size, max_accuracy_loss=cfg.max_accuracy_loss)
    log("export", "fused fp32 + dynamic INT8 (outlier split, accuracy guard)")
    r = export_bundle(ecfg, on_step=lambda message: log("export", message))
    fp32, int8 = r.manifest["models"]["fp32"], r.manifest["models"]["int8"]
    quant = int8["quantization"]
    figures = {"dir": str(r.bundle_dir), "seconds": round(r.seconds, 1), "fused_ops": fp32["fused_ops"],
               "fp32_max_abs_diff": fp32["validation"]["max_abs_diff"],
               "int8_max_abs_diff": int8["validation"]["max_abs_diff"],
               "int8_accuracy": {k: v for k, v in (int8["accuracy"] or {}).items() if k != "sensitivity"},
               "int8_quantized_nodes": quant["quantized_nodes"], "int8_candidate_nodes": quant["candidate_nodes"],
               "int8_excluded_nodes": quant["excluded_nodes"],
               "outlier_channels": (quant.get("outlier_split") or {}).get("channels", 0)}
    for line in r.summary_lines()[1:]:          # the first line repeats the bundle path and time
        log("export", line)
    log("export", f"done in {r.seconds:.0f} s", **figures)
    return r.bundle_dir, figures


def _bench(cfg: PipelineConfig, bundle: Path, teacher: Path, lengths: Path, log: _StageLog) -> tuple[dict, dict]:
    from .bench import run_bench

    bcfg = cfg.bench_config(bundle, teacher, lengths)
    log("bench", f"student bundle vs the fp32 PyTorch teacher: batch {list(bcfg.batches)} x seq {list(bcfg.seqs)}")
    report = run_bench(bcfg)
    headline = headline_speedups(report)
    log("bench", "done: " + "; ".join(f"{k} {v}x" for k, v in headline.items() if v is not None), **headline)
    return report, headline


def headline_speedups(report: dict) -> dict[str, float | None]:
    """Speedups of the CPU paths over the reference at batch 1 x the longest seq, and over the mix."""
    seq = max(r["seq"] for r in report["results"])
    out: dict[str, float | None] = {}
    for precision in ("fp32", "int8"):
        row = next((r for r in report["results"] if r["provider"] == "cpu" and r["precision"] == precision
                    and r["batch"] == 1 and r["seq"] == seq), None)
        out[f"cpu_{precision}_b1_s{seq}_vs_reference"] = row and row["speedup_vs_reference"]
    mix = (report.get("length_mix") or {}).get("results", [])
    row = next((r for r in mix if r["provider"] == "cpu" and r["precision"] == "int8" and r["mode"] == "dynamic"
                and r["batch"] == 1), None)
    out["cpu_int8_length_mix_b1_vs_reference"] = row and row["speedup_vs_reference"]
    return out


@dataclass
class PipelineResult:
    out: Path
    summary: dict[str, Any]
    report: dict[str, Any]


def run_pipeline(cfg: PipelineConfig, *, console=None, say: Callable[[str], None] | None = None) -> PipelineResult:
    """Run every stage (see the module docstring); returns the summary written to ``out/pipeline.json``."""
    _check_out(cfg.out)
    cfg.out.mkdir(parents=True, exist_ok=True)
    log = _StageLog(cfg.out, say or (lambda message: None))
    stages: dict[str, Any] = {}
    data = {"corpus": [str(p) for p in cfg.corpus] or "built-in (Python documentation)",
            "eval_corpus": [str(p) for p in cfg.eval_corpus] or None}
    if not cfg.eval_corpus:   # one held-out split for every stage
        train_txt, held_txt = split_corpus(cfg, cfg.out / "data")
        cfg = cfg.replace(corpus=(train_txt,), eval_corpus=(held_txt,))
        data["split"] = {"train": str(train_txt), "heldout": str(held_txt), "heldout_fraction": 0.1, "seed": 0}
        log("data", f"held out {held_txt} (10% of the documents) for evaluation and calibration")
    stages["data"] = data
    if cfg.teacher is None:
        teacher, stages["pretrain"] = _pretrain(cfg, log, console)
    else:
        teacher = cfg.teacher
        stages["pretrain"] = {"skipped": f"--teacher {teacher}", "dir": str(teacher)}
        log("pretrain", f"skipped: using the teacher in {teacher}")
    student, stages["distill"] = _distill(cfg, teacher, log, console)
    calib = cfg.calib or write_calibration_text(cfg.eval_corpus, cfg.out / "calib.txt")
    bundle, stages["export"] = _export(cfg, student, calib, log)
    report, headline = _bench(cfg, bundle, teacher, cfg.lengths_from or calib, log)
    stages["bench"] = {"dir": str(cfg.out / "report"), "headline": headline}
    summary = {"config": jsonable(cfg), "seconds": round(time.perf_counter() - log.start, 1),
               "calibration_text": str(calib), "stages": stages, "headline": headline,
               "environment": report["environment"]}
    write_json(cfg.out / PIPELINE_FILE, summary)
    write_text(cfg.out / "pipeline.md", pipeline_markdown(summary, cfg.out / "report" / "report.md"))
    log("pipeline", f"done in {summary['seconds']:.0f} s: report in {cfg.out / 'pipeline.md'}")
    return PipelineResult(cfg.out, summary, report)


def pipeline_markdown(summary: dict[str, Any], bench_md: Path) -> str:
    """The one report: stage figures, headline speedups, then the full benchmark report."""
    st = summary["stages"]
    pre, dis, exp = st["pretrain"], st["distill"], st["export"]
    acc = exp["int8_accuracy"]
    lines = ["# edgebert pipeline", "",
             f"Total {summary['seconds']:.0f} s. Every figure below was measured in this run.", "",
             "| stage | result |", "|---|---|"]
    data = st["data"]
    held = data["split"]["heldout"] if "split" in data else ", ".join(data["eval_corpus"] or [])
    lines.append(f"| data | train: {data['corpus'] if isinstance(data['corpus'], str) else ', '.join(data['corpus'])}; "
                 f"held out (evaluation, calibration): {held} |")
    if "skipped" in pre:
        lines.append(f"| pretrain | skipped ({pre['skipped']}) |")
    else:
        ev = pre["eval"]
        lines.append(f"| pretrain | {pre['steps']} steps, {pre['parameters'] / 1e6:.2f}M parameters, "
                     f"{pre['seconds']:.0f} s; held-out MLM acc {ev.get('mlm_accuracy', 0):.4f} "
                     f"(unigram {ev.get('unigram_mlm_accuracy', 0):.4f}), NSP {ev.get('nsp_accuracy', 0):.3f} |")
    ev = dis["eval"]
    lines.append(f"| distill | {dis['steps']} steps, teacher layers {dis['layer_map']} of {dis['teacher_layers']}, "
                 f"{dis['student_parameters'] / 1e6:.2f}M vs {dis['teacher_parameters'] / 1e6:.2f}M parameters, "
                 f"{dis['seconds']:.0f} s; held-out MLM acc {ev.get('mlm_accuracy', 0):.4f} "
                 f"(teacher {ev.get('teacher_mlm_accuracy', 0):.4f}) |")
    lines.append(f"| export | fused {', '.join(f'{k}={v}' for k, v in exp['fused_ops'].items())}; fp32 max diff "
                 f"{exp['fp32_max_abs_diff']:.2g}; INT8 {exp['int8_quantized_nodes']}/{exp['int8_candidate_nodes']} "
                 f"nodes, {exp['outlier_channels']} outlier channels float, cosine mean {acc.get('mean')} "
                 f"min {acc.get('min')} |")
    lines += ["", "Speedups over the fp32 PyTorch teacher (same run, same threads):", ""]
    lines += [f"- {k}: **{v}x**" if v is not None else f"- {k}: not measured" for k, v in summary["headline"].items()]
    lines += ["", "---", ""]
    if bench_md.is_file():
        lines.append(bench_md.read_text(encoding="utf-8"))
    return "\n".join(lines) + "\n"
