"""Build a DistilBERT-style student from a teacher: same width, fewer layers, copied weights.

The student starts from the teacher's embeddings, the teacher layers in ``layer_map`` (evenly spaced by
default), and the teacher's pooler and heads, so distillation starts close to the teacher.
"""

from __future__ import annotations

from typing import Sequence

from torch import nn

from edgebert.errors import ConfigError
from edgebert.model.bert import build_model, encoder_of


def default_layer_map(teacher_layers: int, student_layers: int) -> list[int]:
    """Evenly spaced teacher layers, first and last included: 12 -> 4 gives [0, 4, 7, 11]."""
    if student_layers < 1:
        raise ConfigError(f"--layers {student_layers} must be at least 1")
    if student_layers > teacher_layers:
        raise ConfigError(f"--layers {student_layers} is larger than the teacher's depth "
                          f"({teacher_layers} layers)", "a student must be shallower than its teacher")
    if student_layers == 1:
        return [teacher_layers - 1]
    step = (teacher_layers - 1) / (student_layers - 1)
    return [round(i * step) for i in range(student_layers)]


def parse_layer_map(text: str | Sequence[int] | None, teacher_layers: int, student_layers: int) -> list[int]:
    """Validate a user layer map like ``"0,4,8,11"``; None gives the default map."""
    if text is None or text == "":
        return default_layer_map(teacher_layers, student_layers)
    try:
        layers = [int(x) for x in (text.split(",") if isinstance(text, str) else text)]
    except ValueError as exc:
        raise ConfigError(f"--layer-map {text!r} is not a comma-separated list of integers") from exc
    if len(layers) != student_layers:
        raise ConfigError(f"--layer-map has {len(layers)} entries but the student has {student_layers} layers",
                          "give one teacher layer per student layer")
    bad = [i for i in layers if not 0 <= i < teacher_layers]
    if bad:
        raise ConfigError(f"--layer-map entry {bad[0]} is out of range for a {teacher_layers}-layer teacher",
                          f"use indices 0..{teacher_layers - 1}")
    if sorted(set(layers)) != layers:
        raise ConfigError(f"--layer-map {layers} must be strictly increasing")
    return layers


def make_student(teacher: nn.Module, student_layers: int, layer_map: Sequence[int] | None = None,
                 architecture: str | None = None) -> tuple[nn.Module, list[int]]:
    """A student of the teacher's class (or ``architecture``) initialised from the teacher.

    Returns the student and the layer map used. Every student tensor comes from the teacher: the
    embeddings, layer i <- teacher layer layer_map[i], pooler and heads where both have them.
    """
    t_cfg = teacher.config
    layers = parse_layer_map(layer_map, t_cfg.num_hidden_layers, student_layers)
    arch = architecture or type(teacher).__name__
    s_cfg = t_cfg.replace(num_hidden_layers=student_layers, architecture=arch)
    student = build_model(s_cfg, arch)
    t_sd = teacher.state_dict()
    t_prefix = "bert." if any(k.startswith("bert.") for k in t_sd) else ""
    new_sd = {}
    for key in student.state_dict():
        enc_key = key[len("bert."):] if key.startswith("bert.") else key
        if enc_key.startswith("encoder.layer."):
            i, rest = enc_key[len("encoder.layer."):].split(".", 1)
            src = f"{t_prefix}encoder.layer.{layers[int(i)]}.{rest}"
        elif enc_key.startswith(("embeddings.", "pooler.")) and key.startswith(("bert.", "embeddings.", "pooler.")):
            src = f"{t_prefix}{enc_key}"
        else:
            src = key  # heads: cls.*, classifier.*
        if src in t_sd and t_sd[src].shape == student.state_dict()[key].shape:
            new_sd[key] = t_sd[src].clone()
    student.load_state_dict(new_sd, strict=False)
    # re-tie the MLM decoder (load_state_dict copies into the shared tensor, but be explicit)
    if hasattr(student, "cls"):
        student.cls.predictions.decoder.weight = encoder_of(student).embeddings.word_embeddings.weight
    student.init_report = sorted(set(student.state_dict()) - set(new_sd))  # keys left at random init
    return student, layers
