"""onnxruntime's ``.ort`` format for a bundle's CPU graphs, and the ``required_operators.config`` a reduced
(mobile) onnxruntime build is compiled from.

``add_ort_graphs`` converts graphs as ``python -m onnxruntime.tools.convert_onnx_models_to_ort`` does
(optimization style ``Fixed``, level ``all``, with ``NchwcTransformer`` off as the tool does for ARM: the
saved graph then runs on any CPU), writes the operator config of every converted graph
(``onnxruntime.tools.ort_format_model.create_config_from_models``), and records both in the manifest:
each entry's ``ort`` (file, level, onnxruntime version) and the top-level ``ort_format``. With
``replace=True`` (``edgebert pack --ort-format``) the entry's ``file`` becomes the ``.ort`` graph and the
``.onnx`` one is left out: what a mobile app ships. ``EdgeSession(graph_format="ort")`` loads the ``.ort``
form of a bundle that has both.

An 8-bit-weight INT8 graph's ``.ort`` form runs exactly only where onnxruntime's U8S8 products are exact
(VNNI, ARM64): the int8 -> uint8 weight rewrite that makes it exact on other x86 CPUs happens when a ``.onnx``
graph is optimized at load, and a saved graph is not optimized again, so those CPUs refuse it (``int8_choice``
rule 3); its manifest entry says so (``ort.runs_on``).

A ``.ort`` file is a flatbuffer, not a protobuf: ``bundle.check_graph_io`` cannot read its inputs, so
``check_ort_io`` compares the loaded session's inputs and outputs with the manifest instead.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

from edgebert.bundle import Manifest
from edgebert.errors import BundleError

__all__ = ["ORT_CONFIG", "FIELD", "ort_name", "convert_graph", "add_ort_graphs", "check_ort_io", "ort_graph_name"]

ORT_CONFIG = "required_operators.config"
FIELD = "ort_format"                    # the manifest's key
LEVEL = "all"
# int8_choice rule 3: the weight fix of CPUs whose U8S8 kernel saturates is a load-time rewrite of .onnx graphs
SAVED_8BIT_RUNS_ON = ("CPUs whose U8S8 products are exact (x86 with VNNI, ARM64); refused on x86 CPUs without VNNI, "
                      "whose weight fix (session.x64quantprecision) applies to .onnx graphs only")
DISABLED = ["NchwcTransformer"]         # x86-only layouts: the tool turns them off for ARM; off here for every CPU


def ort_name(onnx_name: str) -> str:
    """``onnx/model_quantized.onnx`` -> ``onnx/model_quantized.ort``."""
    return str(Path(onnx_name).with_suffix(".ort").as_posix())


def convert_graph(onnx_path: Path, ort_path: Path) -> None:
    """Save ``onnx_path`` optimized in the ORT format at ``ort_path`` (atomically)."""
    import onnxruntime as ort

    from edgebert.files.atomic import atomic_path

    with atomic_path(ort_path) as tmp:
        tmp.unlink()              # onnxruntime writes the file itself
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.optimized_model_filepath = str(tmp)
        opts.add_session_config_entry("session.save_model_format", "ORT")
        opts.log_severity_level = 3
        ort.InferenceSession(str(onnx_path), sess_options=opts, providers=["CPUExecutionProvider"],
                             disabled_optimizers=DISABLED)
        if not tmp.is_file():
            raise BundleError(f"onnxruntime wrote no .ort file for {onnx_path}")


def _cpu_graphs(manifest: Manifest, keys: list[str] | None) -> list[str]:
    return [k for k, e in manifest.models.items() if (keys is None or k in keys) and e.engine == "onnxruntime"
            and "cpu" in e.providers and Path(e.file).suffix == ".onnx"]


def add_ort_graphs(folder: Path, manifest: Manifest, keys: list[str] | None = None,
                   replace: bool = False) -> tuple[Manifest, list[str]]:
    """Convert the CPU graphs ``keys`` (default: all) of the bundle in ``folder``; returns the manifest with
    the ``ort`` fields (the caller re-hashes the files) and the files written. ``replace``: the entries
    load the ``.ort`` file, and the ``.onnx`` ones are deleted from ``folder``."""
    import onnxruntime as ort

    value = manifest.to_dict()
    written: dict[str, str] = {}                  # onnx name -> ort name (shared graphs converted once)
    for key in _cpu_graphs(manifest, keys):
        onnx_file = manifest.models[key].file
        if onnx_file not in written:
            written[onnx_file] = ort_name(onnx_file)
            convert_graph(folder / onnx_file, folder / written[onnx_file])
        entry = value["models"][key]
        entry["ort"] = {"file": written[onnx_file], "optimization": f"{LEVEL}, {', '.join(DISABLED)} off",
                        "onnxruntime": ort.__version__}
        model = manifest.models[key]
        if model.precision == "int8" and model.needs_exact_u8s8:
            entry["ort"]["runs_on"] = SAVED_8BIT_RUNS_ON
        if replace:
            entry["onnx_file"], entry["file"] = onnx_file, written[onnx_file]
    if not written:
        raise BundleError("the bundle has no CPU graph to convert to the .ort format")
    _write_config(folder, list(written.values()))
    if replace:
        for onnx_file in written:
            (folder / onnx_file).unlink()
    value[FIELD] = {"required_operators": ORT_CONFIG, "graphs": dict(written), "onnxruntime": ort.__version__,
                    "why": "onnxruntime mobile and reduced builds load .ort graphs; build one with "
                           f"--include_ops_by_config {ORT_CONFIG}"}
    return Manifest.from_dict(value), [*written.values(), ORT_CONFIG]


def _write_config(folder: Path, names: list[str]) -> None:
    """``required_operators.config`` of the ``.ort`` graphs ``names``; its header names them relative to the
    bundle (the tool writes absolute paths, here a scratch folder's)."""
    import logging

    from onnxruntime.tools.ort_format_model import create_config_from_models

    log = logging.getLogger("ort_format_model.utils")
    level = log.level
    log.setLevel(logging.WARNING)                 # the tool logs and prints its progress
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            create_config_from_models([folder / n for n in names], folder / ORT_CONFIG, False)
    finally:
        log.setLevel(level)
    path = folder / ORT_CONFIG
    lines = path.read_text(encoding="utf-8").splitlines()
    header = [f"# - {n}" for n in names]
    body = [line for line in lines if not line.startswith("# - ")]
    path.write_text("\n".join([body[0], *header, *body[1:]]) + "\n", encoding="utf-8")


def ort_graph_name(manifest: Manifest, key: str, graph_format: str) -> str:
    """The file a session loads for ``models[key]``: ``onnx`` its ``file``, ``ort`` its ``.ort`` form."""
    entry = manifest.models[key]
    if graph_format == "onnx" or Path(entry.file).suffix == ".ort":
        return entry.file
    ort_file = (entry.get_extra("ort") or {}).get("file")
    if not ort_file:
        raise BundleError(f"graph {key} ({entry.file}) has no .ort form in this bundle",
                          "export with --ort-format, or open it with graph_format='onnx'")
    return str(ort_file)


def check_ort_io(session: Any, manifest: Manifest, where: str) -> None:
    """``BundleError`` unless the loaded ``.ort`` session takes the manifest's inputs and gives its outputs."""
    have_in = {i.name for i in session.get_inputs()}
    have_out = {o.name for o in session.get_outputs()}
    if have_in != set(manifest.input_names) or not set(manifest.output_names) <= have_out:
        raise BundleError(f"{where} takes {', '.join(sorted(have_in))} and gives {', '.join(sorted(have_out))}; the "
                          f"manifest declares {', '.join(manifest.input_names)} -> {', '.join(manifest.output_names)}",
                          "the manifest and the graph come from different exports")
