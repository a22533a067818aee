"""Sentence vectors for ``EdgeSession``: the pooled batches behind ``embed``, and sentence-transformers'
own API (``encode``, ``similarity``, ``get_sentence_embedding_dimension``) so that replacing
``SentenceTransformer(path)`` by ``EdgeSession(bundle)`` is a one-line change.

``encode`` keeps sentence-transformers' names, defaults and shapes: a str gives a 1-D vector, a list a
2-D array (``convert_to_numpy=False``: a list of 1-D arrays; there is no torch here, so no tensors);
the bundle's pooling and ``Normalize`` apply as sentence-transformers reads them from the bundle's files
(``bundle.bundle_pooling``; ``normalize_embeddings`` adds a normalization, never removes the model's);
texts are cut at the model's ``max_seq_length`` (``sentence_bert_config.json``) when it states one, and
``prompt`` is put before every text (left out of the pooling when the model's pooling says
``include_prompt: false``). ``similarity`` is the cosine matrix, as ``model.similarity`` with
sentence-transformers' default cosine.

The rest of ``encode``'s arguments work as there: ``prompt_name`` (the model's ``prompts``, its
``default_prompt_name``, sentence-transformers' empty ``query`` / ``document`` ones; ``encode_query`` /
``encode_document`` pick them as sentence-transformers does),
``output_value`` (``token_embeddings``: one (tokens, hidden) array per text; None: a dict per text),
``precision`` (``embedding_quantization``: int8 / uint8 calibrated on the encoded batch itself, as
sentence-transformers does; binary / ubinary packed bits), ``truncate_dim`` (default: the model's, where its
config_sentence_transformers.json states one); ``max_seq_length`` and
``similarity_fn_name`` are settable attributes, ``tokenizer`` the bundle's. ``convert_to_tensor`` and
``device`` need torch: refused in one line naming what to use instead.

A text with no tokens (``""``, only spaces or characters the tokenizer drops) has no meaning to pool:
``embed`` and ``encode`` give it the zero vector (norm 0; its cosine with anything is 0), where
sentence-transformers would pool the [CLS] [SEP] frame. Torch-free.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from edgebert.bundle.bundle_pooling import bundle_pooling
from edgebert.bundle.pooling import SentencePooling
from edgebert.bundle.st_settings import DEFAULT_PROMPTS, SIMILARITY_FUNCTIONS, manifest_settings
from edgebert.bundle.task_registry import task_serving
from edgebert.errors import ConfigError, DataError
from edgebert.runtime.embedding_quantization import check_precision, quantize_embeddings
from edgebert.runtime.text import TextEncoder, check_texts, length_sorted_batches, pad_batch
from edgebert.runtime.vector_pooling import choose_pooling, cosine_matrix, pool, unit_rows


class SentenceMethods:
    """Mixed into ``EdgeSession`` (which provides ``encoder``, ``manifest``, ``hidden_size``, ``run``,
    ``pad_id``, ``max_length``, ``_require`` and ``_batch_size``)."""

    encoder: TextEncoder
    hidden_size: int
    pad_id: int
    max_length: int

    @property
    def pooling(self) -> SentencePooling:
        """How this bundle pools: as its files tell sentence-transformers (``bundle.bundle_pooling``: the
        manifest's ``pooling``, else the bundle's ``modules.json``), else edgebert's default (mean)."""
        return choose_pooling(None, self._stated_pooling())

    def _stated_pooling(self) -> SentencePooling | None:
        """``bundle_pooling`` of this bundle, read (and hash-checked when the session verifies) once."""
        if "_stated" not in self.__dict__:
            self.__dict__["_stated"] = bundle_pooling(self.bundle_dir, self.manifest, self.verify)
        return self.__dict__["_stated"]

    def get_sentence_embedding_dimension(self) -> int:
        """The size of ``encode``'s vectors: the hidden size, or the model's ``truncate_dim`` when smaller."""
        return int(min(self.hidden_size, self.truncate_dim or self.hidden_size))

    get_embedding_dimension = get_sentence_embedding_dimension        # sentence-transformers 5's name for it

    @property
    def truncate_dim(self) -> int | None:
        """The dimensions ``encode`` keeps by default (the model's config_sentence_transformers.json; None: all)."""
        return self._st_settings().get("truncate_dim")

    def _vectors(self, items: list[str], pooling: SentencePooling, normalize: bool, batch_size: int | None,
                 truncate: bool, encoder: TextEncoder | None = None, prompt: str | None = None,
                 progress: bool = False, tokens: list | None = None) -> np.ndarray:
        """(N, hidden) float32 sentence vectors of ``items`` in input order (see the module docstring);
        ``tokens`` (a list of N): filled with each text's unpadded ``token_embeddings``, ``input_ids``,
        ``attention_mask``."""
        encoder = encoder or self.encoder
        texts = [prompt + t for t in items] if prompt else items
        rows = encoder.encode(texts, False, truncate)
        skip = encoder.prefix_length + len(encoder.pieces([prompt])[0]) if prompt and not pooling.include_prompt else 0
        framed = len(encoder.frame(np.zeros(0, np.int64)))
        blank = np.asarray([len(r) <= framed for r in (encoder.encode(items, False, True) if prompt else rows)], bool)
        result = np.zeros((len(rows), self.hidden_size), dtype=np.float32)
        size = self._batch_size(batch_size)
        batches = list(length_sorted_batches(rows, size, self.batch_tokens))
        for idx in _with_progress(batches, progress):
            feeds = pad_batch([rows[i] for i in idx], self.pad_id)
            hidden = self.run(feeds, ["last_hidden_state"])["last_hidden_state"]          # (B, T, H)
            result[idx] = pool(hidden, feeds["attention_mask"], pooling.mode, skip)
            if tokens is not None:
                for j, i in enumerate(idx):
                    n = len(rows[i])
                    tokens[i] = {"token_embeddings": hidden[j, :n].copy(), "input_ids": feeds["input_ids"][j, :n],
                                 "attention_mask": feeds["attention_mask"][j, :n]}
        if normalize and len(result):
            result = unit_rows(result)
        result[blank] = 0.0
        return result

    # ------------------------------------------------------------------ sentence-transformers' attributes
    @property
    def prompts(self) -> dict[str, str]:
        """The model's prompts by name (its config_sentence_transformers.json) after sentence-transformers'
        empty ``query`` and ``document`` ones (``DEFAULT_PROMPTS``), as ``model.prompts``."""
        return {**DEFAULT_PROMPTS, **self._st_settings()["prompts"]}

    @property
    def default_prompt_name(self) -> str | None:
        return self._st_settings()["default_prompt_name"]

    @property
    def similarity_fn_name(self) -> str:
        """``cosine`` (sentence-transformers' default), or what the model states or the caller sets:
        ``dot``, ``euclidean`` (negative distance), ``manhattan`` (negative L1 distance)."""
        return self.__dict__.get("_similarity_fn_name") or self._st_settings()["similarity_fn_name"] or "cosine"

    @similarity_fn_name.setter
    def similarity_fn_name(self, name: str) -> None:
        if name not in SIMILARITY_FUNCTIONS:
            raise ConfigError(f"similarity_fn_name={name!r} is not supported", f"use one of {', '.join(SIMILARITY_FUNCTIONS)}")
        self.__dict__["_similarity_fn_name"] = name

    @property
    def max_seq_length(self) -> int:
        """Tokens a text keeps (specials included): the model's ``max_seq_length``, else the bundle's; settable
        up to the bundle's length, as ``model.max_seq_length``."""
        limit = self.__dict__.get("_max_seq_length") or self.pooling.max_seq_length
        return int(min(limit, self.max_length)) if limit else int(self.max_length)

    @max_seq_length.setter
    def max_seq_length(self, value: int) -> None:
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or not 2 < value <= self.max_length:
            raise ConfigError(f"max_seq_length={value!r} must be an integer in 3..{self.max_length}",
                              f"{self.bundle_dir} was exported for at most {self.max_length} tokens")
        self.__dict__["_max_seq_length"] = int(value)

    @property
    def tokenizer(self):
        """The bundle's ``tokenizers.Tokenizer`` (a copy: the session's own is shared by its threads)."""
        from tokenizers import Tokenizer

        return Tokenizer.from_str(self.encoder.tokenizer.to_str())

    def _st_settings(self) -> dict[str, Any]:
        if "_st" not in self.__dict__:
            self.__dict__["_st"] = manifest_settings(self.manifest)
        return self.__dict__["_st"]

    def _resolve_prompt(self, prompt: str | None, prompt_name: str | None) -> str | None:
        """sentence-transformers' rule: ``prompt`` wins, else the named prompt, else the model's default."""
        if prompt is not None:
            if not isinstance(prompt, str):
                raise DataError(f"prompt is a {type(prompt).__name__}, expected a str")
            return prompt
        prompts = self.prompts
        if prompt_name is not None:
            if prompt_name not in prompts:
                raise ConfigError(f"prompt_name={prompt_name!r} is not one of the model's prompts "
                                  f"({', '.join(prompts) or 'it has none'})", "pass prompt='...' instead")
            return prompts[prompt_name]
        default = self.default_prompt_name
        return prompts.get(default) if default else None

    # ------------------------------------------------------------------ encode
    def encode(self, sentences: str | Sequence[str], prompt_name: str | None = None, prompt: str | None = None,
               batch_size: int = 32, show_progress_bar: bool | None = None,
               output_value: str | None = "sentence_embedding", precision: str = "float32",
               convert_to_numpy: bool = True, convert_to_tensor: bool = False, device: str | None = None,
               normalize_embeddings: bool = False, truncate_dim: int | None = None, **kwargs: Any) -> Any:
        """Sentence embeddings as ``SentenceTransformer.encode`` gives them (see the module docstring)."""
        embedding = task_serving("embed").name
        if self.task != embedding:
            raise ConfigError(f"encode() needs an '{embedding}' bundle; {self.bundle_dir} is a '{self.task}' bundle",
                              f"export the model with task '{embedding}'")
        _refuse_torch_options(convert_to_tensor, device, kwargs)
        check_precision(precision)
        if output_value not in OUTPUT_VALUES:
            raise ConfigError(f"output_value={output_value!r} is not supported",
                              "use 'sentence_embedding', 'token_embeddings' or None")
        if precision != "float32" and output_value != "sentence_embedding":
            raise ConfigError(f"precision={precision!r} quantizes sentence embeddings only",
                              "use output_value='sentence_embedding'")
        if truncate_dim is not None and (not isinstance(truncate_dim, (int, np.integer)) or truncate_dim < 1):
            raise ConfigError(f"truncate_dim={truncate_dim!r} must be a positive integer")
        items, _ = check_texts(sentences, what="sentences")
        truncate_dim = self.truncate_dim if truncate_dim is None else truncate_dim     # as sentence-transformers
        prompt = self._resolve_prompt(prompt, prompt_name)
        pooling = self.pooling
        encoder = self.encoder.with_max_length(self.max_seq_length)
        tokens = None if output_value == "sentence_embedding" else [None] * len(items)
        vectors = self._vectors(items, pooling, pooling.normalize, batch_size, True, encoder, prompt,
                                bool(show_progress_bar), tokens)
        if truncate_dim is not None:
            vectors = vectors[:, :int(truncate_dim)]
        if normalize_embeddings and len(vectors):
            vectors = unit_rows(vectors)
        if output_value == "token_embeddings":
            result: Any = [t["token_embeddings"] for t in tokens]
        elif output_value is None:
            result = [{"sentence_embedding": v, **t} for v, t in zip(vectors, tokens)]
        else:
            result = quantize_embeddings(vectors, precision) if precision != "float32" and len(vectors) else vectors
            if not convert_to_numpy:
                result = list(result)
        return result[0] if isinstance(sentences, str) else result

    def encode_query(self, sentences: str | Sequence[str], prompt_name: str | None = None, prompt: str | None = None,
                     **options: Any) -> Any:
        """``encode`` with the model's ``query`` prompt unless one is given (``SentenceTransformer.encode_query``)."""
        if prompt_name is None and prompt is None and "query" in self.prompts:
            prompt_name = "query"
        return self.encode(sentences, prompt_name, prompt, **options)

    def encode_document(self, sentences: str | Sequence[str], prompt_name: str | None = None,
                        prompt: str | None = None, **options: Any) -> Any:
        """``encode`` with the first of the prompts ``document``, ``passage``, ``corpus`` unless one is given, as
        ``SentenceTransformer.encode_document``: ``document`` is always one (empty unless the model states it)."""
        if prompt_name is None and prompt is None:
            prompt_name = next((n for n in ("document", "passage", "corpus") if n in self.prompts), None)
        return self.encode(sentences, prompt_name, prompt, **options)

    def similarity(self, a: Any, b: Any) -> np.ndarray:
        """(N, M) float32 similarities of the vectors in ``a`` and ``b`` (each one vector or a list / 2-D array
        of them) by ``similarity_fn_name``, as sentence-transformers' ``model.similarity``; a zero vector's
        cosine is 0."""
        left, right = _matrix(a, "a"), _matrix(b, "b")
        if left.shape[1] != right.shape[1]:
            raise DataError(f"similarity(): a has vectors of {left.shape[1]}, b of {right.shape[1]}",
                            "compare embeddings of the same model")
        name = self.similarity_fn_name
        if name == "dot":
            return (left @ right.T).astype(np.float32)
        if name == "euclidean":
            return (-np.sqrt(np.maximum(((left[:, None, :] - right[None, :, :]) ** 2).sum(-1), 0))).astype(np.float32)
        if name == "manhattan":
            return (-np.abs(left[:, None, :] - right[None, :, :]).sum(-1)).astype(np.float32)
        return cosine_matrix(left, right)


OUTPUT_VALUES = ("sentence_embedding", "token_embeddings", None)
# sentence-transformers' arguments that need torch or its process pool, and what to do instead
_TORCH_OPTIONS = {"convert_to_tensor": "the numpy array encode returns (torch.from_numpy(x) where a tensor is needed)",
                  "device": "EdgeSession(bundle, provider='cuda' | 'cpu') when opening the session",
                  "pool": "one EdgeSession per process, or batch_size", "chunk_size": "batch_size"}


def _refuse_torch_options(convert_to_tensor: bool, device: Any, kwargs: dict[str, Any]) -> None:
    """One ``ConfigError`` line naming the alternative for an argument that needs torch; unknown ones refused."""
    given = {"convert_to_tensor": convert_to_tensor, "device": device, **kwargs}
    for name, value in given.items():
        if name in _TORCH_OPTIONS and value not in (None, False):
            raise ConfigError(f"encode({name}={value!r}): edgebert's runtime has no torch", f"use {_TORCH_OPTIONS[name]}")
    unknown = [n for n in kwargs if n not in _TORCH_OPTIONS]
    if unknown:
        raise ConfigError(f"encode() got an unknown argument {unknown[0]!r}",
                          "see SentenceTransformer.encode's arguments; edgebert takes the torch-free ones")


def _matrix(value: Any, name: str) -> np.ndarray:
    try:       # float64: a float64 vector past float32's range keeps its direction
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise DataError(f"similarity(): {name} is not a vector or a list of vectors ({exc})") from None
    if array.ndim == 1:
        array = array[None, :]
    if array.ndim != 2 or not array.shape[1]:
        raise DataError(f"similarity(): {name} has shape {array.shape}; expected (hidden,) or (N, hidden)")
    if not np.isfinite(array).all():
        raise DataError(f"similarity(): {name} holds NaN or infinite values", "compare finite embeddings")
    return array


def _with_progress(batches: list, show: bool):
    """The batches, under a rich progress bar on stderr when ``show``."""
    if not show:
        return batches
    from rich.progress import track

    return track(batches, description="encode", console=_stderr(), transient=True)


def _stderr():
    from rich.console import Console

    return Console(stderr=True)

