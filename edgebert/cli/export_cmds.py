"""``edgebert export``: checkpoint -> validated, fused ONNX bundle (+ INT8, + FP16). Thin: parse, call
``exporters.export_bundle``, print."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .app import app, console


@app.command("export")
def export(
    model_dir: Path = typer.Argument(..., help="edgebert checkpoint or Hugging Face BERT directory "
                                               "(config.json, weights, tokenizer.json)"),
    out: Path = typer.Option(..., "--out", "-o", help="bundle directory to write (replaced atomically)"),
    task: Optional[str] = typer.Option(None, help="embed | mlm | cls (default: from the checkpoint's "
                                                  "architecture)"),
    opset: int = typer.Option(17, help="ONNX opset (14..20)"),
    int8: bool = typer.Option(False, "--int8", help="also write INT8 graph(s), gated on held-out text"),
    target: str = typer.Option("portable", "--target", help="INT8 deployment target(s), comma list: portable "
                               "(any x86-64/ARM64 CPU) | x86-avx2 | x86-vnni | arm64 | host (this machine). "
                               "The first is the default graph; the runtime picks per device"),
    int8_mode: str = typer.Option("dynamic", help="dynamic (CPU integer ops, fused graph, per --target) | "
                                                  "static (QDQ S8S8, standard ops, for TensorRT)"),
    per_channel: Optional[bool] = typer.Option(None, "--per-channel/--per-tensor",
                                               help="INT8 weight scales (default: the target's, per-channel)"),
    calib: Optional[Path] = typer.Option(None, help="calibration text (default: the built-in English text): one "
                                                    "sentence per line, a TSV with a 'sentence' column, or "
                                                    "WikiText raw; the texts after the first --calib-size are "
                                                    "held out for the accuracy gate"),
    calib_size: int = typer.Option(256, help="texts that calibrate"),
    gate_size: int = typer.Option(200, help="held-out texts the accuracy gate measures on"),
    max_accuracy_loss: Optional[float] = typer.Option(
        None, help="INT8 budget vs fp32 on held-out text: 1 - mean cosine (embed, default 0.005), 1 - label "
                   "agreement (cls, 0.01), 1 - top-1 agreement (mlm, 0.02); sensitive nodes stay float until met"),
    outlier_ratio: Optional[float] = typer.Option(
        None, help="activation channels whose calibration max exceeds this x the median channel's are "
                   "computed in float (default: the target's, 3; 0: off)"),
    activation_scales: Optional[str] = typer.Option(
        None, help="calibrated (default: fixed from calibration text, batch-invariant) | per-call (dynamic)"),
    fp16: bool = typer.Option(False, "--fp16", help="also write model.fp16.onnx (GPU providers)"),
    max_length: Optional[int] = typer.Option(None, help="max sequence length (default: the model's "
                                                        "max_position_embeddings)"),
) -> None:
    """Export MODEL_DIR to an ONNX bundle: fused fp32 model.onnx, optional INT8/FP16, tokenizer,
    manifest with hashes. Every graph is validated against PyTorch on untraced shapes."""
    from exporters import ExportConfig, export_bundle

    cfg = ExportConfig(model_dir=model_dir, out_dir=out, task=task, opset=opset, int8=int8, int8_mode=int8_mode,
                       int8_targets=tuple(t.strip() for t in target.split(",") if t.strip()),
                       per_channel=per_channel, calib=calib, calib_size=calib_size, gate_size=gate_size,
                       max_accuracy_loss=max_accuracy_loss, outlier_ratio=outlier_ratio,
                       activation_scales=activation_scales, fp16=fp16, max_sequence_length=max_length)
    with console.status("exporting", spinner="dots") as status:
        result = export_bundle(cfg, on_step=lambda msg: status.update(msg))
    for line in result.summary_lines():
        console.print(line, highlight=False, markup=False, soft_wrap=True)
