"""``export_bundle``: checkpoint -> validated, fused ONNX (+ INT8, + FP16, + GPU graphs) bundle, written
atomically.

Every graph is checked against the PyTorch model right after it is made (raw export, fusion, INT8,
FP16, the TensorRT and CUDA graphs); any miss raises a typed error and leaves no bundle behind (an
existing bundle at ``out_dir`` stays until the new one is complete). ``out_dir`` follows ``edgebert.files.outdirs``:
new or empty, or an earlier bundle with ``overwrite``; the scratch folders of killed exports are removed first.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Callable

from edgebert.bundle import MANIFEST_NAME
from edgebert.bundle.cross_encoder import MANIFEST_KEY as CROSS_ENCODER_KEY
from edgebert.bundle.pooling import POOLING_FILES, read_pooling
from edgebert.bundle.st_settings import MANIFEST_KEY, ST_SETTINGS_NAME
from edgebert.bundle.task_registry import bundle_task
from edgebert.errors import CheckpointError, ConfigError
from edgebert.exporters.config import ExportConfig, model_task
from edgebert.exporters.fusion import fused_entry
from edgebert.exporters.gpu_graphs import GpuGraphs
from edgebert.exporters.hf_folder import GRAPH_DIR, HF_FILES, loaders_note, write_hf_folder
from edgebert.exporters.int8 import default_precision, export_int8
from edgebert.exporters.job import ExportJob
from edgebert.exporters.manifest_build import (
    MODEL_FILES,
    OPENVINO_FILE,
    OPENVINO_WEIGHTS,
    build_manifest,
    export_host,
    verify_bundle,
    write_manifest,
)
from edgebert.exporters.onnx_export import TaskModel, export_onnx, prepare
from edgebert.exporters.result import ExportResult
from edgebert.exporters.shared_graphs import share_equal_graphs
from edgebert.exporters.tokenizer_info import find_tokenizer, tokenizer_metadata
from edgebert.exporters.validate import GraphValidator, Say, make_cases, torch_reference
from edgebert.exporters.vocab_prune import prune_vocabulary
from edgebert.files.atomic import current_umask, remove_stale_work_dirs, work_dir, write_text
from edgebert.files.outdirs import OutputDir
from edgebert.model import CONFIG_NAME, BertConfig, load_model
from edgebert.model.bert import BertEmbeddings
from edgebert.model.families import check_pad_id
from edgebert.runtime.float_reference import REFERENCE_FILE, REFERENCE_TASKS, write_reference
from edgebert.runtime.ort_format import ORT_CONFIG, add_ort_graphs

__all__ = ["ExportResult", "export_bundle", "LOG_NAME", "BUNDLE_OUTPUTS"]

LOG_NAME = "export_log.jsonl"
# what a bundle folder may hold (an --overwrite replaces nothing else): manifest, graphs (with external
# data; the OpenVINO IR), tokenizer, config, log
BUNDLE_OUTPUTS = (MANIFEST_NAME, "*.onnx", "*.onnx.data", "*.onnx_data", OPENVINO_FILE, OPENVINO_WEIGHTS,
                  "tokenizer.json", "vocab.txt", CONFIG_NAME, LOG_NAME, GRAPH_DIR, *HF_FILES, *POOLING_FILES,
                  "2_Normalize", ST_SETTINGS_NAME, REFERENCE_FILE, "*.ort", ORT_CONFIG)


class _Steps:
    """Progress callback + the JSONL log of what was measured when."""

    def __init__(self, on_step: Callable[[str], None] | None):
        self.on_step = on_step
        self.start = time.perf_counter()
        self.records: list[dict] = []

    def __call__(self, message: str, **figures) -> None:
        self.records.append({"t": round(time.perf_counter() - self.start, 3), "step": message, **figures})
        if self.on_step:
            self.on_step(message)


def _load(cfg: ExportConfig) -> tuple[BertConfig, str, object, Path]:
    """(config, task, model, tokenizer.json) of the model directory; cheap checks first."""
    if not cfg.model_dir.is_dir():
        raise CheckpointError(f"model directory {cfg.model_dir} not found",
                              "pass a directory written by edgebert or a Hugging Face BERT directory")
    model_cfg = BertConfig.load(cfg.model_dir / CONFIG_NAME)
    task = cfg.task or model_task(cfg.model_dir, model_cfg.architecture, model_cfg.num_labels)
    if bundle_task(task).one_label and model_cfg.num_labels != 1:
        raise ConfigError(f"--task {task} scores each (query, passage) pair with one logit; {cfg.model_dir} has "
                          f"{model_cfg.num_labels} labels", "export it as a pair classifier (--task cls)")
    tok_file = find_tokenizer(cfg.model_dir)
    model = load_model(cfg.model_dir, bundle_task(task).architecture)
    return model_cfg, task, model, tok_file


def _crop_positions(model, model_cfg: BertConfig, max_len: int) -> BertConfig:
    """The position table cut to the rows ``max_len`` tokens read, in the model and in the config the bundle
    records (its config.json and manifest then say ``max_len``)."""
    for module in model.modules():
        if isinstance(module, BertEmbeddings):
            module.crop_positions(max_len)
    return dataclasses.replace(model_cfg, max_position_embeddings=max_len + model_cfg.position_offset)


def export_bundle(cfg: ExportConfig, on_step: Callable[[str], None] | None = None) -> ExportResult:
    """Export ``cfg.model_dir`` into the bundle directory ``cfg.out_dir``; see the module docstring.
    With ``cfg.vocab_from`` the checkpoint is first rewritten with that corpus's vocabulary
    (``exporters.vocab_prune``) in a scratch folder, and the bundle is exported from it."""
    say = _Steps(on_step)
    out = OutputDir(cfg.out_dir, "export", names=BUNDLE_OUTPUTS, overwrite=cfg.overwrite, signature=MANIFEST_NAME,
                    flags="--overwrite")
    remove_stale_work_dirs()
    if cfg.vocab_from is None:
        return _export(cfg, say, out, cfg.model_dir, {})
    with work_dir("vocab") as tmp:
        say(f"keeping the vocabulary of {cfg.vocab_from.name}")
        pruned = prune_vocabulary(cfg.model_dir, cfg.vocab_from, Path(tmp) / "model")
        say("vocabulary pruned", kept=pruned.kept, original=pruned.original)
        return _export(dataclasses.replace(cfg, model_dir=Path(tmp) / "model"), say, out, cfg.model_dir,
                       {"vocabulary": pruned.as_dict()})


def _export(cfg: ExportConfig, say: _Steps, out: OutputDir, source_dir: Path, extra: dict) -> ExportResult:
    """``export_bundle`` from ``cfg.model_dir`` (``source_dir``: the folder the user named, for the manifest;
    ``extra``: more manifest fields)."""
    say("loading checkpoint")
    model_cfg, task, model, tok_file = _load(cfg)
    if "vocabulary" in extra and bundle_task(task).outputs_vocabulary:
        raise ConfigError("--vocab-from changes the token ids a fill-mask model predicts",
                          "drop --vocab-from, or export the encoder with --task embed")
    pooling = read_pooling(cfg.model_dir) if bundle_task(task).has_pooling else None   # the model's own
    st_settings = _st_settings(cfg.model_dir, task)          # its prompts: the manifest's and the bundle's file
    scores = _cross_encoder(cfg.model_dir, task, model_cfg.num_labels)   # a CrossEncoder's score activation
    tok_meta = tokenizer_metadata(tok_file)
    max_len = cfg.max_sequence_length or model_cfg.max_sequence_length
    if max_len > model_cfg.max_sequence_length:
        raise ConfigError(f"max sequence length {max_len} exceeds the model's {model_cfg.max_sequence_length} "
                          f"positions (max_position_embeddings={model_cfg.max_position_embeddings})")
    if cfg.int8 and cfg.int4:                        # refused before tracing, not deep in the 4-bit gate
        cfg.int4_config().check_width(model_cfg.hidden_size)
    if max_len < model_cfg.max_sequence_length:      # rows past max_len are never read: not in the graph
        model_cfg = _crop_positions(model, model_cfg, max_len)
    check_pad_id(model_cfg.model_type, model_cfg.pad_token_id, tok_meta["pad_id"], str(cfg.model_dir))
    if tok_meta["vocab_size"] > model_cfg.vocab_size:
        raise CheckpointError(f"{tok_file} has {tok_meta['vocab_size']} tokens, the model only "
                              f"{model_cfg.vocab_size}", "the tokenizer belongs to another model")
    wrapped = prepare(model, task, bundle_task(task).bundle_outputs(pooling_stated=pooling is not None))
    with work_dir("export") as scratch, out.staged() as staging:
        (staging / GRAPH_DIR).mkdir()
        job = ExportJob(task, model_cfg, Path(scratch), staging, Path(scratch) / "model.raw.onnx",
                        staging / MODEL_FILES["fp32"], tok_file, tok_meta["pad_id"], max_len)
        say(f"tracing to ONNX (opset {cfg.opset}, task {task})")
        export_onnx(wrapped, job.raw, cfg.opset, job.pad_id)
        check = _validator(cfg, wrapped, job, max_len, say)
        raw_val = check.check(job.raw, "export")
        say("validated traced graph", max_abs_diff=raw_val["max_abs_diff"])
        models = {"fp32": {**fused_entry(job, check, job.fused),
                           "unfused_validation": {k: raw_val[k] for k in ("max_abs_diff", "tolerance")}}}
        profile = cfg.tensorrt_profile(max_len) if cfg.tensorrt else None
        gpu = GpuGraphs(job, check, cfg.fp16_config())
        if cfg.tensorrt:
            models["fp32-trt"] = gpu.tensorrt_fp32(profile)
        if cfg.int8:
            cut = min(max_len, scores.get("max_length") or max_len) if scores else max_len   # where predict cuts
            models.update(export_int8(job, check, cfg.int8_config(cut), profile,
                                      small=cfg.int4_config() if cfg.int4 else None))
        if cfg.fp16:
            models["fp16"] = gpu.fp16_graph(job.gpu_source, MODEL_FILES["fp16"])
        if cfg.cuda:
            models.update(gpu.cuda())
        models = share_equal_graphs(staging, models)     # byte-equal targets: one file

        write_hf_folder(staging, task=task, cfg=model_cfg, num_labels=model_cfg.num_labels, tok_file=tok_file,
                        tok_meta=tok_meta, max_len=max_len, pooling=pooling, source_dir=cfg.model_dir,
                        st_settings=st_settings.get(MANIFEST_KEY), cross_encoder=scores)
        manifest = build_manifest(task=task, cfg=model_cfg, model_dir=source_dir, max_len=max_len,
                                  tokenizer=tok_meta, opset=cfg.opset, models=models, trt_profile=profile,
                                  extra={"attention_mask": "raw 2-D mask (any padding side)",
                                         "export_host": export_host(),
                                         **({"pooling": pooling.as_dict()} if pooling else {}),
                                         **st_settings,
                                         **({CROSS_ENCODER_KEY: scores} if scores else {}),
                                         "loaders": loaders_note(task, models),
                                         **default_precision(models), **extra},
                                  output_names=wrapped.names)
        manifest = write_manifest(staging, manifest)
        if manifest.int8_graphs() and task in REFERENCE_TASKS:    # what `check` compares a one-device bundle with
            say("fp32 outputs on the held-out texts (the reference of a bundle without its fp32 graph)")
            manifest = write_manifest(staging, write_reference(staging, manifest))
        if cfg.ort_format:                       # onnxruntime mobile / reduced builds load .ort graphs
            say("converting the CPU graphs to the .ort format")
            manifest = write_manifest(staging, add_ort_graphs(staging, manifest)[0])
        verify_bundle(staging)
        say("bundle written", files=list(manifest.files))
        write_text(staging / LOG_NAME, "".join(json.dumps(r) + "\n" for r in say.records))
        _make_readable(staging)
    return ExportResult(cfg.out_dir, manifest, time.perf_counter() - say.start, say.records)


def _validator(cfg: ExportConfig, wrapped: TaskModel, job: ExportJob, max_len: int, say: Say) -> GraphValidator:
    """The export's validation context: its cases and the PyTorch reference on them, computed once."""
    cases = make_cases(job.model.vocab_size, max_len, cfg.validation_batch_sizes, cfg.validation_seq_lens,
                       cfg.seed, job.pad_id, choices=(2, 4) if bundle_task(job.task).inputs == "choices" else (),
                       segments=job.model.type_vocab_size)
    names = wrapped.names
    return GraphValidator(cases, torch_reference(wrapped, cases, names), names, cfg.fp32_tolerance, say)


def _st_settings(model_dir: Path, task: str) -> dict:
    """An embed model's sentence-transformers prompts and similarity function, for the manifest."""
    from edgebert.bundle.st_settings import read_settings

    settings = read_settings(model_dir) if bundle_task(task).has_pooling else None
    return {MANIFEST_KEY: settings} if settings else {}


def _cross_encoder(model_dir: Path, task: str, num_labels: int) -> dict | None:
    """A cross-encoder's activation for the manifest (``bundle.cross_encoder``): a rerank bundle always has one
    (sentence-transformers' default when the folder states none), a pair classifier when its folder states it."""
    from edgebert.bundle.cross_encoder import ACTIVATIONS, default_activation, read_cross_encoder

    kind = bundle_task(task).cross_encoder
    if not kind:
        return None
    found = read_cross_encoder(model_dir, num_labels)
    if found is None and kind == "always":
        name = default_activation(num_labels)
        found = {"activation": name, "activation_fn": ACTIVATIONS[name], "stated_in": "none (the default)"}
    if found is not None:       # CrossEncoder.max_length: its tokenizer's model_max_length, where one is stated
        limit = _model_max_length(model_dir)
        found = {**found, **({"max_length": limit} if limit else {})}
    return found


def _model_max_length(model_dir: Path) -> int | None:
    """tokenizer_config.json's ``model_max_length`` (None where absent or transformers' 'no limit' 1e30)."""
    from edgebert.files.jsonfile import read_json_object

    path = Path(model_dir) / "tokenizer_config.json"
    value = read_json_object(path).get("model_max_length") if path.is_file() else None
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 10**6 else None


def _make_readable(folder: Path) -> None:
    """Temp files and folders are created private (0600/0700); a bundle is meant to be shipped."""
    umask = current_umask()
    os.chmod(folder, 0o777 & ~umask)
    for path in folder.rglob("*"):
        os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~umask)
