"""Attention maps: which tokens one layer/head of a PyTorch BERT attends to, drawn as a heat map.

Runs the model directory's own tokenizer.json and weights with ``output_attentions=True`` (the
explicit-softmax attention path, so the probabilities are the ones the model computes).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgebert.errors import CheckpointError, ConfigError, DataError


@dataclass(frozen=True)
class AttentionMap:
    tokens: list[str]
    weights: np.ndarray          # (T, T): row = query token, column = key token; rows sum to 1
    layer: int                   # resolved, 0-based
    head: int | None             # None: mean over heads
    num_layers: int
    num_heads: int
    path: Path | None = None

    @property
    def head_label(self) -> str:
        return f"mean of {self.num_heads} heads" if self.head is None else f"head {self.head}"


def attention_map(model_dir: str | Path, text: str, layer: int = -1, head: int | None = None,
                  pair: str | None = None) -> AttentionMap:
    """Attention probabilities of ``layer`` (negative counts from the end) and ``head`` (None: mean)."""
    import torch
    from tokenizers import Tokenizer

    from edgebert.model import encoder_of, load_model

    model_dir = Path(model_dir)
    if not isinstance(text, str) or (pair is not None and not isinstance(pair, str)):
        raise DataError("the text (and --pair) must be strings")
    tok_file = model_dir / "tokenizer.json"
    if not tok_file.is_file():
        raise CheckpointError(f"{model_dir} has no tokenizer.json", "save the tokenizer beside the model")
    model = load_model(model_dir)
    encoder = encoder_of(model)
    cfg = encoder.config
    if not -cfg.num_hidden_layers <= layer < cfg.num_hidden_layers:
        raise ConfigError(f"layer {layer} is out of range", f"the model has {cfg.num_hidden_layers} layers "
                          f"(0..{cfg.num_hidden_layers - 1}, or negative from the end)")
    if head is not None and not 0 <= head < cfg.num_attention_heads:
        raise ConfigError(f"head {head} is out of range",
                          f"the model has {cfg.num_attention_heads} heads (0..{cfg.num_attention_heads - 1})")
    tok = Tokenizer.from_file(str(tok_file))
    tok.no_padding()
    tok.no_truncation()
    enc = tok.encode(text, pair) if pair is not None else tok.encode(text)
    if len(enc.ids) > cfg.max_position_embeddings:
        raise DataError(f"the text is {len(enc.ids)} tokens, more than the model's "
                        f"{cfg.max_position_embeddings} positions", "shorten it")
    ids = torch.tensor([enc.ids])
    types = torch.tensor([enc.type_ids])
    with torch.inference_mode():
        out = encoder(ids, torch.ones_like(ids), types, output_attentions=True)
    probs = out.attentions[layer][0].float().numpy()               # (N, T, T)
    weights = probs.mean(axis=0) if head is None else probs[head]
    return AttentionMap(list(enc.tokens), weights, layer % cfg.num_hidden_layers, head,
                        cfg.num_hidden_layers, cfg.num_attention_heads)


STAMP = "edgebert attention"      # the PNG's Software text: how a later run knows the file is ours


def plot_attention(model_dir: str | Path, text: str, out: str | Path, layer: int = -1,
                   head: int | None = None, pair: str | None = None, overwrite: bool = False) -> AttentionMap:
    """Compute the map and write it as a PNG heat map (queries down, keys across). ``out`` must be a
    new or empty file, or (with ``overwrite``) a picture this command drew (``edgebert.files.outfiles``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from edgebert.files.outfiles import OutputFile, png_software

    target = OutputFile(out, "attention", ours=lambda p: png_software(p) == STAMP, overwrite=overwrite)
    amap = attention_map(model_dir, text, layer, head, pair)
    n = len(amap.tokens)
    size = min(3 + 0.28 * n, 24)
    fig, ax = plt.subplots(figsize=(size + 1.2, size))
    image = ax.imshow(amap.weights, cmap="viridis", vmin=0.0, vmax=float(amap.weights.max()) or 1.0)
    ax.set_xticks(range(n), amap.tokens, rotation=90, fontsize=8)
    ax.set_yticks(range(n), amap.tokens, fontsize=8)
    ax.set_xlabel("attended-to token (key)")
    ax.set_ylabel("token (query)")
    ax.set_title(f"{Path(model_dir).name}: layer {amap.layer}, {amap.head_label}", fontsize=10)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    fig.tight_layout()
    try:
        with target.writing() as tmp:
            fig.savefig(tmp, format="png", dpi=110, metadata={"Software": STAMP})
    finally:
        plt.close(fig)
    return AttentionMap(amap.tokens, amap.weights, amap.layer, amap.head, amap.num_layers,
                        amap.num_heads, target.path)
