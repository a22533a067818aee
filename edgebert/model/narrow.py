"""``narrow_model``: a narrower copy of a BERT (fewer hidden dims, heads and FFN units), its weights sliced
from the wide one, so that a narrow student starts from its teacher instead of from random weights.

The slicing keeps a fixed set of coordinates everywhere:

- the residual stream (hidden size): the first ``hidden`` dims, in every tensor that reads or writes it
  (embedding tables, Q/K/V inputs, attention and FFN outputs, every LayerNorm, pooler, heads);
- attention: the first ``heads`` heads and, inside each, the first ``hidden // heads`` dims (all of them
  when the head size is kept, the default);
- the FFN: the first ``intermediate`` units.

Why slicing and not a PCA/SVD rotation of the hidden space: BERT is post-LN, and LayerNorm (its mean,
its variance, its per-dim gain) does not commute with a rotation, so a rotated copy is no more exact than
a sliced one, while slicing is one index set, needs no data, and keeps every kept weight the teacher's
own number. The student's hidden state starts as the teacher's restricted to the kept dims, which is what
``HiddenProjection`` (distillation) starts from: the identity on those dims.
"""

from __future__ import annotations

import torch
from torch import nn

from edgebert.errors import ConfigError
from edgebert.model.bert import build_model, encoder_of
from edgebert.model.config import BertConfig


def narrow_config(cfg: BertConfig, hidden: int, heads: int, intermediate: int) -> BertConfig:
    """``cfg`` at the narrower width; refused when any of the three would grow or a head would widen."""
    head_dim, new_head_dim = cfg.hidden_size // cfg.num_attention_heads, hidden // max(heads, 1)
    if hidden > cfg.hidden_size:
        raise ConfigError(f"--hidden {hidden} is wider than the teacher's hidden size {cfg.hidden_size}",
                          f"use --hidden {cfg.hidden_size} or less")
    if heads > cfg.num_attention_heads or hidden % heads:
        raise ConfigError(f"--heads {heads} does not fit --hidden {hidden} and the teacher's "
                          f"{cfg.num_attention_heads} heads", "heads must divide the width and be at most the teacher's")
    if new_head_dim > head_dim:
        raise ConfigError(f"--hidden {hidden} over {heads} heads gives heads of {new_head_dim} dims, wider than "
                          f"the teacher's {head_dim}", f"use --heads {-(-hidden // head_dim)} or more")
    if intermediate > cfg.intermediate_size:
        raise ConfigError(f"--intermediate {intermediate} is wider than the teacher's {cfg.intermediate_size}")
    return cfg.replace(hidden_size=hidden, num_attention_heads=heads, intermediate_size=intermediate)


def _index(cfg: BertConfig, narrow: BertConfig) -> dict[str, torch.Tensor]:
    """The kept coordinates of each kind of dimension: ``h`` hidden, ``q`` attention (heads x head dims),
    ``i`` FFN units."""
    d_t = cfg.hidden_size // cfg.num_attention_heads
    d_s = narrow.hidden_size // narrow.num_attention_heads
    q = torch.tensor([h * d_t + j for h in range(narrow.num_attention_heads) for j in range(d_s)])
    return {"h": torch.arange(narrow.hidden_size), "q": q, "i": torch.arange(narrow.intermediate_size)}


_HEADS = ("decoder", "classifier", "qa_outputs", "seq_relationship", "predictions")  # (classes or vocab, h)


def _roles(key: str, tensor: torch.Tensor, cfg: BertConfig) -> tuple[str | None, ...]:
    """Which kind of dimension each axis of a parameter is (None: kept whole, e.g. the vocabulary)."""
    if ".attention.self." in key:                    # query/key/value: (q, h) weight, (q,) bias
        return ("q", "h")[:tensor.ndim]
    if ".attention.output.dense." in key:            # (h, q) weight, (h,) bias
        return ("h", "q")[:tensor.ndim]
    if ".intermediate.dense." in key:                # (i, h), (i,)
        return ("i", "h")[:tensor.ndim]
    if ".output.dense." in key and ".encoder.layer." in f".{key}":   # the FFN's down projection: (h, i), (h,)
        return ("h", "i")[:tensor.ndim]
    if "_embeddings." in key or key.split(".")[-2] in _HEADS:   # tables and output heads: (rows, h)
        return (None, "h")[:tensor.ndim] if tensor.ndim == 2 else (None,)
    return tuple("h" if n == cfg.hidden_size else None for n in tensor.shape)   # LayerNorms, pooler, transform


def narrow_state_dict(state: dict[str, torch.Tensor], cfg: BertConfig, narrow: BertConfig) -> dict[str, torch.Tensor]:
    """Every tensor of a ``cfg``-wide model's state dict sliced to ``narrow`` (see the module docstring)."""
    index = _index(cfg, narrow)
    out = {}
    for key, tensor in state.items():
        sliced = tensor
        for axis, role in enumerate(_roles(key, tensor, cfg)):
            if role is not None:
                sliced = sliced.index_select(axis, index[role].to(tensor.device))
        out[key] = sliced.clone()
    return out


def narrow_model(model: nn.Module, hidden: int, heads: int, intermediate: int) -> nn.Module:
    """A model of ``model``'s class at the narrower width, every weight sliced from ``model``'s."""
    cfg = model.config
    narrow = narrow_config(cfg, hidden, heads, intermediate)
    small = build_model(narrow, type(model).__name__)
    small.load_state_dict(narrow_state_dict(model.state_dict(), cfg, narrow), strict=True)
    if hasattr(small, "cls"):                       # keep the MLM decoder tied to the word embeddings
        small.cls.predictions.decoder.weight = encoder_of(small).embeddings.word_embeddings.weight
    return small
