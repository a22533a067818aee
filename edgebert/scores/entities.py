"""Entity-level scores of named-entity tags, counted as CoNLL's ``conlleval`` counts them, by seqeval.

``entity_scores(gold, predicted)`` takes one list of IOB tags per sentence (one tag per word, not per
sub-token) and returns precision / recall / F1 over entities (micro average: an entity counts when
its type and its word span both match), F1 per entity type, and word accuracy. Fine-tuning,
distillation, ``edgebert evaluate`` (checkpoints and bundles) and ``edgebert check`` all score with it.

Torch-free. seqeval (which needs scikit-learn) is imported when a score is asked for: it belongs to
training and evaluation, and ``edgebert.runtime`` never imports it.
"""

from __future__ import annotations

from typing import Any, Sequence

from edgebert.errors import DataError
from edgebert.system.extras import import_extra


def _seqeval():
    return import_extra("seqeval.metrics", "entity scores")


def require_seqeval() -> None:
    """``MissingExtra`` with the install hint when seqeval is missing (check before long work)."""
    _seqeval()


def entity_report(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> dict[str, Any]:
    """seqeval's report: ``{"overall": {...}, "types": {TYPE: {precision, recall, f1, entities}}}``
    plus word ``accuracy`` and counts. Default (conlleval) mode: an ``I-X`` after ``O`` starts an
    entity, so IOB1 and IOB2 files score alike."""
    if len(gold) != len(predicted):
        raise DataError(f"{len(predicted)} predicted sentences for {len(gold)} gold ones")
    for i, (g, p) in enumerate(zip(gold, predicted)):
        if len(g) != len(p):
            raise DataError(f"sentence {i}: {len(p)} predicted tags for {len(g)} words")
    metrics = _seqeval()
    gold, predicted = [list(s) for s in gold], [list(s) for s in predicted]
    report = metrics.classification_report(gold, predicted, output_dict=True, zero_division=0)

    def row(r: dict) -> dict[str, float]:
        return {"precision": float(r["precision"]), "recall": float(r["recall"]), "f1": float(r["f1-score"]),
                "entities": int(r["support"])}

    micro = report.get("micro avg") or {"precision": 0.0, "recall": 0.0, "f1-score": 0.0, "support": 0}
    return {"overall": row(micro),
            "types": {k: row(v) for k, v in sorted(report.items()) if not k.endswith(" avg")},
            "accuracy": float(metrics.accuracy_score(gold, predicted)) if any(gold) else 0.0,
            "sentences": len(gold), "words": sum(len(s) for s in gold)}


def entity_scores(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> dict[str, float]:
    """Flat figures for logs and metrics.jsonl: ``f1``, ``precision``, ``recall`` (entities, micro),
    ``accuracy`` (words), ``entities`` (gold), ``words``, and ``f1_<TYPE>`` per entity type."""
    report = entity_report(gold, predicted)
    out = {k: float(v) for k, v in report["overall"].items()}
    out.update(accuracy=report["accuracy"], words=float(report["words"]))
    out.update({f"f1_{t}": r["f1"] for t, r in report["types"].items()})
    return out
