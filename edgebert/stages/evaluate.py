"""Evaluate a model directory or an exported ONNX bundle on labelled data or on masked-LM text.

``evaluate(path, task, data)`` returns an ``EvaluationResult``:

- classifiers (``sst2``, ``mrpc``, ``tsv``): accuracy and F1 (positive-class F1 for two labels, as
  GLUE reports MRPC; macro F1 otherwise);
- named entities (``ner``, a CoNLL file): entity precision / recall / F1 overall and per type, and
  word accuracy (seqeval, ``edgebert.scores.entities``). A checkpoint predicts each word's tag at its first
  sub-token; a bundle is run through ``EdgeSession.tag`` on the sentence as text (words joined by
  spaces, ``aggregation="none"``: each word takes the label of the sub-token that starts it, the same
  position), so the figure includes the runtime's tokenization, offsets and windowing. Sentences are
  never truncated by default (the model's full length; a bundle tags longer ones in windows);
- extractive question answering (``squad``, a SQuAD 1.1 / 2.0 JSON file): EM and F1 (percent, the
  official SQuAD normalisation, ``edgebert.scores.squad``) over the answerable questions; with ``with_no_answer``
  SQuAD 2.0 scoring over all of them (a null threshold chosen on the file, HasAns / NoAns split;
  ``edgebert.scores.squad``). Contexts are cut into windows of ``max_seq_len`` tokens (384, at most the
  model's) sharing ``doc_stride`` (128) and the best span over an example's windows is its answer, as
  transformers' ``run_qa`` scores (``edgebert.qa``). A checkpoint and a ``qa`` bundle (through the
  ``EdgeSession``'s graph, torch-free: tokenizers, numpy and onnxruntime) get the same
  windows and the same post-processing, so their figures differ only by the graph's numbers;
- masked LM (``mlm``, a text file): MLM accuracy and perplexity (exp of the mean cross-entropy on the
  masked tokens), on sentence-pair examples masked with a fixed seed: the same examples and masks
  as ``edgebert pretrain``'s evaluation (``edgebert.data.mlm.mlm_eval_batches``), so numbers from
  pretraining, distillation and this command are directly comparable;
- sentence embeddings (``embed``, ``data`` a folder such as ../shared/data): MRPC dev paraphrase ROC-AUC,
  SST-2 dev probe accuracy and WikiText-2 test retrieval of mean-pooled embeddings, texts cut at 256
  tokens (``edgebert.stages.embed_eval``; a bundle through ``EdgeSession.embed``, torch-free).

``path`` is either a model directory (``config.json`` + ``model.safetensors``, run in PyTorch) or a
bundle directory (``manifest.json``, run with ``edgebert.runtime.EdgeSession`` on onnxruntime). A
classifier or NER bundle is scored without PyTorch (the runtime install, plus seqeval for entities), so
the device that serves it can evaluate it; ``mlm`` counts its figures in torch.

Every figure is counted by ``edgebert.stages.metrics``, as fine-tuning and distillation count theirs.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from edgebert.bundle import read_manifest
from edgebert.bundle.task_registry import task_serving
from edgebert.data.corpus import read_corpus
from edgebert.data.tasks import (
    RANK_PRESETS,
    SEQUENCE_PRESETS,
    SPAN_PRESETS,
    TOKEN_PRESETS,
    read_tagged,
    read_task_tsv,
    spec_for_model,
)
from edgebert.errors import CheckpointError, ConfigError, DataError
from edgebert.qa.squad_file import read_squad
from edgebert.qa.windows import MAX_SEQ_LEN, check_window, default_stride
from edgebert.scores.entities import entity_report, entity_scores
from edgebert.scores.labels import classification_metrics
from edgebert.scores.squad import prediction_scores
from edgebert.stages.embed_eval import MAX_SEQ_LEN as EMBED_MAX_SEQ_LEN

EVAL_TASKS = (*SEQUENCE_PRESETS, *TOKEN_PRESETS, *SPAN_PRESETS, *RANK_PRESETS, "mlm", "embed")


@dataclass
class EvaluationResult:
    path: Path
    kind: str                       # "model" (PyTorch) or "bundle" (onnxruntime)
    task: str
    data: Path
    metrics: dict[str, float]
    num_examples: int
    wall_s: float
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["path"], d["data"] = str(self.path), str(self.data)
        return d


def is_bundle(path: str | Path) -> bool:
    return (Path(path) / "manifest.json").is_file()


def evaluate(path: str | Path, task: str, data: str | Path, *, max_seq_len: int | None = None,
             batch_size: int | None = None, max_examples: int | None = None, mlm_probability: float = 0.15,
             corpus_format: str | None = None, precision: str | None = None, device: str = "cpu",
             tag_column: int | None = None, with_no_answer: bool = False,
             doc_stride: int | None = None, retriever: str | Path | None = None) -> EvaluationResult:
    """Score the model (or bundle) at ``path`` on ``data``; see the module docstring. ``None`` settings
    take the defaults: 128 tokens (``ner``: the model's maximum; ``squad``: 384; at most the model's),
    batches of 64, corpus format ``auto``, a CoNLL file's last column as the tag, a window stride of 128
    (less for windows under 384 tokens)."""
    if task in TOKEN_PRESETS and max_seq_len is None:
        max_seq_len = 4096                     # capped at the model's length below: no truncation
    if task in SPAN_PRESETS and max_seq_len is None:
        max_seq_len = MAX_SEQ_LEN
    if task == "embed" and max_seq_len is None:
        max_seq_len = EMBED_MAX_SEQ_LEN
    max_seq_len, batch_size, corpus_format = max_seq_len or 128, batch_size or 64, corpus_format or "auto"
    if task not in EVAL_TASKS:
        raise ConfigError(f"unknown task {task!r}", f"use one of {', '.join(EVAL_TASKS)}")
    if tag_column is not None and task not in TOKEN_PRESETS:
        raise ConfigError(f"--tag-column is for CoNLL files (--task ner), not --task {task}")
    if (with_no_answer or doc_stride is not None) and task not in SPAN_PRESETS:
        raise ConfigError(f"--with-no-answer and --doc-stride are for SQuAD files (--task squad), not --task {task}")
    if not 8 <= max_seq_len <= 4096:
        raise ConfigError(f"max_seq_len={max_seq_len} must be between 8 and 4096")
    if batch_size < 1 or (max_examples is not None and max_examples < 1):
        raise ConfigError("batch_size and max_examples must be >= 1")
    path, data = Path(path), Path(data)
    if not path.is_dir():
        raise CheckpointError(f"model directory {path} not found",
                              "pass a model directory (config.json) or an exported bundle (manifest.json)")
    t0 = time.perf_counter()
    if task == "embed":   # data: a folder of downstream sets (edgebert.stages.embed_eval)
        metrics, n, details = _evaluate_embed(path, data, max_seq_len, batch_size, max_examples, precision)
        return EvaluationResult(path, details["kind"], task, data, metrics, n, time.perf_counter() - t0, details)
    if not data.is_file():
        raise DataError(f"{data} not found", "pass an existing data file")
    if retriever is not None and task not in RANK_PRESETS:
        raise ConfigError(f"--retriever is for --task rerank, not --task {task}")
    if task in RANK_PRESETS:
        metrics, n, details = _evaluate_rerank(path, data, retriever, max_seq_len, batch_size, max_examples,
                                               precision, device)
        return EvaluationResult(path, details["kind"], task, data, metrics, n, time.perf_counter() - t0, details)
    if task in SPAN_PRESETS:
        metrics, n, details = _evaluate_squad(path, data, max_seq_len, doc_stride, batch_size, max_examples,
                                              with_no_answer, precision, device)
        return EvaluationResult(path, "bundle" if is_bundle(path) else "model", task, data, metrics, n,
                                time.perf_counter() - t0, details)
    if is_bundle(path):
        metrics, n, details = _evaluate_bundle(path, task, data, max_seq_len, batch_size, max_examples,
                                               mlm_probability, corpus_format, precision, tag_column)
        kind = "bundle"
    else:
        metrics, n, details = _evaluate_model(path, task, data, max_seq_len, batch_size, max_examples,
                                              mlm_probability, corpus_format, device, tag_column)
        kind = "model"
    return EvaluationResult(path, kind, task, data, metrics, n, time.perf_counter() - t0, details)


def _labels_of(config_id2label: dict[int, str] | None, num_labels: int) -> tuple[str, ...]:
    return tuple(config_id2label[i] for i in range(num_labels)) if config_id2label else ()


def _entity_result(gold: list[list[str]], predicted: list[list[str]], details: dict[str, Any]):
    """(flat metrics, sentences, details with the per-type table) of an NER evaluation."""
    details = {**details, "per_type": entity_report(gold, predicted)["types"], "scorer": "seqeval (conlleval mode)"}
    return {**entity_scores(gold, predicted), "n": float(len(gold))}, len(gold), details


def _evaluate_model(path: Path, task: str, data: Path, max_seq_len: int, batch_size: int,
                    max_examples: int | None, mlm_probability: float, corpus_format: str, device: str,
                    tag_column: int | None):
    from edgebert.data.mlm import mlm_eval_batches
    from edgebert.data.task_data import encode_examples, encode_tagged
    from edgebert.data.tokenizer import SpecialIds, load_tokenizer
    from edgebert.model import BertConfig, load_model
    from edgebert.stages.metrics import classifier_metrics, mlm_metrics, predict_words, word_tags

    cfg = BertConfig.load(path)
    tok = load_tokenizer(path)
    max_seq_len = min(max_seq_len, cfg.max_position_embeddings)
    if task == "mlm":
        if cfg.architecture not in ("BertForMaskedLM", "BertForPreTraining"):
            raise CheckpointError(f"{path} is a {cfg.architecture}, which has no masked-LM head",
                                  "--task mlm needs a BertForMaskedLM or BertForPreTraining model")
        model = load_model(path).to(device)
        batches = mlm_eval_batches(read_corpus(data, corpus_format), tok, max_seq_len, max_examples or 2000,
                                   batch_size, mlm_probability, segment_types=cfg.type_vocab_size > 1)
        n = sum(len(b["input_ids"]) for b in batches)
        return mlm_metrics(model, batches), n, {"architecture": cfg.architecture}
    wanted = "BertForTokenClassification" if task in TOKEN_PRESETS else "BertForSequenceClassification"
    if cfg.architecture != wanted:
        raise CheckpointError(f"{path} is a {cfg.architecture}, not a {wanted}",
                              f"fine-tune it first: edgebert finetune {path} --task {task} ...")
    model = load_model(path).to(device)
    labels = _labels_of(cfg.id2label, cfg.num_labels)
    pad_id = SpecialIds.of(tok).pad
    details: dict[str, Any] = {"architecture": cfg.architecture, "labels": list(labels)}
    if task in TOKEN_PRESETS:
        sentences, tags = read_tagged(data, labels or None, tag_column)
        encoded = encode_tagged(sentences[:max_examples] if max_examples else sentences, tok, max_seq_len)
        gold, predicted = word_tags(predict_words(model, encoded, batch_size, pad_id), encoded, tags)
        return _entity_result(gold, predicted, {**details, "max_seq_len": max_seq_len,
                                                "truncated_sentences": encoded.truncated})
    examples, spec = read_task_tsv(data, task, spec_for_model(task, data, labels))
    encoded = encode_examples(examples[:max_examples] if max_examples else examples, tok, max_seq_len)
    metrics = classifier_metrics(model, encoded, len(spec.labels), batch_size, pad_id)
    return metrics, len(encoded), details


def _evaluate_bundle(path: Path, task: str, data: Path, max_seq_len: int, batch_size: int,
                     max_examples: int | None, mlm_probability: float, corpus_format: str,
                     precision: str | None, tag_column: int | None):
    from edgebert.runtime import EdgeSession

    manifest = read_manifest(path)
    if precision is None:
        precision = "int8" if "int8" in manifest.models else "fp32"
    session = EdgeSession(path, provider="cpu", precision=precision, batch_size=batch_size,
                          max_length=min(max_seq_len, manifest.max_length))
    details = {"precision": precision, "provider": session.provider, "bundle_task": session.task}
    if task == "mlm":
        if session.task != "mlm":
            raise ConfigError(f"{path} is a '{session.task}' bundle; --task mlm needs an 'mlm' bundle",
                              "export the model with --task mlm")
        import torch  # the masked-LM figures are counted in torch (edgebert.stages.metrics)

        from edgebert.data.mlm import mlm_eval_batches
        from edgebert.data.tokenizer import load_tokenizer
        from edgebert.model import IGNORE_INDEX
        from edgebert.stages.metrics import MlmCounts

        batches = mlm_eval_batches(read_corpus(data, corpus_format), load_tokenizer(path), session.max_length,
                                   max_examples or 2000, batch_size, mlm_probability,
                                   segment_types=(session.manifest.config.type_vocab_size or 1) > 1)
        counts, n = MlmCounts(), 0
        for batch in batches:
            feeds = {k: v.numpy() for k, v in batch.items() if k in session.input_names}
            logits = torch.from_numpy(session.run(feeds, ["logits"])["logits"])
            selected = batch["labels"] != IGNORE_INDEX
            counts.add(logits[selected], batch["labels"][selected])
            n += len(batch["input_ids"])
        return counts.summary(), n, details
    if task in TOKEN_PRESETS:
        return _tag_bundle(session, data, max_examples, batch_size, tag_column, details)
    classifying = task_serving("classify").name
    if session.task != classifying:
        raise ConfigError(f"{path} is a '{session.task}' bundle; --task {task} needs a '{classifying}' bundle",
                          f"export the fine-tuned classifier with --task {classifying}")
    examples, spec = read_task_tsv(data, task, spec_for_model(task, data, tuple(session.label_names)))
    examples = examples[:max_examples] if max_examples else examples
    inputs = [(e.text_a, e.text_b) for e in examples] if spec.is_pair else [e.text_a for e in examples]
    logits = session.logits(inputs, batch_size=batch_size, truncate=True)
    preds = logits.argmax(axis=1).tolist()
    metrics = classification_metrics(preds, [e.label for e in examples], len(spec.labels))
    return metrics, len(examples), details


def _tag_bundle(session, data: Path, max_examples: int | None, batch_size: int, tag_column: int | None,
                details: dict[str, Any]):
    """Entity scores of a ``token-cls`` bundle through ``EdgeSession.tag`` (see the module docstring)."""
    from edgebert.runtime.tagging import tag_sentences

    tagging = task_serving("tag").name
    if session.task != tagging:
        raise ConfigError(f"{session.bundle_dir} is a '{session.task}' bundle; --task ner needs a '{tagging}' "
                          "bundle", f"export the fine-tuned token classifier (task {tagging})")
    labels = tuple(session.label_names)
    sentences, tags = read_tagged(data, labels or None, tag_column)
    sentences = sentences[:max_examples] if max_examples else sentences
    predicted = tag_sentences(partial(session.tag, aggregation="none", batch_size=batch_size),
                              [s.words for s in sentences])
    gold = [[tags[t] for t in s.tags] for s in sentences]
    return _entity_result(gold, predicted, {**details, "max_length": session.max_length,
                                            "through": "EdgeSession.tag(aggregation='none')"})


def _evaluate_embed(path: Path, data: Path, max_seq_len: int, batch_size: int, max_examples: int | None,
                    precision: str | None):
    """Downstream scores of sentence embeddings (``edgebert.stages.embed_eval``)."""
    from edgebert.stages.embed_eval import ALL_PARAGRAPHS, METRICS, DownstreamData, downstream_scores

    sets = DownstreamData.load(data, paragraphs=ALL_PARAGRAPHS, limit=max_examples)
    run = downstream_scores(path, sets, precision, max_seq_len=max_seq_len, batch_size=batch_size)
    return {k: run["metrics"][k] for k in METRICS}, sets.describe()["texts"], {**run["details"], **sets.describe()}


# =========================================================================== reranking
def _evaluate_rerank(path: Path, data: Path, retriever: str | Path | None, max_seq_len: int, batch_size: int,
                     max_examples: int | None, precision: str | None, device: str):
    """MRR@10 / NDCG@10 (torchmetrics) of a reranker on a SQuAD file's questions (``edgebert.data.rerank_data``):
    each question's paragraph group, and with a ``retriever`` its top 20 over every sentence of the file. A bundle
    scores through ``EdgeSession.predict`` (cut where it cuts pairs), a checkpoint in PyTorch."""
    from edgebert.data.rerank_data import dev_groups
    from edgebert.qa.squad_file import read_squad
    from edgebert.stages.rerank_metrics import ranking_figures, split_scores
    from edgebert.stages.retriever import bi_encoder

    groups = dev_groups(read_squad(data), bi_encoder(Path(retriever)) if retriever else None, max_examples)
    details: dict[str, Any] = {"settings": {k: {"queries": len(v), "pairs": sum(len(g.passages) for g in v)}
                                            for k, v in groups.items()}, "retriever": str(retriever) if retriever else None}
    metrics: dict[str, float] = {}
    if is_bundle(path):
        from edgebert.runtime import EdgeSession

        session = EdgeSession(path, provider="cpu" if device == "cpu" else "auto", precision=precision)
        details.update(kind="bundle", precision=session.precision, max_length=session.cross_encoder_max_length)
        for setting, found in groups.items():
            flat = session.predict([p for g in found for p in g.pairs()], batch_size=batch_size)
            metrics.update({f"{setting}_{k}": v for k, v in ranking_figures(found, split_scores(found, flat)).items()
                            if k != "queries"})
    else:
        from edgebert.data.tokenizer import SpecialIds, load_tokenizer
        from edgebert.model import BertConfig, load_model
        from edgebert.stages.rerank_metrics import rerank_metrics

        cfg = BertConfig.load(path)
        if cfg.architecture != "BertForSequenceClassification" or cfg.num_labels != 1:
            raise CheckpointError(f"{path} is a {cfg.architecture} of {cfg.num_labels} label(s), not a reranker",
                                  f"fine-tune one first: edgebert finetune {path} --task rerank ...")
        tok = load_tokenizer(path)
        model = load_model(path).to(device)
        metrics = rerank_metrics(model, tok, groups, min(max_seq_len, cfg.max_sequence_length), batch_size,
                                 SpecialIds.of(tok).pad)
        metrics = {k: v for k, v in metrics.items() if "_" in k}
        details.update(kind="model", max_length=min(max_seq_len, cfg.max_sequence_length))
    main = "retrieved" if "retrieved" in groups else "paragraph"
    metrics.update({"mrr@10": metrics[f"{main}_mrr@10"], "ndcg@10": metrics[f"{main}_ndcg@10"]})
    return metrics, len(groups[main]), details


# =========================================================================== SQuAD
def _evaluate_squad(path: Path, data: Path, max_seq_len: int, doc_stride: int | None, batch_size: int,
                    max_examples: int | None, with_no_answer: bool, precision: str | None, device: str):
    """EM / F1 of a span checkpoint (PyTorch) or a ``qa`` bundle (onnxruntime) on a SQuAD file."""
    examples = read_squad(data)
    examples = examples[:max_examples] if max_examples else examples
    if is_bundle(path):
        predictions, details = _bundle_spans(path, examples, max_seq_len, doc_stride, batch_size, precision)
    else:
        predictions, details = _model_spans(path, examples, max_seq_len, doc_stride, batch_size, device)
    details["scoring"] = ("SQuAD 2.0: all questions, a null threshold chosen on the file" if with_no_answer
                          else "SQuAD 1.1: the answerable questions")
    return prediction_scores(examples, predictions, with_no_answer), len(examples), details


def _window_shape(max_seq_len: int, doc_stride: int | None, limit: int) -> tuple[int, int]:
    length = min(max_seq_len, limit)
    stride = default_stride(length) if doc_stride is None else doc_stride
    check_window(length, stride)
    return length, stride


def _model_spans(path: Path, examples, max_seq_len: int, doc_stride: int | None, batch_size: int, device: str):
    from edgebert.data.tokenizer import SpecialIds, load_tokenizer
    from edgebert.model import BertConfig, load_model
    from edgebert.qa.windows import squad_windows
    from edgebert.stages.metrics import squad_predictions

    cfg = BertConfig.load(path)
    if cfg.architecture != "BertForQuestionAnswering":
        raise CheckpointError(f"{path} is a {cfg.architecture}, not a BertForQuestionAnswering",
                              f"fine-tune it first: edgebert finetune {path} --task squad ...")
    tok = load_tokenizer(path)
    length, stride = _window_shape(max_seq_len, doc_stride, cfg.max_position_embeddings)
    windows = squad_windows(examples, tok, length, stride)
    model = load_model(path).to(device)
    predictions = squad_predictions(model, windows, examples, batch_size, SpecialIds.of(tok).pad)
    return predictions, {"architecture": cfg.architecture, "max_seq_len": length, "doc_stride": stride,
                         "windows": len(windows), "truncated_questions": windows.truncated_questions}


def _bundle_spans(path: Path, examples, max_seq_len: int, doc_stride: int | None, batch_size: int,
                  precision: str | None):
    """The spans of a ``qa`` bundle's graph, torch-free: the same windows and post-processing as a checkpoint."""
    from edgebert.qa.spans import predict_spans
    from edgebert.runtime import EdgeSession
    from edgebert.runtime.answer import QA_TASK, SPAN_OUTPUTS, span_logits, window_maker

    session = EdgeSession(path, provider="cpu", precision=precision, batch_size=batch_size)
    if session.task != QA_TASK:
        raise ConfigError(f"{path} is a '{session.task}' bundle; --task squad needs a '{QA_TASK}' bundle",
                          f"export the fine-tuned span model (task {QA_TASK})")
    length, stride = _window_shape(max_seq_len, doc_stride, session.max_length)
    windows = window_maker(str(session.encoder.file), length, stride)(examples)
    starts, ends = span_logits(lambda feeds: session.run(feeds, list(SPAN_OUTPUTS)), session.pad_id, windows,
                               batch_size)
    return predict_spans(examples, windows, starts, ends), {
        "precision": session.precision, "precision_reason": session.precision_reason, "provider": session.provider,
        "bundle_task": session.task, "max_seq_len": length, "doc_stride": stride, "windows": len(windows),
        "truncated_questions": windows.truncated_questions, "through": "EdgeSession.run (graph), edgebert.qa spans"}
