"""``edgebert attention``: draw one layer/head's attention probabilities as a heat map."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from edgebert.cli import options as o
from edgebert.cli.app import app, say


@app.command("attention")
def attention(
    model_dir: Annotated[Path, typer.Argument(metavar="MODEL_DIR",
                                              help="Model directory with config.json, weights, tokenizer.json.")],
    text: Annotated[str, typer.Argument(metavar="TEXT", help="The text to look at.")],
    layer: Annotated[int, typer.Option("--layer", help="Layer index (0-based; negative counts from the end).")] = -1,
    head: Annotated[Optional[int], typer.Option("--head", help="Head index (0-based); omit: mean over heads.")] = None,
    out: o.OutFile = Path("attn.png"),
    pair: Annotated[Optional[str], typer.Option("--pair", help="Optional second text (sentence-pair input).")] = None,
    overwrite: o.Overwrite = False,
) -> None:
    """Draw the attention probabilities of one layer/head of a PyTorch model as a heat map (--out: a
    new file, or with --overwrite a picture this command drew before)."""
    from edgebert.stages.attention import plot_attention

    result = plot_attention(model_dir, text, out, layer=layer, head=head, pair=pair, overwrite=overwrite)
    say(f"wrote {result.path} (layer {result.layer}, {result.head_label}, {len(result.tokens)} tokens)")
