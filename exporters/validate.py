"""Check an ONNX graph against the PyTorch model on shapes it was not traced with.

Cases: every batch size x sequence length (default 1/3/8 x 7/64/max), right padding with uneven
lengths (row 0 full, other rows shorter), two token-type segments per row; for a multiple-choice graph
every case is (batch, choices, sequence), 2 and 4 choices in turn, each choice its own uneven row.
Per-token outputs (hidden states, token logits, ``start_logits`` / ``end_logits``) are compared at
real (mask = 1) positions; outputs at padded positions are undefined by contract (they
drift ~1e-4 between kernels) and are reported apart, not gated. A miss raises ``ValidationError``
whose ``figures`` hold the measured numbers.

``GraphValidator`` is one export's validation context, built once (cases, the PyTorch reference
computed once for them, output names, the fp32 tolerance, the progress callback) and handed to every
graph step (raw export, fusion, outlier split, INT8 per target, FP16, the TensorRT and CUDA graphs).
Graphs run on onnxruntime's CPU provider with exact U8S8 products (``quantization.accuracy.cpu_session``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from edgebert.errors import ValidationError
from edgebert.quantization.accuracy import cpu_session

Arrays = dict[str, np.ndarray]
Say = Callable[..., None]      # progress: say(message, **figures)


@dataclass
class Case:
    batch: int
    sequence: int
    feeds: Arrays

    @property
    def lengths(self) -> list:
        return self.feeds["attention_mask"].sum(-1).astype(int).tolist()


SPAN_OUTPUTS = ("start_logits", "end_logits")     # (batch, sequence): one score per token


def make_cases(vocab_size: int, max_len: int, batch_sizes=(1, 3, 8), seq_lens=(7, 64, None),
               seed: int = 0, pad_id: int = 0, choices: tuple[int, ...] = (), segments: int = 2) -> list[Case]:
    """The validation cases (see the module docstring); ``choices``: multiple-choice counts, used in turn;
    ``segments``: token types the model has (RoBERTa's one: every type id 0)."""
    rng = np.random.default_rng(seed)
    lens = sorted({min(max_len, s if s is not None else max_len) for s in seq_lens})
    cases = []
    for b in batch_sizes:
        for t in lens:
            c = choices[len(cases) % len(choices)] if choices else 1
            rows = b * c
            lengths = [t] + [int(rng.integers(max(1, t // 4), t + 1)) for _ in range(rows - 1)]
            ids = rng.integers(1, vocab_size, (rows, t)).astype(np.int64)
            mask = np.zeros((rows, t), np.int64)
            types = np.zeros((rows, t), np.int64)
            for row, n in enumerate(lengths):
                mask[row, :n] = 1
                split = int(rng.integers(1, n + 1))
                types[row, split:n] = min(1, segments - 1)
            ids[mask == 0] = pad_id
            feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
            if choices:
                feeds = {k: v.reshape(b, c, t) for k, v in feeds.items()}
            cases.append(Case(b, t, feeds))
    return cases


def torch_reference(wrapped: torch.nn.Module, cases: list[Case], output_names: tuple[str, ...]) -> list[Arrays]:
    """Outputs of the PyTorch model (float32, eval) for every case."""
    refs = []
    with torch.no_grad():
        for case in cases:
            outs = wrapped(*(torch.from_numpy(case.feeds[k]) for k in ("input_ids", "attention_mask",
                                                                       "token_type_ids")))
            refs.append({n: o.float().numpy() for n, o in zip(output_names, outs)})
    return refs


def validate_graph(path: str | Path, cases: list[Case], references: list[Arrays],
                   output_names: tuple[str, ...], tolerance: float | None, label: str,
                   relative: bool = False) -> dict:
    """Run ``path`` on every case and compare with ``references``.

    ``tolerance``: max |onnx - torch| allowed (``relative``: times max(1, max|ref|) of that output);
    ``None`` only checks names, shapes and finiteness and reports the differences (INT8).
    """
    try:
        sess = cpu_session(path)
    except Exception as exc:  # onnxruntime raises its own Fail/InvalidGraph types
        raise ValidationError(f"{label}: onnxruntime cannot load the graph ({exc})",
                              figures={"stage": label}) from exc
    got_names = tuple(o.name for o in sess.get_outputs())
    if got_names != tuple(output_names):
        raise ValidationError(f"{label}: outputs are {list(got_names)}, expected {list(output_names)}",
                              figures={"stage": label, "outputs": list(got_names)})
    input_names = {i.name for i in sess.get_inputs()}
    worst, pad_worst, per_output, rows = 0.0, 0.0, {n: 0.0 for n in output_names}, []
    failure = None
    for case, ref in zip(cases, references):
        outs = sess.run(list(output_names), {k: v for k, v in case.feeds.items() if k in input_names})
        diffs = {}
        for name, got in zip(output_names, outs):
            want = ref[name]
            if got.shape != want.shape:
                raise ValidationError(
                    f"{label}: {name} has shape {list(got.shape)} at batch {case.batch} sequence "
                    f"{case.sequence}, expected {list(want.shape)}",
                    figures={"stage": label, "output": name, "shape": list(got.shape),
                             "expected": list(want.shape)})
            if not np.isfinite(got).all():
                raise ValidationError(f"{label}: {name} has non-finite values at batch {case.batch} "
                                      f"sequence {case.sequence}", figures={"stage": label, "output": name})
            err = np.abs(got.astype(np.float32) - want)
            mask = case.feeds["attention_mask"].astype(bool)
            if err.ndim == 3 and err.shape[:2] == mask.shape or name in SPAN_OUTPUTS and err.shape == mask.shape:
                # per-token output: padded positions are undefined by contract; reported apart
                if (~mask).any():
                    pad_worst = max(pad_worst, float(err[~mask].max()))
                err = err[mask]
            diff = float(err.max())
            diffs[name] = diff
            per_output[name] = max(per_output[name], diff)
            scale = max(1.0, float(np.abs(want).max())) if relative else 1.0
            if tolerance is not None and diff > tolerance * scale and failure is None:
                failure = (name, case, diff, tolerance * scale)
            worst = max(worst, diff)
        rows.append({"batch": case.batch, "sequence": case.sequence, "lengths": case.lengths,
                     "max_abs_diff": {k: float(f"{v:.3g}") for k, v in diffs.items()}})
    figures = {"max_abs_diff": float(f"{worst:.3g}"), "tolerance": tolerance,
               "tolerance_kind": "relative to max(1, max|ref|)" if relative else "absolute",
               "per_output": {k: float(f"{v:.3g}") for k, v in per_output.items()},
               "padded_positions_max_abs_diff": float(f"{pad_worst:.3g}"),
               "reference": "pytorch fp32", "provider": sess.get_providers()[0],
               "padding": "right, uneven lengths", "cases": rows}
    if failure is not None:
        name, case, diff, allowed = failure
        raise ValidationError(
            f"{label}: {name} differs from PyTorch by {diff:.3g} (> {allowed:.3g}) at batch {case.batch} "
            f"sequence {case.sequence}",
            "the exported graph does not compute the model; set EDGEBERT_DEBUG=1 and report it",
            figures={"stage": label, **figures})
    return figures


@dataclass(frozen=True)
class GraphValidator:
    """One export's validation context (see the module docstring): ``check`` gates a graph at the fp32
    tolerance, ``measure`` at another one (relative or absolute) or none (reports only: INT8)."""

    cases: list[Case]
    references: list[Arrays]
    output_names: tuple[str, ...]
    tolerance: float               # fp32: max |onnx - torch|
    say: Say

    def check(self, path: str | Path, label: str) -> dict:
        return validate_graph(path, self.cases, self.references, self.output_names, self.tolerance, label)

    def measure(self, path: str | Path, label: str, tolerance: float | None = None, relative: bool = False) -> dict:
        return validate_graph(path, self.cases, self.references, self.output_names, tolerance, label, relative)
