"""The import structure of edgebert/: the training stages are siblings that never import each other,
the engine knows nothing of the stages, data knows nothing of the engine, and the runtime stays
torch-free. Read from the source (every import, lazy ones included), so a new import that breaks a
rule fails here before it is drawn anywhere."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from conftest import REPO

PACKAGE = REPO / "edgebert"
STAGES = ("pretrain", "finetune", "evaluate", "distill")


def _module(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports (absolute names; relative imports resolved), at any depth."""
    module = _module(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            base = base[:len(base) - node.level + 1] if node.level else []
            name = ".".join([*base, node.module] if node.module else base)
            found.add(name)
            found.update(f"{name}.{alias.name}" for alias in node.names)
    return found


def _files(*parts: str) -> list[Path]:
    root = PACKAGE.joinpath(*parts)
    return [root] if root.suffix == ".py" else sorted(root.rglob("*.py"))


def _stage_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["edgebert", "stages"] and parts[2] in STAGES else None


def test_the_reader_sees_lazy_and_relative_imports():
    imports = _imports(PACKAGE / "stages" / "distill" / "stage.py")
    assert {"edgebert.stages.distill.tasks", "edgebert.training", "edgebert.model"} <= imports
    assert "edgebert.runtime" in _imports(PACKAGE / "stages" / "evaluate.py")      # imported inside a function


@pytest.mark.parametrize("stage", STAGES)
def test_a_stage_never_imports_another_stage(stage):
    files = _files("stages", stage if stage == "distill" else f"{stage}.py")
    assert files
    for path in files:
        others = {_stage_of(m) for m in _imports(path)} - {None, stage}
        assert not others, f"{path.relative_to(REPO)} imports the {others} stage"


@pytest.mark.parametrize("lower, upper", [("training", "edgebert.stages"), ("data", "edgebert.stages"),
                                          ("data", "edgebert.training"), ("model", "edgebert.stages"),
                                          ("model", "edgebert.training"), ("model", "edgebert.data"),
                                          ("stages", "edgebert.pipeline"), ("stages", "edgebert.cli")])
def test_nothing_imports_upward(lower, upper):
    for path in _files(lower):
        bad = sorted(m for m in _imports(path) if m == upper or m.startswith(upper + "."))
        assert not bad, f"{path.relative_to(REPO)} imports {bad}"


def test_the_runtime_and_the_base_modules_import_no_torch():
    for path in [*_files("runtime"), *_files("files"), *_files("bundle"), *_files("system"), *_files("scores"),
                 *_files("graph", "declared_io.py"), PACKAGE / "errors.py"]:
        assert not {m for m in _imports(path) if m.split(".")[0] == "torch"}, path


def test_every_package_installs_inside_the_edgebert_namespace():
    """pyproject lists each package folder once, under ``edgebert.``: the repository's top-level
    exporters/ and quantization/ install as edgebert.exporters / edgebert.quantization, nothing else."""
    import tomllib

    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    where = {"edgebert": "edgebert", **config["package-dir"]}
    found = set()
    for name, folder in where.items():
        for init in (REPO / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO / folder).parts
            found.add(".".join((name, *rel)))
    listed = set(config["packages"]) - {"edgebert.assets"}
    assert found == listed, f"missing from pyproject: {sorted(found - listed)}; stale: {sorted(listed - found)}"
    assert all(p == "edgebert" or p.startswith("edgebert.") for p in config["packages"])
    assert config["package-dir"] == {"edgebert.exporters": "exporters", "edgebert.quantization": "quantization"}


# --------------------------------------------------------------------------- no import cycles
def _installed_modules() -> dict[str, Path]:
    """Every module of the installed ``edgebert`` namespace (exporters/ and quantization/ as
    edgebert.exporters / edgebert.quantization), by name; package ``__init__`` files left out (they
    re-export their modules, and a module importing its package's re-export is no cycle)."""
    out = {}
    for folder, prefix in ((PACKAGE, ""), (REPO / "exporters", "edgebert."), (REPO / "quantization", "edgebert.")):
        for path in sorted(folder.rglob("*.py")):
            if path.name != "__init__.py":
                out[prefix + _module(path)] = path
    return out


def _import_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A chain of imports that comes back to the module it started from (``[a, b, a]``), or None."""
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str] | None:
        if node in path:
            return path[path.index(node):] + [node]
        if node in done:
            return None
        for nxt in sorted(graph.get(node, ())):
            found = visit(nxt, [*path, node])
            if found:
                return found
        done.add(node)
        return None

    return next((c for c in (visit(start, []) for start in sorted(graph)) if c), None)


def test_the_cycle_finder_finds_a_cycle_and_only_a_cycle():
    assert _import_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert _import_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_no_two_modules_import_each_other_even_lazily():
    """Issue 49: runtime.gpu_probe and runtime.providers imported each other (``ProviderStatus`` one way,
    ``probe_gpu_provider`` the other, inside a function): each name has one home, and no chain of imports,
    lazy ones included, comes back to where it started."""
    modules = _installed_modules()
    assert {"edgebert.runtime.gpu_probe", "edgebert.quantization.feeds", "edgebert.exporters.job"} <= set(modules)
    graph = {name: {m for m in _imports(path) if m in modules and m != name} for name, path in modules.items()}
    assert "edgebert.runtime.gpu_probe" in graph["edgebert.runtime.providers"]
    cycle = _import_cycle(graph)
    assert cycle is None, " -> ".join(cycle)


def test_the_code_carries_no_project_history():
    """Why-comments stay; which of our issues asked for a change belongs in benchmarks/results/, not the code.
    An upstream project's issue (onnxruntime issue #13381) is a reason and stays."""
    import re

    upstream = ("onnxruntime", "ort", "transformers", "pytorch", "torch", "triton", "optimum", "openvino")
    found = []
    for root in ("edgebert", "exporters", "quantization"):
        for path in sorted((REPO / root).rglob("*.py")):
            text = " ".join(path.read_text(encoding="utf-8").split())
            for match in re.finditer(r"(\w+) issues? #?\d+", text):
                if match.group(1).lower() not in upstream:
                    found.append(f"{path.relative_to(REPO)}: ...{text[max(0, match.start() - 30):match.end()]}")
    assert not found, "\n".join(found)
