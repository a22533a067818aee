"""CLI commands: ``edgebert bench`` (providers x precisions x shapes, with reports) and
``edgebert attention`` (draw one attention map)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from ..errors import ConfigError
from .app import app, console


def _names(text: str | None) -> tuple[str, ...] | None:
    if text is None:
        return None
    return tuple(t.strip() for t in text.split(",") if t.strip())


def _ints(option: str, text: str | None) -> tuple[int, ...] | None:
    names = _names(text)
    if names is None:
        return None
    try:
        return tuple(int(t) for t in names)
    except ValueError:
        raise ConfigError(f"{option} {text!r} must be a comma list of integers",
                          f"e.g. {option} 1,8,32") from None


_BENCH_HELP = {
    "providers": "Comma list of cpu,cuda,tensorrt; unavailable ones are reported with the reason "
                 "(default: all three).",
    "precisions": "Comma list of fp32,int8,fp16 (default: fp32,int8).",
    "batch": "Comma list of batch sizes (default: 1,8,32).",
    "seq": "Comma list of sequence lengths (default: 16,64,128).",
    "lengths_from": "Text or GLUE TSV file whose real length mix is replayed (dynamic vs padded to the "
                    "largest --seq).",
    "reference": "Model directory timed with PyTorch fp32 in the same run (speedup, accuracy columns).",
    "max_seconds": "Stop a shape's timed runs after this long, at least 3 runs (default: 10).",
    "report": "Write report.json, report.md, latency.png and bench.jsonl into this directory.",
}


@app.command("bench")
def bench(
    bundle_dir: Path = typer.Argument(..., help="Bundle directory written by `edgebert export`."),
    providers: Optional[str] = typer.Option(None, "--providers", help=_BENCH_HELP["providers"]),
    precisions: Optional[str] = typer.Option(None, "--precisions", help=_BENCH_HELP["precisions"]),
    batch: Optional[str] = typer.Option(None, "--batch", help=_BENCH_HELP["batch"]),
    seq: Optional[str] = typer.Option(None, "--seq", help=_BENCH_HELP["seq"]),
    lengths_from: Optional[Path] = typer.Option(None, "--lengths-from", help=_BENCH_HELP["lengths_from"]),
    max_texts: Optional[int] = typer.Option(None, "--max-texts", help="Replay at most this many texts."),
    reference: Optional[Path] = typer.Option(None, "--reference", help=_BENCH_HELP["reference"]),
    threads: Optional[int] = typer.Option(None, "--threads", help="onnxruntime/torch intra-op threads."),
    warmup: Optional[int] = typer.Option(None, "--warmup", help="Untimed runs per shape (default: 5)."),
    iters: Optional[int] = typer.Option(None, "--iters", help="Timed runs per shape (default: 50)."),
    max_seconds: Optional[float] = typer.Option(None, "--max-seconds", help=_BENCH_HELP["max_seconds"]),
    preset: str = typer.Option("default", "--preset", help="quick | default | full (options override it)."),
    report: Optional[Path] = typer.Option(None, "--report", help=_BENCH_HELP["report"]),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON instead of tables."),
) -> None:
    """Benchmark a bundle per provider x precision x batch x seq against the PyTorch reference."""
    from ..bench import BenchConfig, print_report, run_bench

    overrides = {
        "providers": _names(providers), "precisions": _names(precisions), "batches": _ints("--batch", batch),
        "seqs": _ints("--seq", seq), "lengths_from": lengths_from, "max_texts": max_texts,
        "reference": reference, "threads": threads, "warmup": warmup, "iters": iters,
        "max_seconds": max_seconds, "report_dir": report,
    }
    config = BenchConfig.preset(preset, bundle_dir, progress=not as_json,
                                **{k: v for k, v in overrides.items() if v is not None})
    result = run_bench(config)
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    print_report(result, console)
    if report is not None:
        console.print(f"wrote {report}/report.json, report.md, latency.png, bench.jsonl", highlight=False,
                      soft_wrap=True)


@app.command("attention")
def attention(
    model_dir: Path = typer.Argument(..., help="Model directory with config.json, weights, tokenizer.json."),
    text: str = typer.Argument(..., help="The text to look at."),
    layer: int = typer.Option(-1, "--layer", help="Layer index (0-based; negative counts from the end)."),
    head: Optional[int] = typer.Option(None, "--head", help="Head index (0-based); omit: mean over heads."),
    out: Path = typer.Option(Path("attn.png"), "--out", help="PNG file to write."),
    pair: Optional[str] = typer.Option(None, "--pair", help="Optional second text (sentence-pair input)."),
) -> None:
    """Draw the attention probabilities of one layer/head of a PyTorch model as a heat map."""
    from ..attention_map import plot_attention

    result = plot_attention(model_dir, text, out, layer=layer, head=head, pair=pair)
    console.print(f"wrote {result.path} (layer {result.layer}, {result.head_label}, "
                  f"{len(result.tokens)} tokens)", highlight=False, soft_wrap=True)
