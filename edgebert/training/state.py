"""What a run leaves in its output directory, and how a resumed run picks it up again.

A checkpoint is a *set* of files written together: ``checkpoints/step-NNNNNNN/`` holds the task's model
files (config.json, model.safetensors, tokenizer ...), ``train_config.json`` and ``training_state.pt``;
it is written in a temp folder, renamed into place, and only then does ``checkpoint.json`` (the
pointer, replaced atomically) name it: that switch is the commit. A kill at any moment leaves the
pointer on a complete set. After the commit the set's model files are published in the output
directory itself (hard links, each replaced atomically), so the directory loads as a model; a resumed
run publishes its set again, so a kill during publishing is repaired, and removes older sets and the
temp files of killed writers.

``training_state.pt`` holds everything needed to continue exactly: model, optimizer and scheduler
state, step, sampler position, RNG states (one per process), the metrics window, the config and a
fingerprint of the data. It is loaded with ``weights_only=True`` (tensors and plain types only).
``metrics.jsonl`` gets one JSON object per logged step; a resumed run first cuts off the lines an
interrupted run wrote after its last checkpoint. Runs written before checkpoint sets (a top-level
``training_state.pt``, no pointer) still resume.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Any, Callable

import torch

from edgebert.errors import CheckpointError, ConfigError
from edgebert.files.atomic import (
    atomic_dir,
    atomic_path,
    fsync_dir,
    remove_path,
    remove_stale_temps,
    write_json,
    write_text,
)
from edgebert.files.jsonfile import loads
from edgebert.training.config import TrainConfig

STATE_FILE = "training_state.pt"
METRICS_FILE = "metrics.jsonl"
TRAIN_CONFIG_FILE = "train_config.json"
POINTER_FILE = "checkpoint.json"
CHECKPOINTS_DIR = "checkpoints"
# what the engine itself writes into an output directory (the task's model files come on top)
TRAINING_OUTPUTS = (METRICS_FILE, TRAIN_CONFIG_FILE, POINTER_FILE, CHECKPOINTS_DIR, STATE_FILE)
STATE_FORMAT = 1
# Settings a resumed run must share with its checkpoint (max_steps may grow; logging may change).
RESUME_FIXED = ("batch_size", "lr", "warmup_ratio", "warmup_steps", "weight_decay", "grad_accum", "seed",
                "max_grad_norm", "adam_beta1", "adam_beta2", "adam_eps", "bf16")


def checkpoint_dir(out_dir: str | Path) -> Path | None:
    """The folder of the committed checkpoint (the pointer's set; ``out_dir`` itself for a run written
    before checkpoint sets), or None when there is none."""
    out_dir = Path(out_dir)
    pointer = out_dir / POINTER_FILE
    if not pointer.exists():
        return out_dir if (out_dir / STATE_FILE).is_file() else None
    try:
        name = loads(pointer.read_bytes())["dir"]
        folder = (out_dir / name).resolve()
        if not (isinstance(name, str) and folder.parent == (out_dir / CHECKPOINTS_DIR).resolve()):
            raise ValueError(f"{name!r} is not a folder of {CHECKPOINTS_DIR}/")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{pointer} is corrupt ({exc})", "start a new run without --resume") from exc
    return out_dir / CHECKPOINTS_DIR / folder.name


def check_out_dir(out_dir: str | Path, resume: bool) -> Path:
    """Refuse to overwrite a checkpoint unless resuming; refuse to resume without one."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"--out {out_dir} is a file, not a directory")
    ckpt = checkpoint_dir(out_dir) if out_dir.is_dir() else None
    if resume and ckpt is None:
        raise CheckpointError(f"cannot resume: {out_dir} holds no checkpoint ({POINTER_FILE} not found)",
                              "run without --resume to start a new run")
    if not resume and ckpt is not None:
        raise CheckpointError(f"{out_dir} already holds a training checkpoint",
                              "pass --resume to continue it, or choose another --out")
    return out_dir


def step_dir_name(step: int) -> str:
    return f"step-{step:07d}"


def write_checkpoint(out_dir: Path, step: int, fill: Callable[[Path], None]) -> Path:
    """Write one checkpoint set (see the module docstring): ``fill(folder)`` writes its files into a
    temp folder; returns the committed set's folder."""
    final = out_dir / CHECKPOINTS_DIR / step_dir_name(step)
    with atomic_dir(final) as tmp:
        fill(tmp)
    write_json(out_dir / POINTER_FILE, {"step": step, "dir": f"{CHECKPOINTS_DIR}/{final.name}"})  # the commit
    publish(final, out_dir)
    prune(out_dir, final)
    return final


def publish(folder: Path, out_dir: Path) -> None:
    """The set's files (all but the training state) in ``out_dir`` too, each replaced atomically; a
    sub-folder (a sentence-transformers model's ``1_Pooling``) is published the same way."""
    for src in sorted(folder.iterdir()):
        if src.is_dir() and not src.is_symlink():
            (out_dir / src.name).mkdir(exist_ok=True)
            publish(src, out_dir / src.name)
            continue
        if src.name == STATE_FILE or not src.is_file():
            continue
        with atomic_path(out_dir / src.name) as tmp:
            try:
                tmp.unlink()
                os.link(src, tmp)          # no second copy on disk; the set's file is never written again
            except OSError:
                shutil.copyfile(src, tmp)
    fsync_dir(out_dir)


def prune(out_dir: Path, keep: Path) -> None:
    """Remove every checkpoint set but ``keep``, a pre-set top-level state, and killed writers' temps."""
    root = out_dir / CHECKPOINTS_DIR
    for folder in root.iterdir() if root.is_dir() else ():
        if folder.name.startswith("step-") and folder.name != keep.name:
            remove_path(folder)
    if keep != out_dir and (out_dir / STATE_FILE).is_file():
        (out_dir / STATE_FILE).unlink()
    remove_stale_temps(root)
    remove_stale_temps(out_dir)


def read_state(out_dir: Path, cfg: TrainConfig) -> dict[str, Any]:
    """The checkpoint's state, refused (one line) if missing, corrupt or made with other settings."""
    folder = checkpoint_dir(out_dir)
    path = (folder or out_dir) / STATE_FILE
    if folder is None or not path.is_file():
        raise CheckpointError(f"cannot resume: {path} not found", "run without --resume to start a new run")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            raise ValueError("not an edgebert training state")
    except Exception as exc:
        raise CheckpointError(f"{path} is corrupt or not a training state "
                              f"({' '.join(str(exc).split())[:200]})",
                              "start a new run without --resume") from exc
    saved = TrainConfig.from_dict(state["config"])
    for name in RESUME_FIXED:
        if getattr(saved, name) != getattr(cfg, name):
            raise ConfigError(f"cannot resume with {name}={getattr(cfg, name)!r}: the checkpoint "
                              f"used {getattr(saved, name)!r}", "resume with the same settings")
    return state


def check_same_data(state: dict[str, Any], fingerprint: str, path: Path) -> None:
    saved = str(state.get("data_fingerprint", ""))
    if saved and fingerprint and saved != fingerprint:
        raise CheckpointError(f"{path} was trained on other data (fingerprint {saved}, now {fingerprint})",
                              "resume with the same corpus and data settings")


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"python": list(random.getstate()[1]), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate((3, tuple(int(x) for x in state["python"]), None))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class MetricsLog:
    """``metrics.jsonl``: one JSON object per logged step (floats rounded to 6 digits, lr kept whole)."""

    def __init__(self, out_dir: Path):
        self.path = out_dir / METRICS_FILE

    def size(self) -> int:
        return self.path.stat().st_size if self.path.exists() else 0

    def append(self, record: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        clean = {k: (round(v, 6) if isinstance(v, float) and k != "lr" else v) for k, v in record.items()}
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(clean) + "\n")

    def truncate(self, size: int) -> None:
        """Drop what was written after the checkpoint that recorded ``size`` bytes."""
        if self.path.exists() and self.path.stat().st_size > size:
            write_text(self.path, self.path.read_bytes()[:size].decode("utf-8"))
