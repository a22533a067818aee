"""``edgebert bench``: a bundle per provider x precision x batch x seq, against the PyTorch reference."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from edgebert.cli import options as o
from edgebert.cli.app import app, console
from edgebert.errors import ConfigError


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


def _opt(flag: str, help: str, kind=str):
    return Annotated[Optional[kind], typer.Option(flag, help=help)]


@app.command("bench")
def bench(
    bundle_dir: Annotated[Path, typer.Argument(metavar="BUNDLE", help="Bundle folder or archive written by "
                                                                    "`edgebert export`.")],
    providers: _opt("--providers", "Comma list of cpu,cuda,tensorrt; unavailable ones are reported with "
                                   "the reason (default: all three).") = None,
    precisions: _opt("--precisions", "Comma list of fp32,int8,fp16,int4 (default: fp32,int8; int4: export --int4).") = None,
    batch: _opt("--batch", "Comma list of batch sizes (default: 1,8,32).") = None,
    seq: _opt("--seq", "Comma list of sequence lengths (default: 16,64,128).") = None,
    lengths_from: o.LengthsFrom = None,
    mix_modes: _opt("--mix-modes", "How the length mix is replayed: dynamic (each batch padded to its "
                                   "longest text), padded (to the longest --seq); default both.") = None,
    data: _opt("--data", "token-cls bundles: a CoNLL file, scored in entity F1; qa bundles: a SQuAD JSON "
                         "file, scored in EM / F1 (its windows are the length mix). Every path, the PyTorch "
                         "reference too.", Path) = None,
    max_texts: _opt("--max-texts", "Replay (and with --data, score) at most this many texts.", int) = None,
    reference: _opt("--reference", "Model directory timed with PyTorch fp32 in the same run (speedup, "
                                   "accuracy columns).", Path) = None,
    threads: o.Threads = None,
    warmup: _opt("--warmup", "Untimed runs per shape (default: 5).", int) = None,
    iters: _opt("--iters", "Timed runs per shape (default: 50).", int) = None,
    max_seconds: _opt("--max-seconds", "Stop a shape's timed runs after this long, at least 3 runs "
                                       "(default: 10).", float) = None,
    preset: o.preset_option("quick | default | full | gpu (cuda, tensorrt x fp32/fp16/int8, batch to 128, "
                            "seq to 512); options override it; default default") = None,
    out: o.ReportDir = None,
    report: Annotated[Optional[Path], typer.Option("--report", hidden=True, help="Old name of --out.")] = None,
    as_json: o.Json = False,
) -> None:
    """Benchmark a bundle per provider x precision x batch x seq against the PyTorch reference."""
    from edgebert.bench import BenchConfig, measure, print_report
    from edgebert.runtime.archive import bundle_folder

    if out is not None and report is not None and out != report:
        raise ConfigError("--out and --report (its old name) name different folders", "pass --out only")
    report = out if out is not None else report
    bundle_dir = bundle_folder(bundle_dir)

    overrides = {
        "providers": _names(providers), "precisions": _names(precisions), "batches": _ints("--batch", batch),
        "seqs": _ints("--seq", seq), "lengths_from": lengths_from, "mix_modes": _names(mix_modes),
        "data": data, "max_texts": max_texts,
        "reference": reference, "threads": threads, "warmup": warmup, "iters": iters,
        "max_seconds": max_seconds, "report_dir": report,
    }
    config = BenchConfig.preset(preset or "default", bundle_dir, progress=not as_json,
                                **{k: v for k, v in overrides.items() if v is not None})
    result = measure(config)
    if as_json:
        typer.echo(json.dumps(result.to_dict(), indent=2))
        return
    print_report(result, console)
    if report is not None:
        plot = ", latency.png" if (report / "latency.png").is_file() else \
            " (latency.png needs matplotlib: pip install 'edgebert[train]')"
        console.print(f"wrote {report}/report.json, report.md, bench.jsonl{plot}", highlight=False, markup=False,
                      soft_wrap=True)
