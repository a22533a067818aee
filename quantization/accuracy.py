"""The accuracy gate: measure an INT8 graph against the fp32 graph on held-out text, and keep the
most sensitive nodes float until the loss fits the budget.

Metrics per task (``edgebert.runtime.fidelity``): 1 - mean cosine of sentence embeddings (embed),
1 - label agreement (cls), 1 - top-1 agreement (mlm), 1 - token label agreement over real tokens
(token-cls), each with a continuous ``distance``.

Every graph is measured as the target computes it: sessions set ``session.x64quantprecision=1``, so
on an export host whose U8S8 kernel saturates (AVX2 without VNNI) a graph made for a VNNI/ARM target
is still measured with exact products (the option is a no-op where products are exact already, and
for 7-bit weights). The figure in the manifest is therefore the target's, not the export host's.
``cpu_session`` makes those sessions (the exporter validates every graph with it too).

Sensitivity is measured per node: quantize *only* that node and record the distance it alone causes
(errors of separate nodes add up nearly linearly in BERT, measured on MiniLM). Then the shortest
prefix of that ranking whose exclusion (``nodes_to_exclude``) meets the budget is searched: first
guess from the summed per-node distances, then doubling / bisection, measuring the real loss.
A ``GateOrder`` names the graph in the gate's messages and may rank by distance per byte saved instead
(the small graph: a candidate kept 8-bit costs its bytes, and the word table is half of them).
A gate may bound the search (``max_excluded``) and accept a miss (``allow_miss``: the question-answering
gate, whose graph then ships flagged ``within_budget: false`` instead of failing the export).

Question-answering graphs are gated by their answers' overlap with fp32's on held-out questions
(``quantization.span_gate``), multiple-choice graphs by choice agreement; both feed this search like
the text metrics do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol

import numpy as np
import onnxruntime as ort

from edgebert.bundle.task_registry import bundle_task
from edgebert.errors import ValidationError
from edgebert.files.atomic import work_dir
from edgebert.quantization.calibration import TextBatches
from edgebert.runtime.fidelity import METRICS, Fidelity, FidelityTracker, summarize
from edgebert.runtime.hostcpu import PRECISION_OPTION

# On a continuous metric the gate accepts a graph at most (1 - its margin) of its budget: `edgebert check` measures the
# same texts cut the same way, but in the runtime's own session (its kernel options and batches) against the bundle's
# final fp32 graph. Cosine: MiniLM's small graph read 2e-5 apart (0.4% of its 0.005 budget), so 2%. Ranking (NDCG@10
# against fp32's order): near-tied passages swap with the last bit of either graph; a 4-layer SQuAD reranker read
# 0.00293 at the gate and 0.00356 in check (13% of the 0.005 budget), so 20%. Counted metrics (labels, tokens,
# answers) keep their exact edge: a budget of 2 labels in 200 admits 2.
MARGINS = {"cosine": 0.02, "ranking": 0.2}
GATE_MARGIN = MARGINS["cosine"]
MARGIN_METRICS = tuple(MARGINS)


class Quantizer(Protocol):
    def candidates(self) -> list[str]: ...
    def quantize(self, out_path, exclude=(), only=None) -> Path: ...


def gate_margin(probe) -> float:
    """The share of the budget the gate keeps back for ``probe``'s metric (``MARGINS``; 0 for counts)."""
    return MARGINS.get(getattr(probe, "metric", None), 0.0)


def cpu_session(path: str | Path, threads: int | None = None, exact: bool = True) -> ort.InferenceSession:
    """A CPU session; ``exact`` (default) computes U8S8 products exactly on every host (see module doc).
    An OpenVINO IR graph (``.xml``, the ``openvino`` target) opens as ``OpenVinoSession``, same calls."""
    if Path(path).suffix == ".xml":
        from edgebert.runtime.openvino_graph import OpenVinoSession

        return OpenVinoSession(path, threads)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    if threads:
        so.intra_op_num_threads = threads
    if exact:
        so.add_session_config_entry(PRECISION_OPTION, "1")
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


@dataclass(frozen=True)
class GateOrder:
    """How the gate names its graph and ranks its candidates. The default is INT8's: messages say "INT8 ...
    loss", excluded nodes are "kept float", and the ranking is by the distance a node alone causes.
    ``bytes_saved(node)``: what quantizing that candidate saves (> 0); given, the ranking is by distance per
    byte saved, so of two candidates with the same loss the bigger one stays quantized (the small graph:
    ``Int4Quantizer.bytes_saved``)."""
    graph: str = "INT8"
    kept: str = "float"
    bytes_saved: Callable[[str], float] | None = None

    def __post_init__(self) -> None:
        if not self.graph or not self.kept:
            raise ValidationError("a gate order needs a graph name and a word for what excluded nodes become",
                                  "e.g. GateOrder('INT4', '8-bit', quantizer.bytes_saved)")


class AccuracyProbe:
    """fp32 reference summaries on ``batches``, computed once; ``measure(path)`` scores another graph."""

    def __init__(self, task: str, fp32_path: str | Path, batches: TextBatches):
        self.task = task
        self.metric = METRICS[task]
        self.output = bundle_task(task).metric_output
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
            out.append(summarize(self.task, result, feeds["attention_mask"]))
            rows.append(int(feeds["input_ids"].shape[0]))
        return out, rows

    def measure(self, path: str | Path, max_sentences: int | None = None) -> Fidelity:
        max_batches = None if max_sentences is None else -(-max_sentences // self.batches.batch_size)
        got, rows = self._summaries(path, max_batches)
        tracker = FidelityTracker(self.task)
        for ref, ours, n in zip(self.reference, got, rows):
            tracker.add(ref, ours, n)
        return tracker.result()


@dataclass
class GuardResult:
    accuracy: Fidelity
    excluded: list[str] = field(default_factory=list)
    before: Fidelity | None = None          # all candidates quantized, when that missed
    sensitivity: list[dict] = field(default_factory=list)   # [{"node", "distance"}], most sensitive first
    search: list[dict] = field(default_factory=list)        # [{"excluded": k, "loss"}] as measured
    within_budget: bool | None = None       # said when the gate may miss (allow_miss)

    def as_dict(self, budget: float | None) -> dict:
        d = self.accuracy.as_dict()
        d["max_accuracy_loss"] = budget
        if budget is not None and self.accuracy.metric in MARGINS:
            d["accepted_below"] = float(f"{budget * (1 - MARGINS[self.accuracy.metric]):.6g}")
        if self.within_budget is not None:
            d["within_budget"] = self.within_budget
        if self.before is not None:
            d["before_exclusion"] = self.before.as_dict()
            d["search"] = self.search
        if self.sensitivity:
            d["sensitivity"] = self.sensitivity
        return d


def rank_nodes(quantizer: Quantizer, probe: AccuracyProbe, sensitivity_size: int, suffix: str = ".onnx",
               bytes_saved: Callable[[str], float] | None = None) -> list[dict]:
    """Per-node sensitivity: the distance caused by quantizing that node alone; largest first, or with
    ``bytes_saved`` largest distance per byte saved first (each row then says its ``bytes_saved``).
    ``suffix``: the quantizer's file kind (``.xml``: an OpenVINO IR, which ``cpu_session`` opens as such)."""
    ranking = []
    with work_dir("sens") as tmp:
        one = Path(tmp) / f"one{suffix}"
        for node in quantizer.candidates():
            quantizer.quantize(one, only=node)
            ranking.append({"node": node, "distance": float(f"{probe.measure(one, sensitivity_size).distance:.4g}")})
    if bytes_saved is None:
        ranking.sort(key=lambda r: r["distance"], reverse=True)
        return ranking
    for r in ranking:
        r["bytes_saved"] = int(bytes_saved(r["node"]))
    ranking.sort(key=lambda r: r["distance"] / max(r["bytes_saved"], 1), reverse=True)
    return ranking


def quantize_with_guard(quantizer: Quantizer, out_path: str | Path, probe: AccuracyProbe | None,
                        budget: float | None, sensitivity_size: int = 64,
                        on_step: Callable[[str], None] | None = None, max_excluded: int | None = None,
                        allow_miss: bool = False,
                        fallback: Callable[[Fidelity], str | None] | None = None,
                        order: GateOrder | None = None) -> GuardResult | None:
    """Quantize into ``out_path``; with a probe, measure; over ``budget``, exclude sensitive nodes (at
    most ``max_excluded``; None: every candidate).

    A miss (even the most exclusions allowed exceed the budget) raises ``ValidationError`` (figures:
    loss, budget, excluded), or with ``allow_miss`` returns the graph with those exclusions and
    ``within_budget=False``. Returns ``None`` when there is no probe (nothing measured).

    ``fallback(missed)``: called once when every candidate quantized misses the budget, before any node is
    kept float; a returned text says what it changed in the quantizer (a speed-only approximation dropped,
    e.g. GELU's tanh form), and the graph is made and measured again.

    ``order``: the graph's name in messages and the ranking (``GateOrder``; None: INT8's).
    """
    say = on_step or (lambda msg: None)
    order = order or GateOrder()
    accept = None if budget is None else budget * (1 - gate_margin(probe))      # what the gate lets through
    name, kept = order.graph, order.kept
    out_path = Path(out_path)
    quantizer.quantize(out_path)
    if probe is None:
        return None
    before = probe.measure(out_path)
    changed = fallback(before) if budget is not None and not before.within(accept) and fallback else None
    if changed:
        quantizer.quantize(out_path)
        missed, before = before, probe.measure(out_path)
        say(f"{name} {probe.metric} loss {missed.loss:.5f} > budget {budget}: {changed}, loss {before.loss:.5f}")
    if budget is None or before.within(accept):
        return GuardResult(before, within_budget=True if allow_miss else None)
    per = " per byte saved" if order.bytes_saved else ""
    say(f"{name} {probe.metric} loss {before.loss:.5f} > budget {budget}: ranking nodes by sensitivity{per}")
    ranking = rank_nodes(quantizer, probe, sensitivity_size, out_path.suffix or ".onnx", order.bytes_saved)
    nodes = [r["node"] for r in ranking]
    limit = len(nodes) if max_excluded is None else max(1, min(len(nodes), max_excluded))
    # first guess: the shortest prefix whose per-node distances add up to the distance to shed
    share = (before.loss - accept) / max(before.loss, 1e-12) * sum(r["distance"] for r in ranking)
    total, guess = 0.0, len(nodes)
    for k, r in enumerate(ranking, start=1):
        total += r["distance"]
        if total >= share:
            guess = k
            break
    measured: dict[int, Fidelity] = {}

    def loss_at(k: int) -> Fidelity:
        quantizer.quantize(out_path, exclude=nodes[:k])
        measured[k] = probe.measure(out_path)
        say(f"{k} node(s) kept {kept}: {probe.metric} loss {measured[k].loss:.5f}")
        return measured[k]

    lo, hi, k = 0, None, min(limit, max(1, guess))      # lo: known miss; hi: known fit
    while True:
        if loss_at(k).within(accept):
            hi = k
        else:
            lo = k
        if hi is None:
            if k == limit:
                break
            k = min(limit, 2 * k)
        elif hi - lo <= 1:
            break
        else:
            k = (lo + hi) // 2
    search = [{"excluded": k, "loss": float(f"{f.loss:.4g}")} for k, f in measured.items()]
    if hi is None:
        if allow_miss:       # the file holds the last try: ``limit`` nodes kept float
            say(f"{name} {probe.metric} loss {measured[limit].loss:.5f} still exceeds {budget} with {limit} node(s) "
                f"kept {kept}: the graph is kept, marked over budget")
            return GuardResult(measured[limit], nodes[:limit], before, ranking, search, within_budget=False)
        everything = "all" if limit == len(nodes) else f"{limit} of"
        raise ValidationError(
            f"{name} {probe.metric} loss {measured[limit].loss:.5f} exceeds --max-accuracy-loss {budget} "
            f"even with {everything} {len(nodes)} quantizable nodes kept {kept}",
            f"raise --max-accuracy-loss, or export without --{name.lower()}",
            figures={"loss": measured[limit].loss, "max_accuracy_loss": budget, "excluded": limit})
    if k != hi:
        quantizer.quantize(out_path, exclude=nodes[:hi])   # the file holds the last try; restore the fit
    return GuardResult(measured[hi], nodes[:hi], before, ranking, search, within_budget=True if allow_miss else None)


def batch_invariance(path: str | Path, task: str, probe_feeds: list[dict[str, np.ndarray]],
                     batch_mates: dict[str, np.ndarray]) -> dict:
    """Run each row of ``probe_feeds`` alone, then inside one batch with ``batch_mates`` (long texts),
    and report the worst change of the task output: 1 - cos of the summary vector (sentence embedding
    for embed, logits for cls, per-token logits for mlm)."""
    sess = cpu_session(path)
    names = {i.name for i in sess.get_inputs()}
    output = bundle_task(task).metric_output
    worst, rows = 0.0, 0
    for feeds in probe_feeds:
        width = max(feeds["input_ids"].shape[-1], batch_mates["input_ids"].shape[-1])
        alone = sess.run([output], {k: v for k, v in feeds.items() if k in names})[0]
        mixed = {k: np.concatenate([_pad(feeds[k], width), _pad(batch_mates[k], width)]) for k in feeds}
        together = sess.run([output], {k: v for k, v in mixed.items() if k in names})[0][:len(alone)]
        for r in range(len(alone)):
            n = int(feeds["attention_mask"][r].sum())
            a, b = _row_vector(task, alone[r], n), _row_vector(task, together[r], n)
            cos = float(a @ b / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-12))
            worst = max(worst, 1.0 - cos)
            rows += 1
    return {"max_1_minus_cos": float(f"{worst:.3g}"), "texts": rows,
            "batch_mates": int(batch_mates["input_ids"].shape[0]),
            "batch_mate_tokens": int(batch_mates["attention_mask"].sum(-1).max()),
            "method": "each text alone vs inside one right-padded batch with long texts; 1 - cos of the "
                      "mean-pooled embedding (embed), the logits (cls, multiple-choice: over the choices), "
                      "the real-token logits (mlm, token-cls) or the real-token start logits (qa)"}


def _pad(array: np.ndarray, width: int) -> np.ndarray:
    out = np.zeros((*array.shape[:-1], width), dtype=array.dtype)
    out[..., :array.shape[-1]] = array
    return out


def _row_vector(task: str, out: np.ndarray, n: int) -> np.ndarray:
    """One text's compared output: its mean token vector (embed), its row (one per text), its tokens."""
    spec = bundle_task(task)
    if spec.has_pooling:
        return out[:n].astype(np.float64).mean(0)
    if "sequence" not in spec.metric_shape:
        return out.astype(np.float64)
    return out[:n].astype(np.float64).ravel()
