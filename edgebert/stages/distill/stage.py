"""``distill``: one distillation run, from the teacher directory to the student directory.

The student keeps the teacher's width (or, with ``hidden``, a narrower one: its weights sliced from the
teacher's by ``edgebert.model.narrow``, its hidden-state loss terms through a learned ``HiddenProjection``)
and starts from the teacher's embeddings, the teacher layers in ``layer_map`` (evenly spaced by default:
6 -> 4 gives [0, 2, 3, 5]; ``closest``: measured by ``layer_choice`` on a sample of the training data
before training), pooler and heads
(``edgebert.model.make_student``); ``student_init="random"`` trains a same-size model from scratch on
the same batches instead (the baseline distillation has to beat). ``distill_config.json`` in the
output directory records the layer map, the loss weights and the teacher.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from edgebert.bundle.cross_encoder import ST_SETTINGS_NAME
from edgebert.bundle.pooling import POOLING_FILES, read_pooling
from edgebert.data.corpus import paragraphs
from edgebert.data.mlm import mlm_documents, mlm_eval_batches, mlm_examples
from edgebert.data.task_data import collate, encode_texts, load_task_data
from edgebert.data.tasks import SPAN_PRESETS, TOKEN_PRESETS
from edgebert.data.tokenizer import TOKENIZER_OUTPUTS, SpecialIds, load_tokenizer
from edgebert.errors import CheckpointError, ConfigError
from edgebert.files.atomic import write_json
from edgebert.files.jsonfile import read_json_or_none
from edgebert.files.outdirs import OutputDir
from edgebert.model import (
    MODEL_OUTPUTS,
    BertConfig,
    build_model,
    count_parameters,
    default_layer_map,
    freeze_word_embeddings,
    load_model,
    make_student,
    parse_layer_map,
    read_state_dict,
)
from edgebert.model.narrow import narrow_model
from edgebert.stages.distill.config import (
    CLOSEST,
    MLM_ARCHITECTURES,
    STUDENT_INITS,
    DistillConfig,
    check_student_depth,
)
from edgebert.stages.distill.int4_aware import bake_student, make_int4_aware
from edgebert.stages.distill.layer_choice import (
    PROBE_EXAMPLES,
    closest_layer_map,
    hidden_distance,
    probe_indices,
    task_distance,
)
from edgebert.stages.distill.tasks import EmbeddingDistillationTask, MlmDistillationTask, TaskDistillationTask
from edgebert.stages.distill.width import student_width
from edgebert.stages.retriever import bi_encoder
from edgebert.training import STATE_FILE, TRAINING_OUTPUTS, Trainer, TrainingTask, checkpoint_dir, is_main_process

DISTILL_CONFIG_FILE = "distill_config.json"
DISTILL_OUTPUTS = (ST_SETTINGS_NAME, *MODEL_OUTPUTS, *TOKENIZER_OUTPUTS, *POOLING_FILES, *TRAINING_OUTPUTS, "best_checkpoint.json",
                   DISTILL_CONFIG_FILE)


def load_teacher(teacher_dir: Path, task: str) -> nn.Module:
    """The teacher in eval mode with frozen weights; a clear error when it cannot teach ``task``."""
    if not teacher_dir.is_dir():
        raise CheckpointError(f"teacher directory {teacher_dir} not found",
                              "pass a model directory from edgebert pretrain/finetune/import-hf")
    cfg = BertConfig.load(teacher_dir)
    if task == "embed":        # any BERT: its encoder teaches
        teacher = load_model(teacher_dir, "BertModel", allow_new_heads=True)
    elif task == "mlm":
        if cfg.architecture in MLM_ARCHITECTURES:
            teacher = load_model(teacher_dir)
        elif any(k.endswith("cls.predictions.transform.dense.weight") for k in read_state_dict(teacher_dir)):
            teacher = load_model(teacher_dir, "BertForMaskedLM")
        else:
            raise CheckpointError(
                f"the teacher {teacher_dir} is a {cfg.architecture} without a masked-LM head, so it "
                "cannot teach MLM distillation",
                "distil its hidden states with --task embed, use a BertForMaskedLM/BertForPreTraining "
                "teacher (e.g. from edgebert pretrain), or fine-tune it and distil the classifier with --task")
    else:
        wanted, kind = (("BertForTokenClassification", "token classifier") if task in TOKEN_PRESETS
                        else ("BertForQuestionAnswering", "span (question answering) model") if task in SPAN_PRESETS
                        else ("BertForSequenceClassification", "sequence classifier"))
        if cfg.architecture != wanted:
            raise CheckpointError(f"the teacher {teacher_dir} is a {cfg.architecture}, not a fine-tuned "
                                  f"{kind}",
                                  f"fine-tune it first: edgebert finetune {teacher_dir} --task {task} ...")
        teacher = load_model(teacher_dir)
    teacher.eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    return teacher


def trained_student(folder: Path, architecture: str, shape: tuple[int, int, int, int]) -> nn.Module:
    """A trained student to continue from (``--init DIR``: e.g. 4-bit-aware fine-tuning of a float student); its
    (layers, hidden, heads, FFN) must be the ones this run asks for."""
    student = load_model(folder, architecture)      # every weight of the architecture: nothing new to train
    c = student.config
    have = (c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.intermediate_size)
    if have != shape:
        raise ConfigError(f"--init {folder} has (layers, hidden, heads, FFN) {have}; this run asks for {shape}",
                          "give --layers / --hidden / --heads / --intermediate as that student has them")
    return student


def build_student(teacher: nn.Module, cfg: DistillConfig,
                  measured: list[int] | None = None) -> tuple[nn.Module, list[int]]:
    """The student and its layer map (validated against the teacher's depth); ``measured``: the map that
    ``--layer-map closest`` chose (``layer_choice``)."""
    if cfg.layer_map == CLOSEST and measured is None:
        raise ConfigError("--layer-map closest needs the measured map", "distill() measures it on the training data")
    given = measured if cfg.layer_map == CLOSEST else list(cfg.layer_map) if cfg.layer_map else None
    trained = None if cfg.student_init in STUDENT_INITS else Path(cfg.student_init)
    hidden, heads, intermediate = student_width(cfg, teacher.config)
    if trained is not None:
        student = trained_student(trained, type(teacher).__name__, (cfg.layers, hidden, heads, intermediate))
        if given is None:                               # the map it was trained with, if it says
            given = (read_json_or_none(trained / "distill_config.json") or {}).get("layer_map")
    layer_map = parse_layer_map(given, teacher.config.num_hidden_layers, cfg.layers)
    if cfg.student_init == "teacher":
        student, layer_map = make_student(teacher, cfg.layers, layer_map)
        if hidden != teacher.config.hidden_size or intermediate != teacher.config.intermediate_size:
            student = narrow_model(student, hidden, heads, intermediate)    # weights sliced from the teacher's
    elif trained is None:
        torch.manual_seed(cfg.train.seed)
        student = build_model(teacher.config.replace(num_hidden_layers=cfg.layers, hidden_size=hidden,
                                                     num_attention_heads=heads, intermediate_size=intermediate),
                              type(teacher).__name__)
    student.train()
    for p in student.parameters():
        p.requires_grad_(True)
    # parameters no loss term reaches stay as copied (unused ones would also break DDP): MLM
    # distillation trains no NSP, embedding distillation no pooler
    frozen = []
    if cfg.mode == "mlm" and hasattr(student, "cls") and hasattr(student.cls, "seq_relationship"):
        frozen = [*student.bert.pooler.parameters(), *student.cls.seq_relationship.parameters()]
    elif cfg.mode == "embed" and getattr(student, "pooler", None) is not None:
        frozen = list(student.pooler.parameters())
    for p in frozen:
        p.requires_grad_(False)
    if cfg.freeze_word_embeddings:
        freeze_word_embeddings(student)
    return student, list(layer_map)


def mode_data(cfg: DistillConfig, teacher: nn.Module, tok):
    """The mode's data, read once: a ``TaskData`` (task mode), else the (train, eval) documents."""
    if not cfg.is_task:
        return mlm_documents(cfg.corpus, cfg.eval_corpus, cfg.corpus_format, cfg.eval_fraction, cfg.train.seed)
    labels = [teacher.config.id2label[i] for i in range(teacher.config.num_labels)] \
        if teacher.config.id2label else None
    data = load_task_data(cfg.task, cfg.train_file, cfg.dev_file, tok, cfg.max_seq_len,
                          cfg.max_train_examples, cfg.eval_limit, cfg.train.seed, labels, cfg.tag_column,
                          cfg.stride, bi_encoder(cfg.retriever) if cfg.retriever else None)
    if not cfg.is_span_task and len(data.labels) != teacher.config.num_labels:
        raise CheckpointError(f"the teacher has {teacher.config.num_labels} labels, the data "
                              f"{len(data.labels)}", "distil on the task the teacher was fine-tuned for")
    return data


def layer_probe(cfg: DistillConfig, data, tok) -> tuple[list[dict], tuple]:
    """What ``--layer-map closest`` measures on: a seeded sample of the training examples (batches) and
    the distance of the mode (the KD term of the task logits, or the hidden-state cosine)."""
    pad = SpecialIds.of(tok).pad
    if cfg.is_task:
        train = data.train
        kind = "span" if train.is_span_task else "token" if train.is_token_task else "sequence"
        measure = task_distance(kind, cfg.temperature)
    else:
        texts = paragraphs(data[0])
        keep = np.random.default_rng(cfg.train.seed).permutation(len(texts))[:PROBE_EXAMPLES]
        train = encode_texts([texts[i] for i in sorted(keep)], tok, cfg.max_seq_len)
        measure = hidden_distance()
    batches = [collate(train, idx, pad, with_labels=False)
               for idx in probe_indices(len(train), np.asarray(train.lengths), cfg.train.seed)]
    return batches, measure


def _task(cfg: DistillConfig, teacher: nn.Module, student: nn.Module, tok, layer_map: list[int], data,
          say) -> tuple[TrainingTask, int]:
    """The mode's training task on its data (``mode_data``), and the number of training examples."""
    if cfg.is_task:
        task = TaskDistillationTask(student, teacher, tok, data, cfg, layer_map)
        if cfg.cache_teacher_logits and task.logits_only and task.needs_teacher:
            say(f"teacher logits: one pass over the {len(data.train)} training examples")
        if cfg.resume:
            task.best.restore(checkpoint_dir(cfg.out), student)
        return task, len(data.train)
    train_docs, eval_docs = data
    if cfg.mode == "embed":
        held_out = paragraphs(eval_docs)[:cfg.eval_limit]
        task = EmbeddingDistillationTask(student, teacher, tok, encode_texts(paragraphs(train_docs), tok, cfg.max_seq_len),
                                         encode_texts(held_out, tok, cfg.max_seq_len) if held_out else None,
                                         cfg, layer_map)
        return task, len(task.train_data)
    examples = mlm_examples(train_docs, tok, cfg.max_seq_len, seed=cfg.train.seed, dupe_factor=cfg.dupe_factor)
    batches = mlm_eval_batches(eval_docs, tok, cfg.max_seq_len, cfg.eval_limit, cfg.eval_batch_size,
                               cfg.mlm_probability, segment_types=student.config.type_vocab_size > 1)
    return MlmDistillationTask(student, teacher, tok, examples, batches, cfg, layer_map), len(examples)


@dataclass
class DistillResult:
    out_dir: Path
    steps: int
    layer_map: list[int]
    eval_metrics: dict[str, float]        # the student at the last evaluation (teacher_* beside it)
    best_metrics: dict[str, float]        # task mode: the kept (best dev accuracy) student
    train_metrics: dict[str, float]
    student_parameters: int
    teacher_parameters: int
    teacher_layers: int
    num_train_examples: int
    wall_s: float
    tokens_per_s: float
    resumed_from: int = 0
    start_metrics: dict[str, float] = field(default_factory=dict)  # embed: the student before training


def distill(cfg: DistillConfig, *, console=None, stop_at_step: int | None = None) -> DistillResult:
    """Run one distillation stage into ``cfg.out``; see the module docstring."""
    t0 = time.perf_counter()
    out = OutputDir(cfg.out, "distill", names=DISTILL_OUTPUTS, resume=cfg.resume, overwrite=cfg.overwrite,
                    signature=STATE_FILE)
    teacher = load_teacher(cfg.teacher, cfg.task)
    check_student_depth(cfg, teacher.config.num_hidden_layers)
    student_width(cfg, teacher.config)          # a width the teacher cannot give: refused before any data is read
    read_pooling(cfg.teacher)   # the student keeps the teacher's sentence-transformers modules: refused now if bad
    if cfg.max_seq_len > teacher.config.max_position_embeddings:
        raise ConfigError(f"max_seq_len={cfg.max_seq_len} is longer than the teacher's "
                          f"max_position_embeddings={teacher.config.max_position_embeddings}")
    tok = load_tokenizer(cfg.teacher)
    main = is_main_process()

    def say(line: str) -> None:
        if console is not None and main:
            console.print(line, highlight=False, soft_wrap=True)

    data = mode_data(cfg, teacher, tok)
    choice = closest_layer_map(teacher, cfg.layers, *layer_probe(cfg, data, tok)) if cfg.layer_map == CLOSEST else None
    student, layer_map = build_student(teacher, cfg, choice.layer_map if choice else None)
    if cfg.int4_block is not None:
        rounded = make_int4_aware(student, cfg.int4_block)
        say(f"4-bit-aware: {rounded} weights (encoder, pooler, head) trained through their 4-bit rounding "
            f"(block {cfg.int4_block})")
    how = {"teacher": f"teacher layers {layer_map}", "random": "random initialisation"}.get(
        cfg.student_init, f"the student in {cfg.student_init} (layer map {layer_map})")
    if choice is not None:
        even = choice.distance_of(default_layer_map(teacher.config.num_hidden_layers, cfg.layers))
        how += (f", the closest of {len(choice.tried)} choices to the teacher on {choice.examples} training examples "
                f"({choice.measure}: {choice.distance_of(layer_map):.4f}"
                + (f"; evenly spaced: {even:.4f})" if even is not None else ")"))
    s_cfg = student.config
    width = (f"width {s_cfg.hidden_size}" if s_cfg.hidden_size == teacher.config.hidden_size else
             f"width {s_cfg.hidden_size} of the teacher's {teacher.config.hidden_size}, {s_cfg.num_attention_heads} "
             f"heads, FFN {s_cfg.intermediate_size}; " + ("the teacher's logits only" if cfg.is_task else
                                                          "hidden-state terms through a learned projection"))
    say(f"student: {cfg.layers} of the teacher's {teacher.config.num_hidden_layers} layers ({width}), from {how}")
    task, num_examples = _task(cfg, teacher, student, tok, layer_map, data, say)
    train_cfg = cfg.train_config(num_examples)
    start: dict[str, float] = {}
    if cfg.mode == "embed" and main and not cfg.resume:
        start = task.evaluate(student)       # the copied layers, before distillation
        say("before distillation: " + "  ".join(f"{k} {v:.4f}" for k, v in start.items() if k != "texts"))
    with Trainer(train_cfg, cfg.out, resume=cfg.resume, overwrite=cfg.overwrite, console=console) as trainer, \
            out.writing(keep=lambda: checkpoint_dir(cfg.out) is not None, enabled=trainer.is_main):
        if trainer.is_main and not cfg.resume:
            write_json(cfg.out / DISTILL_CONFIG_FILE, {
                **cfg.to_dict(), "layer_map": layer_map, "train": train_cfg.to_dict(),
                "teacher_layers": teacher.config.num_hidden_layers,
                "teacher_architecture": type(teacher).__name__,
                "teacher_parameters": count_parameters(teacher),
                "student_parameters": count_parameters(student), "start_metrics": start,
                "layer_choice": choice.as_dict() if choice is not None else None})
        result = trainer.fit(task, stop_at_step)
        if cfg.int4_block is not None and trainer.is_main:
            bake_student(cfg.out, cfg.int4_block)    # the published model files: the rounded weights
    best = dict(task.best.metrics) if cfg.is_task else {}
    return DistillResult(cfg.out, result.step, layer_map, dict(result.eval_metrics), best,
                         dict(result.train_metrics), count_parameters(student), count_parameters(teacher),
                         teacher.config.num_hidden_layers, num_examples, time.perf_counter() - t0,
                         result.tokens_per_s, result.resumed_from, start)
