"""TensorRT optimization profiles: the min / opt / max (batch, sequence) a TensorRT engine is built for.

TensorRT builds an engine for a range of input shapes. onnxruntime's TensorRT provider takes that range
as three strings (``trt_profile_min_shapes`` ...), one ``name:BxS`` per input; every graph input needs
an entry, or the build fails (``... has no associated shape profiles``, onnxruntime PR #17007). A BERT's
three inputs always share one (batch, sequence), so a profile is three shapes applied to every input.

A shape outside the profile is not something TensorRT can run: the runtime refuses it (``check``)
rather than let onnxruntime reroute the call to another provider. Torch-free (stdlib only).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Sequence

from edgebert.errors import ConfigError

Shape = tuple[int, int]   # (batch, sequence)
_SHAPE = re.compile(r"^\s*(\d+)\s*x\s*(\d+)\s*$")
LEVELS = ("min", "opt", "max")


def _shape(text: str, what: str) -> Shape:
    match = _SHAPE.match(text)
    if not match:
        raise ConfigError(f"TensorRT profile {what} {text!r} is not BATCHxSEQUENCE",
                          "e.g. --trt-profile min=1x1,opt=8x128,max=32x512")
    return int(match.group(1)), int(match.group(2))


@dataclass(frozen=True)
class TrtProfile:
    """One optimization profile; ``min <= opt <= max`` in both dimensions, all >= 1."""

    min: Shape
    opt: Shape
    max: Shape

    def __post_init__(self) -> None:
        for level in LEVELS:
            value = tuple(int(v) for v in getattr(self, level))
            if len(value) != 2 or min(value) < 1:
                raise ConfigError(f"TensorRT profile {level}={list(value)} must be two positive integers "
                                  "(batch, sequence)")
            object.__setattr__(self, level, value)
        for dim, name in ((0, "batch"), (1, "sequence")):
            if not self.min[dim] <= self.opt[dim] <= self.max[dim]:
                raise ConfigError(f"TensorRT profile {name}: min {self.min[dim]} <= opt {self.opt[dim]} <= "
                                  f"max {self.max[dim]} does not hold", "order the shapes min <= opt <= max")

    # ------------------------------------------------------------------ construction
    @classmethod
    def default(cls, max_len: int, max_batch: int = 32) -> "TrtProfile":
        """1x1 .. ``max_batch`` x ``max_len``, tuned for 8 x min(128, max_len)."""
        return cls((1, 1), (min(8, max_batch), min(128, max_len)), (max_batch, max_len))

    @classmethod
    def parse(cls, text: str) -> "TrtProfile":
        """``min=1x1,opt=8x128,max=32x512`` (the ``--trt-profile`` spelling)."""
        parts = {}
        for item in str(text).split(","):
            key, sep, value = item.partition("=")
            key = key.strip().lower()
            if not sep or key not in LEVELS or key in parts:
                raise ConfigError(f"--trt-profile {text!r} must name min, opt and max once each",
                                  "e.g. --trt-profile min=1x1,opt=8x128,max=32x512")
            parts[key] = _shape(value, key)
        missing = [k for k in LEVELS if k not in parts]
        if missing:
            raise ConfigError(f"--trt-profile {text!r} lacks {', '.join(missing)}",
                              "e.g. --trt-profile min=1x1,opt=8x128,max=32x512")
        return cls(**parts)

    @classmethod
    def covering(cls, batches: Sequence[int], seqs: Sequence[int]) -> "TrtProfile":
        """A profile from 1x1 up to the largest (batch, seq) a caller will run (e.g. a benchmark's shapes,
        whose real-text batches can be smaller and shorter), tuned for 8 x 128 where that fits."""
        top = (max(batches), max(seqs))
        return cls((1, 1), (min(8, top[0]), min(128, top[1])), top)

    @classmethod
    def from_manifest(cls, value: dict[str, Any]) -> "TrtProfile":
        """From ``{"min": [b, s], ...}`` or the per-input form ``{"input_ids": {"min": [b, s], ...}, ...}``
        (every input must then hold the same shapes)."""
        if all(k in value for k in LEVELS):
            return cls(*(tuple(value[k]) for k in LEVELS))
        profiles = {cls(*(tuple(v[k]) for k in LEVELS)) for v in value.values()}
        if len(profiles) != 1:
            raise ConfigError("the bundle's TensorRT profiles differ between inputs",
                              "re-export the bundle with one --trt-profile")
        return profiles.pop()

    # ------------------------------------------------------------------ use
    def per_input(self, input_names: Sequence[str]) -> dict[str, dict[str, list[int]]]:
        """The manifest form: every input with its own min / opt / max."""
        return {name: {level: list(getattr(self, level)) for level in LEVELS} for name in input_names}

    def provider_options(self, input_names: Sequence[str]) -> dict[str, str]:
        """``trt_profile_{min,opt,max}_shapes`` for onnxruntime: every input named."""
        return {f"trt_profile_{level}_shapes": ",".join(f"{n}:{'x'.join(map(str, getattr(self, level)))}"
                                                       for n in input_names)
                for level in LEVELS}

    def covers(self, batch: int, seq: int) -> bool:
        return self.min[0] <= batch <= self.max[0] and self.min[1] <= seq <= self.max[1]

    def check(self, batch: int, seq: int) -> None:
        """``ConfigError`` if (batch, seq) is outside the profile (TensorRT cannot run it)."""
        if not self.covers(batch, seq):
            raise ConfigError(f"batch {batch} x sequence {seq} is outside the TensorRT profile "
                              f"({self.describe()}); it is refused, not rerouted to another provider",
                              "use smaller batches (batch_size=...) or open the session with a wider "
                              "trt_profile (the engine is rebuilt once for it)")

    def describe(self) -> str:
        return ", ".join(f"{level} {'x'.join(map(str, getattr(self, level)))}" for level in LEVELS)

    def as_dict(self) -> dict[str, list[int]]:
        return {level: list(getattr(self, level)) for level in LEVELS}

    def key(self) -> str:
        """Short text that names this profile in an engine-cache folder name."""
        return "-".join("x".join(map(str, getattr(self, level))) for level in LEVELS)
