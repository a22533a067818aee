"""``edgebert import-hf HF_DIR --out DIR``: a Hugging Face BERT as a verified edgebert checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from edgebert.cli import options as o
from edgebert.cli.app import app, say


@app.command("import-hf")
def import_hf_cmd(
    src: Annotated[Path, typer.Argument(metavar="HF_DIR", help="Hugging Face BERT directory (config.json + "
                                                               "model.safetensors or pytorch_model.bin, tokenizer "
                                                               "files; a sentence-transformers model's modules.json "
                                                               "and pooling config).")],
    out: o.Out,
    architecture: Annotated[Optional[str], typer.Option(
        "--architecture", "-a", help="Import as this architecture instead of the source's "
                                     "(e.g. BertModel to keep only the encoder).")] = None,
    overwrite: o.Overwrite = False,
) -> None:
    """Import a Hugging Face BERT as an edgebert checkpoint (verified to reload with identical outputs)."""
    from edgebert.stages.import_hf import convert_hf

    report = convert_hf(src, out, architecture=architecture, overwrite=overwrite)
    arch = report.architecture
    if arch != report.source_architecture:
        arch += f" (source: {report.source_architecture})"
    say(f"imported {report.src} -> {report.out_dir}")
    say(f"  architecture: {arch}, {report.num_parameters / 1e6:.2f}M parameters, "
         f"from {report.weights_file} ({', '.join(report.source_dtypes)})")
    if report.dropped:
        say(f"  dropped {len(report.dropped)} source key(s):")
        for key, why in report.dropped.items():
            say(f"    {key}: {why}")
    else:
        say("  dropped: nothing")
    tok = ", ".join(report.tokenizer_files) or "none"
    if report.tokenizer_built_from_vocab:
        tok += " (tokenizer.json built from vocab.txt)"
    say(f"  tokenizer: {tok}")
    if report.pooling is not None:
        say(f"  pooling: {report.pooling.describe()}, kept for export (modules.json, 1_Pooling/config.json)")
    for note in report.notes:
        say(f"  note: {note}")
    say(f"  reload check: max abs diff {report.max_abs_diff:g} vs the source weights")
