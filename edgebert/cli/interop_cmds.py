"""CLI commands for Hugging Face interop: ``edgebert import-hf SRC --out DIR``."""

from __future__ import annotations

from pathlib import Path

import typer

from .app import app, console


def _say(text: str) -> None:
    console.print(text, highlight=False, markup=False, soft_wrap=True)


@app.command("import-hf")
def import_hf_cmd(
    src: Path = typer.Argument(..., help="Hugging Face BERT directory (config.json + model.safetensors "
                                         "or pytorch_model.bin, tokenizer files)."),
    out: Path = typer.Option(..., "--out", "-o", help="Output edgebert checkpoint directory."),
    architecture: str | None = typer.Option(None, "--architecture", "-a",
                                     help="Import as this architecture instead of the source's "
                                          "(e.g. BertModel to keep only the encoder)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace --out if it is not empty."),
) -> None:
    """Import a Hugging Face BERT as an edgebert checkpoint (verified to reload with identical outputs)."""
    from ..hf_interop import convert_hf

    report = convert_hf(src, out, architecture=architecture, overwrite=overwrite)
    arch = report.architecture
    if arch != report.source_architecture:
        arch += f" (source: {report.source_architecture})"
    _say(f"imported {report.src} -> {report.out_dir}")
    _say(f"  architecture: {arch}, {report.num_parameters / 1e6:.2f}M parameters, "
         f"from {report.weights_file} ({', '.join(report.source_dtypes)})")
    if report.dropped:
        _say(f"  dropped {len(report.dropped)} source key(s):")
        for key, why in report.dropped.items():
            _say(f"    {key}: {why}")
    else:
        _say("  dropped: nothing")
    tok = ", ".join(report.tokenizer_files) or "none"
    if report.tokenizer_built_from_vocab:
        tok += " (tokenizer.json built from vocab.txt)"
    _say(f"  tokenizer: {tok}")
    for note in report.notes:
        _say(f"  note: {note}")
    _say(f"  reload check: max abs diff {report.max_abs_diff:g} vs the source weights")
