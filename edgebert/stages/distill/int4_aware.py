"""4-bit-aware distillation (``distill --int4-aware``): the student trains as the small graph
(``export --int8 --int4``) will compute, so the 4-bit rounding is learnt around instead of added after.

* **Encoder and head weights** (query, key, value, attention output, FFN in and out; the pooler and the task
  head, which the export rewrites from ``Gemm`` to ``MatMul``: the MatMuls that become ``MatMulNBits``): every
  forward uses the weight rounded as onnxruntime's symmetric round-to-nearest does it (MLAS: per block of
  ``block`` inputs of one output, the largest-magnitude weight maps to -8, the others to ``round(w / scale)`` in
  [-8, 7]; checked equal to ``MatMulNBitsQuantizer``'s output in the tests), with a straight-through gradient to
  the float weights.
* **The word table**, when it is frozen (the embed presets): replaced once by its 4-bit round trip
  (``quantization.int4_tables``: the export's own block rule), so the layers learn on the values they will read.
* **The saved student is baked**: those weights are written already rounded (``bake_student``), so its
  fp32 graph *is* the 4-bit model in float form, the export's gate compares the small graph with what was
  trained, and re-rounding at export gives the same values (the scale stored float16 moves each by at most 2^-11
  of the block's largest weight).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from edgebert.errors import ConfigError
from edgebert.model.bert import encoder_of

CANDIDATE = re.compile(r"encoder\.layer\.\d+\.(attention\.self\.(query|key|value)|attention\.output\.dense|"
                       r"intermediate\.dense|output\.dense)$|(^|\.)pooler\.dense$|^(classifier|qa_outputs)$")
LEVELS = (-8, 7)                    # symmetric 4-bit: the block's largest magnitude maps to -8


def round_4bit(weight: torch.Tensor, block: int) -> torch.Tensor:
    """``weight`` [out, in] rounded to 4 bits per block of ``block`` inputs (see the module docstring)."""
    out_f, in_f = weight.shape
    if in_f % block:
        raise ConfigError(f"a weight with {in_f} inputs does not split into 4-bit blocks of {block}",
                          "use a block size that divides the hidden and FFN sizes")
    blocks = weight.reshape(out_f, in_f // block, block)
    peak = blocks.gather(-1, blocks.abs().argmax(-1, keepdim=True))           # signed largest magnitude
    scale = torch.where(peak == 0, torch.ones_like(peak), peak / LEVELS[0])
    return (torch.clamp(torch.round(blocks / scale), *LEVELS) * scale).reshape(out_f, in_f)


def _ste(weight: torch.Tensor, block: int) -> torch.Tensor:
    """The rounded weight forward, the identity backward (straight-through)."""
    return weight + (round_4bit(weight.detach(), block) - weight).detach()


def four_bit_linears(model: nn.Module) -> dict[str, nn.Linear]:
    """The Linear layers the small graph makes 4-bit candidates (encoder, pooler, task head), by name."""
    return {name: m for name, m in model.named_modules() if isinstance(m, nn.Linear) and CANDIDATE.search(name)}


def make_int4_aware(model: nn.Module, block: int) -> int:
    """Route the 4-bit candidate Linears of ``model`` through the rounded weights (in place); how many."""
    linears = four_bit_linears(model)
    for layer in linears.values():
        if layer.in_features % block:
            raise ConfigError(f"a student Linear has {layer.in_features} inputs, not a multiple of the 4-bit "
                              f"block {block}", "use --int4-block 16 or 32, or a width the block divides")
        layer.forward = (lambda x, m=layer: F.linear(x, _ste(m.weight, block), m.bias))      # type: ignore
    table = encoder_of(model).embeddings.word_embeddings
    if not table.weight.requires_grad:
        from edgebert.quantization.int4_tables import dequantize_blocks, quantize_blocks

        values = table.weight.detach().cpu().numpy().astype(np.float32)
        if values.shape[1] % block == 0:
            rounded = dequantize_blocks(*quantize_blocks(values, block), block)
            table.weight.data.copy_(torch.from_numpy(np.ascontiguousarray(rounded, dtype=np.float32)))
    return len(linears)


def bake_student(model_dir: Path, block: int) -> int:
    """Rewrite the saved student at ``model_dir`` with its 4-bit candidate weights rounded; how many."""
    from edgebert.model import load_model, save_model

    model = load_model(model_dir)
    linears = four_bit_linears(model)
    with torch.no_grad():
        for layer in linears.values():
            layer.weight.copy_(round_4bit(layer.weight, block))
    save_model(model, model_dir)
    return len(linears)
