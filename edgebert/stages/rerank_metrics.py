"""A reranker's dev figures: MRR@10 and NDCG@10 over query groups (``edgebert.data.rerank_data``), computed by
torchmetrics' retrieval metrics (``RetrievalMRR``, ``RetrievalNormalizedDCG``, ``top_k=10``), never by hand.

``ranking_figures(groups, scores)`` scores any scorer's output (a PyTorch model's: ``model_scores``; a bundle's:
``EdgeSession.predict``); ``rerank_metrics`` runs a PyTorch cross-encoder over every dev setting and names the
figures ``<setting>_mrr@10`` / ``<setting>_ndcg@10``, with ``mrr@10`` / ``ndcg@10`` the ``retrieved`` setting's
where there is one (the figure the best checkpoint is kept by).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from torch import nn

from edgebert.data.task_data import EncodedDataset, encode_examples, eval_batches
from edgebert.data.tasks import LabelledExample
from edgebert.qa.rank_groups import RankGroup

DEPTH = 10


def ranking_figures(groups: Sequence[RankGroup], scores: Sequence[np.ndarray]) -> dict[str, float]:
    """MRR@10 and NDCG@10 (binary relevance) of ``scores`` (one array per group, in passage order); a group with
    no relevant passage counts 0."""
    from torchmetrics.retrieval import RetrievalMRR, RetrievalNormalizedDCG

    # each score enters as its place in its query's order (best: n, ... last: 1; equal scores in passage order, as
    # ``rank`` lists them): torchmetrics' MRR counts a score <= 0 as "not retrieved", and logits are often negative
    preds = torch.as_tensor(np.concatenate([_order_values(np.asarray(s, np.float64)) for s in scores]))
    target = torch.as_tensor(np.concatenate([[i in g.relevant for i in range(len(g.passages))] for g in groups]))
    indexes = torch.as_tensor(np.concatenate([np.full(len(g.passages), n) for n, g in enumerate(groups)]))
    mrr = RetrievalMRR(top_k=DEPTH, empty_target_action="neg")(preds, target, indexes=indexes)
    ndcg = RetrievalNormalizedDCG(top_k=DEPTH, empty_target_action="neg")(preds, target, indexes=indexes)
    return {f"mrr@{DEPTH}": float(mrr), f"ndcg@{DEPTH}": float(ndcg), "queries": float(len(groups))}


def _order_values(scores: np.ndarray) -> np.ndarray:
    values = np.empty(len(scores))
    values[np.argsort(-scores, kind="stable")] = np.arange(len(scores), 0, -1)
    return values


def pair_dataset(groups: Sequence[RankGroup], tok, max_seq_len: int) -> EncodedDataset:
    return encode_examples([LabelledExample(q, p, 0) for g in groups for q, p in g.pairs()], tok, max_seq_len)


@torch.no_grad()
def model_scores(model: nn.Module, data: EncodedDataset, batch_size: int = 64, pad_id: int = 0) -> np.ndarray:
    """(N,) relevance logits of a one-label ``BertForSequenceClassification`` on encoded pairs, in order."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    out = np.zeros(len(data), dtype=np.float64)
    for idx, batch in eval_batches(data, batch_size, pad_id):
        batch = {k: v.to(device) for k, v in batch.items() if k != "labels"}
        out[idx] = model(**batch).logits[:, -1].float().cpu().numpy()
    model.train(was_training)
    return out


def split_scores(groups: Sequence[RankGroup], flat: np.ndarray) -> list[np.ndarray]:
    sizes = np.cumsum([len(g.passages) for g in groups])[:-1]
    return np.split(np.asarray(flat), sizes)


def rerank_metrics(model: nn.Module, tok, dev: dict[str, list[RankGroup]], max_seq_len: int,
                   batch_size: int = 64, pad_id: int = 0, encoded: dict | None = None) -> dict[str, float]:
    """Every dev setting's figures (module docstring). ``encoded``: a cache of the settings' encoded pairs."""
    figures: dict[str, float] = {}
    for setting, groups in dev.items():
        data = (encoded or {}).get(setting) or pair_dataset(groups, tok, max_seq_len)
        if encoded is not None:
            encoded[setting] = data
        found = ranking_figures(groups, split_scores(groups, model_scores(model, data, batch_size, pad_id)))
        figures.update({f"{setting}_{k}": v for k, v in found.items() if k != "queries"})
    main = "retrieved" if "retrieved" in dev else next(iter(dev), None)
    if main is not None:
        figures[f"mrr@{DEPTH}"] = figures[f"{main}_mrr@{DEPTH}"]
        figures[f"ndcg@{DEPTH}"] = figures[f"{main}_ndcg@{DEPTH}"]
    return figures
