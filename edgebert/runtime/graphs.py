"""Which of a bundle's graphs a provider gets for a precision, or why it gets none.

A bundle holds graphs made for different providers (manifest ``models``; ``graph`` and ``providers``
per entry):

==========  ================================  ===========================================================
key         graph                             for
==========  ================================  ===========================================================
fp32        fused (ORT contrib ops, 2-D mask)  CPU; CUDA when the bundle has no ``fp32-cuda``
int8[-t]    fused, dynamic-format INT8         CPU (one per target, chosen by ``int8_choice``); CUDA runs
                                              it with the nodes it lacks on the CPU (placement reported)
int8-       OpenVINO IR (.xml + .bin), NNCF    CPU through openvino, when asked for (``int8_target``)
openvino    INT8                               (``int8_choice.choose_openvino``; ``openvino_graph``)
fp16        fused fp16, 2-D mask               CUDA when the bundle has no ``fp16-cuda``
fp32-cuda   fused-gpu: 1-D mask index          CUDA fp32 (unfused attention kernels: fp32 has no flash path)
fp16-cuda   fused-gpu, fp16, fp32 I/O          CUDA fp16 (cuDNN flash attention, measured on H100)
fp32-trt    standard ONNX ops only             TensorRT fp32, and fp16 (``trt_fp16_enable``)
int8-trt    standard ops, QDQ S8S8             TensorRT int8 (``trt_int8_enable``)
==========  ================================  ===========================================================

TensorRT never gets a graph with ``com.microsoft`` ops: onnxruntime would split it around them and hand
TensorRT subgraphs whose inputs have no shape profile. Torch-free.
"""

from __future__ import annotations

from edgebert.bundle import Manifest, ModelEntry
from edgebert.errors import BundleError
from edgebert.records import record
from edgebert.runtime.hostcpu import HostCpu
from edgebert.runtime.int8_choice import GraphChoice, choose_int8, choose_openvino, choose_small

# (provider, precision) -> model keys, best first
CANDIDATES: dict[tuple[str, str], tuple[str, ...]] = {
    ("tensorrt", "fp32"): ("fp32-trt",), ("tensorrt", "fp16"): ("fp32-trt",), ("tensorrt", "int8"): ("int8-trt",),
    ("cuda", "fp32"): ("fp32-cuda", "fp32"), ("cuda", "fp16"): ("fp16-cuda", "fp16"),
    ("cpu", "fp32"): ("fp32",), ("cpu", "fp16"): ("fp16",), ("cpu", "int4"): ("int4",),
}
EXPORT_FLAG = {"fp32-trt": "--tensorrt", "int8-trt": "--tensorrt --int8", "fp32-cuda": "--cuda",
               "fp16-cuda": "--cuda", "fp16": "--fp16 (or --cuda)", "fp32": "", "int4": "--int8 --int4"}


@record
class ModelChoice:
    """The model entry ``provider`` loads for ``precision``, and notes on the choice (``entry`` given as
    a dict is kept as a ``ModelEntry``)."""

    provider: str
    precision: str
    key: str
    entry: ModelEntry
    notes: tuple[str, ...] = ()
    int8: GraphChoice | None = None       # the CPU INT8 graph choice, when one was made

    def __post_init__(self) -> None:
        if not isinstance(self.entry, ModelEntry):
            object.__setattr__(self, "entry", ModelEntry.from_dict(self.key, dict(self.entry)))

    @property
    def file(self) -> str:
        return self.entry.file

    @property
    def standard_ops(self) -> bool:
        return self.entry.graph == "standard-ops"


def _int8_note(provider: str, choice: GraphChoice) -> str:
    if choice.entry.is_static_qdq:
        kind = "a static QDQ S8S8 graph (QuantizeLinear / DequantizeLinear around float MatMuls)"
    else:
        kind = ("a dynamic-format INT8 graph (QAttention / MatMulInteger with uint8 activations, made for "
                "CPU kernels)")
    return (f"{provider} + int8: the {choice.target} INT8 graph is {kind}; nodes the {provider} provider has "
            "no kernel for run on the CPU (see the node placement)")


def choose_model(manifest: Manifest, provider: str, precision: str, host: HostCpu,
                 int8_target: str | None = None, *, graph_format: str = "onnx") -> ModelChoice:
    """The graph ``provider`` runs for ``precision``; ``BundleError`` saying why if there is none.
    ``graph_format``: the form the session loads (``int8_choice`` rule 3)."""
    models = manifest.models
    passed_over = ""
    if precision == "int8" and provider == "cpu":
        engine_choice, passed_over = choose_openvino(manifest, host, int8_target)
        if engine_choice is not None:
            return ModelChoice(provider, precision, engine_choice.key, engine_choice.entry,
                               (f"int8: {engine_choice.reason}",), engine_choice)
    if precision == "int8" and provider in ("cpu", "cuda"):
        choice = choose_int8(manifest, host, int8_target, graph_format=graph_format)
        notes = ((f"int8: {passed_over}",) if passed_over else ()) + (f"int8: {choice.reason}",) \
            + ((_int8_note(provider, choice),) if provider == "cuda" else ())
        return ModelChoice(provider, precision, choice.key, choice.entry, notes, choice)
    if precision == "int4" and provider == "cpu" and "int4" in models:
        small = choose_small(manifest, host, graph_format=graph_format)
        return ModelChoice(provider, precision, small.key, small.entry, (f"int4: {small.reason}",), small)
    if precision == "int8" and int8_target is not None:
        raise BundleError(f"int8_target={int8_target!r} chooses a CPU INT8 graph; {provider} runs the bundle's "
                          "TensorRT INT8 graph", "leave int8_target out for tensorrt")
    keys = CANDIDATES[(provider, precision)]
    usable = [k for k in keys if k in models and provider in models[k].providers]
    if not usable:
        raise BundleError(_missing(manifest, provider, precision, keys), _hint(keys))
    key = usable[0]
    notes = []
    if provider == "cuda" and key in ("fp32", "fp16"):
        notes.append(f"cuda + {precision}: the bundle has no {keys[0]} graph, so CUDA runs the CPU-fused graph "
                     "(raw 2-D attention mask, not the graph measured on a GPU); re-export with --cuda")
    if provider == "tensorrt" and precision == "fp16":
        notes.append("tensorrt + fp16: the fp32 standard-op graph, built by TensorRT with fp16 kernels "
                     "(trt_fp16_enable, LayerNorm kept fp32)")
    return ModelChoice(provider, precision, key, models[key], tuple(notes))


def _missing(manifest: Manifest, provider: str, precision: str, keys: tuple[str, ...]) -> str:
    have = ", ".join(manifest.models)
    if provider == "tensorrt" and precision == "int8":
        cpu_int8 = [k for k, e in manifest.models.items() if e.precision == "int8"]
        why = ("its INT8 graphs are dynamic-format (QAttention / MatMulInteger / DynamicQuantizeLinear are "
               "onnxruntime CPU ops, not TensorRT layers)" if cpu_int8 else "it has no INT8 graph")
        return f"tensorrt + int8 needs the bundle's static QDQ TensorRT graph (int8-trt); {why} (it has: {have})"
    if provider == "tensorrt":
        return (f"tensorrt + {precision} needs the bundle's standard-op TensorRT graph (fp32-trt); the fused "
                f"graphs hold onnxruntime contrib ops TensorRT cannot build (it has: {have})")
    return f"the bundle has no {precision} model for {provider} (it has: {have})"


def _hint(keys: tuple[str, ...]) -> str:
    flag = EXPORT_FLAG.get(keys[0], "")
    return f"re-export with {flag}" if flag else "re-export the bundle"
