"""``edgebert finetune``: a classification head on any BERT, trained on a task's files."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from . import options as o
from .app import app, console, metrics_line, say


@app.command("finetune")
def finetune_cmd(
    model: Annotated[Path, typer.Argument(metavar="MODEL_DIR",
                                          help="Model directory to fine-tune (edgebert or Hugging Face BERT).")],
    out: o.Out,
    task: o.task_option("sst2 | mrpc | tsv | conll (token tags).", required=True),
    train_file: o.TrainFile = None,
    dev_file: o.DevFile = None,
    preset: o.preset_option("glue | cpu-quick | tiny (default glue)") = None,
    max_train_examples: o.MaxTrainExamples = None,
    max_eval_examples: o.MaxEvalExamples = None,
    max_seq_len: o.MaxSeqLen = None,
    freeze_word_embeddings: o.FreezeWordEmbeddings = None,
    epochs: o.Epochs = None,
    evals_per_epoch: o.EvalsPerEpoch = None,
    max_steps: o.MaxSteps = None,
    batch_size: o.BatchSize = None,
    lr: o.Lr = None,
    warmup_ratio: o.WarmupRatio = None,
    warmup_steps: o.WarmupSteps = None,
    weight_decay: o.WeightDecay = None,
    grad_accum: o.GradAccum = None,
    bf16: o.Bf16 = None,
    seed: o.Seed = None,
    device: o.Device = None,
    eval_every: o.EvalEvery = None,
    save_every: o.SaveEvery = None,
    log_every: o.LogEvery = None,
    progress: o.Progress = None,
    resume: o.Resume = False,
) -> None:
    """Fine-tune MODEL_DIR for classification; keeps the best dev-accuracy checkpoint in --out."""
    from ..stages.finetune import build_finetune_config, finetune

    train = o.train_changes(max_steps=max_steps, batch_size=batch_size, lr=lr, warmup_ratio=warmup_ratio,
                            warmup_steps=warmup_steps, weight_decay=weight_decay, grad_accum=grad_accum,
                            bf16=bf16, seed=seed, device=device, eval_every=eval_every, save_every=save_every,
                            log_every=log_every, progress=progress)
    cfg = build_finetune_config(model, task, train_file, out, preset, train=train, resume=resume, dev_file=dev_file,
                                max_train_examples=max_train_examples, max_eval_examples=max_eval_examples,
                                max_seq_len=max_seq_len, freeze_word_embeddings=freeze_word_embeddings,
                                epochs=epochs, evals_per_epoch=evals_per_epoch)
    result = finetune(cfg, console=console)
    say(f"fine-tuned {result.num_train_examples} examples, {result.steps} steps in {result.wall_s:.0f} s; "
        f"labels {list(result.labels)}; saved to {result.out_dir}")
    if result.best_metrics:
        say(f"best dev (step {result.best_step}): {metrics_line(result.best_metrics)}")
