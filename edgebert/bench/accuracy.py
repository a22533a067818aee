"""Accuracy of one path against the PyTorch reference on the same padded inputs.

embed: max |diff| of last_hidden_state over real tokens, cosine of mean-pooled embeddings (mean and
worst), max |diff| of pooler_output. cls: label agreement and max |diff| of logits and probabilities.
token-cls: token label agreement over the real tokens ([CLS], [SEP] and padding left out, as the INT8
gate counts it) and max |diff| of logits and probabilities there. mlm: top-1 agreement over real
tokens and max |diff| of logits.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..runtime.fidelity import inner_tokens, mean_pool, softmax


class AccuracyTracker:
    """Accumulates the comparison over batches (feeds, ours, reference) of one path."""

    def __init__(self, task: str):
        self.task = task
        self.max_abs = 0.0
        self.max_abs_pooler = 0.0
        self.max_abs_prob = 0.0
        self.cosines: list[np.ndarray] = []
        self.agree = 0
        self.total = 0

    def add(self, feeds: dict[str, np.ndarray], ours: dict[str, np.ndarray], ref: dict[str, np.ndarray]) -> None:
        mask = feeds["attention_mask"].astype(bool)
        if self.task == "embed":
            diff = np.abs(ours["last_hidden_state"] - ref["last_hidden_state"])[mask]
            self.max_abs = max(self.max_abs, float(diff.max()))
            if "pooler_output" in ours and "pooler_output" in ref:
                self.max_abs_pooler = max(self.max_abs_pooler,
                                          float(np.abs(ours["pooler_output"] - ref["pooler_output"]).max()))
            a = mean_pool(ours["last_hidden_state"], mask)
            b = mean_pool(ref["last_hidden_state"], mask)
            cos = (a * b).sum(1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12)
            self.cosines.append(cos)
        elif self.task == "cls":
            ours_l, ref_l = ours["logits"], ref["logits"]
            self.max_abs = max(self.max_abs, float(np.abs(ours_l - ref_l).max()))
            self.max_abs_prob = max(self.max_abs_prob, float(np.abs(softmax(ours_l) - softmax(ref_l)).max()))
            self.agree += int((ours_l.argmax(-1) == ref_l.argmax(-1)).sum())
            self.total += len(ours_l)
        elif self.task == "token-cls":
            keep = inner_tokens(feeds["attention_mask"])
            ours_l, ref_l = ours["logits"][keep], ref["logits"][keep]
            self.max_abs = max(self.max_abs, float(np.abs(ours_l - ref_l).max(initial=0.0)))
            self.max_abs_prob = max(self.max_abs_prob,
                                    float(np.abs(softmax(ours_l) - softmax(ref_l)).max(initial=0.0)))
            self.agree += int((ours_l.argmax(-1) == ref_l.argmax(-1)).sum())
            self.total += len(ours_l)
        elif self.task == "mlm":
            ours_l, ref_l = ours["logits"][mask], ref["logits"][mask]
            self.max_abs = max(self.max_abs, float(np.abs(ours_l - ref_l).max()))
            self.agree += int((ours_l.argmax(-1) == ref_l.argmax(-1)).sum())
            self.total += len(ours_l)

    def result(self) -> dict[str, Any]:
        if self.task == "embed":
            cos = np.concatenate(self.cosines) if self.cosines else np.zeros(0)
            return {"metric": "cosine", "inputs": int(len(cos)),
                    "max_abs_diff": self.max_abs, "pooler_max_abs_diff": self.max_abs_pooler,
                    "cosine_mean": float(cos.mean()) if len(cos) else None,
                    "cosine_min": float(cos.min()) if len(cos) else None}
        what = {"cls": "label_agreement", "token-cls": "token_label_agreement"}.get(self.task, "top1_agreement")
        out = {"metric": what, "inputs": self.total, "max_abs_diff": self.max_abs,
               what: self.agree / self.total if self.total else None}
        if self.task in ("cls", "token-cls"):
            out["prob_max_abs_diff"] = self.max_abs_prob
        return out
