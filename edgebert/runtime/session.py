"""``EdgeSession``: an exported bundle behind ``embed`` / ``classify`` / ``tag`` / ``fill_mask``.

Imports only onnxruntime, tokenizers and numpy (plus torch-free edgebert modules), so an app that
ships a bundle does not need torch. One session is safe to share between threads: onnxruntime's
``run`` is thread-safe and nothing here mutates shared state per call.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from ..bundle import PRECISIONS, model_path, open_bundle, tokenizer_path
from ..errors import BundleError, ConfigError, DataError, ProviderUnavailable
from .hostcpu import detect_host
from .int8_choice import choose_int8
from .providers import ORT_NAMES, plan_providers, provider_options, short_name
from .results import ClassificationResult, MaskPrediction
from .tagging import Entity, Tagger, tag_texts
from .text import Encoded, TextEncoder, check_texts, length_sorted_batches, pad_batch

POOLINGS = ("mean", "cls")


class EdgeSession:
    """Load a bundle (hash-checked) and run it on the best provider that really works here.

    provider: ``auto`` (TensorRT -> CUDA -> CPU, whatever this machine can really run), or
    ``cpu`` / ``cuda`` / ``tensorrt`` (``ProviderUnavailable`` with the reason if it cannot be had).
    precision: which of the bundle's models to load (``int8`` / ``fp32`` / ``fp16``).
    threads: onnxruntime intra-op threads (None: onnxruntime's default, one per physical core).
    max_length: token limit per input (default and ceiling: the bundle's ``max_sequence_length``).
    truncate: cut over-long inputs to ``max_length`` (default) or raise ``DataError``.
    batch_size: inputs per onnxruntime call; inputs are length-sorted into batches, padded to each
    batch's longest row, and results come back in input order.
    int8_target: with ``precision="int8"``, load the graph made for this target (``portable``,
    ``x86-vnni`` ...) instead of the one chosen for this host (``int8_choice``). Either way a graph whose
    8-bit weights would saturate this CPU's kernel is loaded with exact products or refused.
    allow_spinning: False stops idle onnxruntime threads from spinning (set it when timing several
    sessions in one process: an idle session's spinning threads steal the running one's cores).
    """

    def __init__(self, bundle_dir: str | os.PathLike, provider: str = "auto", precision: str = "int8",
                 threads: int | None = None, *, max_length: int | None = None, truncate: bool = True,
                 batch_size: int = 32, verify: bool = True, trt_cache_dir: str | os.PathLike | None = None,
                 int8_target: str | None = None, allow_spinning: bool = True):
        if precision not in PRECISIONS:
            raise ConfigError(f"unknown precision {precision!r}", f"use one of {', '.join(PRECISIONS)}")
        if threads is not None and (not isinstance(threads, int) or isinstance(threads, bool) or threads < 1):
            raise ConfigError(f"threads={threads!r} must be a positive integer or None")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"batch_size={batch_size!r} must be a positive integer")
        self.bundle_dir = Path(bundle_dir)
        self.manifest = open_bundle(self.bundle_dir, verify=verify)
        self.task: str = self.manifest["task"]
        self.precision = precision
        self.threads = threads
        self.allow_spinning = bool(allow_spinning)
        self.truncate = bool(truncate)
        self.batch_size = batch_size
        self.host = detect_host()
        self.int8_choice = choose_int8(self.manifest, self.host, int8_target) if precision == "int8" else None
        self.model_file = model_path(self.bundle_dir, precision, self.manifest,
                                     key=self.int8_choice.key if self.int8_choice else None)
        cfg = self.manifest["config"]
        self.hidden_size = int(cfg["hidden_size"])
        limit = int(min(self.manifest.get("max_sequence_length") or cfg["max_position_embeddings"],
                        cfg["max_position_embeddings"]))
        if max_length is not None and not 3 <= int(max_length) <= limit:
            raise ConfigError(f"max_length={max_length} is outside 3..{limit}",
                              f"this bundle takes at most {limit} tokens per input")
        self.max_length = int(max_length or limit)
        tok = self.manifest["tokenizer"]
        self.pad_id = int(tok.get("pad_id", 0))
        self.mask_id = tok.get("mask_id")
        self.encoder = TextEncoder(tokenizer_path(self.bundle_dir, self.manifest), self.max_length, self.pad_id)
        labels = self.manifest.get("labels") or {}
        self.label_names = [labels[k] for k in sorted(labels, key=int)] if labels else []
        self._session, self.providers, self.provider_notes = self._create(provider, trt_cache_dir)
        self.provider = short_name(self.providers[0])
        self.input_names = [i.name for i in self._session.get_inputs()]
        self.output_names = [o.name for o in self._session.get_outputs()]
        self._bind_io = self.provider == "cuda"  # see _run_bound

    # ------------------------------------------------------------------ session creation
    def _create(self, requested: str, trt_cache_dir) -> tuple[Any, list[str], list[str]]:
        import onnxruntime as ort

        plan = plan_providers(requested)
        opts = ort.SessionOptions()
        opts.log_severity_level = 3  # our notes say what happened; keep onnxruntime's warnings out
        if self.threads:
            opts.intra_op_num_threads = self.threads
            opts.inter_op_num_threads = 1
        if not self.allow_spinning:
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
            opts.add_session_config_entry("session.inter_op.allow_spinning", "0")
        for key, value in (self.int8_choice.session_config if self.int8_choice else {}).items():
            opts.add_session_config_entry(key, value)
        input_names = [i["name"] for i in self.manifest["inputs"]]
        cache = None
        if "tensorrt" in plan.wanted:
            from .providers import default_trt_cache_dir

            cache = Path(trt_cache_dir) if trt_cache_dir else default_trt_cache_dir(self.model_file)
            cache.mkdir(parents=True, exist_ok=True)
        chain = [(ORT_NAMES[p], provider_options(p, self.manifest, input_names, precision=self.precision,
                                                 trt_cache_dir=cache)) for p in plan.wanted]
        notes = list(plan.notes)
        if self.int8_choice is not None:
            notes.append(f"int8: {self.int8_choice.reason}")
        try:
            session = ort.InferenceSession(str(self.model_file), sess_options=opts, providers=chain)
        except Exception as exc:  # onnxruntime raises its own Fail/InvalidGraph/NotImplemented types
            text = " ".join(str(exc).split())
            if "NOT_IMPLEMENTED" in text or "Could not find an implementation" in text:
                raise ConfigError(f"{self.model_file.name} ({self.precision}) cannot run on "
                                  f"{plan.wanted[0]}: {text[:300]}",
                                  "fp16 models need cuda/tensorrt; on a CPU use int8 or fp32") from exc
            raise BundleError(f"onnxruntime cannot load {self.model_file}: {text[:300]}",
                              "re-export the bundle") from exc
        got = list(session.get_providers())
        primary = short_name(got[0])
        if primary != plan.wanted[0]:
            why = (f"{plan.wanted[0]}: onnxruntime could not create it at session creation and fell "
                   f"back to {primary} (its dependencies or the GPU are missing)")
            if requested != "auto":
                raise ProviderUnavailable(f"provider {requested!r} is unavailable: {why}",
                                          "use provider='cpu' or 'auto'")
            notes.append(why)
        if primary in ("tensorrt", "cuda") and self.precision == "int8":
            mode = (self.int8_choice.entry.get("quantization") or {}).get("format", "QOperator")
            if mode != "QDQ":
                notes.append(f"{primary} + int8: the {self.int8_choice.target} INT8 graph uses integer CPU "
                             "ops (QAttention / MatMulInteger), a CPU-oriented format; onnxruntime runs the "
                             "nodes the GPU provider lacks on the CPU")
        if primary == "tensorrt":
            notes.append(f"tensorrt engine cache: {cache}")
        notes.append(f"running on {primary} ({', '.join(got)})")
        return session, got, notes

    def __repr__(self) -> str:
        return (f"EdgeSession({str(self.bundle_dir)!r}, task={self.task!r}, precision={self.precision!r}, "
                f"provider={self.provider!r}, max_length={self.max_length})")

    def describe(self) -> dict[str, Any]:
        """What runs: for logs and reports."""
        return {"bundle": str(self.bundle_dir), "task": self.task, "precision": self.precision,
                "model_file": self.model_file.name, "model_bytes": self.model_file.stat().st_size,
                "provider": self.provider, "providers": list(self.providers),
                "provider_notes": list(self.provider_notes), "threads": self.threads,
                "max_length": self.max_length, "host": self.host.summary(), "host_cpu": self.host.as_dict(),
                "int8": self.int8_choice.as_dict() if self.int8_choice else None}

    # ------------------------------------------------------------------ low level
    def tokenize(self, texts: Any, truncate: bool | None = None) -> list[Encoded]:
        """Token ids (with special tokens, unpadded) for texts or (text, text) pairs."""
        items, pairs = check_texts(texts, allow_pairs=True)
        return self.encoder.encode(items, pairs, self._truncate(truncate))

    def run(self, feeds: dict[str, np.ndarray], outputs: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """One onnxruntime call on padded int64 arrays (see ``text.pad_batch``); float32 outputs."""
        names = list(outputs or self.output_names)
        missing = [n for n in self.input_names if n not in feeds]
        if missing:
            raise DataError(f"run() needs inputs {', '.join(missing)}")
        feeds = {n: np.ascontiguousarray(feeds[n], dtype=np.int64) for n in self.input_names}
        arrays = self._run_bound(feeds, names) if self._bind_io else self._session.run(names, feeds)
        return {n: np.asarray(a, dtype=np.float32) for n, a in zip(names, arrays)}

    def _run_bound(self, feeds: dict[str, np.ndarray], names: list[str]) -> list[np.ndarray]:
        """CUDA: copy inputs to the GPU once, let outputs be allocated on the GPU and copy only the
        requested ones back (skips onnxruntime's per-call host staging buffers)."""
        import onnxruntime as ort

        binding = self._session.io_binding()
        for name, array in feeds.items():
            binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(array, "cuda", 0))
        for name in names:
            binding.bind_output(name, "cuda", 0)
        self._session.run_with_iobinding(binding)
        return binding.copy_outputs_to_cpu()

    def _truncate(self, truncate: bool | None) -> bool:
        return self.truncate if truncate is None else bool(truncate)

    def _batches(self, rows: list[Encoded], outputs: list[str], batch_size: int | None
                 ) -> Iterator[tuple[np.ndarray, dict[str, np.ndarray], dict[str, np.ndarray]]]:
        """(indices into rows, padded feeds, outputs) per length-sorted batch."""
        size = batch_size or self.batch_size
        if not isinstance(size, int) or size < 1:
            raise ConfigError(f"batch_size={size!r} must be a positive integer")
        for idx in length_sorted_batches(rows, size):
            feeds = pad_batch([rows[i] for i in idx], self.pad_id)
            yield idx, feeds, self.run(feeds, outputs)

    def _require(self, task: str, method: str) -> None:
        if self.task != task:
            raise ConfigError(f"{method}() needs a '{task}' bundle; {self.bundle_dir} is a "
                              f"'{self.task}' bundle", f"export the model with task '{task}'")

    # ------------------------------------------------------------------ tasks
    def embed(self, texts: str | Sequence[str], pooling: str = "mean", normalize: bool = True,
              batch_size: int | None = None, truncate: bool | None = None) -> np.ndarray:
        """(N, hidden) float32 sentence embeddings, in input order.

        pooling ``mean`` averages the token vectors under the attention mask ([CLS]/[SEP] included,
        as sentence-transformers does); ``cls`` takes the [CLS] vector. ``normalize`` scales each row
        to unit L2 norm (so a dot product is the cosine). An empty list gives shape (0, hidden).
        """
        self._require("embed", "embed")
        if pooling not in POOLINGS:
            raise ConfigError(f"unknown pooling {pooling!r}", f"use one of {', '.join(POOLINGS)}")
        items, _ = check_texts(texts)
        rows = self.encoder.encode(items, False, self._truncate(truncate))
        result = np.zeros((len(rows), self.hidden_size), dtype=np.float32)
        for idx, feeds, out in self._batches(rows, ["last_hidden_state"], batch_size):
            hidden = out["last_hidden_state"]                                   # (B, T, H)
            if pooling == "mean":
                mask = feeds["attention_mask"][:, :, None].astype(np.float32)   # (B, T, 1)
                result[idx] = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1.0)
            else:
                result[idx] = hidden[:, 0]
        if normalize and len(result):
            result /= np.maximum(np.linalg.norm(result, axis=1, keepdims=True), 1e-12)
        return result

    def logits(self, texts: Any, batch_size: int | None = None, truncate: bool | None = None) -> np.ndarray:
        """Raw ``logits`` of a ``cls`` bundle, (N, C) float32 in input order (texts or pairs)."""
        self._require("cls", "classify")
        rows = self.tokenize(texts, truncate)
        result = np.zeros((len(rows), len(self.label_names) or 2), dtype=np.float32)
        for idx, _, out in self._batches(rows, ["logits"], batch_size):
            if out["logits"].shape[-1] != result.shape[1]:  # labels missing from the manifest
                result = np.zeros((len(rows), out["logits"].shape[-1]), dtype=np.float32)
            result[idx] = out["logits"]
        return result

    def classify(self, texts: Any, batch_size: int | None = None,
                 truncate: bool | None = None) -> ClassificationResult:
        """Labels and softmax probabilities for texts, or for (text, text) pairs (e.g. MRPC)."""
        logits = self.logits(texts, batch_size, truncate)
        names = self.label_names or [f"LABEL_{i}" for i in range(logits.shape[1])]
        probs = softmax(logits)
        ids = probs.argmax(axis=1).astype(np.int64) if len(probs) else np.zeros(0, np.int64)
        return ClassificationResult([names[i] for i in ids], ids, probs, names)

    def tag(self, texts: str | Sequence[str], aggregation: str = "simple", *, stride: int | None = None,
            ignore_labels: Sequence[str] = ("O",), batch_size: int | None = None
            ) -> list[Entity] | list[list[Entity]]:
        """Named entities of a ``token-cls`` bundle, grouped as Hugging Face's token-classification
        pipeline groups them (``edgebert.runtime.tagging``): for one str its list of entities, for a
        list of texts one list per text. Each entity: ``entity_group`` (``entity`` with
        ``aggregation="none"``), ``score``, ``word``, ``start``, ``end`` (character offsets into the
        text). ``aggregation``: ``simple`` | ``first`` | ``none``. A text longer than ``max_length`` is
        tagged in windows overlapping by ``stride`` sub-tokens (default: a quarter of a window), never
        truncated."""
        self._require("token-cls", "tag")
        items, _ = check_texts(texts)
        width = int(self.manifest["outputs"][0]["shape"][-1])     # labels of a manifest that names none
        labels = tuple(self.label_names) or tuple(f"LABEL_{i}" for i in range(width))

        def run(rows: list[Encoded]) -> list[np.ndarray]:
            out: list[np.ndarray] = [np.zeros(0)] * len(rows)
            for idx, _, result in self._batches(rows, ["logits"], batch_size):
                for r, i in enumerate(idx):
                    out[i] = result["logits"][r, :len(rows[i])]
            return out

        results = tag_texts(Tagger(self.encoder, labels), items, run, aggregation, stride, ignore_labels)
        return results[0] if isinstance(texts, str) else results

    def fill_mask(self, text: str, top_k: int = 5, truncate: bool | None = None) -> list[MaskPrediction]:
        """Top-k tokens for every mask token in ``text`` (one ``MaskPrediction`` per mask, in order)."""
        self._require("mlm", "fill_mask")
        if not isinstance(text, str):
            raise DataError(f"fill_mask() takes one str, not {type(text).__name__}")
        if not isinstance(top_k, int) or top_k < 1:
            raise ConfigError(f"top_k={top_k!r} must be a positive integer")
        if self.mask_id is None:
            raise BundleError(f"{self.bundle_dir} manifest names no mask_id", "re-export the bundle")
        rows = self.encoder.encode([text], False, self._truncate(truncate))
        positions = np.flatnonzero(rows[0].ids == int(self.mask_id))
        if not len(positions):
            raise DataError(f"no {self.encoder.token(self.mask_id)} token in the text",
                            f"write {self.encoder.token(self.mask_id)} where a word should be predicted")
        logits = self.run(pad_batch(rows, self.pad_id), ["logits"])["logits"][0]   # (T, V)
        predictions = []
        for pos in positions:
            probs = softmax(logits[pos][None, :])[0]
            top = np.argsort(-probs, kind="stable")[:top_k]
            predictions.append(MaskPrediction(int(pos), [self.encoder.token(t) for t in top],
                                              [int(t) for t in top], [float(probs[t]) for t in top]))
        return predictions


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    e = np.exp(shifted)
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)
