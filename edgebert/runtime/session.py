"""``EdgeSession``: a bundle behind ``embed`` / ``classify`` / ``tag`` / ``fill_mask`` / ``answer`` / ``predict`` / ``rank``.

Imports only onnxruntime, tokenizers and numpy (plus torch-free edgebert modules): an app that ships a bundle needs
no torch. One session is safe to share between threads (onnxruntime's ``run`` is; nothing here mutates per call).

Failures are typed, never onnxruntime's own:

* opening: the bundle's parts must agree (``verify_entry``: the hashes of the files it loads, ``files.stamps``,
  the manifest vs the loaded graph's inputs, outputs and embedding tables; ``TextEncoder.check_ids``: the
  tokenizer's ids vs the embedding table), else ``BundleError``; a bad argument is a ``ConfigError``;
* ``run`` (and every task method, which all go through it): inputs the graph cannot take (ids outside the
  vocabulary, more tokens than positions, inputs of different shapes) are a ``DataError`` naming the input;
  anything onnxruntime still refuses is a ``RuntimeFault`` naming the bundle, graph and input shape; an output
  holding NaN or infinity is a ``RuntimeFault`` naming the bundle, the graph key and the rows affected.

onnxruntime's own log lines stay off stderr: sessions log at severity 4 (fatal only; its errors reach the caller
as the exceptions above). ``ort_log_level=`` (0 verbose ... 4 fatal) or ``EDGEBERT_ORT_LOG_LEVEL=2`` (warnings) ...
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import numpy as np

from edgebert.bundle import PRECISIONS, read_manifest, tokenizer_path, verify_files
from edgebert.bundle.task_registry import bundle_task, task_serving
from edgebert.errors import ConfigError, DataError, ProviderUnavailable, RuntimeFault
from edgebert.runtime.attempts import SessionRequest, open_session
from edgebert.runtime.cross_encoder import CrossEncoderMethods
from edgebert.runtime.hostcpu import detect_host
from edgebert.runtime.numeric import nonfinite_rows
from edgebert.runtime.precision import SMALLEST, choose_precision
from edgebert.runtime.providers import short_name
from edgebert.runtime.sentences import SentenceMethods
from edgebert.runtime.session_args import (
    CPU_BATCH_TOKENS,
    ORT_LOG_ENV,
    check_batch_size,
    check_batch_tokens,
    check_feeds,
    check_ort_log_level,
    int64_ids,
    is_int,
)
from edgebert.runtime.task_methods import TaskMethods
from edgebert.runtime.text import Encoded, TextEncoder, check_texts, length_sorted_batches, pad_batch
from edgebert.runtime.vector_pooling import CALLER_POOLINGS
from edgebert.system.environment import check_threads

if TYPE_CHECKING:   # task-specific and GPU-only modules load with their first use, not with every session
    from edgebert.runtime.trt_profile import TrtProfile

POOLINGS = CALLER_POOLINGS                # what embed(pooling=...) takes; a model may also state max
SPECIAL_IDS = ("pad_id", "cls_id", "sep_id", "mask_id", "unk_id")


class EdgeSession(TaskMethods, SentenceMethods, CrossEncoderMethods):
    """Load a bundle (hash-checked) and run it on the best provider that really works here.

    bundle_dir: the folder ``edgebert export`` wrote, or its archive (``.tar.gz`` / ``.zip`` from
    ``export --archive``: extracted once into the cache, see ``runtime.archive``).

    provider: ``auto`` (TensorRT -> CUDA -> CPU, one attempt each with the graph made for it, every failure kept in
    ``provider_notes``), or ``cpu`` / ``cuda`` / ``tensorrt`` (``ProviderUnavailable`` with the reason if it cannot
    be had). ``placement`` says where the nodes really run.
    precision: which of the bundle's models to load (``int8`` / ``fp32`` / ``fp16`` / ``int4``; ``smallest``: the small
    graph where it met its accuracy budget and is smaller than the default's, ``runtime.precision``); None: the best
    the bundle has for this host, INT8 where it has one that runs exactly here (one within its export gate's budget
    first), else fp32 (``runtime.precision``;
    ``describe()["precision_reason"]`` says why). A precision the bundle lacks is a ``BundleError``. On TensorRT
    fp16 and int8 are engine build flags on the standard-op graphs.
    threads: onnxruntime intra-op threads, 1 to the CPUs this process may use (None: onnxruntime's default, one per
    physical core).
    max_length: token limit per input (default and ceiling: the bundle's ``max_sequence_length``).
    truncate: cut over-long inputs to ``max_length`` (default) or raise ``DataError``.
    batch_size: inputs per onnxruntime call (a positive integer; the methods' ``batch_size=None`` means this one);
    inputs are length-sorted into batches, padded to each batch's longest row, and results come back in input order.
    batch_tokens: at most this many padded tokens per call as well (rows x the batch's longest row; a longer row goes
    alone), so that the long texts of a mixed corpus run in small batches: None (the default) is
    ``CPU_BATCH_TOKENS`` (1,024) on the CPU and no cap on a GPU (whose batches are better large); 0: no cap. Results
    do not depend on it (nor on ``batch_size``).
    int8_target: with ``precision="int8"``, load the graph made for this target (``portable``, ``x86-vnni`` ...)
    instead of the one chosen for this host (``int8_choice``). Either way a graph whose 8-bit weights would saturate
    this CPU's kernel is loaded with exact products or refused. A bundle exported with ``--target openvino`` runs
    its OpenVINO graph when ``int8_target="openvino"`` asks for it and ``openvino`` is installed (by default only on
    CPU kinds where it measured faster: none yet, ``int8_choice.choose_openvino``; ``engine`` says which library
    runs); any onnxruntime target avoids it.
    allow_spinning: False stops idle onnxruntime threads from spinning (set it when timing several sessions in one
    process: an idle session's spinning threads steal the running one's cores); None: the profile's, else True.
    pin_threads: onnxruntime's pool threads on CPUs of their own and the calling thread, during each call, on the one
    left (Linux; ``runtime.thread_pinning``); None: the profile's, else off.
    profile: apply the bundle's device profile for this machine (``edgebert tune``; ``runtime.device_profile``) to
    ``precision``, ``int8_target``, ``threads``, ``allow_spinning``, ``pin_threads`` and ``batch_tokens`` where they are left unset
    (CPU and auto providers); ``describe()["profile"]`` says what it applied, or why none (stale, foreign).
    trt_profile: TensorRT min/opt/max (batch, sequence), a ``TrtProfile`` or ``"min=1x1,opt=8x128,max=32x512"``
    (default: the bundle's); it must hold ``max_length``, ``batch_size`` is lowered to its max batch, and a call
    outside it is refused (never rerouted).
    trt_cache_dir: root of the TensorRT engine and timing caches (default ``~/.cache/edgebert/tensorrt``).
    ort_log_level: onnxruntime's log severity, 0 (verbose) to 4 (fatal only, the default: see the module docstring);
    unset, ``EDGEBERT_ORT_LOG_LEVEL`` decides.
    graph_format: ``onnx`` (default) loads the chosen entry's file; ``ort`` its onnxruntime ``.ort`` form (written
    by ``export --ort-format`` / ``pack --ort-format``; a packed ``.ort``-only bundle loads it either way).
    """

    def __init__(self, bundle_dir: str | os.PathLike, provider: str = "auto", precision: str | None = None,
                 threads: int | None = None, *, max_length: int | None = None, truncate: bool = True,
                 batch_size: int = 32, batch_tokens: int | None = None, verify: bool = True, trt_cache_dir: str | os.PathLike | None = None,
                 int8_target: str | None = None, allow_spinning: bool | None = None, pin_threads: bool | None = None,
                 trt_profile: TrtProfile | str | None = None, ort_log_level: int | None = None,
                 graph_format: str = "onnx", profile: bool = True):
        if not isinstance(bundle_dir, (str, os.PathLike)):
            raise ConfigError(f"bundle_dir={bundle_dir!r} is a {type(bundle_dir).__name__}, not a path",
                              "pass the folder written by `edgebert export` (a str or pathlib.Path)")
        if precision is not None and precision not in (*PRECISIONS, SMALLEST):
            raise ConfigError(f"unknown precision {precision!r}", f"use one of {', '.join(PRECISIONS)}, or leave "
                                                               "it unset for the best one here")
        check_threads(threads)   # 1 .. the CPUs this process may use
        if graph_format not in ("onnx", "ort"):
            raise ConfigError(f"graph_format={graph_format!r} must be 'onnx' or 'ort'",
                              "'ort' loads the graph's .ort form (export or pack with --ort-format)")
        self.graph_format = graph_format
        check_batch_size(batch_size)
        check_batch_tokens(batch_tokens)
        if max_length is not None and not is_int(max_length):
            raise ConfigError(f"max_length={max_length!r} must be an integer or None")
        self.ort_log_level = check_ort_log_level(ort_log_level)
        self.source = Path(bundle_dir)                       # as given: a folder or an archive
        self.bundle_dir = _bundle_folder(self.source)
        # only what this session reads is hashed: the manifest's names here, the tokenizer now, the graph it
        # loads just before loading it (``attempts``); ``edgebert check`` verifies every file
        self.manifest = read_manifest(self.bundle_dir)
        self.verify = bool(verify)
        if self.verify:
            verify_files(self.bundle_dir, self.manifest, [self.manifest.tokenizer.file], stamps=True)
        self.task: str = self.manifest.task
        self.truncate = bool(truncate)
        self.batch_size = batch_size
        self.host = detect_host()
        given = {"precision": precision, "int8_target": int8_target, "threads": threads,
                 "allow_spinning": allow_spinning, "pin_threads": pin_threads, "batch_tokens": batch_tokens}
        settings = self._profile_settings(given, profile and provider in ("auto", "cpu"))
        precision, int8_target, threads, allow_spinning, pin_threads, batch_tokens = (settings[k] for k in given)
        self.threads = threads
        self.allow_spinning = True if allow_spinning is None else bool(allow_spinning)
        self.pin_threads, self._pinning, self.pinning_note = bool(pin_threads), None, ""
        chosen = choose_precision(precision, self.manifest, self.host, int8_target, graph_format=graph_format)
        self.precision, self.precision_reason = chosen.precision, chosen.reason
        if "precision" in self.profile.applied:
            self.precision_reason = "this machine's device profile (`edgebert tune`) chose it"
        self.int8_target = int8_target
        self.hidden_size = self.manifest.config.hidden_size
        limit = self.manifest.max_length
        if max_length is not None and not 3 <= int(max_length) <= limit:
            raise ConfigError(f"max_length={max_length} is outside 3..{limit}",
                              f"this bundle takes at most {limit} tokens per input")
        self.max_length = int(max_length or limit)
        tok = self.manifest.tokenizer
        self.pad_id = tok.pad_id
        self.mask_id = tok.mask_id
        self.encoder = TextEncoder(tokenizer_path(self.bundle_dir, self.manifest), self.max_length, self.pad_id)
        self.label_names = self.manifest.label_names
        self._session, self.providers, self.provider_notes = self._create(provider, trt_cache_dir, trt_profile)
        # after the graph's own check (its tables), which names the graph when the manifest claims too much
        self.encoder.check_ids(self.manifest.config.vocab_size, {n: getattr(tok, n) for n in SPECIAL_IDS},
                               tok.max_id)
        # an OpenVINO graph runs on the CPU too; ``engine`` says which library runs it
        self.provider = short_name(self.providers[0]) if self.engine == "onnxruntime" else "cpu"
        self.input_names = [i.name for i in self._session.get_inputs()]
        self.output_names = [o.name for o in self._session.get_outputs()]
        self._bind_io = self.provider == "cuda"  # see _run_bound
        self.batch_tokens = int(batch_tokens) if batch_tokens is not None else (
            CPU_BATCH_TOKENS if self.provider == "cpu" else 0)

    def _profile_settings(self, given: dict[str, Any], wanted: bool) -> dict[str, Any]:
        """``given`` with the unset ones taken from this bundle's device profile for this machine
        (``runtime.device_profile``; ``self.profile`` says what was applied, or why none was)."""
        from edgebert.runtime.device_profile import SETTINGS, load_profile

        found, self.profile = load_profile(self.bundle_dir, self.host, wanted)
        if found is None:
            return given
        out = dict(given)
        for key, value in found.settings.items():
            if key not in SETTINGS or value is None:
                continue
            if given.get(key) is not None:
                self.profile.overridden.append(key)
            else:
                out[key] = self.profile.applied[key] = value
        if not any(v is not None for v in found.settings.values()):
            self.profile.note += ": EdgeSession's defaults (tune found none faster)"
        return out

    # ------------------------------------------------------------------ session creation
    def _create(self, requested: str, trt_cache_dir, trt_profile) -> tuple[Any, list[str], list[str]]:
        """One session attempt per provider (``attempts.open_session``); sets the graph, profile and
        placement of the one that opened."""
        if isinstance(trt_profile, str):      # parsed before any attempt: a bad string is refused on any machine
            from edgebert.runtime.trt_profile import TrtProfile
            trt_profile = TrtProfile.parse(trt_profile)
        request = SessionRequest(self.bundle_dir, self.manifest, requested, self.precision, self.host,
                                 self.batch_size, self.max_length, self.int8_target, trt_profile,
                                 Path(trt_cache_dir) if trt_cache_dir else None, self.threads, self.verify,
                                 self.graph_format)
        opened = open_session(request, self._session_options)
        self.model_file, self.model_key = opened.model_file, opened.choice.key
        self.engine = opened.choice.entry.engine            # onnxruntime | openvino
        self.int8_choice = opened.choice.int8
        self.placement, self.attempts = opened.placement, opened.attempts
        self.trt_profile, self.engine_cache = opened.trt_profile, opened.engine_cache
        self.batch_size = opened.batch_size   # TensorRT: at most the profile's max batch
        return opened.session, list(opened.session.get_providers()), opened.notes

    def _session_options(self):
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.log_severity_level = self.ort_log_level   # see the module docstring
        if self.threads:
            opts.intra_op_num_threads = self.threads
            opts.inter_op_num_threads = 1
        if not self.allow_spinning:
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
            opts.add_session_config_entry("session.inter_op.allow_spinning", "0")
        if self.pin_threads:
            from edgebert.runtime.thread_pinning import plan

            self._pinning, self.pinning_note = plan(self.threads)
            if self._pinning is not None:
                opts.add_session_config_entry("session.intra_op_thread_affinities", self._pinning.pool_affinities)
        return opts

    def __repr__(self) -> str:
        return (f"EdgeSession({str(self.bundle_dir)!r}, task={self.task!r}, precision={self.precision!r}, "
                f"provider={self.provider!r}, max_length={self.max_length})")

    def describe(self) -> dict[str, Any]:
        """What runs: for logs and reports."""
        return {"bundle": str(self.bundle_dir), "source": str(self.source), "task": self.task,
                "precision": self.precision, "precision_reason": self.precision_reason,
                "pooling": self.pooling.as_dict() if bundle_task(self.task).has_pooling else None,
                "model_file": self.model_file.name, "model_bytes": self.model_file.stat().st_size,
                "model": self.model_key, "engine": self.engine, "provider": self.provider, "providers": list(self.providers),
                "provider_notes": list(self.provider_notes), "placement": self.placement.as_dict(),
                "attempts": [a.as_dict() for a in self.attempts],
                "trt_profile": self.trt_profile.as_dict() if self.trt_profile else None, "threads": self.threads,
                "batch_size": self.batch_size, "batch_tokens": self.batch_tokens,
                "max_length": self.max_length, "host": self.host.summary(), "host_cpu": self.host.as_dict(),
                "allow_spinning": self.allow_spinning, "pin_threads": self.pinning_note or False,
                "profile": self.profile.as_dict(),
                "int8": self.int8_choice.as_dict() if self.int8_choice else None}

    # ------------------------------------------------------------------ low level
    def tokenize(self, texts: Any, truncate: bool | None = None) -> list[Encoded]:
        """Token ids (with special tokens, unpadded) for texts or (text, text) pairs."""
        items, pairs = check_texts(texts, allow_pairs=True)
        return self.encoder.encode(items, pairs, self._truncate(truncate))

    def run(self, feeds: dict[str, np.ndarray], outputs: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """One onnxruntime call on padded int64 arrays (see ``text.pad_batch``); float32 outputs. ``DataError`` for
        inputs the graph cannot take, ``RuntimeFault`` if onnxruntime fails or an output holds NaN or infinity."""
        names = list(outputs or self.output_names)
        missing = [n for n in self.input_names if n not in feeds]
        if missing:
            raise DataError(f"run() needs inputs {', '.join(missing)}")
        feeds = {n: int64_ids(n, feeds[n]) for n in self.input_names}
        check_feeds(feeds, self.manifest.config, self.bundle_dir)
        arrays = self._run_bound(feeds, names)
        result = {n: np.asarray(a, dtype=np.float32) for n, a in zip(names, arrays)}
        for name, array in result.items():
            rows = nonfinite_rows(array)
            if rows:
                raise RuntimeFault(f"{self.bundle_dir}: graph {self.model_key} ({self.model_file.name}) gave NaN or "
                                   f"infinite {name} for {rows} of {len(array)} rows",
                                   "its weights hold NaN or the values overflow; re-export the bundle from a "
                                   "finite checkpoint, or run precision='fp32'")
        return result

    def _run_bound(self, feeds: dict[str, np.ndarray], names: list[str]) -> list[np.ndarray]:
        """One onnxruntime call on the session's provider, never another: TensorRT refuses a shape outside its
        profile, and a run-time provider failure raises (fallback is disabled) instead of rerouting. CUDA: inputs
        copied to the GPU once, outputs allocated there and only the requested ones copied back."""
        import onnxruntime as ort

        if self.trt_profile is not None:
            batch, seq = feeds["input_ids"].shape
            self.trt_profile.check(int(batch), int(seq))
        try:
            if self._pinning is not None and self.engine == "onnxruntime" and self.provider == "cpu":
                from edgebert.runtime.thread_pinning import caller_on

                with caller_on(self._pinning.caller_cpu):
                    return self._session.run(names, feeds)
            if not self._bind_io:
                return self._session.run(names, feeds)
            binding = self._session.io_binding()
            for name, array in feeds.items():
                binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(array, "cuda", 0))
            for name in names:
                binding.bind_output(name, "cuda", 0)
            self._session.run_with_iobinding(binding)
            return binding.copy_outputs_to_cpu()
        except Exception as exc:  # noqa: BLE001  (onnxruntime raises Fail / InvalidArgument / EPFail / ...)
            message = " ".join(str(exc).split())[:300]
            if type(exc).__name__ == "EPFail":
                raise ProviderUnavailable(f"provider {self.provider!r} failed at run time ({message}); "
                                          "the call is not rerouted to another provider",
                                          "open the session with provider='cpu' or another precision") from exc
            shapes = ", ".join(f"{n} {'x'.join(map(str, a.shape))}" for n, a in feeds.items())
            raise RuntimeFault(f"{self.engine} failed running graph {self.model_key} ({self.model_file.name}) of "
                               f"{self.bundle_dir} on inputs {shapes} ({type(exc).__name__}: {message})",
                               f"run `edgebert check {self.bundle_dir}`; set {ORT_LOG_ENV}=0 for onnxruntime's "
                               "log") from exc

    def _truncate(self, truncate: bool | None) -> bool:
        return self.truncate if truncate is None else bool(truncate)

    def _batch_size(self, batch_size: int | None) -> int:
        return self.batch_size if batch_size is None else check_batch_size(batch_size)

    def _batches(self, rows: list[Encoded], outputs: list[str], batch_size: int | None
                 ) -> Iterator[tuple[np.ndarray, dict[str, np.ndarray], dict[str, np.ndarray]]]:
        """(indices into rows, padded feeds, outputs) per length-sorted batch."""
        for idx in length_sorted_batches(rows, self._batch_size(batch_size), self.batch_tokens):
            feeds = pad_batch([rows[i] for i in idx], self.pad_id)
            yield idx, feeds, self.run(feeds, outputs)

    def _require(self, method: str) -> None:
        """``ConfigError`` unless this bundle's task is the one ``method`` serves (``task_registry``)."""
        task = task_serving(method).name
        if self.task != task:
            raise ConfigError(f"{method}() needs a '{task}' bundle; {self.bundle_dir} is a "
                              f"'{self.task}' bundle", f"export the model with task '{task}'")


def _bundle_folder(source: Path) -> Path:
    """A folder as it is; an archive through ``runtime.archive`` (imported only then: tarfile and zipfile cost
    every start memory and time)."""
    if source.is_dir():
        return source
    from edgebert.runtime.archive import bundle_folder
    return bundle_folder(source)
