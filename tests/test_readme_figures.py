"""The README's figures come from the result files: every figure the README's Figures table quotes is in the
result file its row links (or a named companion), the SQuAD and GPU tables' in their suites' tables, the
install sizes in install_size.json (``benchmarks/README.md`` lists the suites). A figure copied by hand and
left behind when a result changes fails here, naming the line."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
README = (REPO / "README.md").read_text(encoding="utf-8")
NUMBER = re.compile(r"(?<![\w.\-])\d[\d,]*(?:\.\d+)?(?!\.?[\dA-Za-wyz_\-])")    # 0.68x, 7.16×, 98.4% included
# not figures: CPU names and shapes written beside them
NOT_FIGURES = re.compile(r"AVX-?512|AVX2|Zen \d|family \d+ model \d+|\d+ × \d+|\d+-layer|\d+ layers|H100|H200|"
                         r"\(\d+ repeats")


def linked_files(link: str) -> list[Path]:
    """The result files a README link names: the file, or the tables (.md) of a folder."""
    path = REPO / link.rstrip("/")
    return [path] if path.is_file() else sorted(path.rglob("*.md"))


def source_numbers(files: list[Path]) -> list[Decimal]:
    found = set()
    for path in files:
        for n in NUMBER.findall(path.read_text(encoding="utf-8")):
            found.add(Decimal(n.replace(",", "")))
    return sorted(found)


def quoted(n: str, numbers: list[Decimal], percent: bool) -> bool:
    """``n`` as the README writes it is in ``numbers``: the same value at the README's precision, or as a
    fraction where the README writes a percentage."""
    want = Decimal(n.replace(",", ""))
    step = Decimal(1).scaleb(want.as_tuple().exponent)
    for value in numbers:
        if value.quantize(step) == want if abs(value) < 10**9 else value == want:
            return True
        if percent and value < 2 and (value * 100).quantize(step) == want:
            return True
    return False


def figures(text: str) -> list[tuple[str, bool]]:
    text = NOT_FIGURES.sub(" ", re.sub(r"\]\([^)]*\)|`[^`]*`", " ", text))
    return [(m.group(0), text[m.end():m.end() + 1] == "%") for m in NUMBER.finditer(text)
            if "." in m.group(0) or int(m.group(0).replace(",", "")) >= 10]


def section(title: str) -> str:
    return README.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


# Figures a README line quotes from a results file beside the one it links (pooled runs, the suite's summary)
ALSO = {"2 runs pooled": ["cpu_peers/cpu_peers_x86-vnni_pooled.md"],
        "3 runs pooled": ["cpu_peers/cpu_peers_xeon/pooled.md"]}


def figure_rows() -> list[tuple[str, str, list[Path]]]:
    """(README line, the text holding its figures, the result files they must come from)."""
    rows = []
    for line in section("Figures").splitlines():
        links = re.findall(r"\]\((benchmarks/results/[^)]+)\)", line)
        if line.startswith("| ") and links:
            extra = [RESULTS / f for phrase, files in ALSO.items() if phrase in line for f in files]
            rows.append((line, line.strip("|").split("|")[1], [f for link in links for f in linked_files(link)] + extra))
    squad = section("Question answering (SQuAD)")
    squad_files = [RESULTS / "squad_qa" / "squad_qa.md", RESULTS / "squad_qa" / "squad_qa_bench" / "report.md"]
    rows += [(line, line, squad_files) for line in squad.splitlines() if line.startswith(("teacher (6 layers)", "(97"))]
    gpu = section("GPU (CUDA / TensorRT)")
    rows += [(line, line.split("|", 2)[2], [RESULTS / "gpu_check" / "gpu_check_h100" / "gpu_check.md"])
             for line in gpu.splitlines() if line.startswith("| ") and "---" not in line and not line.startswith("| |")]
    return rows


ROWS = figure_rows()


def test_the_checked_parts_of_the_readme_are_found():
    assert len(ROWS) >= 7 + 2 + 5       # Figures rows with a link, SQuAD lines, GPU rows


@pytest.mark.parametrize("line,text,files", ROWS, ids=[r[0][:50] for r in ROWS])
def test_each_readme_figure_is_in_its_results(line, text, files):
    numbers = source_numbers(files)
    missing = [n for n, percent in figures(text) if not quoted(n, numbers, percent)]
    assert not missing, (f"README figures {missing} are not in {[str(f.relative_to(REPO)) for f in files]}: "
                         f"rerun the suite or copy them from its results ({line[:80]}...)")


def test_install_sizes_are_the_measured_ones():
    sizes = json.loads((RESULTS / "install_size" / "install_size.json").read_text(encoding="utf-8"))
    mb = {name.split(" ")[0]: round(entry["bytes"] / 1e6) for name, entry in sizes.items() if "bytes" in entry}
    line = next(line for line in README.splitlines() if "install_size/install_size.json" in line)
    assert f"{mb['runtime']:,} MB of site-packages against {mb['full']:,} MB" in line, (mb, line)


def test_a_changed_figure_fails():
    """The check can fail: the Figures table's first figure, changed in its last digit, is not found."""
    line, text, files = ROWS[0]
    first, percent = figures(text)[0]
    changed = first[:-1] + str((int(first[-1]) + 1) % 10)
    assert quoted(first, source_numbers(files), percent)
    assert not quoted(changed, source_numbers(files), percent)


def test_the_benchmark_index_lists_every_script_and_its_links_exist():
    """benchmarks/README.md: every script (suites and archive) has a row, every link resolves."""
    bench = REPO / "benchmarks"
    index = (bench / "README.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"`((?:archive/)?[a-z0-9_]+\.(?:py|sh))`", index))
    scripts = {str(p.relative_to(bench)) for p in [*bench.glob("*.py"), *bench.glob("*.sh"), *bench.glob("archive/*.py")]}
    assert scripts - listed == set()
    assert [link for link in re.findall(r"\]\(([^)#]+)\)", index) if not (bench / link).exists()] == []
    # every suite writes into its own folder: no result file left at the top of results/ but the write-ups
    assert sorted(p.name for p in (bench / "results").iterdir() if p.is_file()) == ["README_figures.md", "demo_screens.md"]
