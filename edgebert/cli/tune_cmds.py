"""``edgebert tune``: measure, on this device, the fastest accurate way to run a bundle and keep it as the bundle's
device profile, which ``EdgeSession`` applies by default. Thin: parse, call ``edgebert.runtime.tune.tune``, print."""

from __future__ import annotations

import json
import statistics
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
    text_batch: Annotated[Optional[int], typer.Option("--text-batch", min=1, help="With --texts: texts per call "
                                                                              "(1: one at a time, as a server "
                                                                              "answering single requests; "
                                                                              "default: EdgeSession's 32).")] = None,
    try_threads: Annotated[Optional[str], typer.Option("--try-threads", help="Comma list of intra-op thread counts "
                                                                         "to time (default: 1 to the usable "
                                                                         "CPUs).")] = None,
    graphs: Annotated[str, typer.Option("--graphs", help="int8 (every INT8 target, each gated here first) plus any "
                                                         "of fp32, int4, openvino.")] = "int8",
    try_batch_tokens: Annotated[str, typer.Option("--try-batch-tokens", help="With --texts: the padded-token caps to "
                                                                         "time (0: none).")] = "0,512,1024,2048",
    rounds: Annotated[int, typer.Option("--rounds", min=1, help="Timed runs of each workload per heat round and "
                                                              "per final block.")] = 10,
    repeats: Annotated[int, typer.Option("--repeats", min=1, help="Rotations of the finals' blocks (the heats' "
                                                                "best, spinning on and off, OpenVINO, the "
                                                                "default).")] = 3,
    max_texts: Annotated[int, typer.Option("--max-texts", min=1, help="At most this many of --texts.")] = 200,
    save: Annotated[bool, typer.Option("--save/--no-save", help="Keep the result as the bundle's device "
                                                                "profile (default) or only report it.")] = True,
    as_json: o.Json = False,
) -> None:
    """Time the bundle's accurate graphs (each gated here first) at each thread count, spinning and batch cap on
    the shapes or texts you name, and keep the fastest as this bundle's device profile on this machine."""
    from edgebert.runtime.tune import TuneConfig, tune

    cfg = TuneConfig(bundle_dir, shapes=_shapes(shapes), texts=texts, max_texts=max_texts, text_batch=text_batch,
                     threads=_ints(try_threads, "--try-threads"),
                     graphs=tuple(g.strip() for g in graphs.split(",") if g.strip()),
                     batch_tokens=_ints(try_batch_tokens, "--try-batch-tokens") or (0,), rounds=rounds, repeats=repeats,
                     save=save)
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
    _print_heats(result)
    _print_finals(result)
    s = result.spinning
    if s.get("kept") is not None:
        say(f"spinning on / off for the winner: {s['on_over_off']:.3f} ({'on' if s['kept'] else 'off'})")
    say(f"chosen: {result.chosen}")
    say(f"profile: {result.profile_file}" if result.profile_file else "profile: not saved (--no-save)")


def _print_heats(result) -> None:
    work = list(result.heats_default_ms)
    if not work:
        return
    width = {w: max(16, len(w) + 2) for w in work}
    say("heats (onnxruntime, side by side, spinning off):")
    say(f"{'candidate':<30}" + "".join(f"{w:>{width[w]}}" for w in work) + f"{'vs default':>12}")
    say(f"{'default (EdgeSession)':<30}" + "".join(f"{result.heats_default_ms[w]:>{width[w] - 3}.2f} ms" for w in work)
        + f"{1:>12.3f}")
    for c in sorted((c for c in result.candidates if c.score is not None), key=lambda c: (c.score, c.name)):
        say(f"{c.name:<30}" + "".join(f"{c.p50_ms[w]:>{width[w] - 3}.2f} ms" for w in work) + f"{c.score:>12.3f}")


def _print_finals(result) -> None:
    work = list(result.default_ms)
    width = {w: max(16, len(w) + 2) for w in work}
    say(f"finals (each in its own block, {len(result.finals[0].ratios)} repeats; p50 = median of the repeats'):")
    say(f"{'final':<34}" + "".join(f"{w:>{width[w]}}" for w in work) + f"{'vs default':>12}  per repeat")
    for f in sorted(result.finals, key=lambda f: (f.score, f.name)):
        p50 = {w: statistics.median(p[w] for p in f.p50_ms) for w in work}
        say(f"{f.name:<34}" + "".join(f"{p50[w]:>{width[w] - 3}.2f} ms" for w in work) + f"{f.score:>12.3f}  "
            + " ".join(f"{r:.3f}" for r in f.ratios))
