"""CLI commands for training: ``edgebert pretrain`` (distill and finetune register here too)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from .app import app, console  # noqa: F401


@app.command("pretrain")
def pretrain_cmd(
    out: Path = typer.Option(..., "--out", help="Output directory: checkpoint, tokenizer, metrics.jsonl."),
    corpus: Optional[List[Path]] = typer.Option(
        None, "--corpus", help="Training text (repeatable). Default: the built-in Python docs corpus."),
    corpus_format: Optional[str] = typer.Option(None, "--format", help="auto | text | wikitext."),
    eval_corpus: Optional[List[Path]] = typer.Option(
        None, "--eval-corpus", help="Held-out text for evaluation. Default: 5% of the documents."),
    train_preset: Optional[str] = typer.Option(
        None, "--train-preset", help="Recipe: tiny | demo | demo-12l | wiki-small | wiki-12l (default demo)."),
    preset: Optional[str] = typer.Option(None, "--preset", help="Model size: tiny | small | base | large."),
    config: Optional[Path] = typer.Option(None, "--config", help="Model config.json instead of --preset."),
    vocab_size: Optional[int] = typer.Option(None, "--vocab-size", help="WordPiece vocabulary to train."),
    vocab: Optional[Path] = typer.Option(None, "--vocab", help="Use this vocab.txt / tokenizer dir instead."),
    lowercase: Optional[bool] = typer.Option(None, "--lowercase/--cased", help="Lower-case text (default)."),
    max_seq_len: Optional[int] = typer.Option(None, "--max-seq-len"),
    max_steps: Optional[int] = typer.Option(None, "--max-steps"),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Global examples per step."),
    lr: Optional[float] = typer.Option(None, "--lr"),
    warmup: Optional[int] = typer.Option(None, "--warmup", help="Warmup steps."),
    grad_accum: Optional[int] = typer.Option(None, "--grad-accum"),
    bf16: Optional[bool] = typer.Option(None, "--bf16/--no-bf16", help="bf16 autocast."),
    seed: Optional[int] = typer.Option(None, "--seed"),
    eval_every: Optional[int] = typer.Option(None, "--eval-every"),
    save_every: Optional[int] = typer.Option(None, "--save-every"),
    log_every: Optional[int] = typer.Option(None, "--log-every"),
    device: Optional[str] = typer.Option(None, "--device", help="auto | cpu | cuda."),
    resume: bool = typer.Option(False, "--resume", help="Continue the checkpoint in --out."),
    progress: bool = typer.Option(True, "--progress/--no-progress"),
) -> None:
    """Pretrain a BERT (MLM + NSP) on text; prints where the checkpoint is and its eval metrics."""
    from ..errors import ConfigError
    from ..pretrain import build_pretrain_config, pretrain

    if preset is not None and config is not None:
        raise ConfigError("give --preset or --config, not both")
    if vocab_size is not None and vocab is not None:
        raise ConfigError("give --vocab-size or --vocab, not both")
    cfg = build_pretrain_config(
        out, train_preset, resume=resume,
        corpus=tuple(corpus) if corpus else None, corpus_format=corpus_format,
        eval_corpus=tuple(eval_corpus) if eval_corpus else None,
        model_preset=preset, model_config=config, vocab_size=vocab_size, vocab=vocab,
        lowercase=lowercase, max_seq_len=max_seq_len,
        train=dict(max_steps=max_steps, batch_size=batch_size, lr=lr, warmup_steps=warmup,
                   grad_accum=grad_accum, bf16=bf16, seed=seed, eval_every=eval_every,
                   save_every=save_every, log_every=log_every, device=device, progress=progress),
    )
    result = pretrain(cfg, console=console)
    console.print(f"checkpoint: {result.out_dir}  (step {result.step}, {result.num_parameters:,} "
                  f"parameters, vocab {result.vocab_size}, {result.tokens_per_s:.0f} tokens/s, "
                  f"{result.wall_s:.0f} s)", highlight=False, soft_wrap=True)
    ev = result.eval_metrics
    if ev:
        console.print(f"eval: mlm_accuracy {ev['mlm_accuracy']:.4f} (unigram baseline "
                      f"{ev['unigram_mlm_accuracy']:.4f})  mlm_perplexity {ev['mlm_perplexity']:.2f}  "
                      f"nsp_accuracy {ev['nsp_accuracy']:.4f}  on {result.num_eval_examples} examples",
                      highlight=False, soft_wrap=True)
