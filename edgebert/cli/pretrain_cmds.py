"""``edgebert pretrain``: a tokenizer and a BERT (MLM + NSP) from text."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from edgebert.cli import options as o
from edgebert.cli.app import app, console, say


@app.command("pretrain")
@o.engine_options
def pretrain_cmd(
    out: o.Out,
    preset: o.preset_option("tiny | demo | demo-12l | wiki-small | wiki-12l (default demo)") = None,
    corpus: o.Corpus = None,
    eval_corpus: o.EvalCorpus = None,
    corpus_format: o.CorpusFormat = None,
    model_size: Annotated[Optional[str], typer.Option(
        "--model-size", help="Model size: tiny | small | base | large (default: the recipe's).")] = None,
    config: Annotated[Optional[Path], typer.Option(
        "--config", help="Model config.json instead of --model-size.")] = None,
    vocab_size: Annotated[Optional[int], typer.Option("--vocab-size", help="WordPiece vocabulary to train.")] = None,
    vocab: Annotated[Optional[Path], typer.Option("--vocab", help="Use this vocab.txt / tokenizer dir instead.")] = None,
    lowercase: Annotated[Optional[bool], typer.Option("--lowercase/--cased", help="Lower-case text (default).")] = None,
    max_seq_len: o.MaxSeqLen = None,
    resume: o.Resume = False,
    overwrite: o.Overwrite = False,
    *,
    train: dict[str, Any],          # the engine options, added by o.engine_options
) -> None:
    """Pretrain a BERT (MLM + NSP) on text; prints where the checkpoint is and its eval metrics."""
    from edgebert.stages.pretrain import build_pretrain_config, pretrain

    cfg = build_pretrain_config(out, preset, resume=resume, overwrite=overwrite, train=train, corpus=tuple(corpus or ()) or None,
                                eval_corpus=tuple(eval_corpus or ()) or None, corpus_format=corpus_format,
                                model_size=model_size, model_config=config, vocab_size=vocab_size, vocab=vocab,
                                lowercase=lowercase, max_seq_len=max_seq_len)
    result = pretrain(cfg, console=console)
    say(f"checkpoint: {result.out_dir}  (step {result.step}, {result.num_parameters:,} parameters, vocab "
        f"{result.vocab_size}, {result.tokens_per_s:.0f} tokens/s, {result.wall_s:.0f} s)")
    ev = result.eval_metrics
    if ev:
        say(f"eval: mlm_accuracy {ev['mlm_accuracy']:.4f} (unigram baseline {ev['unigram_mlm_accuracy']:.4f})  "
            f"mlm_perplexity {ev['mlm_perplexity']:.2f}  nsp_accuracy {ev['nsp_accuracy']:.4f}  on "
            f"{result.num_eval_examples} examples")
    for warning in result.warnings:
        say(f"warning: {warning}")
