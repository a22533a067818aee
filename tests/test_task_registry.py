"""The bundle tasks live in one registry (``edgebert.bundle.task_registry``): one frozen entry per task,
which every layer reads; no other module spells out its own tuple of tasks, per-task table or budget."""

from __future__ import annotations

import ast
import dataclasses

import pytest

from conftest import REPO
from edgebert.bundle.task_registry import BUNDLE_TASKS, TASK_NAMES, BundleTask, bundle_task, task_of_architecture
from edgebert.errors import ConfigError

REGISTRY = REPO / "edgebert" / "bundle" / "task_registry.py"
SOURCES = ("edgebert", "exporters", "quantization")
# Where a task name still appears in a comparison, tuple or table, and why that is the task's own code
ALLOWED = {
    "exporters/fusion.py": "the fused op counts the MLM head adds: that head's code",
    # another vocabulary that shares two names with the bundle tasks
    "edgebert/stages/distill/config.py": "distillation modes (mlm / embed: what a student learns from text)",
    "edgebert/stages/distill/stage.py": "distillation modes",
    "edgebert/stages/distill/presets.py": "distillation modes (the recipes' mlm / embed)",
    "edgebert/pipeline/config.py": "the pipeline's distillation modes",
    "edgebert/stages/evaluate.py": "evaluation tasks: the dataset presets plus mlm / embed checkpoints",
}
UNAMBIGUOUS = ("token-cls", "multiple-choice")    # "cls", "embed", "mlm" also name poolings and distillation modes


def test_one_frozen_entry_per_task():
    for entry in BUNDLE_TASKS:
        print(entry.as_dict())
    assert len(TASK_NAMES) == len(set(TASK_NAMES)) == len(BUNDLE_TASKS) == 7
    assert TASK_NAMES == ("embed", "mlm", "cls", "token-cls", "qa", "multiple-choice", "rerank")
    entry = bundle_task("token-cls")
    with pytest.raises(dataclasses.FrozenInstanceError):
        entry.budget = 0.5
    assert (entry.architecture, entry.output_names, entry.metric, entry.budget, entry.method, entry.carries,
            entry.token_level) == ("BertForTokenClassification", ("logits",), "token_label_agreement", 0.005, "tag",
                                   ("labels",), True)
    assert bundle_task("embed").has_pooling and not bundle_task("qa").has_pooling
    assert bundle_task("qa").inputs == "questions" and bundle_task("multiple-choice").inputs == "choices"
    with pytest.raises(ConfigError, match="unknown task 'ner'") as error:
        bundle_task("ner")                                 # a dataset preset is not a bundle task
    assert "use one of embed, mlm, cls, token-cls, qa, multiple-choice, rerank" in error.value.one_line()
    with pytest.raises(ValueError, match="not one of"):
        BundleTask("x", "BertModel", (), (("logits", ("batch",)),), "m", "logits", 0.01, "", "run", inputs="images")


def test_every_layer_reads_the_registry():
    from edgebert.bundle import TASK_OUTPUTS, TASKS, io_spec
    from edgebert.exporters.config import ARCHITECTURE_TASKS, TASK_ARCHITECTURES, default_task
    from edgebert.quantization.config import Int8Config
    from edgebert.runtime import EdgeSession
    from edgebert.runtime.fidelity import DEFAULT_BUDGETS, METRICS

    assert TASKS == TASK_NAMES
    for entry in BUNDLE_TASKS:
        assert TASK_OUTPUTS[entry.name] == entry.output_names
        _, outputs = io_spec(entry.name, 8, 100, 3)
        assert tuple(o.name for o in outputs) == entry.output_names
        assert TASK_ARCHITECTURES[entry.name] == entry.architecture
        assert all(default_task(a) == ARCHITECTURE_TASKS[a] == entry.name for a in entry.architectures)
        assert task_of_architecture(entry.architecture) is entry or entry.cross_encoder == "always"
        assert METRICS[entry.name] == entry.metric and DEFAULT_BUDGETS[entry.name] == entry.budget
        assert Int8Config().budget(entry.name) == entry.budget
        assert callable(getattr(EdgeSession, entry.method)), entry.method
    assert io_spec("multiple-choice", 8, 100, 3)[0][0].shape == ("batch", "choices", "sequence")
    assert io_spec("token-cls", 8, 100, 3)[1][0].shape == ("batch", "sequence", 3)


def _task_literals(node: ast.AST) -> list[str]:
    return [e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in TASK_NAMES]


def _names_task(node: ast.AST) -> bool:
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return name == "task" or name.endswith("_task")


def _findings(path, root=REPO) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    in_fstrings = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
                  and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    found = []
    for node in ast.walk(tree):
        where = f"{path.relative_to(root)}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and len(set(_task_literals(node))) >= 2:
            found.append(f"{where} a tuple of tasks {_task_literals(node)}")
        elif isinstance(node, ast.Dict) and len({k.value for k in node.keys if isinstance(k, ast.Constant)
                                                 and k.value in TASK_NAMES}) >= 2:
            found.append(f"{where} a per-task table")
        elif isinstance(node, ast.Compare) and any(_names_task(n) for n in (node.left, *node.comparators)) and any(
                isinstance(n, ast.Constant) and n.value in TASK_NAMES for n in (node.left, *node.comparators)):
            found.append(f"{where} a task compared with a name")
        elif (isinstance(node, ast.Constant) and node.value in UNAMBIGUOUS and id(node) not in in_fstrings
              and id(node) not in docstrings):
            found.append(f"{where} the task name {node.value!r}")
    return sorted(found, key=lambda f: int(f.split(":")[1].split(" ")[0]))


def test_no_other_module_defines_tasks_tables_or_budgets():
    """Adding a task is one registry entry plus its code: nothing else lists the tasks, keys a table by
    them or compares a task with a name (the allowed modules hold one head's own code)."""
    files = sorted(p for root in SOURCES for p in (REPO / root).rglob("*.py") if p != REGISTRY)
    assert len(files) > 100
    found = [f for p in files if str(p.relative_to(REPO)) not in ALLOWED for f in _findings(p)]
    assert not found, "\n".join(found)
    assert all(_findings(REPO / p) for p in ALLOWED if (REPO / p).is_file()), "an allowed module no longer needs it"


def test_the_finder_finds_what_it_forbids(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text('X = ("cls", "token-cls")\nB = {"embed": 0.005, "qa": 0.02}\n'
                     'def f(task):\n    return task == "qa"\nY = "multiple-choice"\nZ = ("cls", "mean")\n')
    found = _findings(probe, tmp_path)
    assert [f.split(" ", 1)[1] for f in found] == [
        "a tuple of tasks ['cls', 'token-cls']", "the task name 'token-cls'", "a per-task table",
        "a task compared with a name", "the task name 'multiple-choice'"]
