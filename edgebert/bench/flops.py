"""Analytic FLOP count of a BERT forward pass at one (batch, seq) shape, from its config.

Matmuls count 2*M*N*K. Element-wise work is counted per element with fixed costs (bias or residual
add 1, attention scale+mask 2, softmax 5, LayerNorm 8, GELU 8, tanh 1): it is a few percent of the
total at BERT shapes, but kept so the figure is the whole forward pass. ``matmul`` alone is what
``torch.utils.flop_counter`` counts (the tests check the two agree).
"""

from __future__ import annotations

from dataclasses import dataclass

LAYERNORM, GELU, SOFTMAX = 8, 8, 5


@dataclass(frozen=True)
class ModelShape:
    """The config fields that set the cost."""

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    vocab_size: int
    num_labels: int = 2

    @classmethod
    def from_hf_dict(cls, d: dict, num_labels: int | None = None) -> "ModelShape":
        labels = num_labels or len(d.get("id2label") or {}) or 2
        return cls(int(d["hidden_size"]), int(d["num_hidden_layers"]), int(d["num_attention_heads"]),
                   int(d.get("intermediate_size") or 4 * int(d["hidden_size"])), int(d["vocab_size"]), labels)


ENCODER = "encoder"          # the layers alone, no head


def forward_flops(shape: ModelShape, batch: int, seq: int, task: str = "embed") -> dict[str, int]:
    """FLOPs of one forward pass: ``total``, ``matmul`` and one entry per part.

    task: a bundle task (``edgebert.bundle.task_registry``): the head its architecture adds (``BertModel``'s
    pooler, a sequence classifier's pooler + classifier, a token classifier's or span head's per-token
    logits, the LM head over every position), or ``encoder`` (layers only).
    """
    from edgebert.bundle.task_registry import bundle_task

    head = None if task == ENCODER else bundle_task(task).architecture
    H, L, N, I, V = (shape.hidden_size, shape.num_hidden_layers, shape.num_attention_heads,
                     shape.intermediate_size, shape.vocab_size)
    tokens = batch * seq
    scores = batch * N * seq * seq                     # elements of the (B, N, T, T) score tensor
    mm: dict[str, int] = {
        "qkv_projection": L * 3 * 2 * tokens * H * H,
        "attention_scores": L * 2 * batch * seq * seq * H,   # Q K^T over all heads
        "attention_context": L * 2 * batch * seq * seq * H,  # P V
        "attention_output": L * 2 * tokens * H * H,
        "ffn": L * 2 * 2 * tokens * H * I,
    }
    ew: dict[str, int] = {
        "embeddings": tokens * H * (2 + LAYERNORM),
        "attention_elementwise": L * (3 * tokens * H + scores * (2 + SOFTMAX)),
        "layer_elementwise": L * (tokens * H * (1 + 1 + LAYERNORM)          # out bias, residual, LN
                                  + tokens * I * (1 + GELU)                   # FFN bias, GELU
                                  + tokens * H * (1 + 1 + LAYERNORM)),        # FFN out bias, residual, LN
    }
    if head in ("BertModel", "BertForSequenceClassification"):
        mm["pooler"] = 2 * batch * H * H
        ew["pooler_elementwise"] = 2 * batch * H
    if head == "BertForSequenceClassification":
        mm["classifier"] = 2 * batch * H * shape.num_labels
    if head == "BertForTokenClassification":
        mm["classifier"] = 2 * tokens * H * shape.num_labels
    if head == "BertForQuestionAnswering":
        mm["qa_outputs"] = 2 * tokens * H * 2                 # a start and an end logit per token
    if head == "BertForMaskedLM":
        mm["lm_head"] = 2 * tokens * H * H + 2 * tokens * H * V
        ew["lm_head_elementwise"] = tokens * H * (1 + GELU + LAYERNORM) + tokens * V
    if head == "BertForMultipleChoice":
        mm["pooler"] = 2 * batch * H * H                      # a choice's pooled vector, one logit each
        ew["pooler_elementwise"] = 2 * batch * H
        mm["classifier"] = 2 * batch * H
    out = {**mm, **ew}
    out["matmul"] = sum(mm.values())
    out["total"] = out["matmul"] + sum(ew.values())
    return out
