"""The accuracy guard: measure an INT8 graph against the fp32 graph on real text, and keep the most
sensitive nodes float until the loss fits the budget.

Metrics (per task), all against the fp32 model's own outputs on the same text:

* ``embed``: cosine of sentence embeddings (mean pooling over the attention mask); loss = 1 - mean.
* ``cls``:   label agreement (argmax of logits);                                 loss = 1 - rate.
* ``mlm``:   top-1 agreement over every non-pad token;                           loss = 1 - rate.

Label/top-1 agreement moves in steps of 1/n, too coarse to rank single nodes on a few dozen texts,
so every measurement also yields a continuous ``distance``: 1 - cosine (embed), total-variation
distance of the softmax (cls), |p_fp32 - p_int8| of the fp32 top-1 token (mlm).

Sensitivity is measured per node: quantize *only* that node and record the distance it alone causes
(errors of separate nodes add up nearly linearly in BERT, measured on MiniLM). Then the shortest
prefix of that ranking whose exclusion (``nodes_to_exclude``) meets the budget is searched: first
guess from the summed per-node distances, then doubling / bisection, measuring the real loss.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol

import numpy as np
import onnxruntime as ort

from edgebert.errors import ValidationError

from .calibration import TextBatches

METRICS = {"embed": "cosine", "cls": "label_agreement", "mlm": "top1_agreement"}
_OUTPUT = {"embed": "last_hidden_state", "cls": "logits", "mlm": "logits"}


class Quantizer(Protocol):
    def candidates(self) -> list[str]: ...
    def quantize(self, out_path, exclude=(), only=None) -> Path: ...


def cpu_session(path: str | Path, threads: int | None = None) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    if threads:
        so.intra_op_num_threads = threads
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _summary(task: str, output: np.ndarray, mask: np.ndarray) -> dict[str, np.ndarray]:
    """What the metric compares, per batch (small: never the full MLM logits)."""
    if task == "embed":
        m = mask[..., None].astype(np.float32)
        emb = (output.astype(np.float32) * m).sum(1) / np.maximum(m.sum(1), 1.0)
        return {"emb": emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)}
    if task == "cls":
        return {"label": output.argmax(-1), "probs": _softmax(output.astype(np.float64))}
    real = output[mask.astype(bool)].astype(np.float64)          # (tokens, V)
    return {"top1": real.argmax(-1), "probs": _softmax(real)}


def _compare(task: str, ref: dict, got: dict) -> tuple[np.ndarray, np.ndarray]:
    """(per-item score, per-item distance) for one batch."""
    if task == "embed":
        cos = (ref["emb"] * got["emb"]).sum(1)
        return cos, 1.0 - cos
    if task == "cls":
        return (ref["label"] == got["label"]).astype(np.float64), 0.5 * np.abs(ref["probs"] - got["probs"]).sum(1)
    rows = np.arange(len(ref["top1"]))
    p_ref = ref["probs"][rows, ref["top1"]]
    p_got = got["probs"][rows, ref["top1"]]
    return (ref["top1"] == got["probs"].argmax(-1)).astype(np.float64), np.abs(p_ref - p_got)


@dataclass
class AccuracyFigures:
    metric: str
    mean: float
    min: float | None     # per-sentence minimum (cosine only)
    n: int                # sentences
    loss: float           # 1 - mean
    distance: float       # continuous companion of the loss (see module docstring)
    tokens: int | None = None

    def as_dict(self) -> dict:
        d = {"metric": self.metric, "mean": round(self.mean, 6),
             "min": None if self.min is None else round(self.min, 6), "n": self.n,
             "loss": float(f"{self.loss:.4g}"), "distance": float(f"{self.distance:.4g}")}
        if self.tokens is not None:
            d["tokens"] = self.tokens
        return d


class AccuracyProbe:
    """fp32 reference summaries on ``batches``, computed once; ``measure(path)`` scores another graph."""

    def __init__(self, task: str, fp32_path: str | Path, batches: TextBatches):
        self.task = task
        self.metric = METRICS[task]
        self.output = _OUTPUT[task]
        self.batches = batches
        self.reference, self.batch_rows = self._summaries(fp32_path)
        self.sentences = sum(self.batch_rows)

    def _summaries(self, path: str | Path, max_batches: int | None = None) -> tuple[list[dict], list[int]]:
        sess = cpu_session(path)
        names = {i.name for i in sess.get_inputs()}
        out, rows = [], []
        for i, feeds in enumerate(self.batches):
            if max_batches is not None and i >= max_batches:
                break
            result = sess.run([self.output], {k: v for k, v in feeds.items() if k in names})[0]
            out.append(_summary(self.task, result, feeds["attention_mask"]))
            rows.append(int(feeds["input_ids"].shape[0]))
        return out, rows

    def measure(self, path: str | Path, max_sentences: int | None = None) -> AccuracyFigures:
        max_batches = None if max_sentences is None else -(-max_sentences // self.batches.batch_size)
        got, rows = self._summaries(path, max_batches)
        pairs = [_compare(self.task, r, g) for r, g in zip(self.reference, got)]
        scores = np.concatenate([p[0] for p in pairs])
        distance = float(np.concatenate([p[1] for p in pairs]).mean())
        mean = float(scores.mean())
        return AccuracyFigures(self.metric, mean, float(scores.min()) if self.task == "embed" else None,
                               sum(rows), 1.0 - mean, distance,
                               tokens=len(scores) if self.task == "mlm" else None)


@dataclass
class GuardResult:
    accuracy: AccuracyFigures
    excluded: list[str] = field(default_factory=list)
    before: AccuracyFigures | None = None          # all candidates quantized, when that missed
    sensitivity: list[dict] = field(default_factory=list)   # [{"node", "distance"}], most sensitive first
    search: list[dict] = field(default_factory=list)        # [{"excluded": k, "loss"}] as measured

    def as_dict(self, budget: float | None) -> dict:
        d = self.accuracy.as_dict()
        d["max_accuracy_loss"] = budget
        if self.before is not None:
            d["before_exclusion"] = self.before.as_dict()
            d["search"] = self.search
        if self.sensitivity:
            d["sensitivity"] = self.sensitivity
        return d


def rank_nodes(quantizer: Quantizer, probe: AccuracyProbe, sensitivity_size: int) -> list[dict]:
    """Per-node sensitivity: the distance caused by quantizing that node alone; largest first."""
    ranking = []
    with tempfile.TemporaryDirectory(prefix="edgebert-sens-") as tmp:
        one = Path(tmp) / "one.onnx"
        for node in quantizer.candidates():
            quantizer.quantize(one, only=node)
            ranking.append({"node": node, "distance": float(f"{probe.measure(one, sensitivity_size).distance:.4g}")})
    ranking.sort(key=lambda r: r["distance"], reverse=True)
    return ranking


def quantize_with_guard(quantizer: Quantizer, out_path: str | Path, probe: AccuracyProbe | None,
                        budget: float | None, sensitivity_size: int = 64,
                        on_step: Callable[[str], None] | None = None) -> GuardResult | None:
    """Quantize into ``out_path``; with a probe, measure; over ``budget``, exclude sensitive nodes.

    Raises ``ValidationError`` (figures: loss, budget, excluded) if even excluding every candidate
    misses the budget. Returns ``None`` when there is no probe (nothing measured).
    """
    say = on_step or (lambda msg: None)
    out_path = Path(out_path)
    quantizer.quantize(out_path)
    if probe is None:
        return None
    before = probe.measure(out_path)
    if budget is None or before.loss <= budget:
        return GuardResult(before)
    say(f"INT8 {probe.metric} loss {before.loss:.5f} > budget {budget}: ranking nodes by sensitivity")
    ranking = rank_nodes(quantizer, probe, sensitivity_size)
    nodes = [r["node"] for r in ranking]
    # first guess: the shortest prefix whose per-node distances add up to the distance to shed
    share = (before.loss - budget) / max(before.loss, 1e-12) * sum(r["distance"] for r in ranking)
    total, guess = 0.0, len(nodes)
    for k, r in enumerate(ranking, start=1):
        total += r["distance"]
        if total >= share:
            guess = k
            break
    measured: dict[int, AccuracyFigures] = {}

    def loss_at(k: int) -> AccuracyFigures:
        quantizer.quantize(out_path, exclude=nodes[:k])
        measured[k] = probe.measure(out_path)
        say(f"{k} node(s) kept float: {probe.metric} loss {measured[k].loss:.5f}")
        return measured[k]

    lo, hi, k = 0, None, max(1, guess)      # lo: known miss; hi: known fit
    while True:
        if loss_at(k).loss <= budget:
            hi = k
        else:
            lo = k
        if hi is None:
            if k == len(nodes):
                break
            k = min(len(nodes), 2 * k)
        elif hi - lo <= 1:
            break
        else:
            k = (lo + hi) // 2
    search = [{"excluded": k, "loss": float(f"{f.loss:.4g}")} for k, f in measured.items()]
    if hi is None:
        raise ValidationError(
            f"INT8 {probe.metric} loss {measured[len(nodes)].loss:.5f} exceeds --max-accuracy-loss {budget} "
            f"even with all {len(nodes)} quantizable nodes kept float",
            "raise --max-accuracy-loss, or export without --int8",
            figures={"loss": measured[len(nodes)].loss, "max_accuracy_loss": budget, "excluded": len(nodes)})
    if k != hi:
        quantizer.quantize(out_path, exclude=nodes[:hi])   # the file holds the last try; restore the fit
    return GuardResult(measured[hi], nodes[:hi], before, ranking, search)
