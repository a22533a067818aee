"""How closely one graph's outputs follow a reference's on the same inputs: the task metrics of the
INT8 accuracy gate (export), ``edgebert check`` (on the device) and ``edgebert bench``. numpy only.

The metrics, each against the reference's own outputs (a task's metric is its entry's in
``edgebert.bundle.task_registry``):

* ``cosine`` (embed): of sentence embeddings (mean pooling over the attention mask); loss = 1 - mean.
* ``label_agreement`` (cls; multiple-choice: the argmax over the choices): argmax of logits; loss = 1 - rate.
* ``top1_agreement`` (mlm): top-1 agreement over every non-pad token;                loss = 1 - rate.
* ``token_label_agreement`` (token-cls): argmax per token over the real tokens: not padding, and not
  the first ([CLS]) or last ([SEP]) token of a row (inputs are single texts);  loss = 1 - rate.
* ``answer_overlap_f1`` (qa): overlap F1 of each question's answer with the reference's answer, on
  character offsets into the context (1 for the same span, 0 for disjoint ones; two empty answers
  agree), the answers as ``EdgeSession.answer`` gives them;                     loss = 1 - mean.
  The export's INT8 gate measures this too, on held-out questions (``quantization.span_gate``).
* ``ranking`` (rerank): per query (one batch holds one query's candidates), NDCG@10 of the graph's order of
  the candidates against the reference's order, the reference's r-th candidate worth 2^(10 - r) - 1 (its
  best two swapped cost 0.12 on that query, its 2nd and 3rd 0.02); loss = 1 - mean over queries; the share of
  queries whose best candidate is the reference's is ``top1`` beside it.

Agreement moves in steps of 1/n, too coarse to rank single graph nodes on a few dozen texts, so every
comparison also yields a continuous ``distance``: 1 - cosine (embed), total-variation distance of the
softmax (cls; token-cls: per token, averaged over the real tokens), |p_ref - p_ours| of the
reference's top-1 token (mlm), 1 for an answer whose span differs at all (qa), the total-variation distance
of the softmax over a query's candidate scores (rerank).

``FidelityTracker`` is the one tracker of these metrics: the INT8 gate and ``check`` feed it the task
output (``add`` / ``add_outputs``); ``edgebert bench`` feeds it every output of both runs
(``add_runs``), which also keeps the largest element-wise differences (of the output over the positions
the metric counts, of the softmax for cls / token-cls, of ``pooler_output`` for embed) and counts the
texts whose outputs hold a NaN or an infinity: such a comparison is a failure, never a small difference.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgebert.bundle.task_registry import BUNDLE_TASKS, bundle_task
from edgebert.runtime.numeric import nonfinite_rows, softmax

# Each bundle task's metric, compared output and default budget are its registry entry's
# (``edgebert.bundle.task_registry``: the budgets' reasons are there); these maps are read from it.
METRICS = {t.name: t.metric for t in BUNDLE_TASKS}
# compared on batches of single texts (a reranker's: of pairs, each batch as one query's candidates)
OUTPUT = {t.name: t.metric_output for t in BUNDLE_TASKS if t.inputs in ("texts", "pairs")}
DEFAULT_BUDGETS = {t.name: t.budget for t in BUNDLE_TASKS}     # the export gate's and check's
LABELS = ("label_agreement", "token_label_agreement")             # argmax agreement, per text or per token
RANK_DEPTH = 10                                                   # ranking: NDCG@10
# a loss equal to the budget up to float rounding is within it: 2 labels of 200 lose 1 - 0.99 = 0.010000000000000009
LOSS_ROUNDING = 1e-9


def mean_pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """(B, T, H) token vectors -> (B, H) averages over the real tokens."""
    m = mask[..., None].astype(np.float64)
    return (hidden.astype(np.float64) * m).sum(1) / np.maximum(m.sum(1), 1.0)


def inner_tokens(mask: np.ndarray) -> np.ndarray:
    """(B, T) bool: the real tokens of each row of single texts, without the first ([CLS]) and the
    last ([SEP]) real position."""
    keep = mask.astype(bool).copy()
    keep[:, 0] = False
    last = np.maximum(mask.astype(np.int64).sum(1) - 1, 0)
    keep[np.arange(len(keep)), last] = False
    return keep


def summarize(task: str, output: np.ndarray, mask: np.ndarray) -> dict[str, np.ndarray]:
    """What the metric compares, per batch (small: never the full MLM logits)."""
    metric = METRICS[task]
    if metric == "cosine":
        emb = mean_pool(output, mask)
        return {"emb": emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)}
    if metric == "label_agreement":
        return {"label": output.argmax(-1), "probs": softmax(output.astype(np.float64))}
    if metric == "token_label_agreement":
        real = output[inner_tokens(mask)].astype(np.float64)     # (tokens, C)
        return {"label": real.argmax(-1), "probs": softmax(real)}
    if metric == "ranking":                                      # one query's candidates: their scores
        return {"scores": output[:, -1].astype(np.float64)}
    real = output[mask.astype(bool)].astype(np.float64)          # (tokens, V)
    return {"top1": real.argmax(-1), "probs": softmax(real)}


def reference_gains(scores: np.ndarray, depth: int = RANK_DEPTH) -> np.ndarray:
    """Each candidate's gain under the reference's order: 2^(depth - r) - 1 for its r-th best (r = 0 ...), 0 past
    ``depth``; equal scores keep input order, as ``rank`` lists them."""
    order = np.argsort(-scores, kind="stable")
    gains = np.zeros(len(scores))
    top = order[:depth]
    gains[top] = 2.0 ** (depth - np.arange(len(top))) - 1
    return gains


def ndcg_at(gains: np.ndarray, scores: np.ndarray, depth: int = RANK_DEPTH) -> float:
    """NDCG@depth of the order of ``scores`` under ``gains`` (linear in the gains, log2 discount, ties in input
    order), as scikit-learn's ``ndcg_score`` computes it for untied scores (tests/test_rerank.py holds it to that);
    1.0 when no candidate has a gain."""
    discount = 1.0 / np.log2(np.arange(min(depth, len(gains))) + 2)
    got = gains[np.argsort(-scores, kind="stable")[:depth]]
    ideal = np.sort(gains)[::-1][:depth]
    best = float((ideal * discount).sum())
    return 1.0 if best == 0 else float((got * discount).sum()) / best


def answer_spans(answers: list[dict]) -> dict[str, np.ndarray]:
    """``qa``: the (start, end) character span of each answer (``EdgeSession.answer``'s dicts)."""
    return {"spans": np.asarray([[a["start"], a["end"]] for a in answers], dtype=np.int64).reshape(-1, 2)}


def span_overlap_f1(ref: np.ndarray, got: np.ndarray) -> np.ndarray:
    """(N,) F1 of the character overlap of ``got``'s spans with ``ref``'s ((N, 2) start / end offsets)."""
    overlap = np.maximum(0, np.minimum(ref[:, 1], got[:, 1]) - np.maximum(ref[:, 0], got[:, 0]))
    total = (ref[:, 1] - ref[:, 0]) + (got[:, 1] - got[:, 0])
    f1 = np.divide(2.0 * overlap, total, out=np.zeros(len(ref)), where=total > 0)
    return np.where(total == 0, 1.0, f1)          # two empty answers agree


def compare(task: str, ref: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(per-item score, per-item distance) of ``got`` against ``ref`` for one batch."""
    metric = METRICS[task]
    if metric == "answer_overlap_f1":
        same = (ref["spans"] == got["spans"]).all(1)
        return span_overlap_f1(ref["spans"], got["spans"]), 1.0 - same.astype(np.float64)
    if metric == "cosine":
        cos = (ref["emb"] * got["emb"]).sum(1)
        return cos, 1.0 - cos
    if metric == "ranking":              # one query: its NDCG@10 against the reference's order
        a, b = ref["scores"], got["scores"]
        ndcg = ndcg_at(reference_gains(a), b)
        return np.asarray([ndcg]), np.asarray([0.5 * np.abs(softmax(a[None]) - softmax(b[None])).sum()])
    if metric in LABELS:                 # per text or per token
        return (ref["label"] == got["label"]).astype(np.float64), 0.5 * np.abs(ref["probs"] - got["probs"]).sum(1)
    rows = np.arange(len(ref["top1"]))
    p_ref = ref["probs"][rows, ref["top1"]]
    p_got = got["probs"][rows, ref["top1"]]
    return (ref["top1"] == got["probs"].argmax(-1)).astype(np.float64), np.abs(p_ref - p_got)


@dataclass
class Fidelity:
    """One graph against its reference on ``n`` texts."""

    metric: str
    mean: float
    min: float | None     # per-text minimum (cosine only)
    n: int                # texts
    loss: float           # 1 - mean
    distance: float       # continuous companion of the loss
    tokens: int | None = None
    top1: float | None = None   # ranking: share of queries whose best candidate is the reference's
    pairs: int | None = None    # ranking: (query, candidate) pairs scored (n counts queries)
    # ``FidelityTracker.add_runs`` only (bench): largest differences, texts with non-finite outputs
    max_abs_diff: float | None = None
    prob_max_abs_diff: float | None = None      # cls, token-cls
    pooler_max_abs_diff: float | None = None    # embed
    non_finite: int | None = None

    def within(self, budget: float) -> bool:
        """The loss is at most ``budget`` (up to float rounding: ``LOSS_ROUNDING``)."""
        return self.loss <= budget + LOSS_ROUNDING

    def as_dict(self) -> dict:
        # loss is derived from the rounded mean, so the two always agree in the written figures
        mean = round(self.mean, 6)
        d = {"metric": self.metric, "mean": mean, "min": None if self.min is None else round(self.min, 6),
             "n": self.n, "loss": round(1.0 - mean, 6), "distance": float(f"{self.distance:.4g}")}
        if self.tokens is not None:
            d["tokens"] = self.tokens
        if self.top1 is not None:
            d["top1_agreement"] = round(self.top1, 6)
            d["pairs"] = self.pairs
        return d


def compared_positions(task: str, output: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The part of a task output the metric looks at: real tokens (embed, mlm), the tokens between
    [CLS] and [SEP] (token-cls), every row (cls)."""
    metric = METRICS[task]
    if metric in ("label_agreement", "ranking"):
        return output
    return output[inner_tokens(mask) if metric == "token_label_agreement" else mask.astype(bool)]


def _largest(current: float | None, diff: np.ndarray) -> float:
    """The larger of ``current`` and the largest of ``diff``; NaN wins (``max(0.0, nan)`` would be 0.0)."""
    return float(np.maximum(current or 0.0, np.max(diff, initial=0.0)))


class FidelityTracker:
    """Accumulates ``compare`` over batches: ``add(ref_summary, got_summary, rows)``, ``add_outputs``
    or ``add_runs`` (bench), then ``result()``."""

    def __init__(self, task: str):
        if task not in METRICS:
            raise ValueError(f"no fidelity metric for task {task!r}")
        self.task, self.metric = task, METRICS[task]
        self.scores: list[np.ndarray] = []
        self.distances: list[np.ndarray] = []
        self.texts = 0
        self.diffs: dict[str, float] = {}    # add_runs: largest |ours - reference| per figure
        self.non_finite: int | None = None   # add_runs: texts whose outputs hold a NaN or an infinity
        self.top1: list[bool] = []           # ranking: per query, the same best candidate
        self.pairs = 0

    def add(self, ref: dict[str, np.ndarray], got: dict[str, np.ndarray], texts: int) -> None:
        score, distance = compare(self.task, ref, got)
        self.scores.append(score)
        self.distances.append(distance)
        if self.metric == "ranking":     # one batch is one query
            self.top1.append(bool(np.argmax(ref["scores"]) == np.argmax(got["scores"])))
            self.pairs += texts
            texts = 1
        self.texts += texts

    def add_outputs(self, ref_output: np.ndarray, got_output: np.ndarray, mask: np.ndarray) -> None:
        self.add(summarize(self.task, ref_output, mask), summarize(self.task, got_output, mask), len(mask))

    def add_runs(self, ref: dict[str, np.ndarray], got: dict[str, np.ndarray], mask: np.ndarray) -> None:
        """Every output of one batch from two runs: the metric (``add_outputs``), the largest differences
        and the count of texts with a non-finite output in ``got``."""
        output = OUTPUT[self.task]
        with np.errstate(invalid="ignore", over="ignore"):
            self.add_outputs(ref[output], got[output], mask)
            ours, theirs = (compared_positions(self.task, o[output], mask) for o in (got, ref))
            self.diffs["max_abs_diff"] = _largest(self.diffs.get("max_abs_diff"), np.abs(ours - theirs))
            if self.metric in LABELS:
                self.diffs["prob_max_abs_diff"] = _largest(self.diffs.get("prob_max_abs_diff"),
                                                           np.abs(softmax(ours) - softmax(theirs)))
            if self.metric == "cosine":
                pooler = [o["pooler_output"] for o in (got, ref) if "pooler_output" in o]
                diff = np.abs(pooler[0] - pooler[1]) if len(pooler) == 2 else np.zeros(0)
                self.diffs["pooler_max_abs_diff"] = _largest(self.diffs.get("pooler_max_abs_diff"), diff)
        bad = max((nonfinite_rows(v) for v in got.values()), default=0)
        self.non_finite = (self.non_finite or 0) + bad

    def result(self) -> Fidelity:
        scores = np.concatenate(self.scores) if self.scores else np.zeros(0)
        distance = float(np.concatenate(self.distances).mean()) if self.distances else 0.0
        mean = float(scores.mean()) if len(scores) else float("nan")
        return Fidelity(self.metric, mean, float(scores.min()) if self.metric == "cosine" and len(scores) else None,
                        self.texts, 1.0 - mean, distance,
                        tokens=len(scores) if bundle_task(self.task).token_level else None,
                        top1=float(np.mean(self.top1)) if self.top1 else None,
                        pairs=self.pairs if self.metric == "ranking" else None,
                        non_finite=self.non_finite, **self.diffs)
