"""What CI and `make test` promise: the README's test command first, then the runtime's tests in a torch-free
install, the scale-out engines' tests in another and the linter; `make test` installs the CPU onnxruntime unless asked for the GPU one, and no optional
engine by default; the test suite's shared setup never imports torch itself."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[1]


def test_ci_runs_the_readme_test_command_then_the_runtime_tests_and_the_linter():
    steps = [line.strip() for line in (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
             if line.startswith("make ")]
    assert steps == ["make test", "make test-runtime", "make test-scaleout", "make lint"]
    assert "make test " in (REPO / "README.md").read_text(encoding="utf-8")


def test_make_test_installs_the_cpu_onnxruntime_and_no_optional_engine_by_default():
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^ORT\s*\?=\s*cpu$", makefile, re.M) and re.search(r"^EXTRAS\s*\?=\s*$", makefile, re.M)
    install = re.search(r"pip install -q -e '\.\[\$\(ORT\),([^\]$]*)", makefile).group(1)
    assert install.split(",") == ["train", "hf", "dev"]               # openvino / peers / gpu: opt-in only
    runtime = re.search(r"\$\(RT_VENV\)/bin/python -m pip install -q -e '(.*?)' pytest", makefile).group(1)
    assert runtime == ".[cpu]"
    scaleout = re.search(r"\$\(SO_VENV\)/bin/python -m pip install -q -e '\.\[(.*?)\]'", makefile).group(1)
    assert "cpu" in scaleout.split(",") and not {"train", "hf", "dev"} & set(scaleout.split(","))   # torch-free


def test_ruff_bans_relative_imports_and_dev_pins_the_version_lint_uses():
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    ruff = pyproject["tool"]["ruff"]
    assert ruff["lint"]["flake8-tidy-imports"]["ban-relative-imports"] == "all"
    assert {"F", "I", "TID252"} <= set(ruff["lint"]["select"])
    version = re.search(r"^RUFF\s*:=\s*(\S+)$", (REPO / "Makefile").read_text(encoding="utf-8"), re.M).group(1)
    assert f"ruff=={version}" in pyproject["project"]["optional-dependencies"]["dev"]


def test_conftest_imports_no_torch_outside_functions():
    tree = ast.parse((REPO / "tests" / "conftest.py").read_text(encoding="utf-8"))
    top = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    names = {alias.name.split(".")[0] for node in top for alias in node.names}
    names |= {node.module.split(".")[0] for node in top if isinstance(node, ast.ImportFrom) and node.module}
    assert "torch" not in names
    fixtures = [node for node in tree.body if isinstance(node, ast.FunctionDef)
                and any("autouse" in ast.unparse(d) for d in node.decorator_list)]
    for fixture in fixtures:
        imported = {alias.name for node in ast.walk(fixture) if isinstance(node, ast.Import) for alias in node.names}
        assert "torch" not in imported, fixture.name
