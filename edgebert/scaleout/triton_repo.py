"""``edgebert triton-repo``: a bundle as an NVIDIA Triton model repository.

* ``backend="python"`` (the default): one Python-backend model, text in and the task's result out
  (``triton_model``: ``EdgeSession`` inside, on the bundle packed for one INT8 target in the version folder, or
  the bundle as it is where packing does not apply), with ``dynamic_batching`` and
  ``instance_group [{kind: KIND_CPU, count: instances}]``; each instance's session runs ``threads`` onnxruntime
  threads and ``instances x threads <= cores``.
* ``backend="onnxruntime"``: the bundle's INT8 (or fp32) graph on Triton's onnxruntime backend (batch and
  sequence dims -1), a Python tokenizer model and an ensemble wiring tokenizer -> graph (-> a Python pooling step
  for embed); cls / token-cls / qa return the graph's logits (cls labels through Triton's classification
  extension, ``labels.txt``). ``gpu``: the bundle's TensorRT graph on GPU instances, with the TensorRT
  accelerator. Where the bundle has an OpenVINO graph, the CPU graph gets Triton's OpenVINO accelerator.

Every ``config.pbtxt`` is parsed with Triton's own schema and checked against the manifest (``triton_config``)
before anything is written; the repository is written as a whole (``OutputDir.staged``: atomic, never over
files edgebert did not write, ``overwrite`` to replace an earlier one).
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from edgebert.bundle import MANIFEST_NAME, Manifest, bundle_file, read_manifest, verify_files
from edgebert.bundle.task_registry import BUNDLE_TASKS, bundle_task
from edgebert.errors import ConfigError, EdgebertError
from edgebert.runtime.pack import SMALL
from edgebert.scaleout.triton_config import (
    Enum,
    check_io,
    config_text,
    model_config_schema,
    parse_config,
    triton_dims,
    triton_type,
)

__all__ = ["TritonRepo", "write_triton_repo", "BACKENDS", "SERVED_TASKS"]

BACKENDS = ("python", "onnxruntime")
STRING, FP32, INT64 = "TYPE_STRING", "TYPE_FP32", "TYPE_INT64"
# what the Python model returns, per EdgeSession method serving the bundle (edgebert.bundle.task_registry)
_RESULTS = {"embed": lambda hidden: {"embedding": (FP32, [hidden])},
            "classify": lambda hidden: {"label": (STRING, [1]), "score": (FP32, [1])},
            "tag": lambda hidden: {"entities": (STRING, [1])},
            "answer": lambda hidden: {"answer": (STRING, [1]), "start": (INT64, [1]), "end": (INT64, [1]),
                                      "score": (FP32, [1])},
            "rank": lambda hidden: {"score": (FP32, [1])}}     # one (query, passage) row -> its relevance score
SERVED_TASKS = tuple(t.name for t in BUNDLE_TASKS if t.method in _RESULTS)
MODEL_PY = Path(__file__).with_name("triton_model.py")
MODELS_FILE = ".edgebert-triton.json"      # the models this command wrote: what --overwrite may replace


@dataclass(frozen=True)
class Plan:
    """What one repository holds: its models' configs (dicts) and the files of each."""
    configs: dict[str, dict]
    io: dict[str, tuple[dict, dict]]                  # model -> (inputs, outputs) the manifest says it must have
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class TritonRepo:
    out: Path
    backend: str
    model: str                         # the model a client calls
    models: list[str]
    instances: int
    threads: int
    cores: int
    max_batch: int
    inputs: dict[str, tuple[str, list[int]]]
    outputs: dict[str, tuple[str, list[int]]]
    notes: list[str]

    def lines(self) -> list[str]:
        def io(tensors: dict) -> str:
            return ", ".join(f"{n} ({t[5:]} {dims})" for n, (t, dims) in tensors.items())
        return [f"triton repository: {self.out} ({self.backend} backend; models: {', '.join(self.models)})",
                f"call {self.model!r}: {io(self.inputs)} -> {io(self.outputs)}; batches up to {self.max_batch}",
                f"instances: {self.instances} x {self.threads} onnxruntime threads on {self.cores} cores",
                *self.notes,
                f"serve: tritonserver --model-repository {self.out} (its Python needs pip install 'edgebert[cpu]')"]


def _task_io(manifest: Manifest) -> tuple[dict, dict]:
    """The Python model's inputs and outputs ({name: (type, dims)}) for the bundle's task."""
    task = bundle_task(manifest.task)
    if task.method not in _RESULTS:
        raise ConfigError(f"triton-repo serves {', '.join(SERVED_TASKS)} bundles; this one is {task.name!r}",
                          "export the model for one of those tasks")
    inputs = ({"question": (STRING, [1]), "context": (STRING, [1])} if task.inputs == "questions"
              else {"query": (STRING, [1]), "passage": (STRING, [1])} if task.inputs == "pairs"
              else {"text": (STRING, [1])})
    return inputs, _RESULTS[task.method](manifest.config.hidden_size)


def _tensors(io: dict) -> list[dict]:
    return [{"name": n, "data_type": Enum(t), "dims": dims} for n, (t, dims) in io.items()]


def _params(values: dict[str, object]) -> list[dict]:
    return [{"key": k, "value": {"string_value": str(v)}} for k, v in values.items()]


def _threads(instances: int | None, threads: int | None, cores: int | None) -> tuple[int, int, int]:
    for name, value in (("--instances", instances), ("--threads", threads), ("--cores", cores)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise ConfigError(f"{name} {value!r} must be a positive integer")
    cores = cores if cores is not None else (os.cpu_count() or 1)          # 0 is refused above, not "all"
    if instances is None:
        instances = max(1, cores // threads) if threads else min(2, cores)
    threads = threads or max(1, cores // instances)
    if instances * threads > cores:
        raise ConfigError(f"{instances} instances x {threads} threads = {instances * threads} onnxruntime threads "
                          f"on {cores} cores: they would contend", "lower --instances or --threads, or pass the "
                          "server's --cores")
    return instances, threads, cores


def _int8_target(manifest: Manifest, target: str | None, precision: str | None) -> str | None:
    """The CPU INT8 target the repository serves (None: fp32, or the session's own choice where every INT8 graph
    missed its export gate's budget): the one asked for, else portable, else the first within budget. ``int4``
    (``pack``'s name for the small graph of ``export --int4``) is taken where the bundle has it within budget."""
    if target == SMALL:
        small = manifest.models.get(SMALL)
        if precision is not None:
            raise ConfigError(f"--target {SMALL} serves the small (4-bit) graph; --precision {precision} another",
                              "pass one of the two")
        if small is None:
            raise ConfigError(f"--target {SMALL}: the bundle has no small graph", "export with --int8 --int4")
        if small.missed_budget:
            raise ConfigError(f"--target {SMALL}: the bundle's small graph missed its accuracy budget at export",
                              "serve an INT8 target, or re-export the small graph")
        return SMALL
    graphs = {str(e.target): e for e in manifest.models.values() if e.is_cpu_int8 and e.engine == "onnxruntime"}
    if precision == "fp32":
        if target:
            raise ConfigError("--target picks an INT8 graph; --precision fp32 serves the fp32 graph",
                              "pass one of the two")
        return None
    if target is not None and target not in graphs:
        small = [SMALL] if SMALL in manifest.models else []
        raise ConfigError(f"the bundle has no CPU INT8 graph for target {target!r} (its targets: "
                          f"{', '.join([*graphs, *small]) or 'none: export with --int8'})", "pass --target one of them")
    if not graphs:
        if precision == "int8":
            raise ConfigError("the bundle has no CPU INT8 graph", "export with --int8, or pass --precision fp32")
        return None
    passed = [t for t, e in graphs.items() if not e.missed_budget]      # never a graph over its gate's budget
    return target or ("portable" if "portable" in passed else next(iter(passed), None))


def _session_plan(name: str, manifest: Manifest, instances: int, threads: int, max_batch: int,
                  precision: str | None, target: str | None) -> Plan:
    inputs, outputs = _task_io(manifest)
    small = target == SMALL
    params = {"edgebert_role": "session", "bundle": "bundle", "threads": threads,
              "precision": SMALL if small else "int8" if target else (precision or ""),
              "int8_target": "" if small else (target or "")}
    config = {"name": name, "backend": "python", "max_batch_size": max_batch, "input": _tensors(inputs),
              "output": _tensors(outputs), "instance_group": [{"kind": Enum("KIND_CPU"), "count": instances}],
              "dynamic_batching": {"max_queue_delay_microseconds": 2000}, "parameters": _params(params)}
    return Plan({name: config}, {name: (inputs, outputs)})


def _graph_entry(manifest: Manifest, precision: str | None, target: str | None, gpu: bool):
    if gpu:
        key = {"int8": "int8-trt", "fp32": "fp32-trt"}.get(precision or "int8")
        entry = manifest.models.get(key or "") or manifest.models.get("fp32-trt")
        if entry is None:
            raise ConfigError("--gpu serves the bundle's TensorRT graph, and this bundle has none",
                              "export with --tensorrt, or leave out --gpu")
        return entry
    target = _int8_target(manifest, target, precision)
    if target is None:
        return manifest.models["fp32"]
    if target == SMALL:
        return manifest.models[SMALL]
    return next(e for e in manifest.models.values() if e.is_cpu_int8 and str(e.target) == target)


def _graph_io(manifest: Manifest) -> tuple[dict, dict]:
    return ({i.name: (triton_type(i.dtype), triton_dims(i.shape)) for i in manifest.inputs},
            {o.name: (triton_type(o.dtype), triton_dims(o.shape)) for o in manifest.outputs})


def _onnxruntime_plan(name: str, manifest: Manifest, entry, instances: int, threads: int, max_batch: int,
                      gpu: bool) -> Plan:
    from edgebert.runtime.vector_pooling import choose_pooling

    method, notes = bundle_task(manifest.task).method, []
    text_in, _ = _task_io(manifest)
    g_in, g_out = _graph_io(manifest)
    graph, tok, pool = f"{name}_graph", f"{name}_tokenizer", f"{name}_pool"
    dyn = {"max_queue_delay_microseconds": 2000}
    graph_config = {"name": graph, "backend": "onnxruntime", "max_batch_size": max_batch,
                    "default_model_filename": Path(entry.file).name, "input": _tensors(g_in), "output": _tensors(g_out),
                    "instance_group": [{"kind": Enum("KIND_GPU" if gpu else "KIND_CPU"), "count": instances}],
                    "dynamic_batching": dyn}
    if method == "classify":
        graph_config["output"][0]["label_filename"] = "labels.txt"
    if gpu:
        mode = "INT8" if entry.precision == "int8" else "FP32"
        graph_config["optimization"] = {"execution_accelerators": {"gpu_execution_accelerator": [
            {"name": "tensorrt", "parameters": [{"key": k, "value": v} for k, v in
                                                (("precision_mode", mode), ("trt_engine_cache_enable", "true"))]}]}}
        notes.append(f"graph: {entry.file} ({entry.precision}) on TensorRT (Triton's accelerator, {mode})")
    else:
        graph_config["parameters"] = _params({"intra_op_thread_count": threads, "inter_op_thread_count": 1})
        if any(e.engine == "openvino" for e in manifest.models.values()):
            graph_config["optimization"] = {"execution_accelerators": {"cpu_execution_accelerator": [
                {"name": "openvino"}]}}
            notes.append("the bundle has an OpenVINO graph: the CPU graph gets Triton's OpenVINO accelerator, "
                         "which compiles the ONNX graph itself (the bundle's OpenVINO IR is not used)")
        notes.append(f"graph: {entry.file} ({entry.precision}{', ' + str(entry.target) if entry.target else ''}) "
                     "on Triton's onnxruntime backend")
    tok_out = {n: (INT64, [-1]) for n in g_in}
    tok_params = {"edgebert_role": "tokenizer", "tokenizer": Path(manifest.tokenizer.file).name,
                  "max_length": manifest.max_length, "pad_id": manifest.tokenizer.pad_id,
                  "graph_inputs": ",".join(g_in), "pairs": "true" if len(text_in) == 2 else "false"}
    configs = {tok: {"name": tok, "backend": "python", "max_batch_size": max_batch, "input": _tensors(text_in),
                     "output": _tensors(tok_out), "instance_group": [{"kind": Enum("KIND_CPU"), "count": instances}],
                     "dynamic_batching": dyn, "parameters": _params(tok_params)},
               graph: graph_config}
    io = {tok: (text_in, tok_out), graph: (g_in, g_out)}
    steps = [{"model_name": tok, "model_version": -1,
              "input_map": [{"key": n, "value": n} for n in text_in],
              "output_map": [{"key": n, "value": f"_{n}"} for n in g_in]},
             {"model_name": graph, "model_version": -1,
              "input_map": [{"key": n, "value": f"_{n}"} for n in g_in],
              "output_map": [{"key": n, "value": n} for n in g_out] if method != "embed" else
              [{"key": "last_hidden_state", "value": "_last_hidden_state"}]}]
    outputs = dict(g_out)
    if method == "embed":
        hidden = manifest.config.hidden_size
        pool_in = {"last_hidden_state": (FP32, [-1, hidden]), "attention_mask": (INT64, [-1])}
        outputs = {"embedding": (FP32, [hidden])}
        pooling = choose_pooling(None, manifest.pooling).mode
        frame = 2 if manifest.tokenizer.cls_id is not None and manifest.tokenizer.sep_id is not None else 0
        configs[pool] = {"name": pool, "backend": "python", "max_batch_size": max_batch, "input": _tensors(pool_in),
                         "output": _tensors(outputs), "instance_group": [{"kind": Enum("KIND_CPU"), "count": 1}],
                         "parameters": _params({"edgebert_role": "pool", "pooling": pooling, "frame_tokens": frame})}
        io[pool] = (pool_in, outputs)
        steps.append({"model_name": pool, "model_version": -1,
                      "input_map": [{"key": "last_hidden_state", "value": "_last_hidden_state"},
                                    {"key": "attention_mask", "value": "_attention_mask"}],
                      "output_map": [{"key": "embedding", "value": "embedding"}]})
        notes.append(f"embedding: {pooling} pooling and unit length in the {pool} Python step")
    else:
        notes.append(f"returns the graph's raw {', '.join(g_out)} (labels, entities and answer spans are decoded "
                     "by the default Python backend only)" + ("; labels.txt names the classes for Triton's "
                                                             "classification extension" if method == "classify" else ""))
    configs[name] = {"name": name, "platform": "ensemble", "max_batch_size": max_batch, "input": _tensors(text_in),
                     "output": _tensors(outputs), "ensemble_scheduling": {"step": steps}}
    io[name] = (text_in, outputs)
    return Plan(configs, io, notes)


def _parsed(plan: Plan) -> dict[str, str]:
    """model -> its config text, parsed with Triton's schema and checked against the manifest's I/O."""
    texts = {}
    for model, config in plan.configs.items():
        text = config_text(config) + "\n"
        parsed = parse_config(text, f"{model}/config.pbtxt")
        check_io(parsed, f"{model}/config.pbtxt", *plan.io[model])
        texts[model] = text
    return texts


def _check_graph_file(folder: Path, entry, manifest: Manifest) -> None:
    """The graph file declares the manifest's inputs and outputs (names)."""
    from edgebert.graph.declared_io import graph_io

    inputs, outputs = graph_io(bundle_file(folder, entry.file))
    have = ([i.name for i in inputs], [o.name for o in outputs])
    if (sorted(have[0]), sorted(have[1])) != (sorted(manifest.input_names), sorted(manifest.output_names)):
        raise ConfigError(f"{entry.file} declares inputs {have[0]} and outputs {have[1]}, the manifest "
                          f"{manifest.input_names} and {manifest.output_names}", "re-export the bundle")


def _copy_bundle(source: Path, manifest: Manifest, dest: Path) -> None:
    for name in [MANIFEST_NAME, *manifest.file_names()]:
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(bundle_file(source, name), dest / name)


def _place_bundle(bundle: Path, source: Path, manifest: Manifest, dest: Path, target: str | None) -> str:
    """The bundle in ``dest``: packed for ``target`` (``runtime.pack``), or copied whole; returns a note."""
    if target is not None:
        from edgebert.runtime.pack import pack_bundle
        try:
            result = pack_bundle(bundle, target, dest)
            return f"bundle: packed for {target} ({result.bytes / 1e6:.2f} MB: its INT8 graph, tokenizer, manifest)"
        except EdgebertError as exc:
            note = f"bundle: copied whole (packing for {target} did not apply: {exc.one_line()})"
    else:
        note = "bundle: copied whole (fp32: packing keeps one INT8 graph)"
    _copy_bundle(source, manifest, dest)
    return note


def _models_written(out: Path) -> list[str]:
    """The models an earlier ``triton-repo`` wrote in ``out`` (its ``MODELS_FILE``): what ``--overwrite`` may
    replace; anything else there (a model of the user's) is refused, named."""
    from edgebert.files.jsonfile import read_json_or_none

    written = read_json_or_none(out / MODELS_FILE)
    models = written.get("models") if isinstance(written, dict) else None
    return [m for m in models if _model_name(m)] if isinstance(models, list) else []


def _model_name(name: object) -> bool:
    """One path component a Triton model folder can have: never '.', '..' or a path (nothing is written outside
    --out)."""
    return isinstance(name, str) and bool(re.fullmatch(r"[A-Za-z0-9_.-]+", name)) and name not in (".", "..")


def _owned(models: list[str]) -> list[str]:
    """What this command writes inside each model folder: its config, version 1 and (classifiers on the
    onnxruntime backend) labels.txt; another version or a user's file there is not its own (--overwrite refuses)."""
    return [f"{m}/{entry}" for m in models for entry in ("config.pbtxt", "1", "labels.txt")]


def write_triton_repo(bundle: str | os.PathLike, out: str | os.PathLike, *, backend: str = "python",
                      instances: int | None = None, threads: int | None = None, cores: int | None = None,
                      max_batch: int = 64, target: str | None = None, precision: str | None = None,
                      gpu: bool = False, name: str | None = None, overwrite: bool = False) -> TritonRepo:
    """Write the repository (see the module docstring); ``ConfigError`` for settings that do not fit the bundle,
    ``MissingExtra`` without tritonclient, ``OutputError`` for an ``out`` it must not replace."""
    from edgebert.files.atomic import write_json
    from edgebert.files.outdirs import OutputDir
    from edgebert.runtime.archive import bundle_folder

    if backend not in BACKENDS:
        raise ConfigError(f"--backend {backend!r} is not one of {', '.join(BACKENDS)}", "use python or onnxruntime")
    if precision not in (None, "int8", "fp32"):
        raise ConfigError(f"--precision {precision!r} must be int8 or fp32")
    if gpu and backend != "onnxruntime":
        raise ConfigError("--gpu serves the TensorRT graph on the onnxruntime backend",
                          "pass --backend onnxruntime, or leave out --gpu: the Python backend runs on CPUs")
    if not isinstance(max_batch, int) or not 1 <= max_batch <= 4096:
        raise ConfigError(f"--max-batch {max_batch!r} must be from 1 to 4096", "64 suits most CPU servers")
    if name is not None and not _model_name(name):
        raise ConfigError(f"--name {name!r} is not a Triton model name (one folder of the repository)",
                          "use letters, digits, _ . and -, not '.' or '..'")
    instances, threads, cores = _threads(instances, threads, cores)
    model_config_schema()                                   # tritonclient: said before any work
    source = bundle_folder(Path(bundle))
    manifest = read_manifest(source)
    name = name if name is not None else f"edgebert_{manifest.task.replace('-', '_')}"
    if backend == "python":
        target = _int8_target(manifest, target, precision)
        plan = _session_plan(name, manifest, instances, threads, max_batch, precision, target)
    else:
        entry = _graph_entry(manifest, precision, target, gpu)
        _check_graph_file(source, entry, manifest)
        plan = _onnxruntime_plan(name, manifest, entry, instances, threads, max_batch, gpu)
    texts = _parsed(plan)                                   # Triton's schema + the manifest, before any write
    writer = OutputDir(out, "triton-repo", names=(MODELS_FILE, *_owned([*texts, *_models_written(Path(out))])),
                       overwrite=overwrite, flags="--overwrite")
    verify_files(source, manifest)
    notes = list(plan.notes)
    with writer.staged() as staging:
        for model, text in texts.items():
            (staging / model / "1").mkdir(parents=True)
            (staging / model / "config.pbtxt").write_text(text, encoding="utf-8")
            role = plan.configs[model].get("backend")
            if role == "python":
                shutil.copyfile(MODEL_PY, staging / model / "1" / "model.py")
        write_json(staging / MODELS_FILE, {"models": list(texts), "bundle": str(bundle), "backend": backend})
        version = staging / name / "1"
        if backend == "python":
            notes.insert(0, _place_bundle(Path(bundle), source, manifest, version / "bundle", target))
        else:
            graph = staging / f"{name}_graph" / "1"
            for f in [entry.file, *(n for n in manifest.file_names() if n.startswith(f"{entry.file}."))]:
                shutil.copyfile(bundle_file(source, f), graph / Path(f).name)
            shutil.copyfile(bundle_file(source, manifest.tokenizer.file),
                            staging / f"{name}_tokenizer" / "1" / Path(manifest.tokenizer.file).name)
            if bundle_task(manifest.task).method == "classify":
                labels = manifest.label_names or [f"LABEL_{i}" for i in range(manifest.outputs[0].shape[-1])]
                (staging / f"{name}_graph" / "labels.txt").write_text("\n".join(labels) + "\n", encoding="utf-8")
    inputs, outputs = plan.io[name]
    return TritonRepo(Path(out), backend, name, list(texts), instances, threads, cores, max_batch, inputs, outputs,
                      notes)
