"""sentence-transformers on the bundle's ONNX graphs, with no Optimum: ``SentenceTransformer``'s whole API.

sentence-transformers' own ONNX backend (``backend="onnx"``) runs through Optimum, whose ONNX package
(optimum-onnx 0.1) needs transformers < 4.58, while sentence-transformers 6 needs transformers 5: beside
sentence-transformers 6 that backend cannot be installed. ``EdgeSentenceTransformer(bundle)`` is a real
``SentenceTransformer`` built from the bundle's own files (modules.json, pooling, Normalize, prompts,
similarity function, max_seq_length, truncate_dim) by sentence-transformers itself; only its Transformer module
runs the bundle's graph through ``EdgeSession`` (onnxruntime; the INT8 graph this CPU runs exactly, or
``precision="fp32"``) instead of PyTorch weights. Tokenization, prompts, truncation, pooling, ``encode``'s
options, ``similarity``, ``encode_query`` / ``encode_document`` are sentence-transformers' own code::

    from edgebert.st_onnx import EdgeSentenceTransformer
    model = EdgeSentenceTransformer("bundles/minilm")               # precision="int8" / "fp32", threads=...
    vectors = model.encode(["a sentence"], normalize_embeddings=True)

Works with sentence-transformers 5 and 6 (needs torch: they do). The bundle still opens unchanged in
sentence-transformers 5's ``backend="onnx"``; nothing here changes its files.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from edgebert.errors import ConfigError

__all__ = ["EdgeSentenceTransformer", "onnx_encoder"]

# the modules.json types that name sentence-transformers' Transformer module (5.x, 6.x spellings)
_TRANSFORMER_TYPES = ("sentence_transformers.models.Transformer",
                      "sentence_transformers.base.modules.Transformer",
                      "sentence_transformers.base.modules.transformer.Transformer")


def _sentence_transformers():
    try:
        import sentence_transformers
        import torch
    except ImportError as exc:
        raise ConfigError(f"EdgeSentenceTransformer needs sentence-transformers ({exc.name} is not installed)",
                          "pip install sentence-transformers (5 or 6), or use edgebert.runtime.EdgeSession, "
                          "which has encode / similarity without torch") from None
    return sentence_transformers, torch


def onnx_encoder(session, config):
    """A ``torch.nn.Module`` that sentence-transformers' Transformer module calls as it calls a transformers
    model: token ids in, ``last_hidden_state`` out, computed by ``session`` (an ``EdgeSession`` of an
    embedding bundle). No parameters: the weights live in the graph."""
    _, torch = _sentence_transformers()
    from transformers.modeling_outputs import BaseModelOutput

    class OnnxEncoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.session, self.config = session, config
            self.main_input_name = "input_ids"

        def forward(self, input_ids, attention_mask=None, token_type_ids=None, return_dict=True):
            ids = input_ids.detach().cpu().numpy().astype(np.int64)                       # (B, T)
            mask = np.ones_like(ids) if attention_mask is None else attention_mask.detach().cpu().numpy()
            feeds = {"input_ids": ids, "attention_mask": mask.astype(np.int64)}
            if "token_type_ids" in self.session.input_names:
                types = np.zeros_like(ids) if token_type_ids is None else token_type_ids.detach().cpu().numpy()
                feeds["token_type_ids"] = types.astype(np.int64)
            hidden = torch.from_numpy(self.session.run(feeds, ["last_hidden_state"])["last_hidden_state"])  # (B, T, H)
            return BaseModelOutput(last_hidden_state=hidden) if return_dict else (hidden,)

        def __repr__(self) -> str:
            return f"OnnxEncoder({self.session!r})"

    return OnnxEncoder()


def _transformer_class(base: type, session_options: dict[str, Any]) -> type:
    """sentence-transformers' Transformer module whose model is the bundle's graph (``_load_model`` is where
    both 5.x and 6.x load the transformers model; everything else, tokenizer included, stays theirs)."""
    from transformers import PretrainedConfig

    from edgebert.bundle.task_registry import bundle_task
    from edgebert.runtime import EdgeSession

    class EdgeOnnxTransformer(base):
        def _load_model(self, model_name_or_path, *args, **kwargs):
            config = next((a for a in (*args, *kwargs.values()) if isinstance(a, PretrainedConfig)), None)
            session = EdgeSession(model_name_or_path, **session_options)
            if not bundle_task(session.task).has_pooling:
                raise ConfigError(f"{model_name_or_path} is a {session.task!r} bundle, not a sentence encoder",
                                  "EdgeSentenceTransformer opens sentence-embedding bundles")
            model = onnx_encoder(session, config)
            if hasattr(self, "auto_model"):            # 5.x reads self.auto_model; 6.x keeps the return value
                self.auto_model = model
            return model

        def save(self, *args, **kwargs):
            raise ConfigError("an EdgeSentenceTransformer has no PyTorch weights to save",
                              "the bundle is the saved model: copy its folder, or re-export from the checkpoint")

    EdgeOnnxTransformer.__qualname__ = EdgeOnnxTransformer.__name__
    return EdgeOnnxTransformer


def EdgeSentenceTransformer(bundle: str | os.PathLike, precision: str | None = None, provider: str = "cpu",
                            threads: int | None = None, **kwargs: Any):
    """A ``SentenceTransformer`` on the bundle's graph (``precision``: "int8", "fp32" or None for the best one
    here, as ``EdgeSession`` picks it; ``provider`` and ``threads`` as there). ``kwargs`` go to
    ``SentenceTransformer`` (``prompts``, ``default_prompt_name``, ``truncate_dim``, ``similarity_fn_name`` ...);
    ``device`` is the CPU: onnxruntime computes, torch only carries the vectors."""
    st, _ = _sentence_transformers()
    if kwargs.pop("backend", "torch") != "torch":
        raise ConfigError("EdgeSentenceTransformer runs the bundle's ONNX graph itself: leave `backend` out")
    if kwargs.setdefault("device", "cpu") != "cpu":
        raise ConfigError(f"device={kwargs['device']!r}: EdgeSentenceTransformer computes with onnxruntime",
                          "leave device out, and pass provider='cuda' for the GPU")
    options = {"precision": precision, "provider": provider, "threads": threads}
    try:                                                   # 6.x; 5.x has it under sentence_transformers.models
        from sentence_transformers.base.modules import Transformer as base
    except ImportError:
        from sentence_transformers.models import Transformer as base

    class _Model(st.SentenceTransformer):
        def _load_module_class_from_ref(self, class_ref, *args, **kw):
            found = super()._load_module_class_from_ref(class_ref, *args, **kw)
            if class_ref in _TRANSFORMER_TYPES or (isinstance(found, type) and issubclass(found, base)):
                return _transformer_class(found, options)
            return found

    _Model.__name__ = _Model.__qualname__ = "EdgeSentenceTransformer"
    path = os.fspath(bundle)
    if not os.path.isfile(os.path.join(path, "modules.json")):
        raise ConfigError(f"{path} has no modules.json: not an embedding bundle (or exported before the "
                          "sentence-transformers files were written)",
                          "re-export the embedding model with `edgebert export`, or use EdgeSession(bundle).encode")
    return _Model(path, **kwargs)
