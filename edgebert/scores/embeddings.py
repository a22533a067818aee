"""What sentence embeddings are worth to their users: downstream scores of numpy embedding arrays.

- ``paraphrase_auc(a, b, labels)``: ROC-AUC of the cosine of each pair (row i of ``a`` with row i of
  ``b``) as a paraphrase score against the 0/1 labels (MRPC dev);
- ``probe_accuracy(train_x, train_y, test_x, test_y)``: accuracy of a logistic-regression probe
  (features standardised on the training rows, a fixed seed) trained on one set of embeddings and
  scored on another (SST-2 train -> dev);
- ``retrieval_scores(queries, documents)``: query i's right document is document i; every query ranks
  all documents by cosine: recall@1, recall@10 (the share whose right document is in the first 1 / 10)
  and MRR (mean of 1 / rank). A tie with the right document counts against it (the rank is the number
  of documents scoring at least as high), as ``label_ranking_average_precision_score`` (which gives the
  MRR here: one relevant document per query) counts it.

The ROC-AUC, the probe and the MRR are scikit-learn's (the ``[train]`` extra), imported when a score
is asked for; the recall is counted here (scikit-learn has no recall@k of ranked documents).
Torch-free.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from edgebert.errors import DataError
from edgebert.system.extras import import_extra

PURPOSE = "downstream embedding scores"
RECALL_AT = (1, 10)
PROBE_MAX_ITER = 5000


def _sklearn(module: str):
    return import_extra(f"sklearn.{module}", PURPOSE)


def require_sklearn() -> None:
    """``MissingExtra`` with the install hint when scikit-learn is missing (check before long work)."""
    _sklearn("metrics")


def _matrix(x: np.ndarray, name: str) -> np.ndarray:
    array = np.asarray(x, dtype=np.float64)
    if array.ndim != 2 or not len(array):
        raise DataError(f"{name} has shape {array.shape}; expected (N, hidden) embeddings with N >= 1")
    return array


def unit_rows(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm (a zero row stays zero: its cosine with anything is 0)."""
    x = np.asarray(x, dtype=np.float64)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norms > 0, norms, 1.0)


def pair_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(N,) cosine of row i of ``a`` with row i of ``b``."""
    a, b = _matrix(a, "a"), _matrix(b, "b")
    if a.shape != b.shape:
        raise DataError(f"pair embeddings of shapes {a.shape} and {b.shape}; expected the same")
    return (unit_rows(a) * unit_rows(b)).sum(1)


def _labels(y: Sequence[int] | np.ndarray, n: int, name: str) -> np.ndarray:
    labels = np.asarray(y).reshape(-1)
    if len(labels) != n:
        raise DataError(f"{name}: {len(labels)} labels for {n} embeddings")
    if len(np.unique(labels)) < 2:
        raise DataError(f"{name}: every label is {labels[0].item() if len(labels) else None!r}",
                        "the score needs examples of both classes")
    return labels


def paraphrase_auc(a: np.ndarray, b: np.ndarray, labels: Sequence[int] | np.ndarray) -> float:
    """ROC-AUC of the pairs' cosine similarity as the score of label 1 (a paraphrase)."""
    cos = pair_cosines(a, b)
    return float(_sklearn("metrics").roc_auc_score(_labels(labels, len(cos), "paraphrase pairs"), cos))


def probe_predictions(train_x: np.ndarray, train_y: Sequence[int] | np.ndarray, test_x: np.ndarray,
                      seed: int = 0, max_iter: int = PROBE_MAX_ITER) -> np.ndarray:
    """Labels a logistic regression (L2, C=1, lbfgs) fitted on ``train_x`` predicts for ``test_x``, the
    features standardised with the training rows' mean and deviation (so that the scale of a model's
    vectors does not matter)."""
    train_x, test_x = _matrix(train_x, "probe training embeddings"), _matrix(test_x, "probe test embeddings")
    if train_x.shape[1] != test_x.shape[1]:
        raise DataError(f"probe embeddings of width {train_x.shape[1]} and {test_x.shape[1]}")
    y_train = _labels(train_y, len(train_x), "probe training set")
    pipeline, linear = _sklearn("pipeline"), _sklearn("linear_model")
    probe = pipeline.make_pipeline(_sklearn("preprocessing").StandardScaler(),
                                   linear.LogisticRegression(max_iter=max_iter, random_state=seed))
    probe.fit(train_x, y_train)
    return probe.predict(test_x)


def probe_accuracy(train_x: np.ndarray, train_y: Sequence[int] | np.ndarray, test_x: np.ndarray,
                   test_y: Sequence[int] | np.ndarray, seed: int = 0, max_iter: int = PROBE_MAX_ITER) -> float:
    """Accuracy on ``test_x`` of ``probe_predictions``' probe."""
    y_test = np.asarray(test_y).reshape(-1)
    if len(y_test) != len(test_x):
        raise DataError(f"probe test set: {len(y_test)} labels for {len(test_x)} embeddings")
    return float((probe_predictions(train_x, train_y, test_x, seed, max_iter) == y_test).mean())


def cosine_matrix(queries: np.ndarray, documents: np.ndarray) -> np.ndarray:
    """(N, N) cosine of every query with every document; one right document per query."""
    q, d = unit_rows(_matrix(queries, "queries")), unit_rows(_matrix(documents, "documents"))
    if q.shape != d.shape:
        raise DataError(f"{len(q)} queries of width {q.shape[1]} for {len(d)} documents of width {d.shape[1]}",
                        "give one right document per query, embedded by the same model")
    return q @ d.T


def right_document_ranks(sims: np.ndarray) -> np.ndarray:
    """(N,) rank (1 = first) of document i among all documents for query i in a ``cosine_matrix``;
    ties count against the right document."""
    return (sims >= np.diag(sims)[:, None]).sum(1)


def retrieval_scores(queries: np.ndarray, documents: np.ndarray) -> dict[str, float]:
    """``recall_at_1``, ``recall_at_10``, ``mrr`` and ``n`` of query i -> document i (module docstring)."""
    sims = cosine_matrix(queries, documents)
    ranks = right_document_ranks(sims)
    mrr = _sklearn("metrics").label_ranking_average_precision_score(np.eye(len(ranks), dtype=int), sims)
    out = {f"recall_at_{k}": float((ranks <= k).mean()) for k in RECALL_AT}
    return {**out, "mrr": float(mrr), "n": float(len(ranks))}
