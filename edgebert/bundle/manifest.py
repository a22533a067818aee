"""``manifest.json`` as a type: the one place that knows the bundle manifest's keys and versions.

A ``Manifest`` is frozen and validated when it is made (``Manifest.from_dict`` / ``Manifest.read``):
every field the runtime reads is present and of the right type, or a one-line ``BundleError`` names
the first one that is not. Keys it does not know (newer exporters add some) are kept as they are, so
``to_dict()`` gives back exactly the JSON it was made from and a bundle re-written through it is
byte-identical.

Readers use the typed fields (``manifest.task``, ``manifest.models["int8"].target``,
``manifest.tokenizer.pad_id``, ``manifest.max_length``, ``manifest.io``); the JSON form is
``to_dict()``. For code written against the dict a ``Manifest`` is also a read-only mapping of its
JSON (``manifest["models"]["int8"]["accuracy"]``), and a ``ModelEntry`` one of its entry.

Versions: 1 (one INT8 graph, no precision / target / requires per entry: read with ``LEGACY_INT8``)
and 2 (current). Any other version is a ``BundleError`` that says to re-export.

Stdlib only: the runtime imports this module.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Mapping
from dataclasses import field
from pathlib import Path
from typing import Any, Iterator

from edgebert.bundle.manifest_checks import INPUT_NAMES, TASK_OUTPUTS, TOKEN_IDS, entry_problem, manifest_problem
from edgebert.bundle.pooling import SentencePooling
from edgebert.bundle.task_registry import TASK_NAMES, bundle_task
from edgebert.errors import BundleError
from edgebert.files.jsonfile import JsonError, loads
from edgebert.records import record

OPENVINO_ENGINE = "openvino"       # ModelEntry.engine of an OpenVINO IR (runtime.openvino_graph runs it)

__all__ = ["MANIFEST_NAME", "BUNDLE_FORMAT", "BUNDLE_VERSION", "READABLE_VERSIONS", "TASKS", "PRECISIONS",
           "TASK_OUTPUTS", "INPUT_NAMES", "LEGACY_INT8", "TensorSpec", "TokenizerFacts", "ModelShape",
           "ModelEntry", "Manifest", "io_spec"]

MANIFEST_NAME = "manifest.json"
BUNDLE_FORMAT = "edgebert-bundle"
BUNDLE_VERSION = 2
READABLE_VERSIONS = (1, 2)
TASKS = TASK_NAMES                 # the bundle tasks (``task_registry``: one entry each)
PRECISIONS = ("fp32", "int8", "fp16", "int4")   # int4: the small graph, loaded only when asked for
# Output names per task, in graph order (read from the registry).
_REQUIRED_KEYS = ("format", "version", "task", "config", "tokenizer", "inputs", "outputs", "models", "files")

# Version 1 bundles: their one INT8 graph has 8-bit weights, exact only where U8S8 products are.
LEGACY_INT8 = {"target": "legacy-8bit",
               "requires": {"arch": ["x86_64", "arm64"], "u8s8_exact": True,
                            "exact_on": ["x86-vnni", "arm64"],
                            "elsewhere": "run with session.x64quantprecision=1"}}





class _JsonView(Mapping):
    """A read-only mapping over ``self._json`` (copies out, so nothing outside can change it)."""
    _json: dict[str, Any]

    def __getitem__(self, key: str) -> Any:
        return copy.deepcopy(self._json[key])

    def __iter__(self) -> Iterator[str]:
        return iter(self._json)

    def __len__(self) -> int:
        return len(self._json)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form, a fresh copy."""
        return copy.deepcopy(self._json)

    def get_extra(self, key: str, default: Any = None) -> Any:
        """A field the type does not model, a fresh copy: a manifest's ``source``, ``versions``,
        ``export_host`` ...; an entry's ``accuracy``, ``validation``, ``fused_ops``, ``op_domains`` ..."""
        return copy.deepcopy(self._json.get(key, default))

    __eq__ = Mapping.__eq__
    __hash__ = None  # type: ignore[assignment]


# --------------------------------------------------------------------------- parts
@record
class TensorSpec:
    """One graph input or output: its name, dtype and shape (named axes are dynamic: "batch", "sequence")."""
    name: str
    dtype: str = "float32"
    shape: tuple[int | str, ...] = ()

    @property
    def dynamic_axes(self) -> dict[int, str]:
        """``{axis: name}`` of the named (dynamic) axes, as ``torch.onnx.export`` takes them."""
        return {i: d for i, d in enumerate(self.shape) if isinstance(d, str)}

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}

    @classmethod
    def from_dict(cls, value: dict[str, Any]) -> "TensorSpec":
        shape = value.get("shape")
        return cls(value["name"], str(value.get("dtype") or ""), tuple(shape) if isinstance(shape, list) else ())


def io_spec(task: str, hidden_size: int, vocab_size: int, num_labels: int,
            outputs: tuple[str, ...] | None = None) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]:
    """The inputs and outputs of a ``task`` graph: the one definition of a bundle's I/O names and axes.
    ``outputs``: the names this bundle declares (``BundleTask.bundle_outputs``; default: all of the task's)."""
    spec = bundle_task(task)
    inputs = tuple(TensorSpec(n, "int64", spec.input_axes) for n in INPUT_NAMES)
    sizes = {"hidden_size": hidden_size, "vocab_size": vocab_size, "num_labels": num_labels}
    keep = spec.output_names if outputs is None else outputs
    return inputs, tuple(TensorSpec(n, "float32", tuple(sizes.get(a, a) for a in shape))
                         for n, shape in spec.outputs if n in keep)


@record
class ModelShape:
    """The encoder's sizes the runtime needs (``manifest.config``)."""
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    vocab_size: int
    max_position_embeddings: int
    intermediate_size: int | None = None
    type_vocab_size: int | None = None


def _whole(value: Any) -> int | None:
    """A recorded count or id if it is a whole number, else None (the reader then works it out itself)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


@record
class TokenizerFacts:
    """The bundle's tokenizer file and the special-token ids the runtime feeds."""
    file: str
    pad_id: int = 0
    cls_id: int | None = None
    sep_id: int | None = None
    mask_id: int | None = None
    unk_id: int | None = None
    vocab_size: int | None = None
    lowercase: bool | None = None
    # the highest id the tokenizer can give, recorded with the tokenizer's hash at export; None where that
    # hash is not the file's (older bundles, a re-hashed file): the runtime then reads the vocabulary
    max_id: int | None = None


@record(eq=False)
class ModelEntry(_JsonView):
    """One graph of the bundle (``manifest.models[key]``)."""
    key: str
    file: str
    precision: str
    graph: str | None
    providers: tuple[str, ...]
    target: str | None
    requires: Mapping[str, Any] | None
    quantization: Mapping[str, Any]
    tensorrt_profile: Mapping[str, Any] | None
    _json: dict[str, Any] = field(repr=False)

    @classmethod
    def from_dict(cls, key: str, value: dict[str, Any], version: int = BUNDLE_VERSION, *,
                  owned: bool = False) -> "ModelEntry":
        """``value`` as an entry; ``BundleError`` if it lacks what the runtime reads (``owned``: the
        caller hands ``value`` over, so it is not copied)."""
        problem = entry_problem(key, value, version)
        if problem:
            raise BundleError(f"{MANIFEST_NAME}: {problem}", "re-export the bundle")
        value = value if owned else copy.deepcopy(value)
        precision = str(value.get("precision") or key.split("-", 1)[0])
        quant = value.get("quantization") if isinstance(value.get("quantization"), dict) else {}
        if precision == "int8" and "requires" not in value and "cpu" in _providers(precision, quant, value):
            value = {**copy.deepcopy(LEGACY_INT8), **value}          # version 1's one INT8 graph
        return cls(key, value["file"], precision, value.get("graph"), _providers(precision, quant, value),
                   value.get("target"), value.get("requires"), quant, value.get("tensorrt_profile"), value)

    @property
    def is_cpu_int8(self) -> bool:
        """A CPU INT8 graph (dynamic format, one per target); the TensorRT QDQ graph is not."""
        return self.precision == "int8" and "cpu" in self.providers

    @property
    def engine(self) -> str:
        """What runs the graph: ``onnxruntime``, or ``openvino`` (``OPENVINO_ENGINE``: an IR, ``file`` .xml,
        ``weights`` .bin)."""
        return str(self._json.get("engine") or "onnxruntime")

    @property
    def weights(self) -> str | None:
        """The IR's weights file of an ``openvino`` graph; None for ONNX graphs."""
        value = self._json.get("weights")
        return str(value) if value else None

    @property
    def is_static_qdq(self) -> bool:
        return self.quantization.get("mode") == "static" or self.quantization.get("format") == "QDQ"

    @property
    def missed_budget(self) -> bool:
        """An INT8 graph whose export gate measured more loss than its budget (``accuracy.within_budget``
        false: kept, loadable by name, not picked by default while the bundle has one that passed)."""
        accuracy = self._json.get("accuracy")
        return isinstance(accuracy, dict) and accuracy.get("within_budget") is False

    @property
    def needs_exact_u8s8(self) -> bool:
        """An INT8 graph whose 8-bit weights need exact U8S8 products (``requires.u8s8_exact``; unsaid: yes)."""
        return bool((self.requires or {}).get("u8s8_exact", True))


def _providers(precision: str, quant: Mapping[str, Any], value: dict[str, Any]) -> tuple[str, ...]:
    """The providers an entry is made for (entries written before GPU graphs: by their kind)."""
    if value.get("providers"):
        return tuple(value["providers"])
    if precision == "fp16":
        return ("cuda",)
    if quant.get("format") == "QDQ":
        return ("cpu",)
    return ("cpu", "cuda")


# --------------------------------------------------------------------------- the manifest
@record(eq=False)
class Manifest(_JsonView):
    """A bundle's ``manifest.json``, validated. Make one with ``from_dict``, ``read`` or ``build``."""
    version: int
    task: str
    config: ModelShape
    max_sequence_length: int | None
    labels: Mapping[str, str] | None
    tokenizer: TokenizerFacts
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    models: Mapping[str, ModelEntry]
    files: Mapping[str, str]
    _json: dict[str, Any] = field(repr=False)
    pooling: SentencePooling | None = None     # the model's own pooling (``bundle.pooling``); None: unstated

    # ------------------------------------------------------------------ making one
    @classmethod
    def from_dict(cls, value: Any, where: str | os.PathLike = MANIFEST_NAME, *, owned: bool = False) -> "Manifest":
        """``value`` (parsed JSON) as a ``Manifest``; ``BundleError`` naming ``where`` and the first
        field that is missing or wrong. Extra keys and entries are kept. ``owned``: the caller hands
        ``value`` over (freshly parsed), so it is not copied."""
        if not isinstance(value, dict):
            raise BundleError(f"{where} must hold a JSON object", "re-export the bundle")
        if value.get("format") != BUNDLE_FORMAT:
            raise BundleError(f"{where} is not an edgebert bundle manifest (format={value.get('format')!r})")
        if value.get("version") not in READABLE_VERSIONS:
            raise BundleError(f"{where} has bundle version {value.get('version')!r}; this edgebert reads "
                              f"versions {', '.join(map(str, READABLE_VERSIONS))}",
                              "re-export the bundle with this edgebert")
        missing = [k for k in _REQUIRED_KEYS if k not in value]
        if missing:
            raise BundleError(f"{where} lacks {', '.join(missing)}", "re-export the bundle")
        if value["task"] not in TASKS:
            raise BundleError(f"{where} has unknown task {value['task']!r}")
        # a one-device bundle (``packed``, ``runtime.pack``) leaves its fp32 graph out on purpose
        if not isinstance(value["models"], dict) or ("fp32" not in value["models"] and not value.get("packed")):
            raise BundleError(f"{where} lists no fp32 model", "re-export the bundle")
        problem = manifest_problem(value)
        if problem:
            raise BundleError(f"{where}: {problem}", "re-export the bundle")
        value = value if owned else copy.deepcopy(value)
        cfg, tok = value["config"], value["tokenizer"]
        shape = ModelShape(**{k: cfg.get(k) for k in ModelShape.__dataclass_fields__})
        facts = TokenizerFacts(file=tok["file"], **{k: tok.get(k) for k in TOKEN_IDS if k != "pad_id"},
                               pad_id=tok.get("pad_id", 0), vocab_size=tok.get("vocab_size"),
                               lowercase=tok.get("lowercase"), max_id=_whole(tok.get("max_id"))
                               if tok.get("max_id_of") == value["files"].get(tok["file"]) else None)
        models = {k: ModelEntry.from_dict(k, e, value["version"], owned=True) for k, e in value["models"].items()}
        return cls(value["version"], value["task"], shape, value.get("max_sequence_length"), value.get("labels"),
                   facts, tuple(TensorSpec.from_dict(i) for i in value["inputs"]),
                   tuple(TensorSpec.from_dict(o) for o in value["outputs"]), models, dict(value["files"]), value,
                   SentencePooling.from_dict(value["pooling"], str(where)) if value.get("pooling") is not None else None)

    @classmethod
    def read(cls, bundle_dir: str | os.PathLike) -> "Manifest":
        """Parse ``bundle_dir/manifest.json`` (a regular file inside the bundle, not a symlink)."""
        bundle_dir = Path(bundle_dir)
        path = bundle_dir / MANIFEST_NAME
        if not bundle_dir.is_dir():
            raise BundleError(f"bundle directory {bundle_dir} not found", "run `edgebert export` first")
        if path.is_symlink():
            raise BundleError(f"{path} is a symlink (to {os.path.realpath(path)})",
                              "copy the manifest into the bundle, or re-export it")
        if not path.is_file():
            raise BundleError(f"{bundle_dir} has no {MANIFEST_NAME}", "pass a directory written by `edgebert export`")
        try:
            value = loads(path.read_bytes())
        except JsonError as exc:
            raise BundleError(f"{path} {exc.reason}", "re-export the bundle") from None
        except OSError as exc:
            raise BundleError(f"{path} cannot be read ({exc.strerror or exc})", "re-export the bundle") from exc
        return cls.from_dict(value, path, owned=True)

    @classmethod
    def build(cls, *, task: str, config: ModelShape, num_labels: int, source: dict[str, Any],
              max_sequence_length: int, labels: dict[str, str] | None, tokenizer: dict[str, Any],
              opset: int, versions: dict[str, Any], models: dict[str, dict[str, Any]],
              tensorrt_profile: dict[str, Any], extra: dict[str, Any] | None = None,
              output_names: tuple[str, ...] | None = None) -> "Manifest":
        """A new bundle's manifest, without file hashes yet (``with_files`` adds them)."""
        inputs, outputs = io_spec(task, config.hidden_size, config.vocab_size, num_labels, output_names)
        if config.type_vocab_size is None:    # a model without token types (DistilBERT): its graph takes none
            inputs = tuple(i for i in inputs if i.name != "token_type_ids")
        value = {
            "format": BUNDLE_FORMAT, "version": BUNDLE_VERSION, "task": task, "source": source,
            "config": {k: getattr(config, k) for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                                        "vocab_size", "max_position_embeddings",
                                                        "intermediate_size", "type_vocab_size")},
            "max_sequence_length": max_sequence_length, "labels": labels, "tokenizer": tokenizer,
            "inputs": [i.as_dict() for i in inputs], "outputs": [o.as_dict() for o in outputs],
            "padding": "right", "opset": opset, "versions": versions, "models": models,
            "tensorrt_profile": tensorrt_profile, **(extra or {}), "files": {},
        }
        return cls.from_dict(value)

    def with_files(self, files: dict[str, str], sizes: dict[str, int] | None = None) -> "Manifest":
        """The same manifest with ``files`` (name -> sha256) and, if given, ``sizes`` (name -> bytes) replaced."""
        value = self.to_dict()
        value.pop("files", None)
        kept = value.pop("sizes", None)
        sizes = dict(sizes) if sizes is not None else kept
        return Manifest.from_dict({**value, "files": dict(files), **({"sizes": sizes} if sizes is not None else {})})

    def to_json(self) -> str:
        return json.dumps(self._json, indent=2) + "\n"

    # ------------------------------------------------------------------ what readers ask
    @property
    def max_length(self) -> int:
        """The longest input the bundle takes: its export length, never past its position table."""
        limit = self.config.max_position_embeddings
        return int(min(self.max_sequence_length or limit, limit))

    @property
    def label_names(self) -> list[str]:
        """The label names in id order (empty when the manifest names none)."""
        labels = self.labels or {}
        return [labels[k] for k in sorted(labels, key=int)]

    @property
    def input_names(self) -> list[str]:
        return [i.name for i in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [o.name for o in self.outputs]

    def named_files(self) -> list[str]:
        """The files the entries name: graphs, an OpenVINO graph's weights, the tokenizer (each must be hashed)."""
        return [*(m.file for m in self.models.values()), *(m.weights for m in self.models.values() if m.weights),
                self.tokenizer.file]

    @property
    def file_sizes(self) -> dict[str, int]:
        """``{name: bytes}`` of the hashed files, as exported (empty for bundles exported before sizes were
        recorded): an archive's members are extracted at these sizes, never more."""
        return dict(self._json.get("sizes") or {})

    def file_names(self) -> list[str]:
        """Every file the manifest names: ``named_files`` and the hashed files."""
        return [*self.named_files(), *self.files]

    def int8_graphs(self) -> dict[str, ModelEntry]:
        """``{key: entry}`` of every CPU INT8 graph, the default (``int8``) first. The TensorRT INT8 graph
        (``int8-trt``) is not one of them."""
        out = {k: e for k, e in self.models.items() if e.is_cpu_int8}
        return dict(sorted(out.items(), key=lambda kv: kv[0] != "int8"))

    def openvino_graphs(self) -> dict[str, ModelEntry]:
        """``{key: entry}`` of the OpenVINO INT8 graphs (``export --target openvino``): not in ``int8_graphs``,
        which onnxruntime runs."""
        return {k: e for k, e in self.models.items() if e.engine == OPENVINO_ENGINE and e.precision == "int8"}

    def entry(self, key: str) -> ModelEntry | None:
        return self.models.get(key)
