"""``edgebert finetune``: a classification or question-answering (span) head on any BERT, trained on a
task's files."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from edgebert.cli import options as o
from edgebert.cli.app import app, console, metrics_line, say


@app.command("finetune")
@o.engine_options
def finetune_cmd(
    model: Annotated[Path, typer.Argument(metavar="MODEL_DIR",
                                          help="Model directory to fine-tune (edgebert or Hugging Face BERT).")],
    out: o.Out,
    task: o.task_option("sst2 | mrpc | tsv | ner (CoNLL named-entity tags) | squad (SQuAD JSON: answer spans) | "
                        "rerank (SQuAD JSON: question-sentence relevance, a cross-encoder).", required=True),
    train_file: o.TrainFile = None,
    dev_file: o.DevFile = None,
    tag_column: o.TagColumn = None,
    doc_stride: o.DocStride = None,
    retriever: o.Retriever = None,
    preset: o.preset_option("glue | cpu-quick | ner | squad | run-qa | rerank | tiny (default: ner / squad / rerank "
                            "for those tasks, else glue)") = None,
    max_train_examples: o.MaxTrainExamples = None,
    max_eval_examples: o.MaxEvalExamples = None,
    max_seq_len: o.MaxSeqLen = None,
    freeze_word_embeddings: o.FreezeWordEmbeddings = None,
    epochs: o.Epochs = None,
    evals_per_epoch: o.EvalsPerEpoch = None,
    resume: o.Resume = False,
    overwrite: o.Overwrite = False,
    *,
    train: dict[str, Any],          # the engine options, added by o.engine_options
) -> None:
    """Fine-tune MODEL_DIR for classification or question answering; keeps the best dev checkpoint
    (accuracy; entity F1 for ner; F1 for squad; MRR@10 for rerank) in --out."""
    from edgebert.stages.finetune import build_finetune_config, finetune

    cfg = build_finetune_config(model, task, train_file, out, preset, train=train, resume=resume,
                                overwrite=overwrite, dev_file=dev_file,
                                max_train_examples=max_train_examples, max_eval_examples=max_eval_examples,
                                max_seq_len=max_seq_len, freeze_word_embeddings=freeze_word_embeddings,
                                epochs=epochs, evals_per_epoch=evals_per_epoch, tag_column=tag_column,
                                doc_stride=doc_stride, retriever=retriever)
    result = finetune(cfg, console=console)
    what = ("a reranker (one relevance logit)" if cfg.is_rank_task else
            f"labels {list(result.labels)}" if result.labels else "answer spans")
    say(f"fine-tuned {result.num_train_examples} examples, {result.steps} steps in {result.wall_s:.0f} s; "
        f"{what}; saved to {result.out_dir}")
    if result.best_metrics:
        say(f"best dev (step {result.best_step}): {metrics_line(result.best_metrics)}")
