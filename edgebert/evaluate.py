"""Evaluate a model directory or an exported ONNX bundle on labelled data or on masked-LM text.

``evaluate(path, task, data)`` returns an ``EvaluationResult``:

- classifiers (``sst2``, ``mrpc``, ``tsv``, ``conll``): accuracy and F1 (positive-class F1 for two
  labels, as GLUE reports MRPC; macro F1 otherwise; token accuracy / F1 over words for ``conll``);
- masked LM (``mlm``, a text file): MLM accuracy and perplexity (exp of the mean cross-entropy on the
  masked tokens), on sentence-pair examples masked with a fixed seed: the same examples and masks
  as ``edgebert pretrain``'s evaluation (same ``EVAL_SEED``, same example builder), so numbers from
  pretraining, distillation and this command are directly comparable.

``path`` is either a model directory (``config.json`` + ``model.safetensors``, run in PyTorch) or a
bundle directory (``manifest.json``, run with ``edgebert.runtime.EdgeSession`` on onnxruntime).

The metric helpers (``classifier_metrics``, ``mlm_metrics``, ``mlm_eval_batches``) are what
fine-tuning and distillation call on their dev sets, so every stage counts the same way.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .classification_data import EncodedDataset, encode_examples, encode_tagged, eval_batches
from .errors import CheckpointError, ConfigError, DataError
from .glue import (SEQUENCE_TASKS, TOKEN_TASKS, TaskSpec, classification_metrics, read_tagged,
                   read_task_tsv, task_spec)
from .pretraining_data import (IGNORE_INDEX, MaskingCollator, create_examples, regroup_documents,
                               tokenize_documents)

EVAL_TASKS = (*SEQUENCE_TASKS, *TOKEN_TASKS, "mlm")
# The pretraining stage's evaluation set: fixed seed for example building and masking.
MLM_EVAL_SEED = 20_231_121  # == edgebert.pretrain.EVAL_SEED (asserted in tests)
MLM_SHORT_SEQ_PROB = 0.1


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


# =========================================================================== shared metric helpers
@torch.no_grad()
def predict(model: nn.Module, data: EncodedDataset, batch_size: int = 64, pad_id: int = 0
            ) -> tuple[np.ndarray, np.ndarray]:
    """(predictions, gold labels) of a classifier, in example order.

    Sequence tasks: two (N,) arrays. Token tasks: the labelled positions only, concatenated.
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    if data.is_token_task:
        preds, golds = [], []
        for _, batch in eval_batches(data, batch_size, pad_id):
            labels = batch.pop("labels")
            logits = model(**{k: v.to(device) for k, v in batch.items()}).logits.float().cpu()
            keep = labels != IGNORE_INDEX
            preds.append(logits.argmax(-1)[keep].numpy())
            golds.append(labels[keep].numpy())
        model.train(was_training)
        return np.concatenate(preds), np.concatenate(golds)
    preds = np.zeros(len(data), dtype=np.int64)
    for idx, batch in eval_batches(data, batch_size, pad_id):
        batch.pop("labels")
        logits = model(**{k: v.to(device) for k, v in batch.items()}).logits.float().cpu()
        preds[idx] = logits.argmax(-1).numpy()
    model.train(was_training)
    return preds, data.labels.copy()


def classifier_metrics(model: nn.Module, data: EncodedDataset, num_labels: int, batch_size: int = 64,
                       pad_id: int = 0) -> dict[str, float]:
    """accuracy, f1 and n of a sequence or token classifier on ``data``."""
    preds, golds = predict(model, data, batch_size, pad_id)
    return classification_metrics(preds.tolist(), golds.tolist(), num_labels)


def mlm_eval_batches(documents: Sequence[str], tok, max_seq_len: int = 128, max_examples: int = 2000,
                     batch_size: int = 64, mlm_probability: float = 0.15) -> list[dict[str, torch.Tensor]]:
    """The pretraining evaluation set of ``documents``: sentence-pair examples and their masks, both
    built with the fixed ``MLM_EVAL_SEED`` (so every model is scored on the same masked tokens)."""
    from .tokenizer import SpecialIds

    ids = SpecialIds.of(tok)
    docs = regroup_documents(list(documents))
    segment = max(1, (max_seq_len - 3) // 2)
    examples = create_examples(tokenize_documents(docs, tok, segment), ids, max_seq_len,
                               seed=MLM_EVAL_SEED, dupe_factor=1, short_seq_prob=MLM_SHORT_SEQ_PROB,
                               max_examples=max_examples)
    collator = MaskingCollator(ids, tok.get_vocab_size(), seed=MLM_EVAL_SEED,
                               mlm_probability=mlm_probability)
    n = len(examples)
    return [collator(examples, range(i, min(n, i + batch_size)), range(i, min(n, i + batch_size)))
            for i in range(0, n, batch_size)]


def has_mlm_head(model: nn.Module) -> bool:
    return hasattr(model, "cls") and hasattr(model.cls, "predictions")


def masked_logits(model: nn.Module, batch: dict[str, torch.Tensor], **encoder_kwargs):
    """(encoder output, (M, V) logits at the M masked positions, (M,) targets) of an MLM model.

    The vocabulary projection runs only where ``labels`` is set: the (B, T, V) logits would cost
    more CPU time than the encoder.
    """
    enc = model.bert(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], **encoder_kwargs)
    selected = batch["labels"] != IGNORE_INDEX
    return enc, model.cls.predictions(enc.last_hidden_state[selected]), batch["labels"][selected]


def _mlm_summary(ce_sum: float, correct: int, masked: int) -> dict[str, float]:
    mean_ce = ce_sum / max(1, masked)
    return {"mlm_accuracy": correct / max(1, masked), "mlm_perplexity": math.exp(min(mean_ce, 50.0)),
            "mlm_loss": mean_ce, "masked_tokens": float(masked)}


@torch.no_grad()
def mlm_metrics(model: nn.Module, batches: Sequence[dict[str, torch.Tensor]]) -> dict[str, float]:
    """MLM accuracy, perplexity, mean loss and masked-token count of a BertForMaskedLM/PreTraining."""
    if not has_mlm_head(model):
        raise CheckpointError(f"a {type(model).__name__} has no masked-LM head",
                              "evaluate --task mlm needs a BertForMaskedLM or BertForPreTraining model")
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    ce_sum, correct, masked = 0.0, 0, 0
    for batch in batches:
        batch = {k: v.to(device) for k, v in batch.items()}
        _, logits, targets = masked_logits(model, batch)
        ce_sum += float(F.cross_entropy(logits.float(), targets, reduction="sum"))
        correct += int((logits.argmax(-1) == targets).sum())
        masked += targets.numel()
    model.train(was_training)
    return _mlm_summary(ce_sum, correct, masked)


# =========================================================================== the command
def is_bundle(path: str | Path) -> bool:
    return (Path(path) / "manifest.json").is_file()


def evaluate(path: str | Path, task: str, data: str | Path, *, max_seq_len: int = 128,
             batch_size: int = 64, max_examples: int | None = None, mlm_probability: float = 0.15,
             corpus_format: str = "auto", precision: str | None = None, device: str = "cpu") -> EvaluationResult:
    """Score the model (or bundle) at ``path`` on ``data``; see the module docstring."""
    if task not in EVAL_TASKS:
        raise ConfigError(f"unknown task {task!r}", f"use one of {', '.join(EVAL_TASKS)}")
    if not 8 <= max_seq_len <= 4096:
        raise ConfigError(f"max_seq_len={max_seq_len} must be between 8 and 4096")
    if batch_size < 1 or (max_examples is not None and max_examples < 1):
        raise ConfigError("batch_size and max_examples must be >= 1")
    path, data = Path(path), Path(data)
    if not path.is_dir():
        raise CheckpointError(f"model directory {path} not found",
                              "pass a model directory (config.json) or an exported bundle (manifest.json)")
    if not data.is_file():
        raise DataError(f"{data} not found", "pass an existing data file")
    t0 = time.perf_counter()
    if is_bundle(path):
        metrics, n, details = _evaluate_bundle(path, task, data, max_seq_len, batch_size, max_examples,
                                               mlm_probability, corpus_format, precision)
        kind = "bundle"
    else:
        metrics, n, details = _evaluate_model(path, task, data, max_seq_len, batch_size, max_examples,
                                              mlm_probability, corpus_format, device)
        kind = "model"
    return EvaluationResult(path, kind, task, data, metrics, n, time.perf_counter() - t0, details)


def _labels_of(config_id2label: dict[int, str] | None, num_labels: int) -> tuple[str, ...]:
    return tuple(config_id2label[i] for i in range(num_labels)) if config_id2label else ()


def _spec_for_model(task: str, data: Path, model_labels: tuple[str, ...]) -> TaskSpec:
    """The task spec with the model's label order (``tsv``: the model's id2label names the file's values)."""
    if task != "tsv":
        spec = task_spec(task)
        if model_labels and len(model_labels) != len(spec.labels):
            raise CheckpointError(f"the model has {len(model_labels)} labels, task {task} has "
                                  f"{len(spec.labels)}", "evaluate it on the task it was fine-tuned for")
        return spec
    header = data.read_text(encoding="utf-8-sig").split("\n", 1)[0].rstrip("\r").split("\t")
    base = task_spec("tsv", [h.strip() for h in header])
    if not model_labels:
        return base
    return TaskSpec("tsv", base.text_columns, base.label_column, model_labels, model_labels)


def _load_classifier_data(task: str, data: Path, tok, max_seq_len: int, max_examples: int | None,
                          model_labels: tuple[str, ...]) -> tuple[EncodedDataset, int]:
    if task in TOKEN_TASKS:
        sentences, tags = read_tagged(data, model_labels or None)
        sentences = sentences[:max_examples] if max_examples else sentences
        return encode_tagged(sentences, tok, max_seq_len), len(tags)
    examples, spec = read_task_tsv(data, task, _spec_for_model(task, data, model_labels))
    examples = examples[:max_examples] if max_examples else examples
    return encode_examples(examples, tok, max_seq_len), len(spec.labels)


def _read_documents(data: Path, corpus_format: str) -> list[str]:
    from .corpus import read_corpus

    return read_corpus(data, corpus_format)


def _evaluate_model(path: Path, task: str, data: Path, max_seq_len: int, batch_size: int,
                    max_examples: int | None, mlm_probability: float, corpus_format: str, device: str):
    from .checkpoint import load_model
    from .config import BertConfig
    from .tokenizer import SpecialIds, load_tokenizer

    cfg = BertConfig.load(path)
    tok = load_tokenizer(path)
    max_seq_len = min(max_seq_len, cfg.max_position_embeddings)
    if task == "mlm":
        if cfg.architecture not in ("BertForMaskedLM", "BertForPreTraining"):
            raise CheckpointError(f"{path} is a {cfg.architecture}, which has no masked-LM head",
                                  "--task mlm needs a BertForMaskedLM or BertForPreTraining model")
        model = load_model(path).to(device)
        batches = mlm_eval_batches(_read_documents(data, corpus_format), tok, max_seq_len,
                                   max_examples or 2000, batch_size, mlm_probability)
        n = sum(len(b["input_ids"]) for b in batches)
        return mlm_metrics(model, batches), n, {"architecture": cfg.architecture}
    wanted = "BertForTokenClassification" if task in TOKEN_TASKS else "BertForSequenceClassification"
    if cfg.architecture != wanted:
        raise CheckpointError(f"{path} is a {cfg.architecture}, not a {wanted}",
                              f"fine-tune it first: edgebert finetune {path} --task {task} ...")
    model = load_model(path).to(device)
    labels = _labels_of(cfg.id2label, cfg.num_labels)
    encoded, num_labels = _load_classifier_data(task, data, tok, max_seq_len, max_examples, labels)
    metrics = classifier_metrics(model, encoded, num_labels, batch_size, SpecialIds.of(tok).pad)
    return metrics, len(encoded), {"architecture": cfg.architecture, "labels": list(labels)}


def _evaluate_bundle(path: Path, task: str, data: Path, max_seq_len: int, batch_size: int,
                     max_examples: int | None, mlm_probability: float, corpus_format: str,
                     precision: str | None):
    try:
        from .runtime import EdgeSession
    except ImportError as exc:  # pragma: no cover - the runtime ships with edgebert
        raise ConfigError(f"evaluating ONNX bundles is not supported here ({exc})",
                          "evaluate the model directory instead") from exc
    from .bundle import read_manifest

    manifest = read_manifest(path)
    if precision is None:
        models = manifest.get("models") or {}
        precision = "int8" if "int8" in models else "fp32"
    cfg = manifest["config"]
    limit = int(min(manifest.get("max_sequence_length") or cfg["max_position_embeddings"],
                    cfg["max_position_embeddings"]))
    session = EdgeSession(path, provider="cpu", precision=precision, batch_size=batch_size,
                          max_length=min(max_seq_len, limit))
    details = {"precision": precision, "provider": session.provider, "bundle_task": session.task}
    if task == "mlm":
        if session.task != "mlm":
            raise ConfigError(f"{path} is a '{session.task}' bundle; --task mlm needs an 'mlm' bundle",
                              "export the model with --task mlm")
        from .tokenizer import load_tokenizer

        tok = load_tokenizer(path)
        batches = mlm_eval_batches(_read_documents(data, corpus_format), tok, session.max_length,
                                   max_examples or 2000, batch_size, mlm_probability)
        ce_sum, correct, masked, n = 0.0, 0, 0, 0
        for batch in batches:
            feeds = {k: v.numpy() for k, v in batch.items() if k in session.input_names}
            logits = torch.from_numpy(session.run(feeds, ["logits"])["logits"])
            selected = batch["labels"] != IGNORE_INDEX
            sel_logits, targets = logits[selected], batch["labels"][selected]
            ce_sum += float(F.cross_entropy(sel_logits, targets, reduction="sum"))
            correct += int((sel_logits.argmax(-1) == targets).sum())
            masked += targets.numel()
            n += len(batch["input_ids"])
        return _mlm_summary(ce_sum, correct, masked), n, details
    if task in TOKEN_TASKS:
        raise ConfigError(f"--task {task} is not supported for ONNX bundles yet",
                          "evaluate the model directory instead")
    if session.task != "cls":
        raise ConfigError(f"{path} is a '{session.task}' bundle; --task {task} needs a 'cls' bundle",
                          "export the fine-tuned classifier with --task cls")
    examples, spec = read_task_tsv(data, task, _spec_for_model(task, data, tuple(session.label_names)))
    examples = examples[:max_examples] if max_examples else examples
    inputs = [(e.text_a, e.text_b) for e in examples] if spec.is_pair else [e.text_a for e in examples]
    logits = session.logits(inputs, batch_size=batch_size, truncate=True)
    preds = logits.argmax(axis=1).tolist()
    metrics = classification_metrics(preds, [e.label for e in examples], len(spec.labels))
    return metrics, len(examples), details
