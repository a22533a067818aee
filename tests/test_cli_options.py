"""One set of CLI options: walks every command of the Typer app and fails when one option gets two
spellings (one destination, two flags; one flag, two destinations; one concept, two names) or when a
command re-declares an option that ``edgebert.cli.options`` declares once."""

from __future__ import annotations

import typing
from collections import defaultdict
from itertools import combinations

import pytest
import typer

from edgebert.cli import app, options

TRAINING_FAMILY = ("pretrain", "finetune", "distill", "evaluate", "pipeline")
# Flags whose words contain another flag's words, yet name a different thing (reviewed one by one).
DISTINCT_CONCEPTS = {
    ("--corpus", "--eval-corpus"),          # training text / held-out text
    ("--corpus", "--corpus-format"),        # the text / how to read it
    ("--train", "--max-train-examples"),    # the training file / a cap on its examples
    ("--vocab", "--vocab-size"),            # an existing vocabulary / the size of one to train
    ("--batch-size", "--eval-batch-size"),  # examples per optimizer step / per evaluation forward pass
    ("--data", "--downstream-data"),        # the file a command scores / the folder of the held-out embedding sets
    ("--hidden", "--alpha-hidden"),         # the student's width / the weight of the hidden-state loss term
}


def _options() -> list[tuple[str, object]]:
    """(command, click option) for every option of every command."""
    group = typer.main.get_command(app)
    return [(name, p) for name, cmd in sorted(group.commands.items()) for p in cmd.params
            if p.param_type_name == "option"]


def _long(param) -> tuple[str, ...]:
    return tuple(f for f in (*param.opts, *param.secondary_opts) if f.startswith("--"))


def _words(flag: str) -> list[str]:
    return flag.lstrip("-").split("-")


def _one_concept(a: str, b: str) -> bool:
    """True when one flag's words appear, in order and together, inside the other's (``--warmup`` in
    ``--warmup-steps``): the shape every past drift had."""
    short, long = sorted((_words(a), _words(b)), key=len)
    return a != b and any(long[i:i + len(short)] == short for i in range(len(long) - len(short) + 1))


def test_the_detector_catches_the_drifts_this_cli_had():
    for old, new in (("--warmup", "--warmup-steps"), ("--format", "--corpus-format"),
                     ("--layers", "--student-layers"), ("--preset", "--train-preset")):
        assert _one_concept(old, new)
    assert not _one_concept("--max-steps", "--distill-steps") and not _one_concept("--lr", "--layers")


def test_one_destination_one_spelling_across_every_command():
    seen: dict[str, dict[tuple, list[str]]] = defaultdict(lambda: defaultdict(list))
    for command, p in _options():
        seen[p.name][(_long(p), p.is_flag, p.multiple)].append(command)
    drift = {dest: dict(forms) for dest, forms in seen.items() if len(forms) > 1}
    assert not drift, f"one option, several spellings: {drift}"


def test_one_flag_one_destination_across_every_command():
    dests: dict[str, set[str]] = defaultdict(set)
    for _, p in _options():
        for flag in _long(p):
            dests[flag].add(p.name)
    assert not {f: d for f, d in dests.items() if len(d) > 1}


def test_one_concept_one_name_in_the_training_commands():
    flags = sorted({f for command, p in _options() if command in TRAINING_FAMILY for f in p.opts
                    if f.startswith("--")})
    assert {"--preset", "--warmup-steps", "--warmup-ratio", "--corpus-format", "--layers", "--max-steps"} <= set(flags)
    pairs = {tuple(sorted(pair)) for pair in combinations(flags, 2) if _one_concept(*pair)}
    distinct = {tuple(sorted(p)) for p in DISTINCT_CONCEPTS}
    assert pairs <= distinct, pairs - distinct


def _declared_once() -> dict[str, set[str]]:
    """flag -> helps of the ``Annotated`` aliases that ``edgebert.cli.options`` declares it in."""
    out: dict[str, set[str]] = defaultdict(set)
    for value in vars(options).values():
        if typing.get_origin(value) is typing.Annotated:
            info = typing.get_args(value)[1]
            # in Annotated, typer takes the first positional (here the flag) as ``default``
            for flag in (info.default, *info.param_decls):
                for part in str(flag).split("/"):
                    if part.startswith("--"):
                        out[part].add(info.help)
    return out


def test_shared_options_are_the_declared_ones():
    declared = _declared_once()
    assert len(declared) > 25
    for command, p in _options():
        for flag in _long(p):
            if flag in declared:
                assert p.help in declared[flag], (command, flag)


@pytest.mark.parametrize("command", ["pretrain", "finetune", "distill"])
def test_training_commands_take_every_engine_option(command):
    """Every TrainConfig setting a user can give one training command, they can give all three."""
    group = typer.main.get_command(app)
    names = {p.name for p in group.commands[command].params}
    engine = set(options.ENGINE_OPTIONS)
    assert engine <= names, engine - names
