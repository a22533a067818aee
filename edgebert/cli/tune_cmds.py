"""``edgebert tune``: measure, on this device, the fastest accurate way to run a bundle and keep it as the bundle's
device profile, which ``EdgeSession`` applies by default. Thin: parse, call ``edgebert.runtime.tune.tune``, print."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from edgebert.cli import options as o
from edgebert.cli.app import app, say
from edgebert.errors import ConfigError


def _shapes(value: str) -> tuple[tuple[int, int], ...]:
    out = []
    for item in (v.strip() for v in value.split(",") if v.strip()):
        try:
            b, s = (int(x) for x in item.lower().split("x"))
        except ValueError:
            raise ConfigError(f"--shapes {value!r}: {item!r} is not BATCHxSEQUENCE", "e.g. --shapes 1x128,8x64") from None
        out.append((b, s))
    return tuple(out)


def _ints(value: str | None, flag: str) -> tuple[int, ...] | None:
    if value is None:
        return None
    try:
        return tuple(int(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise ConfigError(f"{flag} {value!r} is not a comma list of whole numbers") from None


@app.command("tune")
def tune_cmd(
    bundle_dir: Annotated[Path, typer.Argument(metavar="BUNDLE", help="A bundle folder written by `edgebert export`.")],
    shapes: Annotated[str, typer.Option("--shapes", help="Comma list of BATCHxSEQUENCE to time (random ids, every "
                                                         "token real); '' with --texts: the texts only.")] = "1x128",
    texts: Annotated[Optional[Path], typer.Option("--texts", help="Real inputs (text or TSV, one per line): the "
                                                                 "whole file through the session's batching.")] = None,
    try_threads: Annotated[Optional[str], typer.Option("--try-threads", help="Comma list of intra-op thread counts "
                                                                         "to time (default: 1 to the usable "
                                                                         "CPUs).")] = None,
    graphs: Annotated[str, typer.Option("--graphs", help="int8 (every INT8 target, each gated here first) plus any "
                                                         "of fp32, int4, openvino.")] = "int8",
    try_batch_tokens: Annotated[str, typer.Option("--try-batch-tokens", help="With --texts: the padded-token caps to "
                                                                         "time (0: none).")] = "0,512,1024,2048",
    rounds: Annotated[int, typer.Option("--rounds", min=1, help="Interleaved timing rounds.")] = 10,
    max_texts: Annotated[int, typer.Option("--max-texts", min=1, help="At most this many of --texts.")] = 200,
    save: Annotated[bool, typer.Option("--save/--no-save", help="Keep the result as the bundle's device "
                                                                "profile (default) or only report it.")] = True,
    as_json: o.Json = False,
) -> None:
    """Time the bundle's accurate graphs (each gated here first) at each thread count, spinning and batch cap on
    the shapes or texts you name, and keep the fastest as this bundle's device profile on this machine."""
    from edgebert.runtime.tune import TuneConfig, tune

    cfg = TuneConfig(bundle_dir, _shapes(shapes), texts, max_texts, _ints(try_threads, "--try-threads"),
                     tuple(g.strip() for g in graphs.split(",") if g.strip()),
                     _ints(try_batch_tokens, "--try-batch-tokens") or (0,), rounds, save=save)
    from rich.console import Console

    stderr = Console(stderr=True)
    if as_json or not stderr.is_terminal:     # plain lines off a terminal (a log), none with --json
        result = tune(cfg, say=(lambda m: None) if as_json else (lambda m: say(f"tune: {m}")))
    else:                                     # a live status line on a terminal: gates, rounds, spinning
        with stderr.status("tune: starting") as status:
            result = tune(cfg, say=lambda m: status.update(f"tune: {m}"))
    if as_json:
        print(json.dumps(result.as_dict(), indent=2))
        return
    work = list(result.default_ms)
    say(f"{'candidate':<28}" + "".join(f"{w:>16}" for w in work) + f"{'vs default':>12}")
    say(f"{'default (EdgeSession)':<28}" + "".join(f"{result.default_ms[w]:>13.2f} ms" for w in work) + f"{1:>12.3f}")
    for c in sorted(result.candidates, key=lambda c: c.score):
        say(f"{c.name:<28}" + "".join(f"{c.p50_ms[w]:>13.2f} ms" for w in work) + f"{c.score:>12.3f}")
    s = result.spinning
    say(f"spinning on / off for the best: {s['on_over_off']:.3f} ({'kept on' if s['kept'] else 'off'})")
    say(f"chosen: {result.chosen}")
    say(f"profile: {result.profile_file}" if result.profile_file else "profile: not saved (--no-save)")
