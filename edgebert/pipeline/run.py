"""``run_pipeline``: every step in order, each into its own folder, then one summary."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from edgebert.files.atomic import jsonable, write_json, write_text
from edgebert.files.outdirs import OutputDir
from edgebert.pipeline.config import PipelineConfig, teacher_name
from edgebert.pipeline.steps import (
    HELD_OUT_FRACTION,
    SPLIT_SEED,
    STAGE_LOG,
    StageLog,
    bench_bundle,
    distill_student,
    export_student,
    pretrain_teacher,
    score_downstream,
    split_corpus,
    write_calibration_text,
)
from edgebert.pipeline.summary import pipeline_markdown, summarize, summary_lines

PIPELINE_FILE = "pipeline.json"
# every entry a pipeline folder holds: one folder per stage, the calibration text, the reports
PIPELINE_OUTPUTS = ("data", "teacher", "student", "bundle", "report", "calib.txt", PIPELINE_FILE, "pipeline.md",
                    STAGE_LOG)


@dataclass
class PipelineResult:
    out: Path
    summary: dict[str, Any]            # what pipeline.json holds
    report: dict[str, Any]             # the benchmark report
    lines: list[str]                   # the one-screen summary


def run_pipeline(cfg: PipelineConfig, *, console=None, say: Callable[[str], None] | None = None) -> PipelineResult:
    """Run every step (see ``edgebert.pipeline``); returns the summary written to ``out/pipeline.json``.
    ``cfg.out`` follows ``edgebert.files.outdirs``; a run that fails removes what it wrote."""
    out = OutputDir(cfg.out, "pipeline", names=PIPELINE_OUTPUTS, overwrite=cfg.overwrite, signature=STAGE_LOG,
                    flags="--overwrite")
    with out.writing():
        return _run(cfg, console, say)


def _run(cfg: PipelineConfig, console, say: Callable[[str], None] | None) -> PipelineResult:
    log = StageLog(cfg.out, say or (lambda message: None))
    stages: dict[str, Any] = {}
    t0 = time.perf_counter()
    data = {"corpus": [str(p) for p in cfg.corpus] or "built-in (Python documentation)",
            "eval_corpus": [str(p) for p in cfg.eval_corpus] or None}
    if not cfg.eval_corpus:   # one held-out split for every stage
        train_txt, held_txt = split_corpus(cfg.corpus, cfg.corpus_format, cfg.out / "data")
        cfg = cfg.replace(corpus=(train_txt,), eval_corpus=(held_txt,), corpus_format="lines")
        data["split"] = {"train": str(train_txt), "heldout": str(held_txt),
                         "heldout_fraction": HELD_OUT_FRACTION, "seed": SPLIT_SEED}
        log("data", f"held out {held_txt} ({HELD_OUT_FRACTION:.0%} of the documents) for evaluation and calibration")
    stages["data"] = {**data, "seconds": round(time.perf_counter() - t0, 1)}
    if cfg.from_scratch:
        teacher, stages["pretrain"] = pretrain_teacher(cfg, log, console)
    else:
        teacher = cfg.teacher
        name = teacher_name(teacher)
        stages["pretrain"] = {"skipped": f"teacher {name}", "dir": str(teacher), "name": name, "seconds": 0.0}
        log("pretrain", f"skipped: the teacher is {name}")
    student, stages["distill"] = distill_student(cfg, teacher, log, console)
    calib = cfg.calib or write_calibration_text(cfg.eval_corpus, cfg.corpus_format, cfg.out / "calib.txt")
    bundle, stages["export"] = export_student(cfg, student, calib, log)
    report, stages["bench"] = bench_bundle(cfg, bundle, teacher, cfg.lengths_from or calib, log)
    stages["downstream"] = score_downstream(cfg.downstream_data, teacher, bundle, log)
    figures = summarize(jsonable(cfg), stages, report, time.perf_counter() - log.start)
    lines = summary_lines(figures, cfg.out)
    summary = {"config": jsonable(cfg), "seconds": figures["seconds"], "calibration_text": str(calib),
               "summary": figures, "stages": stages, "headline": stages["bench"]["headline"],
               "environment": report["environment"]}
    write_json(cfg.out / PIPELINE_FILE, summary)
    write_text(cfg.out / "pipeline.md", pipeline_markdown(figures, stages, lines, cfg.out / "report" / "report.md"))
    log("pipeline", f"done in {figures['seconds']:.0f} s: report in {cfg.out / 'pipeline.md'}")
    return PipelineResult(cfg.out, summary, report, lines)
