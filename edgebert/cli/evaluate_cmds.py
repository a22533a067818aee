"""``edgebert evaluate``: a model directory or an ONNX bundle, scored on labelled data, a SQuAD file, MLM
text or (sentence embeddings) a folder of downstream sets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from edgebert.cli import options as o
from edgebert.cli.app import app, say


@app.command("evaluate")
def evaluate_cmd(
    path: Annotated[Path, typer.Argument(metavar="MODEL_DIR",
                                         help="Model directory (config.json) or ONNX bundle (manifest.json).")],
    task: o.task_option("sst2 | mrpc | tsv | ner | squad | rerank | mlm | embed", required=True),
    data: Annotated[Path, typer.Option("--data", help="Labelled TSV (classifiers), CoNLL file (ner), SQuAD "
                                                      "1.1 / 2.0 JSON (squad, rerank), a text file (mlm), or for embed "
                                                      "a folder with mrpc/dev.tsv, sst2/train.tsv, sst2/dev.tsv "
                                                      "and wikitext-2-raw/wiki.test.raw (e.g. ../shared/data).")],
    tag_column: o.TagColumn = None,
    retriever: o.Retriever = None,
    with_no_answer: Annotated[bool, typer.Option(
        "--with-no-answer", help="squad: SQuAD 2.0 scoring of every question (a null threshold chosen on the "
                                 "file, HasAns / NoAns split); default: EM / F1 of the answerable ones.")] = False,
    doc_stride: o.DocStride = None,
    max_seq_len: o.MaxSeqLen = None,
    eval_batch_size: Annotated[Optional[int], typer.Option(
        "--eval-batch-size", help="Examples per forward pass (default 64).")] = None,
    max_eval_examples: o.MaxEvalExamples = None,
    corpus_format: o.CorpusFormat = None,
    precision: Annotated[Optional[str], typer.Option("--precision", help="Bundles: int8 | fp32 | fp16.")] = None,
    as_json: o.Json = False,
) -> None:
    """Accuracy/F1 of a classifier, entity F1 (overall and per type) of a token classifier, SQuAD EM/F1
    of a span model, MRR@10 / NDCG@10 of a reranker, MLM accuracy/perplexity of a masked LM, or (embed) what a sentence-embedding model's
    mean-pooled vectors are worth: MRPC paraphrase ROC-AUC of the cosine, SST-2 logistic-probe accuracy,
    WikiText-2 retrieval recall@1/@10 and MRR."""
    from edgebert.stages.evaluate import evaluate

    result = evaluate(path, task, data, max_seq_len=max_seq_len, batch_size=eval_batch_size,
                      max_examples=max_eval_examples, corpus_format=corpus_format, precision=precision,
                      tag_column=tag_column, with_no_answer=with_no_answer, doc_stride=doc_stride,
                      retriever=retriever)
    if as_json:
        print(json.dumps(result.to_dict(), indent=2))
        return
    say(f"{result.path} ({result.kind}) on {result.data} [{result.task}], {result.num_examples} examples, "
        f"{result.wall_s:.1f} s")
    for key, value in result.metrics.items():
        say(f"  {key}: {value:.4f}" if isinstance(value, float) else f"  {key}: {value}")
    for name, row in (result.details.get("per_type") or {}).items():
        say(f"  {name}: precision {row['precision']:.4f}  recall {row['recall']:.4f}  f1 {row['f1']:.4f}  "
            f"({row['entities']} entities)")
