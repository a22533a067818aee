"""The README is a path a newcomer walks top to bottom: read without running anything, every command's input is made
by an earlier command or shipped (``examples/data/``, ``../shared/data`` as ``$D``), every ``--out`` a command reuses
says ``--overwrite`` (or ``--resume``), and no command holds a placeholder (``MODEL_DIR``, ``...``)."""

from __future__ import annotations

import re
import shlex

from conftest import REPO

# options whose value is a path a command reads / writes
INPUTS = ("--input", "--context", "--corpus", "--eval-corpus", "--train", "--dev", "--data", "--calib", "--reference",
          "--lengths-from", "--vocab", "--init", "--gate-data", "--downstream-data", "--vocab-from", "--documents",
          "--retriever")
OUTPUTS = ("--out", "--output", "--archive", "--report")
# commands whose first positional argument is a model folder or a bundle
READS_FIRST = ("import-hf", "finetune", "distill", "evaluate", "export", "check", "pack", "info", "answer", "batch",
               "bench", "attention", "triton-repo", "rerank", "tune")
SKIPPED = ("pip ", "python -m venv", "cd ", "make ")          # the install lines and the two commands


def commands(text: str) -> list[str]:
    """The shell lines of the README's ``bash`` blocks, continuation lines joined, in order."""
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip() and not line.startswith(SKIPPED):
                lines.append(line.strip())
    return lines


def _edgebert_args(segment: list[str]) -> list[str] | None:
    """The arguments from the subcommand on, where ``segment`` runs edgebert (directly or as ``-m edgebert.cli``)."""
    for i, token in enumerate(segment):
        if token == "edgebert" or token == "edgebert.cli":
            return segment[i + 1:]
    return None


def walk(text: str, shipped=lambda path: False) -> list[str]:
    """What breaks the path: one message per problem (empty: the README walks)."""
    made: set[str] = set()
    targets: dict[str, set[str]] = {}       # a bundle export made -> the graphs it holds for --target
    problems = []
    for line in commands(text):
        tokens = shlex.split(line, comments=True)
        segments, current = [], []
        for token in tokens:
            if token == "|":
                segments.append(current)
                current = []
            else:
                current.append(token)
        segments.append(current)
        for segment in segments:
            if segment and segment[0] == "cat":
                inputs, outputs, args = segment[1:], [], None
            else:
                args = _edgebert_args(segment)
                if args is None:
                    problems.append(f"{line!r}: not an edgebert command")
                    continue
                inputs, outputs = [], []
                for option, value in zip(args, args[1:]):
                    if option in INPUTS:
                        inputs.append(value)
                    elif option in OUTPUTS:
                        outputs.append(value)
                positional = [a for a in args[1:2] if not a.startswith("-")]
                if args and args[0] in READS_FIRST and positional:
                    inputs.append(positional[0])
            for token in (args or segment):
                if re.fullmatch(r"[A-Z][A-Z_]{2,}", token) or token == "...":
                    problems.append(f"{line!r}: the placeholder {token!r}")
            for path in inputs:
                if path == "-" or path.startswith("$("):
                    continue
                if not (path in made or shipped(path) or any(path.startswith(m.rstrip("/") + "/") for m in made)):
                    problems.append(f"{line!r}: reads {path}, which no earlier command makes and nothing ships")
            options = dict(zip(args or [], (args or [])[1:]))
            if args and args[0] in ("pack", "check") and "--target" in options and inputs:
                held = targets.get(inputs[-1])
                if held is not None and options["--target"] not in held:
                    problems.append(f"{line!r}: --target {options['--target']}, which the export of {inputs[-1]} "
                                    f"does not make ({', '.join(sorted(held))})")
            reuse = {"--overwrite", "--resume"} & set(args or ())
            for path in outputs:
                if path in made and not reuse:
                    problems.append(f"{line!r}: writes {path} again without --overwrite")
                made.add(path)
                if args and args[0] == "export" and options.get("--out") == path:
                    targets[path] = set(options.get("--target", "portable").split(",")) | (
                        {"int4"} if "--int4" in args else set())
    return problems


def _shipped(path: str) -> bool:
    if path == "$D" or path.startswith("$D/"):
        return True                          # ../shared/data: checked to exist where it is (below)
    return path.startswith("examples/") and (REPO / path).exists()


def test_the_readme_walks_from_top_to_bottom():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(commands(text)) >= 45
    assert walk(text, _shipped) == []


def test_the_shared_data_it_names_is_the_data_there():
    from conftest import SHARED_DATA

    if not SHARED_DATA.is_dir():
        import pytest

        pytest.skip(f"shared data {SHARED_DATA} not present")
    text = (REPO / "README.md").read_text(encoding="utf-8")
    named = sorted({p for p in re.findall(r"\$D/([\w./-]+)", text)})
    assert named and [p for p in named if not (SHARED_DATA / p).exists()] == []


def test_the_walker_finds_what_breaks_a_path():
    broken = """```bash
edgebert info bundles/minilm
edgebert export runs/minilm --out bundles/minilm --int8
edgebert export runs/minilm --out bundles/minilm --int8 --int4
edgebert finetune MODEL_DIR --task tsv --train t.tsv --out OUT
cat letter.txt | edgebert answer bundles/minilm "Who?" --context -
edgebert export runs/minilm --out bundles/minilm --int8 --overwrite
edgebert pack bundles/minilm --target arm64 --out arm64.tar.gz
```
"""
    problems = walk(broken, _shipped)
    assert problems == [
        "'edgebert info bundles/minilm': reads bundles/minilm, which no earlier command makes and nothing ships",
        "'edgebert export runs/minilm --out bundles/minilm --int8': reads runs/minilm, which no earlier command makes "
        "and nothing ships",
        "'edgebert export runs/minilm --out bundles/minilm --int8 --int4': reads runs/minilm, which no earlier "
        "command makes and nothing ships",
        "'edgebert export runs/minilm --out bundles/minilm --int8 --int4': writes bundles/minilm again without "
        "--overwrite",
        "'edgebert finetune MODEL_DIR --task tsv --train t.tsv --out OUT': the placeholder 'MODEL_DIR'",
        "'edgebert finetune MODEL_DIR --task tsv --train t.tsv --out OUT': the placeholder 'OUT'",
        "'edgebert finetune MODEL_DIR --task tsv --train t.tsv --out OUT': reads t.tsv, which no earlier command "
        "makes and nothing ships",
        "'edgebert finetune MODEL_DIR --task tsv --train t.tsv --out OUT': reads MODEL_DIR, which no earlier "
        "command makes and nothing ships",
        "'cat letter.txt | edgebert answer bundles/minilm \"Who?\" --context -': reads letter.txt, which no earlier "
        "command makes and nothing ships",
        "'edgebert export runs/minilm --out bundles/minilm --int8 --overwrite': reads runs/minilm, which no earlier "
        "command makes and nothing ships",
        "'edgebert pack bundles/minilm --target arm64 --out arm64.tar.gz': --target arm64, which the export of "
        "bundles/minilm does not make (portable)"]
