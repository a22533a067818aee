"""The retriever of reranker training and evaluation: a sentence-embedding model as a function of texts (its
encoder, mean-pooled, unit length: all-MiniLM-L6-v2's recipe), for ``edgebert.data.rerank_data``."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def bi_encoder(model_dir: Path, max_seq_len: int = 128, batch_size: int = 64):
    """The retriever: ``model_dir``'s encoder, mean-pooled and unit-length (sentence-transformers' all-MiniLM-L6-v2
    recipe), as a function of texts."""
    import torch

    from edgebert.data.task_data import encode_texts
    from edgebert.data.tokenizer import SpecialIds, load_tokenizer
    from edgebert.model import load_model
    from edgebert.stages.metrics import sentence_embeddings

    model = load_model(model_dir, "BertModel").eval()
    tok = load_tokenizer(model_dir)
    pad = SpecialIds.of(tok).pad

    def embed(texts: list[str]) -> np.ndarray:
        with torch.no_grad():
            vectors = sentence_embeddings(model, encode_texts(texts, tok, max_seq_len), batch_size, pad)
        return torch.nn.functional.normalize(vectors, dim=1).numpy()

    return embed
