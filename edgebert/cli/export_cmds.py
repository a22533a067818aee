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
    int8: bool = typer.Option(False, "--int8", help="also write model.int8.onnx"),
    int8_mode: str = typer.Option("dynamic", help="dynamic (CPU, fused graph) | static (QDQ S8S8, "
                                                  "standard ops, for TensorRT; needs --calib)"),
    per_channel: bool = typer.Option(True, "--per-channel/--per-tensor", help="INT8 weight scales"),
    calib: Optional[Path] = typer.Option(None, help="text for calibration and the accuracy guard: one "
                                                    "sentence per line, a TSV with a 'sentence' column, "
                                                    "or WikiText raw"),
    calib_size: int = typer.Option(256, help="sentences read from --calib"),
    max_accuracy_loss: Optional[float] = typer.Option(
        None, help="INT8 budget vs fp32 on --calib text: 1 - cosine (embed), 1 - label agreement (cls), "
                   "1 - top-1 agreement (mlm); sensitive MatMuls stay float until it is met"),
    outlier_ratio: float = typer.Option(
        6.0, help="dynamic INT8 with --calib: activation channels whose calibration max exceeds this x the "
                  "median channel's are computed in float (0: off)"),
    fp16: bool = typer.Option(False, "--fp16", help="also write model.fp16.onnx (GPU providers)"),
    max_length: Optional[int] = typer.Option(None, help="max sequence length (default: the model's "
                                                        "max_position_embeddings)"),
) -> None:
    """Export MODEL_DIR to an ONNX bundle: fused fp32 model.onnx, optional INT8/FP16, tokenizer,
    manifest with hashes. Every graph is validated against PyTorch on untraced shapes."""
    from exporters import ExportConfig, export_bundle

    cfg = ExportConfig(model_dir=model_dir, out_dir=out, task=task, opset=opset, int8=int8,
                       int8_mode=int8_mode, per_channel=per_channel, calib=calib, calib_size=calib_size,
                       max_accuracy_loss=max_accuracy_loss, outlier_ratio=outlier_ratio, fp16=fp16, max_sequence_length=max_length)
    with console.status("exporting", spinner="dots") as status:
        result = export_bundle(cfg, on_step=lambda msg: status.update(msg))
    for line in result.summary_lines():
        console.print(line, highlight=False, markup=False, soft_wrap=True)
