"""sentence-transformers' ``CrossEncoder`` API on ``EdgeSession``: ``predict(pairs)`` and ``rank(query, documents)``,
so that replacing ``CrossEncoder(path)`` by ``EdgeSession(bundle)`` is a one-line change. Torch-free.

Names, defaults and shapes are the pinned sentence-transformers' (``CrossEncoder.predict`` / ``rank``):

* ``predict`` scores (text, text) pairs: the logits through the model's activation (``activation_fn``: the
  bundle's, ``bundle.cross_encoder``: Sigmoid for one label unless the model states another; Identity for several),
  one label squeezed to shape (N,), several kept (N, C); ``apply_softmax`` then softmaxes rows of several labels.
  One pair gives one score (a 0-d float32, or a (C,) row); an empty list ``np.array([])``; ``convert_to_numpy=False``
  a list of rows. ``activation_fn`` may be a name (``sigmoid``, ``identity``, ``tanh``), torch's module of one of
  them (``torch.nn.Sigmoid()``: read by its name, torch itself is never needed), or any callable on a float32
  numpy array.
* ``rank`` needs one label: ``[{"corpus_id": i, "score": s, ("text": document)}]``, best first, equal scores in
  document order (Python's stable sort, as sentence-transformers sorts), ``top_k`` of them.

Pairs are cut at ``max_length`` tokens as sentence-transformers' tokenizer cuts them (``longest_first``: tokens
come off the longer text first). ``show_progress_bar`` is taken and ignored; ``prompt``, ``device`` and ``pool``
are refused: a prompt changes the model's input, and this session runs on its own provider.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from edgebert.bundle.cross_encoder import MANIFEST_KEY, activation_name, default_activation
from edgebert.bundle.task_registry import bundle_task
from edgebert.errors import ConfigError, DataError
from edgebert.runtime.numeric import softmax

_FUNCTIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "identity": lambda x: x,
    "tanh": np.tanh,
}


class CrossEncoderMethods:
    """Mixed into ``EdgeSession`` (which provides ``task``, ``manifest``, ``logits`` and ``bundle_dir``)."""

    @property
    def activation(self) -> str:
        """The activation ``predict`` applies by default (sentence-transformers' ``model.activation_fn``)."""
        stated = self.manifest.get(MANIFEST_KEY) if hasattr(self.manifest, "get") else None
        if isinstance(stated, dict) and stated.get("activation"):
            return activation_name(stated["activation"], f"{self.bundle_dir} manifest {MANIFEST_KEY}")
        return default_activation(self.num_labels)

    @property
    def num_labels(self) -> int:
        return int(self.manifest.outputs[0].shape[-1]) if str(self.manifest.outputs[0].shape[-1]).isdigit() \
            else len(self.label_names) or 1

    @property
    def cross_encoder_max_length(self) -> int:
        """Where pairs are cut: the model's ``CrossEncoder.max_length`` (its tokenizer's ``model_max_length``, in the
        manifest) when it is below the session's ``max_length``."""
        stated = self.manifest.get(MANIFEST_KEY) if hasattr(self.manifest, "get") else None
        limit = stated.get("max_length") if isinstance(stated, dict) else None
        return min(int(limit), self.max_length) if isinstance(limit, int) and limit > 0 else self.max_length

    def _pair_logits(self, pairs: list, batch_size: int | None, truncate: bool | None) -> np.ndarray:
        """(N, C) float32 logits of (text, text) pairs, cut at ``cross_encoder_max_length``."""
        limit = self.cross_encoder_max_length
        encoder = self.encoder if limit == self.max_length else self.encoder.with_max_length(limit)
        rows = encoder.encode(pairs, True, self._truncate(truncate))
        result = np.zeros((len(rows), self.num_labels), dtype=np.float32)
        for idx, _, out in self._batches(rows, ["logits"], batch_size):
            result[idx] = out["logits"]
        return result

    def _activation_fn(self, activation_fn: Any) -> Callable[[np.ndarray], np.ndarray]:
        if activation_fn is None:
            return _FUNCTIONS[self.activation]
        if isinstance(activation_fn, str) or type(activation_fn).__module__.startswith("torch"):
            return _FUNCTIONS[activation_name(activation_fn, "activation_fn")]
        if callable(activation_fn):
            return lambda x: np.asarray(activation_fn(x), dtype=np.float32)
        raise ConfigError(f"activation_fn={activation_fn!r} is not callable",
                          "pass 'sigmoid', 'identity', 'tanh', a torch.nn module of one of them, or a function")

    def predict(self, inputs: Any, batch_size: int = 32, show_progress_bar: bool | None = None,
                activation_fn: Any = None, apply_softmax: bool = False, convert_to_numpy: bool = True,
                truncate: bool | None = None, **unsupported: Any) -> Any:
        """Scores of (text, text) pairs, as ``CrossEncoder.predict`` gives them (module docstring)."""
        if not bundle_task(self.task).cross_encoder:          # a reranker, or a pair classifier
            raise ConfigError(f"predict() needs a 'rerank' or pair-classifier ('cls') bundle; {self.bundle_dir} is "
                              f"a '{self.task}' bundle", "export a cross-encoder (its folder's CrossEncoder settings)")
        _refuse(unsupported, "predict")
        single = _is_single_pair(inputs)
        pairs = [inputs] if single else list(inputs)
        for i, pair in enumerate(pairs):
            if not (isinstance(pair, (list, tuple)) and len(pair) == 2):
                raise DataError(f"input {i} is {type(pair).__name__} {pair!r:.60}, not a (text, text) pair",
                                "pass pairs such as [(query, passage), ...]")
            pairs[i] = tuple(pair)
        if not pairs:
            return np.array([])
        logits = self._pair_logits(pairs, batch_size, truncate)                              # (N, C)
        scores = np.asarray(self._activation_fn(activation_fn)(logits), dtype=np.float32)
        if scores.shape[-1] == 1:
            scores = scores[:, 0]
        elif apply_softmax:
            scores = softmax(scores).astype(np.float32)
        if not convert_to_numpy:
            scores = list(scores)
        return scores[0] if single else scores

    def rank(self, query: str, documents: Sequence[str], top_k: int | None = None, return_documents: bool = False,
             batch_size: int = 32, show_progress_bar: bool | None = None, activation_fn: Any = None,
             truncate: bool | None = None,
             **unsupported: Any) -> list[dict[str, Any]]:
        """``documents`` ordered by their score for ``query``, as ``CrossEncoder.rank`` (module docstring)."""
        if self.num_labels != 1:
            raise ConfigError(f"rank() needs a model of one label; {self.bundle_dir} has {self.num_labels}",
                              "use predict() with (text, text) pairs")
        _refuse(unsupported, "rank")
        if not isinstance(query, str):
            raise DataError(f"query is a {type(query).__name__}, not a str")
        if isinstance(documents, str) or not isinstance(documents, Sequence):
            raise DataError("documents must be a list of texts", "pass rank(query, [passage, ...])")
        if top_k is not None and (not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 0):
            raise ConfigError(f"top_k={top_k!r} must be a whole number >= 0, or None for every document")
        scores = self.predict([(query, d) for d in documents], batch_size=batch_size, activation_fn=activation_fn,
                              truncate=truncate) if len(documents) else np.array([])
        results = [{"corpus_id": i, "score": float(s), **({"text": documents[i]} if return_documents else {})}
                   for i, s in enumerate(scores)]
        return sorted(results, key=lambda r: r["score"], reverse=True)[:top_k]


def _is_single_pair(inputs: Any) -> bool:
    """One pair (``("q", "p")``) rather than a batch of them, as sentence-transformers decides."""
    if isinstance(inputs, (list, tuple)):
        return len(inputs) > 0 and not isinstance(inputs[0], (list, tuple))
    raise DataError(f"inputs is a {type(inputs).__name__}, not a pair or a list of pairs",
                    "pass [(query, passage), ...]")


def _refuse(unsupported: dict, method: str) -> None:
    if unsupported:
        names = ", ".join(sorted(unsupported))
        raise ConfigError(f"{method}() does not take {names} here",
                          "prompts change the model's input; device, pool and progress bars belong to PyTorch's "
                          "CrossEncoder: this session runs on its own provider")
