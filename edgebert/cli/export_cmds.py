"""``edgebert export``: checkpoint -> validated, fused ONNX bundle (+ INT8 per deployment target, + FP16).
Thin: parse, call ``exporters.export_bundle``, print."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from edgebert.bundle.task_registry import bundle_task
from edgebert.cli import options as o
from edgebert.cli.app import app, console, say


@app.command("export")
def export(
    model_dir: Annotated[Path, typer.Argument(metavar="MODEL_DIR", help="edgebert checkpoint or Hugging Face BERT "
                                                                        "directory (config.json, weights, "
                                                                        "tokenizer.json).")],
    out: o.Out,
    overwrite: o.Overwrite = False,
    task: o.task_option("embed | mlm | cls | token-cls | qa | multiple-choice (default: from the "
                        "checkpoint's architecture).") = None,
    opset: Annotated[int, typer.Option("--opset", help="ONNX opset (14..20).")] = 17,
    int8: Annotated[bool, typer.Option("--int8", help="Also write INT8 graph(s), gated on held-out text.")] = False,
    int4: Annotated[bool, typer.Option("--int4", help="With --int8: also write the small graph onnx/model_q4.onnx "
                                       "(4-bit MatMulNBits and word table, the rest 8-bit), gated like INT8; "
                                       "loaded only when asked for (precision='int4').")] = False,
    int4_block: Annotated[Optional[int], typer.Option("--int4-block", help="4-bit weights (and word-table values) per "
                                                      "scale (16..128, a power of two dividing the hidden size; default: the "
                                                      "block a --int4-aware student trained at, else 32).")] = None,
    int4_table_block: Annotated[Optional[int], typer.Option(
        "--int4-table-block", help="The 4-bit word table's values per scale (default: --int4-block's; 128 costs "
                                   "0.7 MB less than 32 on a 30,522 x 384 table).")] = None,
    int4_algorithm: Annotated[str, typer.Option(
        "--int4-algorithm", help="gptq (the default: round to nearest's grid, bytes and kernel, each weight rounded "
                                 "against the calibration text's inputs: about half its loss; a longer export) | "
                                 "rtn (round to nearest, symmetric) | hqq (fitted scales and zero points; "
                                 "onnxruntime's CPU kernel takes a slow path, 7x INT8's time on short texts).")] = "gptq",
    int4_attention: Annotated[str, typer.Option("--int4-attention", help="split (query, key and value MatMuls "
                                                "can be 4-bit, feeding MultiHeadAttention) | packed (the fused "
                                                "Attention, 8-bit).")] = "split",
    int4_accuracy_level: Annotated[int, typer.Option(
        "--int4-accuracy-level", help="MatMulNBits' compute: 4 (int8 activations, the default) | 1 (float32 "
                                      "activations: no activation rounding; slower on short texts) | 0 (onnxruntime's "
                                      "choice).")] = 4,
    int4_max_accuracy_loss: Annotated[Optional[float], typer.Option(
        "--int4-max-accuracy-loss", help="The small graph's own budget, in the gate's metric (default: "
                                         "--max-accuracy-loss, else the task's).")] = None,
    int4_rotate: Annotated[Optional[bool], typer.Option(
        "--int4-rotate/--no-int4-rotate", help="Rotate the 4-bit MatMuls' inputs (random signs, 128-wide Hadamard) "
                                               "before rounding: the same outputs, outlier weight rows spread thin, "
                                               "less 4-bit loss; a few float MatMuls more (default: on, off for a "
                                               "--int4-aware student, trained on the unrotated rounding).")] = None,
    vocab_from: Annotated[Optional[Path], typer.Option(
        "--vocab-from", help="A domain's text (one per line): keep only the word pieces it uses, plus every "
                             "character, so any text still tokenizes (words outside it cost more tokens).")] = None,
    target: o.Target = None,
    int8_mode: Annotated[str, typer.Option(
        "--int8-mode", help="dynamic (CPU integer ops on the fused graph, one graph per --target) | static "
                            "(TensorRT only: the QDQ S8S8 graph, no CPU INT8 graphs; implies --tensorrt).")] = "dynamic",
    per_channel: Annotated[Optional[bool], typer.Option(
        "--per-channel/--per-tensor", help="INT8 weight scales (default: the target's, per-channel).")] = None,
    calib: o.Calib = None,
    calib_size: Annotated[int, typer.Option("--calib-size", help="Texts that calibrate.")] = 256,
    gate_size: Annotated[Optional[int], typer.Option(
        "--gate-size", help="Held-out texts the accuracy gate measures on (default 200): of the built-in held-out "
                            "text's 202 (`edgebert check` re-measures on all 202), or of --calib's texts after "
                            "--calib-size; question answering: of --gate-data's questions, or of the 439 built-in "
                            "ones (default: all 439).")] = None,
    gate_data: Annotated[Optional[Path], typer.Option(
        "--gate-data", help="Question answering: a SQuAD JSON file of questions the model did not train on; "
                            "its first --gate-size answerable questions that are not in the --calib file gate instead "
                            "of the built-in questions (a training file's questions never gate: the --calib file "
                            "itself is refused).")] = None,
    max_accuracy_loss: o.MaxAccuracyLoss = None,
    outlier_ratio: Annotated[Optional[float], typer.Option(
        "--outlier-ratio", help="Activation channels whose calibration max exceeds this x the median "
                                "channel's are computed in float (default: the target's, 3; 0: off).")] = None,
    smooth_alpha: Annotated[Optional[float], typer.Option(
        "--smooth-alpha", help="SmoothQuant scales folded into the LayerNorms before INT8: how much of their "
                               "outputs' outlier range moves into the weights (default: the target's, 0.75; "
                               "0: off).")] = None,
    activation_scales: Annotated[Optional[str], typer.Option(
        "--activation-scales", help="calibrated (default: fixed from calibration text, batch-invariant) | "
                                    "per-call (dynamic, changes with the batch).")] = None,
    fp16: Annotated[bool, typer.Option("--fp16", help="Also write onnx/model_fp16.onnx (GPU providers).")] = False,
    tensorrt: Annotated[bool, typer.Option(
        "--tensorrt", help="Also write the TensorRT graphs: onnx/model.trt.onnx (standard ONNX ops; TensorRT "
                           "fp32 and fp16, and WebGPU) and, with --int8, onnx/model.int8.trt.onnx (QDQ S8S8).")] = False,
    trt_profile: Annotated[Optional[str], typer.Option(
        "--trt-profile", help="TensorRT shape profile of every input, BATCHxSEQ: min=1x1,opt=8x128,max=32x512 "
                              "(default max: 32 x the max length).")] = None,
    cuda: Annotated[bool, typer.Option(
        "--cuda", help="Also write the CUDA graphs onnx/model.cuda.onnx and onnx/model.fp16.cuda.onnx (1-D mask "
                       "index: cuDNN flash attention in fp16).")] = False,
    ort_format: Annotated[bool, typer.Option(
        "--ort-format", help="Also write the CPU graphs in onnxruntime's .ort format and the "
                             "required_operators.config a reduced (mobile) onnxruntime build needs "
                             "(EdgeSession(graph_format='ort') loads them).")] = False,
    max_seq_len: o.MaxSeqLen = None,
    archive: Annotated[Optional[Path], typer.Option(
        "--archive", help="Also pack the bundle into this one file to ship (.tar.gz, .tgz or .zip); EdgeSession, "
                          "check, bench and info open it as they open the folder.")] = None,
) -> None:
    """Export MODEL_DIR to an ONNX bundle: fused fp32 model.onnx, INT8 graphs per deployment target (gated
    on held-out text), optional FP16, TensorRT and CUDA graphs, tokenizer, manifest with hashes. Every graph
    is validated against PyTorch on untraced shapes."""
    from edgebert.exporters import ExportConfig, export_bundle

    archive_out = _archive_output(archive, out, overwrite)     # checked before anything is computed

    cfg = ExportConfig(model_dir=model_dir, out_dir=out, overwrite=overwrite, task=task, opset=opset, int8=int8, int8_mode=int8_mode,
                       int8_targets=target or "portable", per_channel=per_channel, calib=calib, calib_size=calib_size,
                       gate_size=gate_size, gate_data=gate_data, max_accuracy_loss=max_accuracy_loss, outlier_ratio=outlier_ratio,
                       smooth_alpha=smooth_alpha, activation_scales=activation_scales, fp16=fp16, max_sequence_length=max_seq_len,
                       tensorrt=tensorrt, trt_profile=trt_profile, cuda=cuda,
                       ort_format=ort_format, int4=int4, int4_block_size=int4_block, int4_algorithm=int4_algorithm,
                       int4_table_block=int4_table_block,
                       int4_attention=int4_attention, int4_max_accuracy_loss=int4_max_accuracy_loss,
                       int4_accuracy_level=int4_accuracy_level, int4_rotate=int4_rotate, vocab_from=vocab_from)
    result = _export_with_progress(export_bundle, cfg)
    if archive_out is not None:          # packed before the summary: what is printed never costs the archive
        from edgebert.runtime.archive import write_archive

        with archive_out.writing(published=f"the bundle folder {result.bundle_dir}") as tmp:
            write_archive(result.bundle_dir, tmp, name=archive.name)
    for line in result.summary_lines():
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    if bundle_task(result.manifest.task).has_pooling:
        from edgebert.bundle.bundle_pooling import bundle_pooling
        from edgebert.runtime.vector_pooling import choose_pooling

        pooling = choose_pooling(None, bundle_pooling(result.bundle_dir, result.manifest, verify=False))
        say(f"pooling: {pooling.describe()}" if result.manifest.pooling else "pooling: not stated by the model: "
            f"{pooling.describe()}; EdgeSession.encode and sentence-transformers both use it")
    if archive_out is not None:
        say(f"archive: {archive} ({archive.stat().st_size / 1e6:.1f} MB), one file holding the bundle")


def _export_with_progress(export_bundle, cfg):
    """A spinner naming the step on a terminal; elsewhere (a pipe, a log file) one line per step."""
    if console.is_terminal:
        with console.status("exporting", spinner="dots") as status:
            return export_bundle(cfg, on_step=lambda msg: status.update(msg))
    start = time.perf_counter()
    return export_bundle(cfg, on_step=lambda msg: say(f"[{time.perf_counter() - start:6.1f}s] export: {msg}"))


def _archive_output(archive: Path | None, out: Path, overwrite: bool):
    """The ``--archive`` file as an output (``files.outfiles``), checked before the export runs."""
    if archive is None:
        return None
    from edgebert.errors import ConfigError, OutputError
    from edgebert.files.outfiles import OutputFile
    from edgebert.runtime.archive import check_archive_name, foreign_archive

    check_archive_name(archive)
    if archive.resolve().is_relative_to(out.resolve()):
        raise ConfigError(f"--archive {archive} is inside --out {out}", "write the archive beside the bundle folder")
    if archive.is_file() and not archive.is_symlink() and archive.stat().st_size:
        what = foreign_archive(archive, "export")      # only exactly what `export --archive` writes is ours
        if what is not None:
            raise OutputError(f"--archive {archive} already exists and was not written by `edgebert export "
                              f"--archive`: it is {what}", "name a new file; edgebert never replaces a file it "
                                                           "did not write")
    return OutputFile(archive, "export", ours=lambda _: True, overwrite=overwrite, what="--archive")
