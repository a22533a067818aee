"""``edgebert distill``: a teacher into a shallower student (text: mlm | embed; or a fine-tuned model's
task: sst2 | mrpc | tsv | ner | squad)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from edgebert.cli import options as o
from edgebert.cli.app import app, console, metrics_line, say


def _weight(flag: str, what: str):
    return Annotated[Optional[float], typer.Option(flag, help=what)]


def _width(flag: str, what: str):
    return Annotated[Optional[int], typer.Option(flag, help=what)]


@app.command("distill")
@o.engine_options
def distill_cmd(
    teacher: Annotated[Path, typer.Argument(metavar="TEACHER_DIR",
                                            help="Teacher model directory (edgebert or Hugging Face BERT).")],
    out: o.Out,
    task: o.task_option("mlm | embed (text) or sst2 | mrpc | tsv | ner | squad | rerank (a fine-tuned model); default: "
                        "from the teacher (an MLM head: mlm; a bare encoder: embed; a token classifier: ner; "
                        "a span model: squad)") = None,
    preset: o.preset_option("distilbert | tinybert | embed | embed-long | embed-narrow | task | ner | squad | tiny "
                            "(default: by --task)") = None,
    corpus: o.Corpus = None,
    eval_corpus: o.EvalCorpus = None,
    corpus_format: o.CorpusFormat = None,
    train_file: o.TrainFile = None,
    dev_file: o.DevFile = None,
    tag_column: o.TagColumn = None,
    doc_stride: o.DocStride = None,
    retriever: o.Retriever = None,
    max_train_examples: o.MaxTrainExamples = None,
    max_eval_examples: o.MaxEvalExamples = None,
    layers: o.Layers = None,
    layer_map: Annotated[Optional[str], typer.Option(
        "--layer-map", help="Teacher layer per student layer, e.g. 0,4,8,11 (default: evenly spaced), or "
                            "closest: the layers whose untrained student is nearest the teacher on training examples.")] = None,
    init: Annotated[Optional[str], typer.Option(
        "--init", help="teacher (copy layers) | random (the from-scratch baseline) | a trained student's folder "
                  "to continue from (e.g. --int4-aware fine-tuning of a float student).")] = None,
    freeze_word_embeddings: o.FreezeWordEmbeddings = None,
    hidden: _width("--hidden", "A narrower student: its hidden size (default: the teacher's), weights sliced from "
                               "the teacher's; hidden-state terms through a learned projection (text modes), the logits (--task).") = None,
    heads: _width("--heads", "With --hidden: attention heads (default: the teacher's head size kept).") = None,
    intermediate: _width("--intermediate", "With --hidden: FFN size (default: the teacher's FFN/hidden ratio).") = None,
    int4_aware: _width("--int4-aware", "Train as `export --int4` will round: 4-bit encoder weights in blocks of this "
                                       "many inputs (32, as --int4-block), saved rounded.") = None,
    temperature: _weight("--temperature", "Softmax temperature T (2.0).") = None,
    alpha_kd: _weight("--alpha-kd", "KL(student/T || teacher/T) * T^2 (5.0; task and ner presets 1.0).") = None,
    alpha_mlm: _weight("--alpha-mlm", "MLM cross-entropy (2.0).") = None,
    alpha_ce: _weight("--alpha-ce", "Task mode: hard-label cross-entropy (ner and squad presets 1.0).") = None,
    alpha_cos: _weight("--alpha-cos", "1 - cos of the last hidden states (1.0; task preset 0).") = None,
    alpha_pool: _weight("--alpha-pool", "embed: 1 - cos of the mean-pooled sentence vectors (0).") = None,
    alpha_sim: _weight("--alpha-sim", "embed: in-batch similarity of the pooled sentence vectors (0).") = None,
    alpha_hidden: _weight("--alpha-hidden", "TinyBERT hidden-state MSE per mapped layer (0).") = None,
    alpha_attn: _weight("--alpha-attn", "TinyBERT attention KL per mapped layer (0).") = None,
    max_seq_len: o.MaxSeqLen = None,
    epochs: o.Epochs = None,
    evals_per_epoch: o.EvalsPerEpoch = None,
    resume: o.Resume = False,
    overwrite: o.Overwrite = False,
    *,
    train: dict[str, Any],          # the engine options, added by o.engine_options
) -> None:
    """Distil TEACHER_DIR into a shallower (and, with --hidden, narrower) student (text distillation, or --task
    for a classifier)."""
    from edgebert.stages.distill import build_distill_config, distill

    cfg = build_distill_config(
        teacher, out, preset, train=train, resume=resume, overwrite=overwrite, task=task, corpus=tuple(corpus or ()) or None,
        eval_corpus=tuple(eval_corpus or ()) or None, corpus_format=corpus_format, train_file=train_file,
        dev_file=dev_file, max_train_examples=max_train_examples, max_eval_examples=max_eval_examples,
        layers=layers, layer_map=layer_map, student_init=init, freeze_word_embeddings=freeze_word_embeddings,
        hidden=hidden, heads=heads, intermediate=intermediate, int4_block=int4_aware,
        temperature=temperature, alpha_kd=alpha_kd, alpha_mlm=alpha_mlm, alpha_ce=alpha_ce, alpha_cos=alpha_cos,
        alpha_pool=alpha_pool, alpha_sim=alpha_sim, alpha_hidden=alpha_hidden, alpha_attn=alpha_attn,
        max_seq_len=max_seq_len, epochs=epochs, evals_per_epoch=evals_per_epoch, tag_column=tag_column, doc_stride=doc_stride,
        retriever=retriever)
    result = distill(cfg, console=console)
    say(f"student saved to {result.out_dir} ({result.steps} steps, {result.wall_s:.0f} s): "
        f"{result.student_parameters / 1e6:.1f}M parameters vs the teacher's {result.teacher_parameters / 1e6:.1f}M, "
        f"layers {result.layer_map} of {result.teacher_layers}")
    if result.best_metrics:
        say(f"best dev: {metrics_line(result.best_metrics)}")
    elif result.eval_metrics:
        say(f"eval: {metrics_line(result.eval_metrics)}")
