"""The pipeline's steps, each a thin call into one library stage; every step logs one line per event
(printed, and appended with its figures to ``out/pipeline.jsonl``) and returns its figures."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable

from edgebert.data.corpus import paragraphs, read_corpora, split_documents
from edgebert.data.mlm import regroup_documents
from edgebert.files.atomic import jsonable, write_text
from edgebert.pipeline.config import PipelineConfig

STAGE_LOG = "pipeline.jsonl"
HELD_OUT_FRACTION, SPLIT_SEED = 0.1, 0


class StageLog:
    """Prints one line per event and appends it, with its figures, to ``out/pipeline.jsonl``."""

    def __init__(self, out: Path, say: Callable[[str], None]):
        self.path = out / STAGE_LOG
        self.say = say
        self.start = time.perf_counter()

    def __call__(self, stage: str, message: str, **figures: Any) -> None:
        record = {"t": round(time.perf_counter() - self.start, 1), "stage": stage, "message": message, **figures}
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(jsonable(record)) + "\n")
        self.say(f"[{record['t']:7.1f}s] {stage}: {message}")


def split_corpus(corpus: tuple[Path, ...], corpus_format: str, folder: Path) -> tuple[Path, Path]:
    """Hold out a tenth of the documents once, so that every stage and the calibration text see the
    same held-out set (train.txt, heldout.txt: corpus format ``lines``, paragraphs kept)."""
    docs = regroup_documents(read_corpora(corpus, corpus_format))
    train, held = split_documents(docs, HELD_OUT_FRACTION, SPLIT_SEED)
    paths = folder / "train.txt", folder / "heldout.txt"
    for path, docs in zip(paths, (train, held)):
        write_text(path, "\n\n".join(docs) + "\n")
    return paths


def write_calibration_text(eval_corpus: tuple[Path, ...], corpus_format: str, path: Path,
                           max_lines: int = 4000) -> Path:
    """Held-out text for calibration, the INT8 guard and the length mix: one text per paragraph of the
    held-out documents with at least 3 words (never training text)."""
    write_text(path, "\n".join(paragraphs(read_corpora(eval_corpus, corpus_format))[:max_lines]) + "\n")
    return path


def pretrain_teacher(cfg: PipelineConfig, log: StageLog, console) -> tuple[Path, dict]:
    """``cfg.corpus`` / ``cfg.eval_corpus`` are the resolved files here (see ``run_pipeline``)."""
    from edgebert.stages.pretrain import build_pretrain_config, pretrain

    train = {"max_steps": cfg.pretrain_steps, "progress": cfg.progress}
    pcfg = build_pretrain_config(cfg.out / "teacher", cfg.pretrain_preset, train=train, corpus=cfg.corpus,
                                 eval_corpus=cfg.eval_corpus, corpus_format=cfg.corpus_format)
    log("pretrain", f"{cfg.pretrain_preset}: {pcfg.bert_config(pcfg.vocab_size, 0).num_hidden_layers}-layer "
                    f"teacher, {pcfg.train.max_steps} steps")
    r = pretrain(pcfg, console=console)
    figures = {"dir": str(r.out_dir), "steps": r.step, "parameters": r.num_parameters, "seconds": round(r.wall_s, 1),
               "tokens_per_s": round(r.tokens_per_s), "eval": r.eval_metrics}
    log("pretrain", f"done in {r.wall_s:.0f} s: eval MLM acc {r.eval_metrics.get('mlm_accuracy', 0):.4f} "
                    f"(unigram {r.eval_metrics.get('unigram_mlm_accuracy', 0):.4f})", **figures)
    return r.out_dir, figures


def distill_student(cfg: PipelineConfig, teacher: Path, log: StageLog, console) -> tuple[Path, dict]:
    from edgebert.stages.distill import DistillConfig, distill

    steps = cfg.distill_steps
    train = {"max_steps": steps, "batch_size": cfg.distill_batch_size, "eval_every": steps, "save_every": steps,
             "log_every": min(20, steps), "progress": cfg.progress}
    sizes = {k: v for k, v in (("max_seq_len", cfg.distill_max_seq_len),
                               ("max_eval_examples", cfg.distill_eval_examples)) if v is not None}
    dcfg = DistillConfig.preset(cfg.distill_preset, teacher, cfg.out / "student", layers=cfg.layers,
                                corpus=cfg.corpus, eval_corpus=cfg.eval_corpus, corpus_format=cfg.corpus_format,
                                train=train, **sizes)
    log("distill", f"{dcfg.mode} distillation (recipe {cfg.distill_preset}): {cfg.layers}-layer student, "
                   f"{steps} steps of {cfg.distill_batch_size}")
    r = distill(dcfg, console=console)
    figures = {"dir": str(r.out_dir), "mode": dcfg.mode, "steps": r.steps, "layer_map": r.layer_map,
               "seconds": round(r.wall_s, 1), "student_parameters": r.student_parameters,
               "teacher_parameters": r.teacher_parameters, "teacher_layers": r.teacher_layers,
               "eval": r.eval_metrics, "before": r.start_metrics}
    ev = r.eval_metrics
    if dcfg.mode == "embed":
        done = (f"held-out embedding cosine {ev.get('embedding_cosine_mean', 0):.4f} (before distillation "
                f"{r.start_metrics.get('embedding_cosine_mean', 0):.4f})")
    else:
        done = (f"eval MLM acc {ev.get('mlm_accuracy', 0):.4f} (teacher {ev.get('teacher_mlm_accuracy', 0):.4f})")
    log("distill", f"done in {r.wall_s:.0f} s: layers {r.layer_map} of {r.teacher_layers}; {done}", **figures)
    return r.out_dir, figures


def export_student(cfg: PipelineConfig, student: Path, calib: Path, log: StageLog) -> tuple[Path, dict]:
    from edgebert.bundle import read_manifest
    from edgebert.exporters import ExportConfig, export_bundle

    # validation at batch 1 and 3 (x seq 7, 64 and the model's max): the fp32 and INT8 graphs are checked at
    # untraced shapes with padding as always, without the batch-8 x 512 case that doubles the export time
    ecfg = ExportConfig(model_dir=student, out_dir=cfg.out / "bundle", task="embed", int8=True, calib=calib,
                        calib_size=cfg.calib_size, max_accuracy_loss=cfg.max_accuracy_loss,
                        validation_batch_sizes=(1, 3))
    log("export", "fused fp32 + INT8 (portable target: outlier split, calibrated scales, accuracy gate)")
    r = export_bundle(ecfg, on_step=lambda message: log("export", message))
    models = read_manifest(r.bundle_dir).models
    fp32, int8 = models["fp32"], models["int8"]
    quant = int8.quantization
    figures = {"dir": str(r.bundle_dir), "seconds": round(r.seconds, 1), "fused_ops": fp32.get_extra("fused_ops"),
               "fp32_max_abs_diff": fp32.get_extra("validation")["max_abs_diff"],
               "int8_max_abs_diff": int8.get_extra("validation")["max_abs_diff"],
               "int8_accuracy": {k: v for k, v in (int8.get_extra("accuracy") or {}).items() if k != "sensitivity"},
               "int8_quantized_nodes": quant["quantized_nodes"], "int8_candidate_nodes": quant["candidate_nodes"],
               "int8_excluded_nodes": quant["excluded_nodes"],
               "outlier_channels": (quant.get("outlier_split") or {}).get("channels", 0)}
    for line in r.summary_lines()[1:]:          # the first line repeats the bundle path and time
        log("export", line)
    log("export", f"done in {r.seconds:.0f} s", **figures)
    return r.bundle_dir, figures


def score_downstream(data_root: Path | None, teacher: Path, bundle: Path, log: StageLog) -> dict:
    """Teacher vs student fp32 vs student INT8 on the held-out downstream sets under ``data_root``
    (``edgebert.stages.embed_eval.compare_downstream``); ``{"skipped": why}`` without a folder or when
    one of its files is missing (nothing logged: the summary says it in one line)."""
    from edgebert.errors import DataError, MissingExtra
    from edgebert.scores.embeddings import require_sklearn
    from edgebert.stages.embed_eval import DownstreamData, compare_downstream

    if data_root is None:
        return {"skipped": "no --downstream-data given"}
    try:
        require_sklearn()
        data = DownstreamData.load(data_root)
    except MissingExtra as exc:
        return {"skipped": f"scikit-learn is not installed ({exc.hint})"}
    except DataError as exc:
        return {"skipped": exc.message}
    sets = data.describe()
    log("downstream", f"teacher, student fp32 and INT8 on MRPC dev ({sets['mrpc_pairs']} pairs), SST-2 "
                      f"(probe of {sets['sst2_train']} train sentences, {sets['sst2_dev']} dev), WikiText-2 test "
                      f"retrieval ({sets['paragraphs']} paragraphs)")
    t0 = time.perf_counter()
    figures = compare_downstream(teacher, bundle, data)
    figures["seconds"] = round(time.perf_counter() - t0, 1)
    which = "student_int8" if "student_int8" in figures["retention"] else "student_fp32"
    log("downstream", f"done in {figures['seconds']:.0f} s: {which.replace('_', ' ')} keeps " + ", ".join(
        f"{name} {100 * value:.0f}%" for name, value in figures["retention"][which].items() if value is not None),
        **figures)
    return figures


def bench_bundle(cfg: PipelineConfig, bundle: Path, teacher: Path, lengths: Path, log: StageLog) -> tuple[dict, dict]:
    from edgebert.bench import run_bench

    bcfg = cfg.bench_config(bundle, teacher, lengths)
    log("bench", f"student bundle vs the fp32 PyTorch teacher: batch {list(bcfg.batches)} x seq {list(bcfg.seqs)}")
    t0 = time.perf_counter()
    report = run_bench(bcfg)
    headline = headline_speedups(report)
    log("bench", "done: " + "; ".join(f"{k} {v}x" for k, v in headline.items() if v is not None), **headline)
    return report, {"dir": str(cfg.out / "report"), "seconds": round(time.perf_counter() - t0, 1),
                    "headline": headline}


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
