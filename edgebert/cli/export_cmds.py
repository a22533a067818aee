"""``edgebert export``: checkpoint -> validated, fused ONNX bundle (+ INT8 per deployment target, + FP16).
Thin: parse, call ``exporters.export_bundle``, print."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from . import options as o
from .app import app, console


@app.command("export")
def export(
    model_dir: Annotated[Path, typer.Argument(help="edgebert checkpoint or Hugging Face BERT directory "
                                                   "(config.json, weights, tokenizer.json).")],
    out: o.Out,
    overwrite: o.Overwrite = False,
    task: o.task_option("embed | mlm | cls | token-cls (default: from the checkpoint's architecture).") = None,
    opset: Annotated[int, typer.Option("--opset", help="ONNX opset (14..20).")] = 17,
    int8: Annotated[bool, typer.Option("--int8", help="Also write INT8 graph(s), gated on held-out text.")] = False,
    target: o.Target = None,
    int8_mode: Annotated[str, typer.Option(
        "--int8-mode", help="dynamic (CPU integer ops on the fused graph, one graph per --target) | static "
                            "(TensorRT only: the QDQ S8S8 graph, no CPU INT8 graphs; implies --tensorrt).")] = "dynamic",
    per_channel: Annotated[Optional[bool], typer.Option(
        "--per-channel/--per-tensor", help="INT8 weight scales (default: the target's, per-channel).")] = None,
    calib: o.Calib = None,
    calib_size: Annotated[int, typer.Option("--calib-size", help="Texts that calibrate.")] = 256,
    gate_size: Annotated[int, typer.Option("--gate-size", help="Held-out texts the accuracy gate measures on.")] = 200,
    max_accuracy_loss: o.MaxAccuracyLoss = None,
    outlier_ratio: Annotated[Optional[float], typer.Option(
        "--outlier-ratio", help="Activation channels whose calibration max exceeds this x the median "
                                "channel's are computed in float (default: the target's, 3; 0: off).")] = None,
    activation_scales: Annotated[Optional[str], typer.Option(
        "--activation-scales", help="calibrated (default: fixed from calibration text, batch-invariant) | "
                                    "per-call (dynamic, changes with the batch).")] = None,
    fp16: Annotated[bool, typer.Option("--fp16", help="Also write model.fp16.onnx (GPU providers).")] = False,
    tensorrt: Annotated[bool, typer.Option(
        "--tensorrt", help="Also write the TensorRT graphs: model.trt.onnx (standard ONNX ops; TensorRT fp32 "
                           "and fp16) and, with --int8, model.int8.trt.onnx (QDQ S8S8).")] = False,
    trt_profile: Annotated[Optional[str], typer.Option(
        "--trt-profile", help="TensorRT shape profile of every input, BATCHxSEQ: min=1x1,opt=8x128,max=32x512 "
                              "(default max: 32 x the max length).")] = None,
    cuda: Annotated[bool, typer.Option(
        "--cuda", help="Also write the CUDA graphs model.cuda.onnx and model.fp16.cuda.onnx (1-D mask "
                       "index: flash / memory-efficient attention).")] = False,
    max_seq_len: o.MaxSeqLen = None,
) -> None:
    """Export MODEL_DIR to an ONNX bundle: fused fp32 model.onnx, INT8 graphs per deployment target (gated
    on held-out text), optional FP16, TensorRT and CUDA graphs, tokenizer, manifest with hashes. Every graph
    is validated against PyTorch on untraced shapes."""
    from exporters import ExportConfig, export_bundle

    targets = tuple(t.strip() for t in (target or "portable").split(",") if t.strip())
    cfg = ExportConfig(model_dir=model_dir, out_dir=out, overwrite=overwrite, task=task, opset=opset, int8=int8, int8_mode=int8_mode,
                       int8_targets=targets, per_channel=per_channel, calib=calib, calib_size=calib_size,
                       gate_size=gate_size, max_accuracy_loss=max_accuracy_loss, outlier_ratio=outlier_ratio,
                       activation_scales=activation_scales, fp16=fp16, max_sequence_length=max_seq_len,
                       tensorrt=tensorrt, trt_profile=trt_profile, cuda=cuda)
    with console.status("exporting", spinner="dots") as status:
        result = export_bundle(cfg, on_step=lambda msg: status.update(msg))
    for line in result.summary_lines():
        console.print(line, highlight=False, markup=False, soft_wrap=True)
