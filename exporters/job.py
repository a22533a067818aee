"""``ExportJob``: the facts of one export that every graph step after tracing reads (the task, the
model's shape, the traced and fused fp32 graphs, the tokenizer, the scratch folder and the bundle
folder being written). Steps take it, the ``GraphValidator`` and their own options."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from edgebert.model import BertConfig


@dataclass(frozen=True)
class ExportJob:
    task: str
    model: BertConfig
    work: Path            # scratch folder, removed after the export
    staging: Path         # the bundle folder being written (replaces out_dir when complete)
    raw: Path             # the traced graph (standard ONNX ops)
    fused: Path           # the fused fp32 graph (model.onnx in staging)
    tokenizer: Path       # the model's tokenizer.json
    pad_id: int
    max_len: int | None = None   # the bundle's longest input (question windows for INT8 are cut to it)

    def name_of(self, path: Path) -> str:
        """``path``'s name in the bundle (a manifest entry's ``file``): relative to the staging folder."""
        return Path(path).relative_to(self.staging).as_posix()

    @property
    def gpu_source(self) -> Path:
        """The optimizer's fused graph before the CPU passes (``exporters.cpu_passes``): what the fp16
        graph is converted from, since the passes are measured for onnxruntime's CPU provider only."""
        return self.work / "model.fused-ops.onnx"
