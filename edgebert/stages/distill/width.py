"""A narrower student's width (``distill --hidden``): what the teacher can give, checked once it is loaded."""

from __future__ import annotations

from edgebert.errors import ConfigError
from edgebert.model.config import BertConfig
from edgebert.stages.distill.config import DistillConfig


def student_width(cfg: DistillConfig, teacher: BertConfig) -> tuple[int, int, int]:
    """The student's (hidden, heads, intermediate): the teacher's without ``cfg.hidden``; else ``hidden``,
    ``heads`` (default: the teacher's head size kept, hidden // head size) and ``intermediate`` (default:
    the teacher's FFN/hidden ratio, 4 in BERT). Refused in one line when the teacher cannot give them
    (a student is at most as wide as its teacher in each of the three, its heads no wider)."""
    from edgebert.model.narrow import narrow_config

    if cfg.hidden is None:
        return teacher.hidden_size, teacher.num_attention_heads, teacher.intermediate_size
    head_dim = teacher.hidden_size // teacher.num_attention_heads
    heads = cfg.heads
    if heads is None:
        if cfg.hidden % head_dim:
            raise ConfigError(f"--hidden {cfg.hidden} is not a multiple of the teacher's head size {head_dim}",
                              "pass --heads N, or a width that is a multiple of the head size")
        heads = cfg.hidden // head_dim
    intermediate = cfg.intermediate or cfg.hidden * teacher.intermediate_size // teacher.hidden_size
    narrow = narrow_config(teacher, cfg.hidden, heads, intermediate)
    return narrow.hidden_size, narrow.num_attention_heads, narrow.intermediate_size
