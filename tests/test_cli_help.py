"""The help of every command, read through the Typer app (as tests/test_cli_options.py reads its options):
``-h`` and ``--version`` work, switches are plain switches (no ``<bool>`` value hint), argument names are
spelled one way (upper case, one name per concept), every command has an example in the README, and the
defaults the help states are the code's. Also: what long commands print without a terminal."""

from __future__ import annotations

import io
import re

import pytest
import typer

from conftest import REPO
from distill_helpers import run_cli
from edgebert.cli import app, main

# one spelling per concept an argument names
ARGUMENT_NAMES = {"BUNDLE", "MODEL_DIR", "TEACHER_DIR", "HF_DIR", "TEXT", "QUESTION"}


def _commands() -> dict[str, object]:
    return dict(sorted(typer.main.get_command(app).commands.items()))


def _help(capsys, *argv: str) -> str:
    code = main([*argv, "-h"])
    out = capsys.readouterr().out
    assert code == 0, argv
    return out


def _flat(text: str) -> str:
    """Help text as one line (a word the wrapping cut at its hyphen joined again)."""
    return " ".join(re.sub(r"(?<=\w)-\n\s+", "-", text).split())


def test_h_and_version_work(capsys):
    assert "Usage: edgebert [OPTIONS] COMMAND" in _help(capsys)
    for flag in ("--version", "-V"):
        assert main([flag]) == 0
        assert re.fullmatch(r"edgebert \d+\.\d+\.\d+\S*\n", capsys.readouterr().out)


@pytest.mark.parametrize("command", sorted(_commands()))
def test_every_help_reads_plainly(capsys, command):
    text = _help(capsys, command)
    assert text.startswith(f"Usage: edgebert {command} [OPTIONS]") and "-h, --help" in text
    assert "<bool>" not in text and "[default: False]" not in text            # switches take no value
    hints = re.findall(r"<([^>]+)>", text)
    assert all(h == h.lower() for h in hints), hints                           # value hints: one case


def test_switches_are_switches_and_arguments_are_spelled_one_way(capsys):
    seen = set()
    for name, command in _commands().items():
        for param in command.params:
            if param.param_type_name == "argument":
                assert re.fullmatch(r"[A-Z][A-Z_]*", param.metavar or ""), (name, param.name, param.metavar)
                seen.add(param.metavar)
            elif param.type_descriptor.annotation is bool:
                assert param.is_flag, (name, param.opts)
    assert seen == ARGUMENT_NAMES
    json_flags = {tuple(p.opts + p.secondary_opts) for c in _commands().values() for p in c.params
                  if p.name == "as_json"}
    assert json_flags == {("--json", "--no-json")}
    code = main(["check", "nowhere", "--json", "true"])
    assert code == 2 and "unexpected extra argument(s) (true)" in capsys.readouterr().err


def test_bench_writes_to_out_and_still_takes_report(capsys):
    bench = _commands()["bench"]
    names = {p.name: p for p in bench.params}
    assert names["out"].opts == ["--out", "-o"] and names["report"].hidden
    text = _help(capsys, "bench")
    assert "--out <path>" in text and "--report" not in text


def test_every_command_has_an_example_in_the_readme():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    blocks = "\n".join(re.findall(r"```(?:bash|sh|console)?\n(.*?)```", readme, flags=re.S))
    missing = [c for c in _commands() if not re.search(rf"^(\$ )?edgebert {re.escape(c)}\b", blocks, flags=re.M)]
    assert not missing, f"no example in README.md for: {missing}"
    assert "pip install 'edgebert[cpu]'" not in readme.split("## ", 2)[1]     # the install section: a checkout


def test_the_defaults_the_help_states_are_the_codes(capsys):
    from edgebert.exporters.config import ExportConfig
    from edgebert.files.textfiles import builtin_texts
    from edgebert.pipeline.config import PipelineConfig
    from edgebert.runtime.fidelity import DEFAULT_BUDGETS

    pipeline = _flat(_help(capsys, "pipeline"))
    assert f"pipeline: {PipelineConfig.max_accuracy_loss}" in pipeline
    for task, budget in DEFAULT_BUDGETS.items():
        assert f"({task}, default {budget})" in pipeline or f"({task}, {budget})" in pipeline, task
    export = _flat(_help(capsys, "export"))
    from edgebert.qa.squad_file import builtin_questions
    from edgebert.quantization.feeds import GATE_TEXTS

    assert ExportConfig.__dataclass_fields__["gate_size"].default is None         # GATE_TEXTS, or every question
    held = len(builtin_texts("held-out"))
    assert f"(default {GATE_TEXTS}): of the built-in held-out text's {held}" in export
    assert f"of the {len(builtin_questions())} built-in ones (default: all {len(builtin_questions())})" in export
    check = _flat(_help(capsys, "check"))
    assert f"the first --gate-size built-in held-out ones, {GATE_TEXTS} by default" in check
    assert f"questions: the built-in {len(builtin_questions())}" in check


# --------------------------------------------------------------------------- what runs says what it does
def _console() -> tuple[object, io.StringIO]:
    from rich.console import Console

    buffer = io.StringIO()
    return Console(file=buffer, force_terminal=False, width=200), buffer


@pytest.mark.parametrize("progress", [True, False])
def test_training_prints_log_lines_without_a_bar(progress):
    """--no-progress, or an output that is not a terminal: a line per logging step and evaluation."""
    from edgebert.training.config import TrainConfig
    from edgebert.training.progress import Progress

    console, buffer = _console()
    cfg = TrainConfig(max_steps=4, progress=progress)
    with Progress(console, cfg, enabled=True, start=0) as bar:
        bar.update(2, {"loss": 1.5, "lr": 1e-4, "tokens_per_s": 900.0})
        bar.update(4, {"eval_accuracy": 0.75})
    assert buffer.getvalue().splitlines() == ["step 2/4  loss 1.5000  lr 1.00e-04  900 tok/s",
                                              "step 4/4  eval_accuracy 0.7500"]
    console, buffer = _console()
    with Progress(console, cfg, enabled=False, start=0) as bar:                   # not the main process
        bar.update(2, {"loss": 1.5, "lr": 1e-4, "tokens_per_s": 900.0})
    assert buffer.getvalue() == ""


def test_bench_prints_a_line_per_step_without_a_terminal(capsys):
    from types import SimpleNamespace

    from edgebert.bench.runner import _Log

    with _Log(SimpleNamespace(report_dir=None, progress=True), None) as log:
        log.plan(2)
        log.step("cpu fp32 batch 1 x 16")
        log.say("cpu int8: opening the session")
    assert capsys.readouterr().err.splitlines() == ["bench: cpu fp32 batch 1 x 16",
                                                    "bench: cpu int8: opening the session"]


def test_info_says_which_providers_run_here_and_why_not_the_others(capsys):
    from edgebert.runtime.providers import probe
    from edgebert.system.environment import usable_cpus

    code, out, err = run_cli(capsys, "info")
    assert code == 0, err
    assert f"threads: {usable_cpus()} CPU(s) usable by this process" in out
    usable = [name for name in ("cpu", "cuda", "tensorrt") if probe(name).available]
    assert f"providers usable here: {', '.join(usable)} (" in out
    for name in {"cuda", "tensorrt"} - set(usable):
        assert f"provider {name}: not usable here: {probe(name).reason}" in out


def test_a_folder_holding_another_programs_files_is_refused_naming_them(tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    for name in ("notes.txt", "photo.png"):
        (out / name).write_text("the user's")
    code, _, err = run_cli(capsys, "export", tmp_path / "no-model", "--out", out)
    assert code == 2 and err.strip() == (f"error: {out} is not empty and was not written by `edgebert export` "
                                         "(it holds notes.txt, photo.png) (choose a new or empty folder)")
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "photo.png"]


def test_makefile_demo_never_deletes_silently():
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    assert "rm -rf $(RUNS)/demo" not in makefile and "edgebert pipeline --out $(RUNS)/demo --overwrite" in makefile
    gitignore = (REPO / ".gitignore").read_text(encoding="utf-8").split()
    assert {"/bundles/", "/reports/", "runs/"} <= set(gitignore)     # the README examples' output folders


def test_the_readme_is_a_guide_and_the_write_ups_live_beside_the_results():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    sections = re.findall(r"^## (.+)$", readme, flags=re.M)
    guide = ["Install", "Two commands", "Commands", "Runtime API (torch-free)", "Figures"]
    assert [s for s in sections if s in guide] == guide              # in this order (other sections may join)
    assert len(readme.splitlines()) < 450
    for link in re.findall(r"\]\((benchmarks/results/[^)]+)\)", readme):
        assert (REPO / link).exists(), link
    assert "## INT8 on every CPU" in (REPO / "benchmarks" / "results" / "README_figures.md").read_text(encoding="utf-8")


def test_the_training_eta_counts_the_held_out_evaluations():
    """The ETA after the first step names the evaluations still to come; once one is timed, the ETA counts
    them (a preset whose held-out evaluation dominates once said "~2 min (evaluations not counted)")."""
    from edgebert.training.config import TrainConfig
    from edgebert.training.progress import Progress, evaluations_left

    cfg = TrainConfig(max_steps=100, eval_every=25, progress=False)
    assert [evaluations_left(cfg, s, 100) for s in (0, 1, 25, 26, 99)] == [4, 4, 3, 3, 1]
    assert evaluations_left(TrainConfig(max_steps=90, eval_every=25), 0, 90) == 4           # 25, 50, 75 and 90
    assert evaluations_left(TrainConfig(max_steps=90, eval_every=25), 0, 60) == 2           # stopped at 60
    console, buffer = _console()
    with Progress(console, cfg, enabled=True, start=0) as bar:
        bar.first_step(1, 0.5, 100)
        bar.first_eval(25, 30.0, 100)
    first, again = buffer.getvalue().splitlines()
    assert first == ("step 1/100 took 0.50 s: ETA ~50 s for the remaining 99 steps; 4 held-out evaluations to add "
                     "(timed at the first, then the ETA again)")
    assert again == "evaluation at step 25 took 30.0 s: ETA ~2 min for the remaining 75 steps and 3 evaluations"
