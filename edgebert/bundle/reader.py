"""The ONNX bundle on disk: ``manifest.json`` + model files + tokenizer, opened and hash-checked.

Torch-free on purpose (stdlib only): the runtime and ``edgebert bench`` import this module to open a
bundle written by ``edgebert export``, so it must not pull in torch, onnx or onnxruntime. The
manifest's keys are known to ``edgebert.bundle.manifest`` alone; this module checks the files.

Layout of a bundle directory::

    manifest.json      {"format": "edgebert-bundle", "version": 1, "task": ..., "models": {...}, "files": {...}}
    onnx/model.onnx    fused fp32 graph            (models.fp32.file)
    onnx/model_quantized.onnx  default INT8 graph  (models.int8.file; its target, e.g. "portable")
    onnx/model_qint8_<t>.onnx  more INT8 graphs    (models["int8-<t>"], one per distinct extra target)
    onnx/model_fp16.onnx  FP16 graph, if exported  (models.fp16.file)
    tokenizer.json     Hugging Face tokenizers JSON (+ tokenizer_config.json, special_tokens_map.json)
    config.json        the model's Hugging Face config (the task's architecture, labels)

The names are those Hugging Face's loaders look for (``exporters.hf_folder``); a runtime reads every name
from the manifest, so older bundles (graphs at the root: ``model.onnx``, ``model.int8.onnx`` ...) open too.

``Manifest.files`` maps every file name (except the manifest) to its sha256; ``verify_files``
re-hashes them and raises ``BundleError`` on any mismatch.

``read_manifest`` checks the structure the runtime relies on (``Manifest.read``: types and presence
of what is read, never a ban on extra keys, so newer entries and tasks pass) and every file it names
must stay inside the bundle, symlinks resolved (``bundle_file``), with or without hash checks.
``open_bundle`` also checks that each graph's declared inputs and outputs agree with the ONNX file's
own (``check_graph_io``, read by ``edgebert.graph.declared_io`` without onnxruntime), and that the
manifest claims no more than the graph's embedding tables hold (``check_tables``: ``config.vocab_size``
and every special-token id against the word table, ``max_sequence_length`` and
``max_position_embeddings`` against the position table, ``type_vocab_size`` against the token-type
table). Every problem is a one-line ``BundleError``.

Version 2 gives every model entry a ``precision``, and every INT8 entry its ``target`` and
``requires`` (what a host needs to run it exactly: ``u8s8_exact``, see ``edgebert.runtime.hostcpu``).
Version 1 bundles are still read: their one INT8 graph has 8-bit int8 weights, so it is treated as
needing exact U8S8 products (``LEGACY_INT8``).

GPU graphs are further entries (``edgebert.runtime.graphs``): ``fp32-trt`` / ``int8-trt``
(``model.trt.onnx`` / ``model.int8.trt.onnx``: standard ONNX ops only, QDQ S8S8 for INT8, with a
TensorRT min/opt/max profile for every input) and ``fp32-cuda`` / ``fp16-cuda`` (``model.cuda.onnx`` /
``model.fp16.cuda.onnx``: fused with the 1-D mask index). Every entry names its ``graph`` kind and the
``providers`` it is made for; entries written before that carry neither (``ModelEntry.providers`` infers them).
"""

from __future__ import annotations

import os
from pathlib import Path

from edgebert.bundle.manifest import (
    BUNDLE_FORMAT,
    BUNDLE_VERSION,
    INPUT_NAMES,
    LEGACY_INT8,
    MANIFEST_NAME,
    PRECISIONS,
    TASK_OUTPUTS,
    TASKS,
    Manifest,
    ModelEntry,
)
from edgebert.bundle.manifest_checks import is_whole as _is_int
from edgebert.errors import BundleError
from edgebert.files.hashing import sha256_file  # stdlib only, like this module
from edgebert.files.stamps import hashed_sha256, keep, recall, stamped_sha256

GRAPH_IO_CHECK = 1   # raise when check_graph_io checks more: graphs passed by an older check are read again

__all__ = ["MANIFEST_NAME", "BUNDLE_FORMAT", "BUNDLE_VERSION", "TASKS", "PRECISIONS", "TASK_OUTPUTS",
           "INPUT_NAMES", "LEGACY_INT8", "Manifest", "ModelEntry", "sha256_file", "read_manifest",
           "int8_graphs", "verify_files", "model_path", "tokenizer_path", "open_bundle", "check_graph_io",
           "check_tables", "bundle_file", "EMBEDDING_TABLES", "verify_entry", "entry_files"]

# initializer name endings of a BERT graph's embedding tables (every graph edgebert exports) -> what the
# rows count; a graph without one is not checked for it
EMBEDDING_TABLES = {"word_embeddings.weight": "token ids", "position_embeddings.weight": "positions",
                    "token_type_embeddings.weight": "token types"}


def read_manifest(bundle_dir: str | os.PathLike) -> Manifest:
    """Parse and check ``bundle_dir/manifest.json`` (``Manifest.read``); every file it names must stay
    inside the bundle. ``BundleError`` if unusable."""
    manifest = Manifest.read(bundle_dir)
    root = os.path.realpath(bundle_dir)
    for name in manifest.file_names():
        bundle_file(bundle_dir, name, root)
    return manifest


def bundle_file(bundle_dir: str | os.PathLike, name: str, root: str | None = None) -> Path:
    """``bundle_dir/name``, refused unless it stays inside the bundle once symlinks are resolved
    (``root``: ``os.path.realpath(bundle_dir)``, when the caller has it)."""
    bundle_dir = Path(bundle_dir)
    if not name or "\x00" in name or Path(name).is_absolute() or ".." in Path(name).parts:
        raise BundleError(f"{bundle_dir}/{MANIFEST_NAME} names a file outside the bundle: {name!r}",
                          "re-export the bundle")
    path = bundle_dir / name
    root = root or os.path.realpath(bundle_dir)
    real = os.path.realpath(path)
    if real != root and not real.startswith(root.rstrip(os.sep) + os.sep):
        raise BundleError(f"{path} is a symlink that leaves the bundle (to {real})",
                          "copy the file into the bundle, or re-export it")
    return path


# --------------------------------------------------------------------------- graphs vs manifest
def check_graph_io(bundle_dir: str | os.PathLike, manifest: Manifest, key: str) -> None:
    """``BundleError`` unless the graph of ``models[key]`` takes exactly the manifest's inputs (int64)
    and gives its outputs (floating point, of the manifest's fixed sizes, e.g. hidden_size), and its
    embedding tables hold what the manifest claims (``check_tables``)."""
    path = bundle_file(bundle_dir, manifest.models[key].file)
    if not path.is_file():
        raise BundleError(f"{path} is missing", "the bundle is incomplete; re-export it")
    if path.suffix == ".xml":
        return check_ir_io(path, manifest, key)
    if path.suffix == ".ort":      # a flatbuffer: checked on the loaded session (runtime.ort_format.check_ort_io)
        return None
    from edgebert.graph.declared_io import FLOAT_TYPES, NotOnnx, read_graph  # not needed once remembered

    try:
        graph = read_graph(path)
    except (NotOnnx, OSError, ValueError) as exc:
        raise BundleError(f"{path} is not a readable ONNX model ({exc})", "re-export the bundle") from exc
    inputs, outputs = graph.inputs, graph.outputs
    where = f"{path} ({key})"
    check_tables(where, graph.initializers, manifest)
    wanted = set(manifest.input_names)
    have = {i.name: i for i in inputs}
    if set(have) != wanted:
        raise BundleError(f"{where} takes inputs {', '.join(sorted(have))}; the manifest declares "
                          f"{', '.join(sorted(wanted))}", "the manifest and the graph come from different exports")
    wrong = [i.name for i in inputs if i.dtype and i.dtype != "int64"]
    if wrong:
        raise BundleError(f"{where} input {wrong[0]} is {have[wrong[0]].dtype}, the runtime feeds int64")
    produced = {o.name: o for o in outputs}
    for out in manifest.outputs:
        got = produced.get(out.name)
        if got is None:
            raise BundleError(f"{where} has no output {out.name!r} (it gives {', '.join(produced)}), yet the "
                              f"manifest's task {manifest.task!r} needs it",
                              "the manifest and the graph come from different exports")
        if got.dtype and got.dtype not in FLOAT_TYPES:
            raise BundleError(f"{where} output {got.name} is {got.dtype}, not floating point")
        declared = out.shape
        if got.shape and declared and len(declared) == len(got.shape):
            for axis, (a, b) in enumerate(zip(declared, got.shape)):
                if _is_int(a) and _is_int(b) and a != b:
                    raise BundleError(f"{where} output {got.name} has size {b} on axis {axis}; the manifest "
                                      f"says {a}", "the manifest and the graph come from different exports")
    hidden = produced.get("last_hidden_state")
    if hidden is not None and hidden.shape and _is_int(hidden.shape[-1]) \
            and hidden.shape[-1] != manifest.config.hidden_size:
        raise BundleError(f"{where} gives vectors of {hidden.shape[-1]}; config.hidden_size is "
                          f"{manifest.config.hidden_size}", "the manifest and the graph come from different exports")


def check_ir_io(path: Path, manifest: Manifest, key: str) -> None:
    """``check_graph_io`` for an OpenVINO IR graph (the ``openvino`` INT8 target, ``graph.ir_graph``): the
    manifest's inputs (int64) and outputs, and the entry's weights file present."""
    from edgebert.graph.ir_graph import NotIr, read_ir  # xml: only for OpenVINO graphs

    where = f"{path} ({key})"
    entry = manifest.models[key]
    weights = bundle_file(path.parent, entry.weights or path.with_suffix(".bin").name)
    if not weights.is_file():
        raise BundleError(f"{weights} is missing (the weights of {where})", "the bundle is incomplete; re-export it")
    try:
        graph = read_ir(path)
    except NotIr as exc:
        raise BundleError(f"{where} is not a readable OpenVINO IR file ({exc})", "re-export the bundle") from exc
    if set(graph.inputs) != set(manifest.input_names):
        raise BundleError(f"{where} takes inputs {', '.join(sorted(graph.inputs))}; the manifest declares "
                          f"{', '.join(sorted(manifest.input_names))}",
                          "the manifest and the graph come from different exports")
    wrong = [n for n, t in graph.inputs.items() if t not in (None, "i64")]
    if wrong:
        raise BundleError(f"{where} input {wrong[0]} is {graph.inputs[wrong[0]]}, the runtime feeds int64")
    missing = [o.name for o in manifest.outputs if o.name not in graph.outputs]
    if missing:
        raise BundleError(f"{where} has no output {missing[0]!r} (it gives {', '.join(sorted(graph.outputs))}), yet "
                          f"the manifest's task {manifest.task!r} needs it",
                          "the manifest and the graph come from different exports")


def table_rows(initializers: dict[str, tuple[int, ...]]) -> dict[str, int]:
    """Rows of each embedding table found (``EMBEDDING_TABLES``'s counts -> rows)."""
    rows = {}
    for ending, what in EMBEDDING_TABLES.items():
        dims = next((d for name, d in initializers.items() if name.endswith(ending) and len(d) == 2), None)
        if dims is not None:
            rows[what] = int(dims[0])
    return rows


def check_tables(where: str, initializers: dict[str, tuple[int, ...]], manifest: Manifest) -> None:
    """``BundleError`` if the manifest claims more token ids, special-token ids, positions or token types
    than the graph's embedding tables hold (onnxruntime would fail on the first input that uses one)."""
    rows = table_rows(initializers)
    tok, cfg = manifest.tokenizer, manifest.config
    ids = [(f"tokenizer.{n}", getattr(tok, n)) for n in ("pad_id", "cls_id", "sep_id", "mask_id", "unk_id")]
    claims = {"token ids": [("config.vocab_size", cfg.vocab_size, cfg.vocab_size)]      # (name, value, rows it needs)
              + [(name, v, v + 1) for name, v in ids if v is not None],
              "positions": [("max_sequence_length", manifest.max_sequence_length, manifest.max_sequence_length),
                            ("config.max_position_embeddings", cfg.max_position_embeddings,
                             cfg.max_position_embeddings)],
              "token types": [("config.type_vocab_size", cfg.type_vocab_size, cfg.type_vocab_size)]}
    for what, have in rows.items():
        for name, value, needs in claims[what]:
            if value is not None and needs > have:
                raise BundleError(f"{where} has {have} {what} in its embedding table, but the manifest's {name} "
                                  f"is {value}", "the manifest and the graph come from different exports; "
                                                 "re-export the bundle")


def verify_files(bundle_dir: str | os.PathLike, manifest: Manifest | None = None,
                 names: list[str] | None = None, stamps: bool = False) -> dict[str, str]:
    """Re-hash every file listed in ``manifest.files`` (or only ``names``: the files a session loads);
    ``BundleError`` on a missing or changed file. ``stamps``: a file unchanged on disk since it was last
    hashed keeps that hash (``files.stamps``; what a session does, never ``check``).

    Also checks that every model file and the tokenizer named in the manifest is listed.
    Returns the verified ``{name: sha256}``.
    """
    bundle_dir = Path(bundle_dir)
    manifest = manifest if manifest is not None else read_manifest(bundle_dir)
    files = dict(manifest.files)
    unlisted = [n for n in (names if names is not None else manifest.named_files()) if n not in files]
    if unlisted:
        raise BundleError(f"{bundle_dir}/{MANIFEST_NAME} has no hash for {', '.join(unlisted)}",
                          "re-export the bundle")
    if names is not None:
        files = {n: files[n] for n in dict.fromkeys(names)}
    for name, expected in files.items():
        path = bundle_file(bundle_dir, name)
        if not path.is_file():
            raise BundleError(f"{path} is missing", "the bundle is incomplete; re-export it")
        actual = stamped_sha256(path, expected) if stamps else hashed_sha256(path)    # check: hashed, then stamped
        if actual != expected:
            raise BundleError(f"{path} does not match its manifest hash "
                              f"(sha256 {actual[:12]}..., expected {expected[:12]}...)",
                              "the file was changed or corrupted; re-export the bundle")
    return dict(files)


def entry_files(manifest: Manifest, key: str, file: str | None = None) -> list[str]:
    """The files a session of ``models[key]`` reads: its graph (or ``file``, its ``.ort`` form), an IR's
    weights, a graph's external data."""
    entry = manifest.models[key]
    file = file or entry.file
    data = [n for n in manifest.files if n.startswith(f"{file}.")]      # model.onnx.data
    return [file, *([entry.weights] if entry.weights else []), *data]


def verify_entry(bundle_dir: str | os.PathLike, manifest: Manifest, key: str, hashes: bool = True,
                 file: str | None = None, stamps: bool = False) -> None:
    """What a session checks of the one graph it loads, just before loading it: its files' hashes
    (``hashes``) and its inputs, outputs and tables against the manifest (``check_graph_io``). The
    bundle's other graphs are left unread (``edgebert check`` verifies every file). ``file``: the entry's
    ``.ort`` form is loaded instead of its ``file`` (checked on the loaded session)."""
    if hashes:
        verify_files(bundle_dir, manifest, entry_files(manifest, key, file), stamps)
    if file is None or file == manifest.models[key].file:
        fact = None
        if stamps and hashes:   # this graph's bytes were just verified: the check is the same for the same pair
            manifest_sha = stamped_sha256(Path(bundle_dir, MANIFEST_NAME))
            fact = f"graph-io/{GRAPH_IO_CHECK}/{manifest_sha}/{key}/{manifest.files[manifest.models[key].file]}"
            if recall(fact) is not None:
                return
        check_graph_io(bundle_dir, manifest, key)
        if fact is not None:
            keep(fact)


def int8_graphs(manifest: Manifest) -> dict[str, ModelEntry]:
    """``{model key: entry}`` of every CPU INT8 graph, the default (``int8``) first (``Manifest.int8_graphs``)."""
    return manifest.int8_graphs()


def model_path(bundle_dir: str | os.PathLike, precision: str = "fp32",
               manifest: Manifest | None = None, key: str | None = None) -> Path:
    """Path of the ``fp32`` / ``int8`` / ``fp16`` model of a bundle (or of the model entry ``key``, e.g.
    ``int8-x86-vnni``); ``BundleError`` if not exported."""
    if precision not in PRECISIONS:
        raise BundleError(f"unknown precision {precision!r}", f"use one of {', '.join(PRECISIONS)}")
    bundle_dir = Path(bundle_dir)
    manifest = manifest if manifest is not None else read_manifest(bundle_dir)
    entry = manifest.models.get(key or precision)
    if entry is None:
        have = ", ".join(manifest.models)
        flag = {"int8": " with --int8", "fp16": " with --fp16"}.get(precision, "")
        raise BundleError(f"{bundle_dir} has no {precision} model (it has: {have})",
                          f"re-export{flag}")
    path = bundle_file(bundle_dir, entry.file)
    if not path.is_file():
        raise BundleError(f"{path} is missing", "the bundle is incomplete; re-export it")
    return path


def tokenizer_path(bundle_dir: str | os.PathLike, manifest: Manifest | None = None) -> Path:
    """Path of the bundle's ``tokenizer.json``."""
    bundle_dir = Path(bundle_dir)
    manifest = manifest if manifest is not None else read_manifest(bundle_dir)
    path = bundle_file(bundle_dir, manifest.tokenizer.file)
    if not path.is_file():
        raise BundleError(f"{path} is missing", "the bundle is incomplete; re-export it")
    return path


def open_bundle(bundle_dir: str | os.PathLike, verify: bool = True) -> Manifest:
    """``read_manifest`` + (optionally) ``verify_files`` + ``check_graph_io`` of every graph: the one
    call a runtime needs before loading."""
    manifest = read_manifest(bundle_dir)
    if verify:
        verify_files(bundle_dir, manifest)
    for key, entry in manifest.models.items():
        if entry.precision in PRECISIONS:   # graphs of kinds this runtime loads
            check_graph_io(bundle_dir, manifest, key)
    return manifest
