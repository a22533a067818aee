"""The PyTorch fp32 reference, timed in the same run as the ONNX paths (torch imported here only).

The reference may be a different model than the bundle (e.g. the 12-layer teacher of a 4-layer
student bundle): then speedups are against that model, and accuracy deltas are computed only when
the outputs have the same meaning and shape (``comparability``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from edgebert.bundle.task_registry import bundle_task as task_entry

ENCODER, ENCODER_OUTPUTS = "BertModel", ("last_hidden_state", "pooler_output")   # the bare encoder's
SIZE_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")


def torch_cuda_status() -> tuple[bool, str]:
    """(torch sees a CUDA GPU, why not)."""
    import torch

    if not torch.cuda.is_available():
        return False, (f"torch {torch.__version__} sees no CUDA device"
                       + (" (a CPU-only build)" if torch.version.cuda is None else ""))
    return True, ""


class TorchReference:
    """A model directory loaded with ``edgebert.model.load_model``, run under inference_mode; on the CPU
    in fp32 (the reference), or on CUDA in fp32 / fp16 (provider ``torch-cuda``: the GPU baseline)."""

    def __init__(self, model_dir: str | Path, task: str, threads: int | None = None, device: str = "cpu",
                 precision: str = "fp32"):
        import torch

        from edgebert.errors import CheckpointError
        from edgebert.model import WEIGHTS_NAME, BertConfig, count_parameters, load_model

        self._torch = torch
        if threads:
            torch.set_num_threads(threads)
        self.model_dir = Path(model_dir)
        self.config = BertConfig.load(self.model_dir)
        self.notes: list[str] = []
        self.task = task
        try:
            self.model = load_model(self.model_dir, task_entry(task).architecture)
        except CheckpointError as exc:
            if task_entry(task).architecture == ENCODER:      # nothing to fall back to
                raise
            self.model = load_model(self.model_dir, ENCODER)
            self.task = "encoder"
            self.notes.append(f"{self.model_dir} has no {task} head ({exc.message}); it is timed as a "
                              "bare encoder and its outputs are not compared")
        self.model.eval()
        self.device, self.precision = device, precision
        self.provider = "torch" if device == "cpu" else "torch-cuda"
        if device != "cpu":
            self.model.to(device=device, dtype=torch.float16 if precision == "fp16" else torch.float32)
            torch.backends.cuda.matmul.allow_tf32 = False   # fp32 means fp32, as for onnxruntime's CUDA
            torch.backends.cudnn.allow_tf32 = False
        self.parameters = count_parameters(self.model)
        weights = self.model_dir / WEIGHTS_NAME
        self.size_bytes = weights.stat().st_size if weights.exists() else 4 * self.parameters
        self.threads = torch.get_num_threads()

    @property
    def label_names(self) -> tuple[str, ...] | None:
        """The classifier's labels in id order (None: no label map)."""
        id2label = self.config.id2label
        return tuple(id2label[i] for i in range(len(id2label))) if id2label else None

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        torch = self._torch
        args = [torch.from_numpy(feeds[k]).to(self.device) for k in ("input_ids", "attention_mask", "token_type_ids")]
        with torch.inference_mode():
            out = self.model(*args)

        def host(t):   # .cpu() waits for the GPU, so a timed call includes the work
            return t.float().cpu().numpy()
        names = ENCODER_OUTPUTS if self.task == "encoder" else task_entry(self.task).output_names
        return {n: host(getattr(out, n)) for n in names}

    def logits(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        """The classifier's (B, T, C) or (B, C) logits (``--data`` scoring)."""
        return self.run(feeds)["logits"]

    def describe(self) -> dict[str, Any]:
        return {"dir": str(self.model_dir), "architecture": type(self.model).__name__, "device": self.device,
                "precision": self.precision, "task": self.task, "parameters": self.parameters,
                "size_bytes": self.size_bytes,
                "config": {k: getattr(self.config, k) for k in SIZE_KEYS}, "torch_threads": self.threads,
                "notes": list(self.notes)}


def comparability(bundle_task: str, bundle_config: dict[str, Any], num_labels: int,
                  reference: TorchReference) -> dict[str, Any]:
    """Are the reference's outputs comparable with the bundle's, and is it the same model?"""
    ref_cfg = {k: getattr(reference.config, k) for k in SIZE_KEYS}
    ours = {k: bundle_config.get(k) for k in SIZE_KEYS}
    same = all(ours[k] is None or ours[k] == ref_cfg[k] for k in SIZE_KEYS)
    why = ""
    if reference.task != bundle_task:
        comparable, why = False, f"the reference runs as {reference.task!r}, the bundle as {bundle_task!r}"
    else:       # the sizes in the shape of the output the metric compares must agree
        spec = task_entry(bundle_task)
        pairs = {"hidden_size": ("hidden sizes", ours["hidden_size"], ref_cfg["hidden_size"]),
                 "vocab_size": ("vocabularies", ours["vocab_size"], ref_cfg["vocab_size"]),
                 "num_labels": ("label counts", num_labels, reference.config.num_labels)}
        differ = [pairs[a] for a in spec.metric_shape if a in pairs and pairs[a][1] != pairs[a][2]]
        comparable = not differ
        if differ:
            why = f"{differ[0][0]} differ ({differ[0][1]} vs {differ[0][2]})"
    differs = ", ".join(f"{k} {ours[k]} vs {ref_cfg[k]}" for k in SIZE_KEYS
                        if ours[k] is not None and ours[k] != ref_cfg[k])
    if not comparable:
        note = f"accuracy deltas not computed: {why}; the speedup column is against the reference model"
    elif same:
        note = "same architecture and size as the bundle: deltas measure export/quantization error"
    else:
        note = (f"the reference is a different model ({differs}): deltas measure agreement between the "
                "two models, not export error, and the speedup is against that model")
    return {"same_model": same, "comparable": comparable, "note": note}
