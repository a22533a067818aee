"""``edgebert pack``: cut a bundle down to what one device runs: one INT8 graph, its tokenizer and model
files, the manifest, and the fp32 reference outputs ``edgebert check`` verifies the graph against there.

What is kept: the target's INT8 graph in one form (the ``.onnx``; with ``ort_format`` its ``.ort`` form alone), every
file that is not a graph (tokenizer files, ``config.json``, the sentence-transformers pooling files) and the fp32 reference
(``float_reference``: written at export; a bundle exported before that gets it computed here from its
fp32 graph). Left out: every other graph (the fp32 graph, other targets', GPU graphs), and the kept graph's other
form (a bundle exported with ``--ort-format`` has each graph as ``.onnx`` and ``.ort``: a device loads one), each named in
the manifest's ``packed.left_out`` with its size and why. The kept entry keeps its key and file name,
so the packed bundle opens and checks like the full one (``EdgeSession``, ``edgebert check``).
Target ``int4`` (``SMALL``) packs the bundle's small graph (``export --int8 --int4``) instead of an INT8 graph,
when its gate met the budget: the packed bundle's only graph, loaded by default there.

The output is a folder, or an archive (``.tar.gz`` / ``.tgz`` / ``.zip``: ``archive.write_archive``);
either is written atomically and follows the one output rule (``files.outdirs`` / ``files.outfiles``):
``overwrite`` replaces only an earlier pack's output (a folder: its manifest and the files it names, any
other file there refused by name; an archive: exactly as pack wrote it), and never the bundle being packed
(the same file or folder, or a folder holding it). The source bundle is hash-checked first.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgebert.bundle import MANIFEST_NAME, Manifest, ModelEntry, bundle_file, read_manifest, verify_files
from edgebert.errors import ConfigError, EdgebertError
from edgebert.files.hashing import sha256_file
from edgebert.runtime.archive import archive_kind, bundle_folder
from edgebert.runtime.float_reference import FIELD, REFERENCE_TASKS, write_reference
from edgebert.runtime.ort_format import FIELD as ORT_FIELD

__all__ = ["PackResult", "pack_bundle", "pack_plan"]

PACKED = "packed"          # the manifest's key
SMALL = "int4"             # the target naming the small graph (its manifest key)
_ORIGIN = {"export": "from the export", "pack": "computed now from the fp32 graph"}


@dataclass(frozen=True)
class PackResult:
    out: Path
    target: str
    model: str
    kept: list[str]
    left_out: list[dict[str, Any]]
    bytes: int
    reference: str                        # "export" (carried over) or "pack" (computed now)
    ort: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        gone = sum(e["bytes"] for e in self.left_out)
        graph = "small (int4) graph" if self.target == SMALL else f"{self.target} INT8 graph"
        return [f"packed: {self.out} ({self.bytes / 1e6:.2f} MB): the {graph} ({self.model}) and "
                f"{len(self.kept) - 1} other files",
                f"left out: {len(self.left_out)} files ({gone / 1e6:.2f} MB): "
                + (", ".join(e["file"] for e in self.left_out) or "nothing"),
                f"check reference: fp32 outputs on the held-out texts ({_ORIGIN[self.reference]}); "
                f"`edgebert check {self.out}` verifies the graph on the device"]


def _target_entry(bundle: Path, manifest: Manifest, target: str) -> tuple[str, ModelEntry]:
    graphs = {str(e.target): (k, e) for k, e in manifest.models.items() if e.precision == "int8"
              and e.is_cpu_int8}
    if SMALL in manifest.models:
        graphs[SMALL] = (SMALL, manifest.models[SMALL])
    if target not in graphs:
        have = ", ".join(graphs) or "none: export with --int8"
        other = next((e for e in manifest.models.values() if e.target is not None and str(e.target) == target), None)
        if other is not None:       # e.g. the OpenVINO graph: pack takes the graphs onnxruntime runs on a CPU
            kind = "an OpenVINO graph" if other.engine == "openvino" else \
                f"a {other.precision} graph for {', '.join(other.providers)}"
            raise ConfigError(f"pack takes onnxruntime CPU INT8 graphs, and the {target!r} graph of {bundle} is {kind} "
                              f"(its targets pack takes: {have})",
                              "pass --target one of them, or ship the full bundle to the device")
        raise ConfigError(f"{bundle} has no INT8 graph for target {target!r} (its targets: {have})",
                          "pass --target one of them")
    key, entry = graphs[target]
    accuracy = entry.get_extra("accuracy") or {}
    if accuracy.get("within_budget") is False:
        graph = "small (int4) graph" if target == SMALL else f"{target} INT8 graph"
        raise ConfigError(f"the {graph} of {bundle} missed its accuracy budget at export, so a bundle "
                          "without its fp32 graph would serve it", "ship the full bundle, or re-export")
    return key, entry


def _graph_files(manifest: Manifest, key: str) -> list[str]:
    """Every file of entry ``key``: its graph, an IR's weights, external data, its ``.ort`` form."""
    entry = manifest.models[key]
    ort = (entry.get_extra("ort") or {}).get("file")
    return [entry.file, *([entry.weights] if entry.weights else []), *([ort] if ort else []),
            *(n for n in manifest.files if n.startswith(f"{entry.file}."))]


def pack_plan(bundle: Path, manifest: Manifest, target: str,
              ort_format: bool = False) -> tuple[str, list[str], list[dict[str, Any]]]:
    """(model key, files kept, files left out with why) of packing ``target`` (``ort_format``: the ``.ort`` form
    ships, made from the ``.onnx`` by ``_as_ort``)."""
    key, entry = _target_entry(bundle, manifest, target)
    keep_graph = set(_graph_files(manifest, key))
    left: dict[str, dict[str, Any]] = {}
    ort = (entry.get_extra("ort") or {}).get("file")
    if ort and ort != entry.file and not ort_format:     # one form per device: the .onnx, which every build loads
        left[ort] = {"file": ort, "model": key, "bytes": bundle_file(bundle, ort).stat().st_size,
                     "reason": "the kept graph's .ort form: a device loads one form, and this one-device bundle "
                               "ships the .onnx (`pack --ort-format` ships the .ort alone)"}
        config = (manifest.get_extra(ORT_FIELD) or {}).get("required_operators")
        if config in manifest.files:
            left[config] = {"file": config, "model": key, "bytes": bundle_file(bundle, config).stat().st_size,
                            "reason": "the operators of the bundle's .ort graphs, for a reduced onnxruntime build: "
                                      "no .ort graph is shipped"}
    for other in manifest.models:
        if other == key:
            continue
        e = manifest.models[other]
        runs = "the small (int4) graph" if key == SMALL else "the INT8 graph"
        why = (f"the fp32 graph: this device runs {runs}, and `edgebert check` compares it with the fp32 "
               "outputs stored in the bundle" if other == "fp32" else
               f"the small (int4) graph: this device runs the {target} INT8 graph" if other == SMALL else
               f"the {e.target or other} graph ({e.precision}, for {', '.join(e.providers)}): "
               + ("this device runs the small (int4) graph" if key == SMALL else "made for other devices"))
        for name in _graph_files(manifest, other):
            if name not in keep_graph and name not in left:
                left[name] = {"file": name, "model": other, "reason": why,
                              "bytes": bundle_file(bundle, name).stat().st_size}
    kept = [n for n in dict.fromkeys(manifest.file_names()) if n not in left]
    return key, kept, list(left.values())


def _packed_manifest(manifest: Manifest, key: str, target: str, left_out: list[dict[str, Any]],
                     source: Path) -> Manifest:
    value = manifest.to_dict()
    entry = dict(value["models"][key])
    entry.pop("same_graph_as", None)
    if isinstance(entry.get("ort"), dict) and entry["ort"].get("file") in {e["file"] for e in left_out}:
        entry.pop("ort")                    # the .onnx form ships alone (pack_plan)
        value.pop(ORT_FIELD, None)
    value["models"] = {key: entry}
    loaders = value.get("loaders")          # how other libraries load each graph: only the kept one's is true now
    if isinstance(loaders, dict):
        value["loaders"] = {name: {k: v for k, v in how.items() if k == key} if isinstance(how, dict) else how
                            for name, how in loaders.items()}
    value.pop("files", None)
    value.pop("sizes", None)
    value.pop("default_precision", None)    # said of graphs left out: the kept one met its budget (_target_entry)
    value[PACKED] = {"target": target, "model": key, "from": str(source),
                     "from_manifest_sha256": sha256_file(source / MANIFEST_NAME),
                     "why": f"a one-device bundle: only what a {target} device runs",
                     "left_out": left_out}
    value["files"] = {}
    return Manifest.from_dict(value)


def pack_bundle(bundle: str | Path, target: str, out: str | Path, *, overwrite: bool = False,
                ort_format: bool = False) -> PackResult:
    """Write the one-device bundle of ``target`` to ``out`` (a folder, or an archive by its suffix); see the
    module docstring. ``ConfigError`` for an unknown target (naming the bundle's), ``BundleError`` for a
    source bundle whose files do not match its manifest, ``OutputError`` for an ``out`` it must not replace."""
    from edgebert.files.atomic import work_dir

    given, out = Path(bundle), Path(out)
    _check_not_input(given, out)
    source = bundle_folder(given)
    manifest = read_manifest(source)
    key, kept, left_out = pack_plan(source, manifest, target, ort_format)
    if out.resolve().is_relative_to(source.resolve()):
        raise ConfigError(f"--out {out} is inside the bundle {source}", "write the packed bundle beside it")
    writer = _output(out, overwrite)                     # checked before any work
    verify_files(source, manifest)
    has_reference = isinstance(manifest.get_extra(FIELD), dict)
    if not has_reference and manifest.task not in REFERENCE_TASKS:
        raise ConfigError(f"`edgebert check` has no metric for task {manifest.task!r}, so a {target} bundle without "
                          "its fp32 graph could not be checked", "ship the full bundle")
    with work_dir("pack") as scratch:
        folder = Path(scratch) / "bundle"
        if has_reference:
            reference_manifest = manifest
        else:                   # a bundle exported before references: computed now from its fp32 graph
            reference_manifest = write_reference(source, manifest, out_dir=folder, stage="pack")
        for name in kept:
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / name, folder / name)
        packed = _packed_manifest(reference_manifest, key, target, left_out, source)
        ort: list[str] = []
        if ort_format:
            packed, ort = _as_ort(folder, packed, key)
        packed = _write_manifest(folder, packed)
        verify_files(folder, packed)
        size = writer(folder, packed)
    return PackResult(out, target, key, sorted(packed.files), packed.get_extra(PACKED)["left_out"], size,
                      "export" if has_reference else "pack", ort)


def _check_not_input(bundle: Path, out: Path) -> None:
    """``ConfigError`` when ``out`` is the bundle being packed (the same file or folder, by any path), or a
    folder holding it: writing there would replace the input with the one-device pack."""
    with contextlib.suppress(OSError):
        if out.exists() and bundle.exists() and os.path.samefile(out, bundle):
            raise ConfigError(f"--out {out} is the bundle being packed", "write the packed bundle to a new path")
    if bundle.resolve().is_relative_to(out.resolve()):
        raise ConfigError(f"--out {out} holds the bundle being packed ({bundle})",
                          "write the packed bundle to a new path")


def _as_ort(folder: Path, manifest: Manifest, key: str) -> tuple[Manifest, list[str]]:
    """The kept graph in onnxruntime's ``.ort`` format instead of ``.onnx`` (``ort_format``), the ``.onnx``
    named in ``packed.left_out``."""
    from edgebert.runtime.ort_format import ORT_CONFIG, add_ort_graphs

    onnx_file = manifest.models[key].file
    size = (folder / onnx_file).stat().st_size
    manifest, written = add_ort_graphs(folder, manifest, [key], replace=True)
    value = manifest.to_dict()
    value.pop("loaders", None)              # Optimum, transformers.js and sentence-transformers load .onnx files
    value[PACKED]["left_out"].append({"file": onnx_file, "model": key, "bytes": size,
                                      "reason": f"shipped as {manifest.models[key].file} instead: onnxruntime "
                                                f"mobile and reduced builds ({ORT_CONFIG}) load .ort graphs"})
    return Manifest.from_dict(value), written


def _write_manifest(folder: Path, manifest: Manifest) -> Manifest:
    """``manifest`` with the hash and size of every file under ``folder``, written there."""
    from edgebert.files.atomic import write_json

    paths = {p.relative_to(folder).as_posix(): p for p in sorted(folder.rglob("*")) if p.is_file()
             and p.name != MANIFEST_NAME}
    manifest = manifest.with_files({n: sha256_file(p) for n, p in paths.items()},
                                   {n: p.stat().st_size for n, p in paths.items()})
    write_json(folder / MANIFEST_NAME, manifest.to_dict())
    return manifest


def _output(out: Path, overwrite: bool):
    """A function writing the packed folder to ``out`` atomically (returns the bytes written), made after the
    output rule was checked (``OutputError`` now, before any work)."""
    if archive_kind(out) is not None:
        from edgebert.files.outfiles import OutputFile
        from edgebert.runtime.archive import foreign_archive, write_archive

        target = OutputFile(out, "pack", ours=lambda path: foreign_archive(path, "pack") is None,
                            overwrite=overwrite, what="--out")

        def to_archive(folder: Path, manifest: Manifest) -> int:
            with target.writing() as tmp:
                write_archive(folder, tmp, name=out.name)
            return out.stat().st_size
        return to_archive
    from edgebert.files.outdirs import OutputDir

    target_dir = OutputDir(out, "pack", names=_written(out), overwrite=overwrite, flags="--overwrite")

    def to_folder(folder: Path, manifest: Manifest) -> int:
        with target_dir.staged() as staging:
            for name in [MANIFEST_NAME, *manifest.files]:
                (staging / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(folder / name, staging / name)
        return sum((out / n).stat().st_size for n in [MANIFEST_NAME, *manifest.files])
    return to_folder


def _written(out: Path) -> tuple[str, ...]:
    """The files an earlier ``edgebert pack`` wrote in the folder ``out``: its manifest and the files that
    manifest names (``--overwrite`` replaces these and refuses, naming them, any other file there)."""
    try:
        manifest = read_manifest(out) if (out / MANIFEST_NAME).is_file() else None
    except EdgebertError:
        manifest = None
    names = [*manifest.files, *manifest.file_names()] if manifest is not None else []
    return tuple(glob.escape(n) for n in dict.fromkeys([MANIFEST_NAME, *names]))      # names, not patterns
