"""Every metric a stage reports, counted one way: classification (accuracy, F1), named entities
(entity-level precision / recall / F1 by seqeval, ``edgebert.scores.entities``), SQuAD answers (EM / F1
by the official rules, ``edgebert.scores.squad``, of the spans ``edgebert.qa.spans`` picks), masked LM
(accuracy, mean cross-entropy, perplexity) and sentence embeddings (cosine, nearest-neighbour agreement).

Fine-tuning, distillation, pretraining and ``edgebert evaluate`` (PyTorch models and ONNX bundles)
all call these, so their figures are directly comparable.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from edgebert.data.task_data import EncodedDataset, eval_batches
from edgebert.errors import CheckpointError
from edgebert.model import IGNORE_INDEX, has_mlm_head, masked_positions_logits
from edgebert.qa.spans import MAX_ANSWER_LEN, N_BEST, SpanPrediction, predict_spans
from edgebert.qa.squad_file import SquadExample
from edgebert.qa.windows import SquadWindows
from edgebert.scores.entities import entity_scores
from edgebert.scores.labels import accuracy, classification_metrics, f1_binary, f1_macro  # noqa: F401
from edgebert.scores.squad import prediction_scores


# =========================================================================== classification
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


@torch.no_grad()
def predict_words(model: nn.Module, data: EncodedDataset, batch_size: int = 64, pad_id: int = 0) -> list[np.ndarray]:
    """Per example of a token task, the predicted tag id of each word: the argmax at the word's first
    sub-token (the position its gold tag was aligned to), in word order. Words that truncation cut off
    have no prediction: the arrays are as long as the words that were seen."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    out: list[np.ndarray] = [np.zeros(0, np.int64)] * len(data)
    for idx, batch in eval_batches(data, batch_size, pad_id):
        labels = batch.pop("labels")
        pred = model(**{k: v.to(device) for k, v in batch.items()}).logits.argmax(-1).cpu()
        for row, i in enumerate(idx):
            out[i] = pred[row][labels[row] != IGNORE_INDEX].numpy()
    model.train(was_training)
    return out


def word_tags(predicted: Sequence[np.ndarray], data: EncodedDataset, labels: Sequence[str]
              ) -> tuple[list[list[str]], list[list[str]]]:
    """(gold, predicted) tag names per sentence, every word of it: a word truncation cut off is
    predicted ``O`` (scored as missed, never dropped from the gold side)."""
    gold = [[labels[t] for t in words] for words in data.word_labels]
    pred = [[labels[t] for t in p] + ["O"] * (len(g) - len(p)) for p, g in zip(predicted, gold)]
    return gold, pred


def ner_metrics(model: nn.Module, data: EncodedDataset, labels: Sequence[str], batch_size: int = 64,
                pad_id: int = 0) -> dict[str, float]:
    """Entity precision / recall / F1 (overall and per type), word accuracy, and ``n`` sentences of a
    token classifier on ``data`` (``edgebert.scores.entities.entity_scores``)."""
    gold, pred = word_tags(predict_words(model, data, batch_size, pad_id), data, labels)
    return {**entity_scores(gold, pred), "n": float(len(data)), "truncated": float(data.truncated)}


def task_metrics(model: nn.Module, data: EncodedDataset, labels: Sequence[str], batch_size: int = 64,
                 pad_id: int = 0) -> dict[str, float]:
    """A classifier's dev figures: entity scores for a token task, accuracy / F1 for a sequence task."""
    if data.is_token_task:
        return ner_metrics(model, data, labels, batch_size, pad_id)
    return {k: float(v) for k, v in classifier_metrics(model, data, len(labels), batch_size, pad_id).items()}


# =========================================================================== SQuAD spans
@torch.no_grad()
def span_logits(model: nn.Module, windows: SquadWindows, batch_size: int = 64, pad_id: int = 0
                ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(start, end) logits of a span model for every window, (T_i,) float32 arrays in window order."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    starts: list[np.ndarray] = [np.zeros(0, np.float32)] * len(windows)
    ends = list(starts)
    for idx, batch in eval_batches(windows, batch_size, pad_id):
        out = model(**{k: batch[k].to(device) for k in ("input_ids", "attention_mask", "token_type_ids")})
        start, end = out.start_logits.float().cpu().numpy(), out.end_logits.float().cpu().numpy()
        for row, i in enumerate(idx):
            starts[i], ends[i] = start[row, :len(windows.input_ids[i])], end[row, :len(windows.input_ids[i])]
    model.train(was_training)
    return starts, ends


def squad_predictions(model: nn.Module, windows: SquadWindows, examples: Sequence[SquadExample],
                      batch_size: int = 64, pad_id: int = 0, n_best: int = N_BEST,
                      max_answer_len: int = MAX_ANSWER_LEN) -> list[SpanPrediction]:
    """The best span of every example (``edgebert.qa.spans.predict_spans``) by a span model."""
    starts, ends = span_logits(model, windows, batch_size, pad_id)
    return predict_spans(examples, windows, starts, ends, n_best, max_answer_len)


def squad_metrics(model: nn.Module, windows: SquadWindows, examples: Sequence[SquadExample], batch_size: int = 64,
                  pad_id: int = 0, with_no_answer: bool = False) -> dict[str, float]:
    """EM / F1 (percent) of a span model: over the answerable questions (``squad_scores``), or with
    ``with_no_answer`` over all of them with a null threshold chosen on the file (``squad_v2_scores``)."""
    return prediction_scores(examples, squad_predictions(model, windows, examples, batch_size, pad_id), with_no_answer)


# =========================================================================== masked LM
class MlmCounts:
    """Masked-token counts over batches -> MLM accuracy, mean cross-entropy and perplexity."""

    def __init__(self) -> None:
        self.ce_sum, self.correct, self.masked = 0.0, 0, 0

    def add(self, logits: torch.Tensor, targets: torch.Tensor) -> None:
        """(M, V) logits and (M,) targets at the masked positions of one batch."""
        self.ce_sum += float(F.cross_entropy(logits.float(), targets, reduction="sum"))
        self.correct += int((logits.argmax(-1) == targets).sum())
        self.masked += targets.numel()

    def summary(self) -> dict[str, float]:
        mean_ce = self.ce_sum / max(1, self.masked)
        return {"mlm_accuracy": self.correct / max(1, self.masked),
                "mlm_perplexity": math.exp(min(mean_ce, 50.0)),   # exp of the mean masked-token CE
                "mlm_loss": mean_ce, "masked_tokens": float(self.masked)}


@torch.no_grad()
def mlm_metrics(model: nn.Module, batches: Sequence[dict[str, torch.Tensor]]) -> dict[str, float]:
    """MLM accuracy, perplexity, mean loss and masked-token count of a BertForMaskedLM/PreTraining."""
    if not has_mlm_head(model):
        raise CheckpointError(f"a {type(model).__name__} has no masked-LM head",
                              "evaluate --task mlm needs a BertForMaskedLM or BertForPreTraining model")
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    counts = MlmCounts()
    for batch in batches:
        batch = {k: v.to(device) for k, v in batch.items()}
        _, logits, targets = masked_positions_logits(model, batch["input_ids"], batch["attention_mask"],
                                                     batch["token_type_ids"], batch["labels"])
        counts.add(logits, targets)
    model.train(was_training)
    return counts.summary()


# =========================================================================== sentence embeddings
def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, T, H) token vectors -> (B, H) mean over real tokens (sentence-transformers' pooling)."""
    mask = attention_mask[:, :, None].to(hidden.dtype)
    return (hidden * mask).sum(1) / mask.sum(1).clamp_min(1.0)


@torch.no_grad()
def sentence_embeddings(model: nn.Module, data: EncodedDataset, batch_size: int = 64,
                        pad_id: int = 0) -> torch.Tensor:
    """(N, H) mean-pooled last hidden states of any BERT, in example order."""
    from edgebert.model import encoder_of

    was_training = model.training
    model.eval()
    encoder = encoder_of(model)
    device = next(model.parameters()).device
    out = torch.zeros(len(data), encoder.config.hidden_size)
    for idx, batch in eval_batches(data, batch_size, pad_id):
        batch = {k: v.to(device) for k, v in batch.items() if k != "labels"}
        hidden = encoder(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).last_hidden_state
        out[torch.as_tensor(idx)] = mean_pool(hidden.float(), batch["attention_mask"]).cpu()
    model.train(was_training)
    return out


def _ranks(x: torch.Tensor) -> torch.Tensor:
    return x.argsort().argsort().double()


def embedding_agreement(student: torch.Tensor, teacher: torch.Tensor, top: int = 5) -> dict[str, float]:
    """How closely one model's sentence embeddings follow another's, on the same N texts:

    - ``cosine_mean`` / ``cosine_min``: cosine between the two embeddings of each text;
    - ``similarity_spearman``: rank correlation of the N(N-1)/2 pairwise cosines (do both models
      find the same pairs of texts alike?);
    - ``neighbour_agreement``: share of texts whose nearest other text is the same under both;
      ``neighbour_in_top5``: share whose student nearest neighbour is among the teacher's ``top``.
    """
    s, t = F.normalize(student.double(), dim=1), F.normalize(teacher.double(), dim=1)
    cos = (s * t).sum(1)
    out = {"cosine_mean": float(cos.mean()), "cosine_min": float(cos.min()), "texts": float(len(cos))}
    n = len(cos)
    if n > top:
        sim_s, sim_t = s @ s.T, t @ t.T
        pairs = torch.triu_indices(n, n, 1)
        a, b = _ranks(sim_s[pairs[0], pairs[1]]), _ranks(sim_t[pairs[0], pairs[1]])
        out["similarity_spearman"] = float(torch.corrcoef(torch.stack([a, b]))[0, 1])
        eye = torch.eye(n, dtype=torch.bool)
        nn_s = sim_s.masked_fill(eye, -2.0).argmax(1)
        top_t = sim_t.masked_fill(eye, -2.0).topk(top, dim=1).indices                  # (N, top)
        out["neighbour_agreement"] = float((nn_s == top_t[:, 0]).double().mean())
        out[f"neighbour_in_top{top}"] = float((top_t == nn_s[:, None]).any(1).double().mean())
    return out
