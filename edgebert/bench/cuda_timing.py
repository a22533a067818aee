"""GPU latency the way each engine is really used: onnxruntime CUDA with host arrays, with I/O binding
(inputs already on the GPU, outputs left there) and with CUDA graphs; PyTorch eager and
``torch.compile(mode="reduce-overhead")``, with and without the host copies. One workload is a list of
feed batches run in order (a fixed shape repeated, or a real length mix at batch 1). Device-agnostic:
on a machine without a GPU the same code runs on the CPU (``device="cpu"``) so it is tested here.

Every call is timed on its own with ``time.perf_counter`` after the engine's own synchronisation
(onnxruntime's ``run`` returns when its outputs are ready; PyTorch is followed by
``torch.cuda.synchronize``). A path that cannot run a workload (CUDA graphs on a length mix) says why.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

INPUTS = ("input_ids", "attention_mask", "token_type_ids")


@dataclass(frozen=True)
class Workload:
    """``name`` (``1x128``, ``sst2-mix``), the batches in run order, and whether every batch has one shape."""

    name: str
    batches: tuple[dict[str, np.ndarray], ...]

    @property
    def fixed(self) -> bool:
        return len({b["input_ids"].shape for b in self.batches}) == 1

    @property
    def sequences(self) -> int:
        return sum(int(b["input_ids"].shape[0]) for b in self.batches)

    @property
    def tokens(self) -> int:
        return sum(int(b["attention_mask"].sum()) for b in self.batches)


def fixed_workload(batch: int, seq: int, vocab: int = 30522, seed: int = 0) -> Workload:
    """Random ids (CLS ... SEP kept out of the way: ids 1000..vocab), no padding, ``batch x seq``."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(min(1000, vocab // 2), vocab, size=(batch, seq), dtype=np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
    return Workload(f"{batch}x{seq}", (feeds,))


def mix_workload(name: str, encodings: Sequence[Sequence[int]], limit: int | None = None) -> Workload:
    """Batch 1 per text, each at its own length (no padding): a real length mix in file order."""
    batches = []
    for ids in list(encodings)[:limit]:
        arr = np.asarray([list(ids)], dtype=np.int64)
        batches.append({"input_ids": arr, "attention_mask": np.ones_like(arr), "token_type_ids": np.zeros_like(arr)})
    return Workload(name, tuple(batches))


@dataclass
class Timing:
    """Per-call latencies of one path on one workload (ms), or why it was not measured."""

    path: str
    workload: str
    latencies_ms: list[float] = field(default_factory=list)
    sequences: int = 0
    not_measured: str | None = None
    cold_ms: float | None = None          # first call after the session/model was ready (includes capture)
    gpu_memory_mb: float | None = None

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "workload": self.workload}
        if self.not_measured or not self.latencies_ms:
            return {**out, "not_measured": self.not_measured or "no call finished"}
        lat = np.asarray(self.latencies_ms)
        total_s = lat.sum() / 1000.0
        return {**out, "calls": len(lat), "p50_ms": round(float(np.percentile(lat, 50)), 4),
                "p90_ms": round(float(np.percentile(lat, 90)), 4), "mean_ms": round(float(lat.mean()), 4),
                "throughput_seq_s": round(self.sequences / total_s, 1) if total_s > 0 else None,
                "cold_ms": None if self.cold_ms is None else round(self.cold_ms, 3),
                "gpu_memory_mb": None if self.gpu_memory_mb is None else round(self.gpu_memory_mb, 1)}


def time_calls(call: Callable[[int], Any], n_batches: int, sizes: Sequence[int], *, warmup: int,
               max_seconds: float, min_calls: int, max_calls: int, path: str, workload: str,
               sync: Callable[[], None] | None = None) -> Timing:
    """Call ``call(i)`` for batch ``i`` (cycling through ``n_batches``): ``warmup`` untimed calls, then timed
    ones until ``max_seconds`` have passed (at least ``min_calls``, at most ``max_calls``; a length mix is
    run once through at least, when time allows)."""
    timing = Timing(path, workload)
    sync = sync or (lambda: None)
    t0 = time.perf_counter()
    call(0)
    sync()
    timing.cold_ms = (time.perf_counter() - t0) * 1000
    for i in range(1, warmup):
        call(i % n_batches)
    sync()
    start = time.perf_counter()
    i = 0
    while i < max_calls:
        k = i % n_batches
        t = time.perf_counter()
        call(k)
        sync()
        timing.latencies_ms.append((time.perf_counter() - t) * 1000)
        timing.sequences += sizes[k]
        i += 1
        if i >= min_calls and time.perf_counter() - start > max_seconds:
            break
    return timing


# ---------------------------------------------------------------- onnxruntime
def ort_session(model_file: str, provider: str, *, cuda_graph: bool = False, threads: int | None = None,
                extra_options: dict[str, Any] | None = None, profile_prefix: str | None = None,
                log_level: int = 3) -> Any:
    """A plain onnxruntime session on ``provider`` (``cuda`` or ``cpu``), fallback off, placement recorded."""
    import onnxruntime as ort

    from edgebert.runtime.placement import RECORD_CONFIG
    from edgebert.runtime.providers import provider_options

    so = ort.SessionOptions()
    so.log_severity_level = log_level
    so.add_session_config_entry(RECORD_CONFIG, "1")
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if threads:
        so.intra_op_num_threads = threads
    if profile_prefix:
        so.enable_profiling = True
        so.profile_file_prefix = profile_prefix
    if provider == "cuda":
        opts = {**provider_options("cuda", "fp32", INPUTS), **(extra_options or {})}
        if cuda_graph:
            opts["enable_cuda_graph"] = "1"
        providers = [("CUDAExecutionProvider", {k: str(v) for k, v in opts.items()})]
    else:
        providers = ["CPUExecutionProvider"]
    session = ort.InferenceSession(model_file, so, providers=providers)
    session.disable_fallback()
    return session


def ort_device(provider: str) -> str:
    return "cuda" if provider == "cuda" else "cpu"


def time_ort(session: Any, workload: Workload, mode: str, provider: str, *, output: str | None = None,
             **limits: Any) -> Timing:
    """``mode``: ``host`` (numpy in, numpy out: the copies included), ``iobinding`` (inputs placed on the
    device once, the output left there: device-only), ``cudagraph`` (a session made with
    ``cuda_graph=True``: fixed buffers, captured on the first call; fixed shapes only)."""
    import onnxruntime as ort

    path = f"onnxruntime {provider} {mode}"
    output = output or session.get_outputs()[0].name      # last_hidden_state, logits ...
    names = [i.name for i in session.get_inputs()]
    sizes = [int(b["input_ids"].shape[0]) for b in workload.batches]
    if mode == "host":
        def call(i: int) -> Any:
            return session.run([output], {n: workload.batches[i][n] for n in names})
        return time_calls(call, len(workload.batches), sizes, path=path, workload=workload.name, **limits)
    device = ort_device(provider)
    if mode == "cudagraph" and not workload.fixed:
        return Timing(path, workload.name, not_measured="CUDA graphs replay one captured shape; a length mix "
                                                        "changes the shape every call")
    bound = [{n: ort.OrtValue.ortvalue_from_numpy(b[n], device, 0) for n in names} for b in workload.batches]
    if mode == "cudagraph":
        binding = session.io_binding()
        for n in names:
            binding.bind_ortvalue_input(n, bound[0][n])
        batch, seq = workload.batches[0]["input_ids"].shape
        out_shape = [batch, seq] + [d for d in session.get_outputs()[0].shape[2:]]
        out = ort.OrtValue.ortvalue_from_shape_and_type(out_shape, _ort_output_dtype(session, output), device, 0)
        binding.bind_ortvalue_output(output, out)

        def call(i: int) -> Any:
            session.run_with_iobinding(binding)
        return time_calls(call, 1, sizes, path=path, workload=workload.name, **limits)

    bindings = []
    for b in bound:
        binding = session.io_binding()
        for n in names:
            binding.bind_ortvalue_input(n, b[n])
        binding.bind_output(output, device, 0)
        bindings.append(binding)

    def call(i: int) -> Any:
        session.run_with_iobinding(bindings[i])
    return time_calls(call, len(bindings), sizes, path=path, workload=workload.name, **limits)


def _ort_output_dtype(session: Any, name: str) -> Any:
    kind = next(o.type for o in session.get_outputs() if o.name == name)
    return np.float16 if "float16" in kind else np.float32


# ---------------------------------------------------------------- PyTorch
def time_torch(model: Any, workload: Workload, mode: str, device: str, *, label: str, **limits: Any) -> Timing:
    """``mode``: ``host`` (numpy -> device -> model -> ``last_hidden_state`` back to numpy) or ``device``
    (inputs on the device beforehand, the output left there). ``model`` returns a dict or a tuple whose
    first item is ``last_hidden_state``; ``label`` names the path (``torch eager fp16``)."""
    import torch

    sizes = [int(b["input_ids"].shape[0]) for b in workload.batches]
    sync = torch.cuda.synchronize if device.startswith("cuda") else None
    path = f"{label} {mode}"

    def first(out: Any) -> Any:
        if isinstance(out, dict):
            return out["last_hidden_state"]
        return out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]

    if mode == "host":
        def call(i: int) -> Any:
            b = workload.batches[i]
            args = [torch.from_numpy(b[k]).to(device) for k in INPUTS]
            with torch.no_grad():
                return first(model(*args)).float().cpu().numpy()
        return time_calls(call, len(workload.batches), sizes, path=path, workload=workload.name, sync=sync,
                          **limits)
    on_device = [[torch.from_numpy(b[k]).to(device) for k in INPUTS] for b in workload.batches]

    def call(i: int) -> Any:
        with torch.no_grad():
            return first(model(*on_device[i]))
    return time_calls(call, len(on_device), sizes, path=path, workload=workload.name, sync=sync, **limits)
