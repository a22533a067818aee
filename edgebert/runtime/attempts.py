"""Build an onnxruntime session: one attempt per provider, each with the graph made for it.

``auto`` tries TensorRT, then CUDA, then the CPU; an explicit provider is tried alone. Every attempt:

1. picks the provider's graph (``graphs.choose_model``; TensorRT: standard ONNX ops only, and a shape
   profile that holds the session's max length; the session's batch size is lowered to the profile's
   max batch, with a note);
2. creates ``onnxruntime.InferenceSession`` with that provider (+ the CPU for nodes it has no kernel
   for) and ``enable_fallback=0``, so onnxruntime raises instead of printing "EP Error ... Falling
   back" to stdout and retrying on other providers; then ``disable_fallback()``, so a run-time
   ``EPFail`` raises too instead of rebuilding the session on CUDA/CPU behind the caller's back;
3. reads where the nodes were really assigned (``placement``): a provider given no node failed,
   even if onnxruntime did not raise (a CUDA provider whose libraries do not load, say).

Every failure is kept with its kind and onnxruntime's message, and ``auto`` goes on to the next
provider; the notes of the session that opens say what was tried and why each one failed.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

from edgebert.bundle import Manifest, bundle_file, entry_files, verify_entry
from edgebert.bundle.manifest import OPENVINO_ENGINE
from edgebert.errors import BundleError, ConfigError, EdgebertError, ProviderUnavailable
from edgebert.files.stamps import stamped
from edgebert.runtime.graphs import ModelChoice, choose_model
from edgebert.runtime.hostcpu import HostCpu
from edgebert.runtime.ort_format import check_ort_io, ort_graph_name
from edgebert.runtime.placement import HYBRID, RECORD_CONFIG, Placement, read_placement
from edgebert.runtime.providers import ORT_NAMES, ProviderPlan, plan_providers, provider_options, trt_cache_dirs

if TYPE_CHECKING:       # a CPU session loads neither (see _attempt, _openvino_attempt)
    from edgebert.runtime.trt_profile import TrtProfile

# error kinds, in the words the notes use
EP_FAIL, CUDA_FAILURE, MISSING_LIBRARY, NO_PROFILE, NOT_IMPLEMENTED, NO_GRAPH, NO_NODES, OTHER = (
    "EPFail", "CUDA failure", "missing library", "no shape profile", "no kernel", "no graph", "no node assigned",
    "error")
_CUDA_TEXT = r"CUDA failure \d+|CUDA error|cudaError|CUDNN failure|CUBLAS failure|CUDA driver"   # re.I


class Attempt(NamedTuple):
    """One provider tried: the graph it got, and why it failed (``kind`` empty on success)."""

    provider: str
    model: str | None
    kind: str = ""
    message: str = ""

    @property
    def ok(self) -> bool:
        return not self.kind

    def note(self) -> str:
        graph = f" ({self.model})" if self.model else ""
        return f"{self.provider}{graph}: failed [{self.kind}]: {self.message}"

    def as_dict(self) -> dict[str, Any]:
        return {"provider": self.provider, "model": self.model, "ok": self.ok, "kind": self.kind or None,
                "message": self.message or None}


class OpenedSession(NamedTuple):
    """The session that opened, the graph and profile it runs, where its nodes are, and every attempt."""

    session: Any
    provider: str
    choice: ModelChoice
    model_file: Path
    placement: Placement
    notes: list[str]
    attempts: list[Attempt]
    trt_profile: TrtProfile | None = None
    engine_cache: Path | None = None
    batch_size: int = 32


def classify(exc: BaseException) -> tuple[str, str]:
    """(kind, one-line message) of an onnxruntime session-creation error."""
    text = " ".join(str(exc).split())
    if "has no associated shape profiles" in text:      # an EPFail, but this one names its cause
        return NO_PROFILE, text
    if type(exc).__name__ == "EPFail":
        return EP_FAIL, text
    if "cannot open shared object file" in text or "Failed to load library" in text or \
            "Please install TensorRT libraries" in text:
        return MISSING_LIBRARY, text
    if re.search(_CUDA_TEXT, text, re.I):
        return CUDA_FAILURE, text
    if "NOT_IMPLEMENTED" in text or "Could not find an implementation" in text:
        return NOT_IMPLEMENTED, text
    return OTHER, text


class SessionRequest(NamedTuple):
    """What the caller asks for: provider, precision, and the limits the session must hold."""

    bundle_dir: Path
    manifest: Manifest
    provider: str
    precision: str
    host: HostCpu
    batch_size: int
    max_length: int
    int8_target: str | None = None
    trt_profile: TrtProfile | None = None
    trt_cache_dir: Path | None = None
    threads: int | None = None             # intra-op threads (None: the engine's default)
    verify: bool = True                    # hash the graph's files before loading it
    graph_format: str = "onnx"             # onnx: the entry's file | ort: its .ort form (runtime.ort_format)


def trt_profile_for(request: SessionRequest, choice: ModelChoice) -> TrtProfile:
    """The caller's profile, else the graph's (export-time) one; it must hold max_length tokens, from one
    text of one token up."""
    from edgebert.runtime.trt_profile import TrtProfile

    if request.trt_profile is not None:
        profile = request.trt_profile
    elif choice.entry.tensorrt_profile:
        profile = TrtProfile.from_manifest(dict(choice.entry.tensorrt_profile))
    else:
        profile = TrtProfile.default(request.max_length)
    if request.max_length > profile.max[1] or profile.min != (1, 1):
        raise ConfigError(f"the TensorRT profile ({profile.describe()}) does not hold batches of 1 to "
                          f"{request.batch_size} texts of 1 to {request.max_length} tokens",
                          f"pass max_length <= {profile.max[1]}, or trt_profile='min=1x1,opt=8x128,max=BxS'")
    return profile


def _check_standard_ops(choice: ModelChoice) -> None:
    domains = choice.entry.get_extra("op_domains") or []
    if not choice.standard_ops or "com.microsoft" in domains:
        raise BundleError(f"{choice.file} is not a standard-op graph (graph {choice.entry.graph!r}, "
                          f"domains {domains}); TensorRT is only given graphs without com.microsoft ops",
                          "re-export with --tensorrt")


def open_session(request: SessionRequest, options_factory: Callable[[], Any]) -> OpenedSession:
    """Try the planned providers in order (see the module docstring); raise if none opens."""
    plan = plan_providers(request.provider)
    attempts: list[Attempt] = []
    last_error: EdgebertError | None = None
    for provider in plan.wanted:
        try:
            return _attempt(request, plan, provider, options_factory, attempts)
        except _Failed as failed:
            attempts.append(failed.attempt)
            last_error = failed.error
            if plan.requested != "auto":
                raise failed.error from failed.__cause__
    tried = "; ".join([*plan.notes, *(a.note() for a in attempts)])
    if last_error is None:
        raise ProviderUnavailable(f"no provider could be tried: {tried}")
    raise type(last_error)(f"{last_error.message} [auto tried: {tried}]", last_error.hint)


class _Failed(Exception):
    def __init__(self, attempt: Attempt, error: EdgebertError):
        super().__init__(attempt.note())
        self.attempt, self.error = attempt, error


def _error_for(provider: str, kind: str, message: str, file: str) -> EdgebertError:
    """The error an explicit request raises: GPU trouble is ProviderUnavailable, not a bundle defect."""
    if provider != "cpu":
        return ProviderUnavailable(f"provider {provider!r} is unavailable: {file}: [{kind}] {message[:400]}",
                                   "use provider='cpu' or 'auto' (auto reports what it got)")
    if kind == NOT_IMPLEMENTED:
        return ConfigError(f"{file} cannot run on cpu: {message[:300]}",
                           "fp16 models need cuda/tensorrt; on a CPU use int8 or fp32")
    return BundleError(f"onnxruntime cannot load {file}: {message[:300]}", "re-export the bundle")


def _attempt(request: SessionRequest, plan: ProviderPlan, provider: str, options_factory: Callable[[], Any],
             attempts: list[Attempt]) -> OpenedSession:
    import onnxruntime as ort

    try:
        choice = choose_model(request.manifest, provider, request.precision, request.host, request.int8_target,
                              graph_format=request.graph_format)
        profile = engine = timing = None
        if provider == "tensorrt":
            _check_standard_ops(choice)
            profile = trt_profile_for(request, choice)
    except EdgebertError as exc:
        raise _Failed(Attempt(provider, None, NO_GRAPH, exc.one_line()), exc) from exc
    try:
        name = ort_graph_name(request.manifest, choice.key, request.graph_format)
        model_file = bundle_file(request.bundle_dir, name)
        if not model_file.is_file():
            raise BundleError(f"{model_file} is missing", "the bundle is incomplete; re-export it")
        pending = _verify(request, choice.key, name)
    except BundleError as error:
        raise _Failed(Attempt(provider, choice.key, NO_GRAPH, error.one_line()), error) from error
    if choice.entry.engine == OPENVINO_ENGINE:
        _verified(pending, provider, choice.key)
        return _openvino_attempt(request, plan, choice, model_file, attempts)
    input_names = request.manifest.input_names
    if profile is not None:
        engine, timing = trt_cache_dirs(model_file, request.precision, profile, request.trt_cache_dir)
        engine.mkdir(parents=True, exist_ok=True)
        timing.mkdir(parents=True, exist_ok=True)
    chain = [(ORT_NAMES[provider], provider_options(provider, request.precision, input_names, profile=profile,
                                                    engine_cache=engine, timing_cache=timing))]
    if provider != "cpu":
        chain.append(("CPUExecutionProvider", {}))
    opts = options_factory()
    for key, value in (choice.int8.session_config if choice.int8 else {}).items():
        opts.add_session_config_entry(key, value)
    opts.add_session_config_entry(RECORD_CONFIG, "1")
    try:
        session = ort.InferenceSession(str(model_file), sess_options=opts, providers=chain, enable_fallback=0)
    except Exception as exc:  # noqa: BLE001  (onnxruntime raises Fail / EPFail / RuntimeError / ...)
        _verified(pending, provider, choice.key)          # a damaged file is named as such, not as onnxruntime's error
        kind, message = classify(exc)
        raise _Failed(Attempt(provider, choice.key, kind, message),
                      _error_for(provider, kind, message, model_file.name)) from exc
    _verified(pending, provider, choice.key)
    session.disable_fallback()   # a run-time EPFail raises; onnxruntime must not reroute the session
    if model_file.suffix == ".ort":
        check_ort_io(session, request.manifest, f"{model_file} ({choice.key})")
    placement = read_placement(session)
    if not placement.runs_on(provider):
        message = (f"onnxruntime built the session but assigned no node to {provider} ({placement.describe()}; "
                   f"registered: {', '.join(session.get_providers())}): its libraries or the GPU are unusable")
        raise _Failed(Attempt(provider, choice.key, NO_NODES, message),
                      _error_for(provider, NO_NODES, message, model_file.name))
    notes = list(plan.notes) + [a.note() for a in attempts] + list(choice.notes)
    batch_size = request.batch_size
    if profile is not None:
        notes.append(f"tensorrt profile {profile.describe()}; engine cache {engine}; timing cache {timing}")
        if batch_size > profile.max[0]:
            batch_size = profile.max[0]
            notes.append(f"batch_size {request.batch_size} lowered to {batch_size}, the TensorRT profile's max "
                         "batch (a larger batch passed to run() is refused)")
    notes.append(f"{placement.describe()} ({placement.method})")
    if provider != "cpu" and placement.label(provider) == HYBRID:
        off = ", ".join(f"{op} {n}" for op, n in sorted(placement.compute_off(provider).items(), key=lambda kv: -kv[1]))
        notes.append(f"hybrid: compute nodes run on the CPU, not {provider} ({off}); this graph gains nothing "
                     f"from the GPU there (graph {choice.key})")
    notes.append(f"running on {provider} ({', '.join(session.get_providers())}), graph {choice.key} ({choice.file})")
    return OpenedSession(session, provider, choice, model_file, placement, notes,
                         attempts + [Attempt(provider, choice.key)], profile, engine, batch_size)


def _verify(request: SessionRequest, key: str, name: str) -> tuple[Any, dict] | None:
    """Verify the files of the graph about to be loaded (``verify_entry``). Stamped files (every open but the
    first on this machine: ``files.stamps``) are verified here, at the cost of a stat and a small read. Files
    to be hashed are hashed on a second thread while onnxruntime loads the graph (it releases the GIL, as
    hashlib does): ``_verified`` joins it before the session is used, and a file that fails its hash fails
    the attempt as it would before the load."""
    files = entry_files(request.manifest, key, name)
    if not request.verify or all(stamped(bundle_file(request.bundle_dir, f)) for f in files):
        verify_entry(request.bundle_dir, request.manifest, key, request.verify, name, stamps=True)
        return None
    import threading

    outcome: dict[str, BaseException] = {}

    def work() -> None:
        try:
            verify_entry(request.bundle_dir, request.manifest, key, request.verify, name, stamps=True)
        except BaseException as exc:  # noqa: BLE001  (raised on the caller's thread by _verified)
            outcome["error"] = exc

    thread = threading.Thread(target=work, name="edgebert-verify", daemon=True)
    thread.start()
    return thread, outcome


def _verified(pending: tuple[Any, dict] | None, provider: str, key: str) -> None:
    """Wait for ``_verify``'s thread; raise what it raised (a ``BundleError`` fails the attempt)."""
    if pending is None:
        return
    thread, outcome = pending
    thread.join()
    error = outcome.get("error")
    if isinstance(error, BundleError):
        raise _Failed(Attempt(provider, key, NO_GRAPH, error.one_line()), error) from error
    if error is not None:
        raise error


def _openvino_attempt(request: SessionRequest, plan: ProviderPlan, choice: ModelChoice, model_file: Path,
                      attempts: list[Attempt]) -> OpenedSession:
    """The CPU attempt when the choice is the bundle's OpenVINO graph: ``OpenVinoSession`` with the
    session's thread count."""
    from edgebert.runtime.openvino_graph import PROVIDER_NAME, OpenVinoSession

    try:
        session = OpenVinoSession(model_file, request.threads)
    except Exception as exc:  # noqa: BLE001  (openvino raises RuntimeError / its own types)
        message = " ".join(str(exc).split())[:300]
        error = BundleError(f"openvino cannot load {model_file.name}: {message}",
                            "pass int8_target='portable' for the onnxruntime graph, or re-export the bundle")
        raise _Failed(Attempt("cpu", choice.key, OTHER, message), error) from exc
    placement = Placement({"cpu": 1}, method=f"every node on {PROVIDER_NAME} (openvino runs the whole graph)")
    notes = list(plan.notes) + [a.note() for a in attempts] + list(choice.notes)
    notes.append(f"running on {PROVIDER_NAME} (openvino, {session.config.get('INFERENCE_NUM_THREADS', 'default')} "
                 f"threads), graph {choice.key} ({choice.file})")
    return OpenedSession(session, "cpu", choice, model_file, placement, notes,
                         attempts + [Attempt("cpu", choice.key)], None, None, request.batch_size)
