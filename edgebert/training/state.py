"""What a run leaves in its output directory, and how a resumed run picks it up again.

``training_state.pt`` holds everything needed to continue exactly: model, optimizer and scheduler
state, step, sampler position, RNG states (one per process), the metrics window, the config and a
fingerprint of the data. It is loaded with ``weights_only=True`` (tensors and plain types only).
``metrics.jsonl`` gets one JSON object per logged step; a resumed run first cuts off the lines an
interrupted run wrote after its last checkpoint.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import torch

from ..errors import CheckpointError, ConfigError
from ..fileio import write_text
from .config import TrainConfig

STATE_FILE = "training_state.pt"
METRICS_FILE = "metrics.jsonl"
TRAIN_CONFIG_FILE = "train_config.json"
STATE_FORMAT = 1
# Settings a resumed run must share with its checkpoint (max_steps may grow; logging may change).
RESUME_FIXED = ("batch_size", "lr", "warmup_ratio", "warmup_steps", "weight_decay", "grad_accum", "seed",
                "max_grad_norm", "adam_beta1", "adam_beta2", "adam_eps", "bf16")


def check_out_dir(out_dir: str | Path, resume: bool) -> Path:
    """Refuse to overwrite a checkpoint unless resuming; refuse to resume without one."""
    out_dir = Path(out_dir)
    state = out_dir / STATE_FILE
    if resume and not state.is_file():
        raise CheckpointError(f"cannot resume: {state} not found",
                              "run without --resume to start a new run")
    if not resume and state.exists():
        raise CheckpointError(f"{out_dir} already holds a training checkpoint",
                              "pass --resume to continue it, or choose another --out")
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"--out {out_dir} is a file, not a directory")
    return out_dir


def read_state(out_dir: Path, cfg: TrainConfig) -> dict[str, Any]:
    """The checkpoint's state, refused (one line) if missing, corrupt or made with other settings."""
    path = out_dir / STATE_FILE
    if not path.is_file():
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
