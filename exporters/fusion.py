"""Fuse a traced BERT with onnxruntime's transformer optimizer, and gate the result.

For L layers the fused graph must hold ``Attention`` = L, ``SkipLayerNormalization`` >= 2L,
one fused GELU per layer (``BiasGelu``/``Gelu``/``FastGelu``), and ``EmbedLayerNormalization`` = 1;
anything less means the model code drifted from the pattern the optimizer knows, and export stops.
After the gate, the CPU graph (raw mask) gets ``exporters.cpu_passes``: its SkipLayerNormalization
nodes become Add + LayerNormalization, which onnxruntime's CPU provider runs faster (measured there);
the manifest entry's ``fused_ops`` stays what the optimizer fused and ``cpu_passes`` says what changed.

ORT basic graph optimizations (level 1, provider independent) run first, then the Python fusions.
The CPU graph keeps a raw 2-D mask (``AttentionMaskFormat.AttentionMask``) rather than the bert default
1-D "mask index" (sequence lengths): same speed on CPU (measured, MiniLM), and correct for any padding
side, not only right padding. The CUDA graph (``mask="index"``) takes the 1-D mask index, with which
CUDA fp16 Attention runs cuDNN's flash attention kernel (measured on an H100, benchmarks/results/gpu_check/gpu_cuda.md;
fp32 Attention runs unfused GEMM + masked softmax; the raw-mask form was not measured on a GPU). The mask index is
only right for right padding, which the runtime always uses (``runtime.text.pad_batch``).

The level-1 ORT pass runs on the CPU provider for the GPU graph too (``use_gpu=False``): basic
optimizations are provider-independent, and running them on a CUDA session would make the saved graph
depend on the export host (onnxruntime can insert Memcpy nodes for nodes it places on the CPU).

``fused_entry`` is the export step: fuse, gate, validate against PyTorch, and the graph's manifest entry.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import NamedTuple

from edgebert.errors import ValidationError
from edgebert.exporters.job import ExportJob
from edgebert.exporters.validate import GraphValidator
from edgebert.graph.ops import op_type_counts, quiet_logging
from edgebert.model import BertConfig

GELU_OPS = ("BiasGelu", "Gelu", "FastGelu")
SKIP_LN_OPS = ("SkipLayerNormalization", "SkipSimplifiedLayerNormalization")


MASK_FORMATS = {"raw": "raw 2-D mask (any padding side)",
                "index": "1-D mask index (sequence lengths: right padding only)"}


class FusedKind(NamedTuple):
    """What a fused graph of each mask format is: its manifest kind and providers, its validation
    label and progress messages."""
    graph: str
    providers: tuple[str, ...]
    label: str
    start: str
    done: str


FUSED_KINDS = {"raw": FusedKind("fused", ("cpu", "cuda"), "fusion", "fusing (onnxruntime transformer optimizer)",
                                "validated fused graph"),
               "index": FusedKind("fused-gpu", ("cuda",), "cuda fusion", "fusing the CUDA graph (1-D mask index)",
                                  "validated CUDA graph")}


def fuse_bert(raw_path: str | Path, out_path: str | Path, cfg: BertConfig, mask: str = "raw") -> dict[str, int]:
    """Write the fused graph of ``raw_path`` to ``out_path``; return the fused-operator counts.
    ``mask``: ``raw`` (CPU graph) or ``index`` (CUDA graph), see the module docstring."""
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model

    if mask not in MASK_FORMATS:
        raise ValueError(f"mask must be one of {', '.join(MASK_FORMATS)}")
    options = FusionOptions("bert")
    options.use_raw_attention_mask(mask == "raw")
    with quiet_logging():
        model = optimize_model(str(raw_path), model_type="bert", num_heads=cfg.num_attention_heads,
                               hidden_size=cfg.hidden_size, optimization_options=options)
        model.save_model_to_file(str(out_path))
    return fused_op_counts(out_path)


def fused_op_counts(path: str | Path) -> dict[str, int]:
    counts = op_type_counts(path)
    keys = ("EmbedLayerNormalization", "Attention", *SKIP_LN_OPS, "LayerNormalization", *GELU_OPS,
            "MatMul", "Gemm")
    return {k: counts[k] for k in keys if counts.get(k)}


def fusion_shortfalls(counts: dict[str, int], cfg: BertConfig, task: str = "embed") -> list[str]:
    """What the fused graph lacks for a BERT of ``cfg.num_hidden_layers`` layers (empty: all fused).

    The MLM head's transform (dense -> GELU -> LayerNorm) adds one GELU to the L of the encoder.
    """
    layers = cfg.num_hidden_layers
    head_gelus = 1 if task == "mlm" else 0
    missing = []
    if counts.get("Attention", 0) != layers:
        missing.append(f"Attention={counts.get('Attention', 0)} (want {layers})")
    skip = sum(counts.get(k, 0) for k in SKIP_LN_OPS)
    if skip < 2 * layers:
        missing.append(f"SkipLayerNormalization={skip} (want >= {2 * layers})")
    if cfg.hidden_act.startswith("gelu"):
        gelu = sum(counts.get(k, 0) for k in GELU_OPS)
        if gelu != layers + head_gelus:
            missing.append(f"BiasGelu/Gelu={gelu} (want {layers + head_gelus})")
    if counts.get("EmbedLayerNormalization", 0) != 1:
        missing.append(f"EmbedLayerNormalization={counts.get('EmbedLayerNormalization', 0)} (want 1)")
    return missing


def check_fusion(counts: dict[str, int], cfg: BertConfig, task: str = "embed") -> None:
    missing = fusion_shortfalls(counts, cfg, task)
    if missing:
        raise ValidationError(f"ONNX Runtime fusion incomplete: {', '.join(missing)}",
                              "the model code no longer matches the BERT pattern the optimizer fuses",
                              figures={"fused_ops": counts, "layers": cfg.num_hidden_layers})


def fused_entry(job: ExportJob, check: GraphValidator, out: Path, mask: str = "raw") -> dict:
    """Fuse ``job.raw`` into ``out`` (``mask``: see the module docstring), gate and validate it; the
    graph's manifest entry."""
    kind = FUSED_KINDS[mask]
    check.say(kind.start)
    counts = fuse_bert(job.raw, out, job.model, mask)
    check_fusion(counts, job.model, job.task)
    passes = {}
    if mask == "raw":
        shutil.copyfile(out, job.gpu_source)
        passes = cpu_graph_passes(out)
    validation = check.check(out, kind.label)
    check.say(kind.done, fused_ops=counts, **({"cpu_passes": passes} if passes else {}),
              max_abs_diff=validation["max_abs_diff"])
    return {"file": job.name_of(out), "precision": "fp32", "graph": kind.graph, "providers": list(kind.providers),
            "attention_mask": MASK_FORMATS[mask], "fused_ops": counts, **({"cpu_passes": passes} if passes else {}),
            "validation": validation}


def cpu_graph_passes(path: Path) -> dict[str, int]:
    """Rewrite the fused CPU graph at ``path`` with ``exporters.cpu_passes`` (in place); ``{pass: nodes}``.
    ``fused_ops`` keeps the optimizer's counts (what the fusion gate checked); this says what changed after."""
    import onnx

    from edgebert.exporters.cpu_passes import unfuse_skip_layernorm

    model = onnx.load(str(path))
    done = unfuse_skip_layernorm(model)
    if done:
        onnx.save(model, str(path))
    return {"unfuse_skip_layernorm": done} if done else {}
