"""CLI commands: distill, finetune, evaluate. Each parses, calls one library function, prints."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional

import typer

from .app import app, console


def _is_main() -> bool:
    """Under torchrun only rank 0 prints the summary."""
    return int(os.environ.get("RANK", "0")) == 0


def _given(**values: Any) -> dict[str, Any]:
    """Only the options the user set (None = keep the preset's value)."""
    return {k: v for k, v in values.items() if v is not None}


def _fmt(metrics: dict[str, float], keys: tuple[str, ...] | None = None) -> str:
    items = [(k, v) for k, v in metrics.items() if keys is None or k in keys]
    return "  ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in items)


@app.command("distill")
def distill_cmd(
    teacher: Path = typer.Argument(..., metavar="TEACHER_DIR",
                                   help="Teacher model directory (edgebert or Hugging Face BERT)."),
    out: Path = typer.Option(..., "--out", help="Output directory for the student."),
    corpus: Optional[list[Path]] = typer.Option(None, "--corpus", help="MLM distillation text (repeatable); "
                                                "none: the built-in corpus."),
    eval_corpus: Optional[list[Path]] = typer.Option(None, "--eval-corpus", help="Held-out text for MLM "
                                                     "accuracy/perplexity (repeatable)."),
    corpus_format: Optional[str] = typer.Option(None, "--format", "--corpus-format", help="auto | text | wikitext"),
    task: Optional[str] = typer.Option(None, "--task", help="Task distillation of a fine-tuned classifier: "
                                       "sst2 | mrpc | tsv (default: MLM distillation)."),
    train_file: Optional[Path] = typer.Option(None, "--train", help="Task distillation: training TSV."),
    dev_file: Optional[Path] = typer.Option(None, "--dev", help="Task distillation: dev TSV."),
    max_train_examples: Optional[int] = typer.Option(None, "--max-train-examples"),
    preset: Optional[str] = typer.Option(None, "--preset", help="distilbert | tinybert | task | tiny "
                                         "(default: distilbert, or task with --task)."),
    layers: Optional[int] = typer.Option(None, "--layers", help="Student layers (default 4)."),
    layer_map: Optional[str] = typer.Option(None, "--layer-map", help="Teacher layer per student layer, "
                                            "e.g. 0,4,8,11 (default: evenly spaced)."),
    init: Optional[str] = typer.Option(None, "--init", help="teacher (copy layers) | random (baseline)."),
    temperature: Optional[float] = typer.Option(None, "--temperature", help="Softmax temperature T (2.0)."),
    alpha_kd: Optional[float] = typer.Option(None, "--alpha-kd", help="KL(student/T || teacher/T) * T^2 "
                                           "(5.0; task preset 1.0)."),
    alpha_mlm: Optional[float] = typer.Option(None, "--alpha-mlm", help="MLM cross-entropy (2.0)."),
    alpha_ce: Optional[float] = typer.Option(None, "--alpha-ce", help="Task mode: hard-label weight."),
    alpha_cos: Optional[float] = typer.Option(None, "--alpha-cos", help="Cosine loss on last hidden states "
                                            "(1.0; task preset 0)."),
    alpha_hidden: Optional[float] = typer.Option(None, "--alpha-hidden", help="TinyBERT hidden-state MSE "
                                               "per mapped layer (0)."),
    alpha_attn: Optional[float] = typer.Option(None, "--alpha-attn", help="TinyBERT attention KL per "
                                             "mapped layer (0)."),
    max_seq_len: Optional[int] = typer.Option(None, "--max-seq-len", help="128; task preset 64."),
    epochs: Optional[float] = typer.Option(None, "--epochs", help="Task mode: training epochs."),
    evals_per_epoch: Optional[int] = typer.Option(None, "--evals-per-epoch", help="Task mode: dev "
                                                  "evaluations (and checkpoints) per epoch."),
    max_steps: Optional[int] = typer.Option(None, "--max-steps"),
    batch_size: Optional[int] = typer.Option(None, "--batch-size"),
    lr: Optional[float] = typer.Option(None, "--lr"),
    warmup_steps: Optional[int] = typer.Option(None, "--warmup-steps"),
    grad_accum: Optional[int] = typer.Option(None, "--grad-accum"),
    eval_every: Optional[int] = typer.Option(None, "--eval-every"),
    save_every: Optional[int] = typer.Option(None, "--save-every"),
    log_every: Optional[int] = typer.Option(None, "--log-every"),
    seed: Optional[int] = typer.Option(None, "--seed"),
    device: Optional[str] = typer.Option(None, "--device", help="auto | cpu | cuda"),
    bf16: bool = typer.Option(False, "--bf16", help="bfloat16 autocast."),
    freeze_embeddings: bool = typer.Option(False, "--freeze-word-embeddings"),
    resume: bool = typer.Option(False, "--resume", help="Continue the checkpoint in --out."),
) -> None:
    """Distil TEACHER_DIR into a shallower student (MLM distillation, or --task for a classifier)."""
    from ..distill import DistillConfig, distill

    name = preset or ("task" if task else "distilbert")
    train_changes = _given(max_steps=max_steps, batch_size=batch_size, lr=lr, warmup_steps=warmup_steps,
                           grad_accum=grad_accum, eval_every=eval_every, save_every=save_every,
                           log_every=log_every, seed=seed, device=device)
    if bf16:
        train_changes["bf16"] = True
    fields = _given(task=task, corpus_format=corpus_format, train_file=train_file, dev_file=dev_file,
                    max_train_examples=max_train_examples, layers=layers, layer_map=layer_map,
                    student_init=init, temperature=temperature, alpha_kd=alpha_kd, alpha_mlm=alpha_mlm,
                    alpha_ce=alpha_ce, alpha_cos=alpha_cos, alpha_hidden=alpha_hidden,
                    alpha_attn=alpha_attn, max_seq_len=max_seq_len, epochs=epochs,
                    evals_per_epoch=evals_per_epoch)
    if max_steps is not None and epochs is None:
        fields["epochs"] = None  # an explicit step count wins over the preset's epochs
    if corpus:
        fields["corpus"] = tuple(corpus)
    if eval_corpus:
        fields["eval_corpus"] = tuple(eval_corpus)
    if freeze_embeddings:
        fields["freeze_word_embeddings"] = True
    cfg = DistillConfig.preset(name, teacher, out, train=train_changes, resume=resume, **fields)
    result = distill(cfg, console=console)
    if not _is_main():
        return
    console.print(f"student saved to {result.out_dir} ({result.steps} steps, {result.wall_s:.0f} s): "
                  f"{result.student_parameters / 1e6:.1f}M parameters vs the teacher's "
                  f"{result.teacher_parameters / 1e6:.1f}M, layers {result.layer_map} of "
                  f"{result.teacher_layers}", highlight=False)
    if result.best_metrics:
        console.print(f"best dev: {_fmt(result.best_metrics)}", highlight=False)
    elif result.eval_metrics:
        console.print(f"eval: {_fmt(result.eval_metrics)}", highlight=False)


@app.command("finetune")
def finetune_cmd(
    model: Path = typer.Argument(..., metavar="MODEL_DIR",
                                 help="Model directory to fine-tune (edgebert or Hugging Face BERT)."),
    task: str = typer.Option(..., "--task", help="sst2 | mrpc | tsv | conll (token tags)."),
    train_file: Path = typer.Option(..., "--train", help="Training file (GLUE TSV, or CoNLL for conll)."),
    out: Path = typer.Option(..., "--out", help="Output directory (the best checkpoint)."),
    dev_file: Optional[Path] = typer.Option(None, "--dev", help="Dev file: accuracy/F1 every epoch."),
    preset: str = typer.Option("glue", "--preset", help="glue | cpu-quick | tiny"),
    epochs: Optional[float] = typer.Option(None, "--epochs"),
    max_steps: Optional[int] = typer.Option(None, "--max-steps", help="Overrides --epochs."),
    lr: Optional[float] = typer.Option(None, "--lr"),
    max_seq_len: Optional[int] = typer.Option(None, "--max-seq-len"),
    batch_size: Optional[int] = typer.Option(None, "--batch-size"),
    max_train_examples: Optional[int] = typer.Option(None, "--max-train-examples",
                                                     help="Train on a seeded random subset."),
    max_eval_examples: Optional[int] = typer.Option(None, "--max-eval-examples"),
    warmup_ratio: Optional[float] = typer.Option(None, "--warmup-ratio"),
    weight_decay: Optional[float] = typer.Option(None, "--weight-decay"),
    grad_accum: Optional[int] = typer.Option(None, "--grad-accum"),
    evals_per_epoch: Optional[int] = typer.Option(None, "--evals-per-epoch"),
    log_every: Optional[int] = typer.Option(None, "--log-every"),
    seed: Optional[int] = typer.Option(None, "--seed"),
    device: Optional[str] = typer.Option(None, "--device", help="auto | cpu | cuda"),
    bf16: bool = typer.Option(False, "--bf16"),
    freeze_embeddings: Optional[bool] = typer.Option(None, "--freeze-word-embeddings/--train-word-embeddings"),
    resume: bool = typer.Option(False, "--resume"),
) -> None:
    """Fine-tune MODEL_DIR for classification; keeps the best dev-accuracy checkpoint in --out."""
    from ..finetune import FinetuneConfig, finetune

    fields = _given(epochs=epochs, max_steps=max_steps, lr=lr, max_seq_len=max_seq_len, batch_size=batch_size,
                    max_train_examples=max_train_examples, max_eval_examples=max_eval_examples,
                    warmup_ratio=warmup_ratio, weight_decay=weight_decay, grad_accum=grad_accum,
                    evals_per_epoch=evals_per_epoch, log_every=log_every, seed=seed, device=device,
                    freeze_word_embeddings=freeze_embeddings)
    if bf16:
        fields["bf16"] = True
    cfg = FinetuneConfig.preset(preset, model=model, task=task, train_file=train_file, dev_file=dev_file,
                                out=out, resume=resume, **fields)
    result = finetune(cfg, console=console)
    if not _is_main():
        return
    console.print(f"fine-tuned {result.num_train_examples} examples, {result.steps} steps in "
                  f"{result.wall_s:.0f} s; labels {list(result.labels)}; saved to {result.out_dir}",
                  highlight=False)
    if result.best_metrics:
        console.print(f"best dev (step {result.best_step}): {_fmt(result.best_metrics)}", highlight=False)


@app.command("evaluate")
def evaluate_cmd(
    path: Path = typer.Argument(..., metavar="MODEL_DIR",
                                help="Model directory (config.json) or ONNX bundle (manifest.json)."),
    task: str = typer.Option(..., "--task", help="sst2 | mrpc | tsv | conll | mlm"),
    data: Path = typer.Option(..., "--data", help="Labelled TSV (classifiers) or a text file (mlm)."),
    max_seq_len: int = typer.Option(128, "--max-seq-len"),
    batch_size: int = typer.Option(64, "--batch-size"),
    max_examples: Optional[int] = typer.Option(None, "--max-examples"),
    corpus_format: str = typer.Option("auto", "--format", "--corpus-format", help="mlm: auto | text | wikitext"),
    precision: Optional[str] = typer.Option(None, "--precision", help="Bundles: int8 | fp32 | fp16."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Accuracy/F1 of a classifier, or MLM accuracy/perplexity of a masked LM."""
    from ..evaluate import evaluate

    result = evaluate(path, task, data, max_seq_len=max_seq_len, batch_size=batch_size,
                      max_examples=max_examples, corpus_format=corpus_format, precision=precision)
    if as_json:
        print(json.dumps(result.to_dict(), indent=2))
        return
    console.print(f"{result.path} ({result.kind}) on {result.data} [{result.task}], "
                  f"{result.num_examples} examples, {result.wall_s:.1f} s", highlight=False)
    for key, value in result.metrics.items():
        console.print(f"  {key}: {value:.4f}" if isinstance(value, float) else f"  {key}: {value}",
                      highlight=False)
