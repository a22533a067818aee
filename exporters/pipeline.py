"""``export_bundle``: checkpoint -> validated, fused ONNX (+ INT8, + FP16, + GPU graphs) bundle, written
atomically.

Every graph is checked against the PyTorch model right after it is made (raw export, fusion, INT8,
FP16, the TensorRT and CUDA graphs); any miss raises a typed error and leaves no bundle behind (an
existing bundle at ``out_dir`` stays until the new one is complete). ``out_dir`` follows ``edgebert.files.outdirs``:
new or empty, or an earlier bundle with ``overwrite``; the scratch folders of killed exports are removed first.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from edgebert.bundle import INPUT_NAMES, MANIFEST_NAME, TASK_OUTPUTS
from edgebert.model import CONFIG_NAME, load_model
from edgebert.model import BertConfig
from edgebert.errors import CheckpointError, ConfigError
from edgebert.files.atomic import current_umask, remove_stale_work_dirs, work_dir, write_text
from edgebert.files.outdirs import OutputDir

from .bundle import MODEL_FILES, build_manifest, verify_bundle, write_manifest
from .config import TASK_ARCHITECTURES, ExportConfig, default_task
from .fusion import MASK_FORMATS, check_fusion, fuse_bert
from .gpu_graphs import GpuGraphs
from .int8 import Int8Export, export_host, export_int8
from .onnx_export import export_onnx, prepare
from .tokenizer_info import find_tokenizer, tokenizer_metadata
from .validate import make_cases, torch_reference, validate_graph

LOG_NAME = "export_log.jsonl"
# what a bundle folder may hold (an --overwrite replaces nothing else): manifest, graphs (with external
# data), tokenizer, config, log
BUNDLE_OUTPUTS = (MANIFEST_NAME, "*.onnx", "*.onnx.data", "*.onnx_data", "tokenizer.json", "vocab.txt",
                  CONFIG_NAME, LOG_NAME)


@dataclass
class ExportResult:
    bundle_dir: Path
    manifest: dict
    seconds: float
    log: list[dict] = field(default_factory=list)

    def summary_lines(self) -> list[str]:
        m = self.manifest
        fp32 = m["models"]["fp32"]
        ops = ", ".join(f"{k}={v}" for k, v in fp32["fused_ops"].items() if k not in ("MatMul", "Gemm"))
        lines = [f"bundle: {self.bundle_dir} (task {m['task']}, opset {m['opset']}, {self.seconds:.1f}s)",
                 f"fp32 model.onnx: {ops}; max |onnx - torch| = {fp32['validation']['max_abs_diff']:.2g} "
                 f"(tolerance {fp32['validation']['tolerance']:g}, {len(fp32['validation']['cases'])} shapes)"]
        for key, q in m["models"].items():
            if q.get("precision") == "int8":
                lines.append(_int8_line(q))
        for key in ("fp16", "fp16-cuda"):
            if key in m["models"]:
                e = m["models"][key]
                v = e["validation"]
                if v.get("mode") == "structural":
                    lines.append(f"{key} {e['file']}: checked structurally ({v['reason']})")
                else:
                    lines.append(f"{key} {e['file']}: max |onnx - torch| = {v['max_abs_diff']:.2g} on CPU")
        for key in ("fp32-trt", "fp32-cuda"):
            if key in m["models"]:
                e = m["models"][key]
                lines.append(f"{key} {e['file']} ({e['graph']}, for {', '.join(e['providers'])}): max |onnx - torch| "
                             f"= {e['validation']['max_abs_diff']:.2g}"
                             + (f"; TensorRT profile {_profile_text(e['tensorrt_profile'])}"
                                if e.get("tensorrt_profile") else f"; {e.get('attention_mask', '')}"))
        return lines


def _profile_text(per_input: dict) -> str:
    first = next(iter(per_input.values()))
    return ", ".join(f"{k} {'x'.join(map(str, v))}" for k, v in first.items()) + f" (every input: {len(per_input)})"


def _int8_line(q: dict) -> str:
    """One summary line per INT8 graph: target, recipe, ops, gate figure, batch invariance."""
    quant = q["quantization"]
    counts = ", ".join(f"{k}={v}" for k, v in quant["op_counts"].items()
                       if k in ("QAttention", "MatMulIntegerToFloat", "MatMulInteger", "DynamicQuantizeMatMul",
                                "MatMul", "QuantizeLinear", "DequantizeLinear", "Attention"))
    if quant.get("mode") == "static":
        kind = f"static {quant['format']}"
    else:
        kind = f"{quant['weight_type']} weights {quant['weight_range']}, {quant['activation_scales'].split(' ')[0]} scales"
    line = f"int8 {q['file']} (target {q['target']}): {kind}; {counts}"
    acc = q["accuracy"]
    line += (f"; {acc['metric']} mean {acc['mean']:.4f}" + (f" min {acc['min']:.4f}" if acc.get("min") is not None else "")
             + f" on {acc['n']} held-out texts (loss {acc['loss']:.4f}, budget {acc['max_accuracy_loss']})")
    if quant["excluded_nodes"]:
        line += f"; kept float: {len(quant['excluded_nodes'])} of {quant['candidate_nodes']} node(s)"
    split = quant.get("outlier_split") or {}
    if split.get("channels"):
        line += f"; {split['channels']} outlier channel(s) float in {split['nodes']} MatMul(s)"
    line += f"; batch-invariance 1-cos {q['batch_invariance']['max_1_minus_cos']:.2g}"
    if q["requires"].get("u8s8_exact"):
        line += "; needs exact U8S8 (VNNI/ARM64, elsewhere the runtime sets session.x64quantprecision=1)"
    return line


class _Steps:
    """Progress callback + the JSONL log of what was measured when."""

    def __init__(self, on_step: Callable[[str], None] | None):
        self.on_step = on_step
        self.start = time.perf_counter()
        self.records: list[dict] = []

    def __call__(self, message: str, **figures) -> None:
        self.records.append({"t": round(time.perf_counter() - self.start, 3), "step": message, **figures})
        if self.on_step:
            self.on_step(message)


def _load(cfg: ExportConfig) -> tuple[BertConfig, str, object, Path]:
    """(config, task, model, tokenizer.json) of the model directory; cheap checks first."""
    if not cfg.model_dir.is_dir():
        raise CheckpointError(f"model directory {cfg.model_dir} not found",
                              "pass a directory written by edgebert or a Hugging Face BERT directory")
    model_cfg = BertConfig.load(cfg.model_dir / CONFIG_NAME)
    task = cfg.task or default_task(model_cfg.architecture)
    tok_file = find_tokenizer(cfg.model_dir)
    model = load_model(cfg.model_dir, TASK_ARCHITECTURES[task])
    return model_cfg, task, model, tok_file


def export_bundle(cfg: ExportConfig, on_step: Callable[[str], None] | None = None) -> ExportResult:
    """Export ``cfg.model_dir`` into the bundle directory ``cfg.out_dir``; see the module docstring."""
    say = _Steps(on_step)
    out = OutputDir(cfg.out_dir, "export", names=BUNDLE_OUTPUTS, overwrite=cfg.overwrite, signature=MANIFEST_NAME,
                    flags="--overwrite")
    remove_stale_work_dirs()
    say("loading checkpoint")
    model_cfg, task, model, tok_file = _load(cfg)
    tok_meta = tokenizer_metadata(tok_file)
    max_len = cfg.max_sequence_length or model_cfg.max_position_embeddings
    if max_len > model_cfg.max_position_embeddings:
        raise ConfigError(f"max sequence length {max_len} exceeds the model's "
                          f"max_position_embeddings={model_cfg.max_position_embeddings}")
    if tok_meta["vocab_size"] > model_cfg.vocab_size:
        raise CheckpointError(f"{tok_file} has {tok_meta['vocab_size']} tokens, the model only "
                              f"{model_cfg.vocab_size}", "the tokenizer belongs to another model")
    wrapped = prepare(model, task)
    names = TASK_OUTPUTS[task]
    with work_dir("export") as scratch, out.staged() as staging:
        work = Path(scratch)
        say(f"tracing to ONNX (opset {cfg.opset}, task {task})")
        raw = export_onnx(wrapped, work / "model.raw.onnx", cfg.opset, tok_meta["pad_id"])
        cases = make_cases(model_cfg.vocab_size, max_len, cfg.validation_batch_sizes,
                           cfg.validation_seq_lens, cfg.seed, tok_meta["pad_id"])
        refs = torch_reference(wrapped, cases, names)
        raw_val = validate_graph(raw, cases, refs, names, cfg.fp32_tolerance, "export")
        say("validated traced graph", max_abs_diff=raw_val["max_abs_diff"])

        say("fusing (onnxruntime transformer optimizer)")
        fused = staging / MODEL_FILES["fp32"]
        counts = fuse_bert(raw, fused, model_cfg)
        check_fusion(counts, model_cfg, task)
        fused_val = validate_graph(fused, cases, refs, names, cfg.fp32_tolerance, "fusion")
        say("validated fused graph", fused_ops=counts, max_abs_diff=fused_val["max_abs_diff"])
        models = {"fp32": {"file": MODEL_FILES["fp32"], "precision": "fp32", "graph": "fused",
                           "providers": ["cpu", "cuda"], "attention_mask": MASK_FORMATS["raw"], "fused_ops": counts,
                           "validation": fused_val,
                           "unfused_validation": {k: raw_val[k] for k in ("max_abs_diff", "tolerance")}}}
        profile = cfg.tensorrt_profile(max_len) if cfg.tensorrt else None
        gpu = GpuGraphs(raw, staging, cases, refs, names, cfg.fp32_tolerance, cfg.fp16_config(), say)
        if cfg.tensorrt:
            models["fp32-trt"] = gpu.tensorrt_fp32(profile, list(INPUT_NAMES))
        if cfg.int8:
            qcfg = cfg.int8_config()
            if qcfg.calib_seq_len > max_len:   # calibration/gate texts must fit the model's positions
                qcfg = replace(qcfg, calib_seq_len=max_len)
            shared = Int8Export(qcfg, task, raw, fused, work, tok_file, tok_meta["pad_id"], cases, refs, names,
                                cfg.fp32_tolerance, say)
            models.update(export_int8(qcfg, staging, shared, say, profile, list(INPUT_NAMES)))
        if cfg.fp16:
            models["fp16"] = gpu.fp16_graph(fused, MODEL_FILES["fp16"])
        if cfg.cuda:
            models.update(gpu.cuda(model_cfg, task))

        shutil.copyfile(tok_file, staging / tok_meta["file"])
        shutil.copyfile(cfg.model_dir / CONFIG_NAME, staging / CONFIG_NAME)
        manifest = build_manifest(task=task, cfg=model_cfg, model_dir=cfg.model_dir,
                                  architecture=model_cfg.architecture, max_len=max_len,
                                  tokenizer=tok_meta, opset=cfg.opset, models=models, trt_profile=profile,
                                  extra={"attention_mask": "raw 2-D mask (any padding side)",
                                         "export_host": export_host()})
        manifest = write_manifest(staging, manifest)
        verify_bundle(staging)
        say("bundle written", files=list(manifest["files"]))
        write_text(staging / LOG_NAME, "".join(json.dumps(r) + "\n" for r in say.records))
        _make_readable(staging)
    return ExportResult(cfg.out_dir, manifest, time.perf_counter() - say.start, say.records)


def _make_readable(folder: Path) -> None:
    """Temp files and folders are created private (0600/0700); a bundle is meant to be shipped."""
    umask = current_umask()
    os.chmod(folder, 0o777 & ~umask)
    for path in folder.iterdir():
        os.chmod(path, 0o666 & ~umask)
