"""Trace a BERT to ONNX with the TorchScript exporter: dynamic batch/sequence axes, named outputs (names
and axes from ``edgebert.bundle.manifest.io_spec``, the one definition the manifest declares too).

An ``embed`` graph of a DistilBERT (no pooler) returns its first token's hidden state as ``pooler_output``.
A ``qa`` graph returns ``start_logits`` and ``end_logits`` (batch, sequence); a ``multiple-choice``
graph takes (batch, choices, sequence) inputs and returns (batch, choices) ``logits``.

``dynamo=False`` on purpose: the TorchScript exporter with the model's eager attention yields the
MatMul/Div/Add/Softmax/MatMul pattern that onnxruntime's BERT optimizer fuses into ``Attention``.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import onnx
import torch
from torch import nn

from edgebert.bundle.manifest import io_spec
from edgebert.bundle.task_registry import bundle_task
from edgebert.errors import ValidationError
from edgebert.model import encoder_of

TRACE_BATCH, TRACE_SEQUENCE = 2, 16   # deliberately not among the validation shapes
TRACE_CHOICES = 3                     # multiple-choice: validated at 2 and 4 choices


class TaskModel(nn.Module):
    """A BERT model with plain tensor inputs and the task's outputs as a tuple (what ONNX sees)."""

    def __init__(self, model: nn.Module, task: str, names: tuple[str, ...] | None = None):
        super().__init__()
        self.model = model
        self.task = task
        self.names = names or bundle_task(task).output_names

    def forward(self, input_ids, attention_mask, token_type_ids):
        out = self.model(input_ids, attention_mask, token_type_ids)
        # DistilBERT has no pooler: its first token's vector stands in for pooler_output
        return tuple(out.last_hidden_state[:, 0] if n == "pooler_output" and out.pooler_output is None
                     else getattr(out, n) for n in self.names)


def prepare(model: nn.Module, task: str, names: tuple[str, ...] | None = None) -> TaskModel:
    """Eval mode, eager (explicit softmax) attention, wrapped for ``task`` with the outputs ``names``
    (default: all of the task's; ``BundleTask.bundle_outputs``)."""
    names = names or bundle_task(task).output_names
    model.eval()
    encoder_of(model).set_attention_impl("eager")
    encoder_of(model).embeddings.static_positions = True   # RoBERTa: the position pattern onnxruntime fuses
    if ("pooler_output" in names and encoder_of(model).pooler is None
            and model.config.model_type != "distilbert"):
        raise ValidationError("the model has no pooler, so task embed has no pooler_output",
                              "export a checkpoint with a pooler (BertModel/BertForPreTraining)")
    return TaskModel(model, task, names).eval()


def export_onnx(wrapped: TaskModel, path: str | Path, opset: int, pad_id: int = 0) -> Path:
    """Trace ``wrapped`` to ``path``, then run the ONNX checker and strict shape inference."""
    path = Path(path)
    cfg = wrapped.model.config
    inputs, outputs = io_spec(wrapped.task, cfg.hidden_size, cfg.vocab_size, cfg.num_labels, wrapped.names)
    vocab = cfg.vocab_size
    g = torch.Generator().manual_seed(0)
    seq = min(TRACE_SEQUENCE, cfg.max_sequence_length)       # a model with fewer positions: as many as it has
    ids = torch.randint(0, vocab, (TRACE_BATCH, seq), generator=g)
    mask = torch.ones_like(ids)
    mask[1, seq // 2:] = 0
    ids[mask == 0] = pad_id
    types = torch.zeros_like(ids)
    if bundle_task(wrapped.task).inputs == "choices":      # (batch, choices, sequence): every row a choice
        ids, mask, types = (x[:, None, :].repeat(1, TRACE_CHOICES, 1) for x in (ids, mask, types))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            wrapped, (ids, mask, types), str(path),
            input_names=[t.name for t in inputs], output_names=[t.name for t in outputs],
            dynamic_axes={t.name: t.dynamic_axes for t in (*inputs, *outputs)}, opset_version=opset,
            do_constant_folding=True, dynamo=False)
    onnx.checker.check_model(str(path), full_check=False)
    inferred = onnx.shape_inference.infer_shapes(onnx.load(str(path)), check_type=True, strict_mode=True)
    onnx.save(inferred, str(path))
    return path
