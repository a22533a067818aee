"""The ``config.pbtxt`` files of ``edgebert triton-repo``: written from plain dicts, parsed with Triton's own
schema (``tritonclient.grpc.model_config_pb2.ModelConfig``) before they are written, and checked against what
they serve (the bundle manifest's inputs and outputs, the graph file's declared ones).

A config is a dict whose values are scalars, ``Enum`` names (``KIND_CPU``, ``TYPE_FP32``), nested dicts
(messages) or lists of them (repeated fields); maps (``parameters``) are lists of ``{"key", "value"}``.
``config_text`` renders it, ``parse_config`` parses the text into Triton's ``ModelConfig`` (a text Triton would
refuse fails here, with the parser's line and column). Needs ``tritonclient`` (``pip install
'edgebert[triton]'``): ``MissingExtra`` says so in one line where it is absent.
"""

from __future__ import annotations

from typing import Any, Sequence

from edgebert.errors import ConfigError, MissingExtra

__all__ = ["Enum", "config_text", "parse_config", "model_config_schema", "triton_dims", "triton_type",
           "check_io", "TRITON_HINT"]

TRITON_HINT = "pip install 'edgebert[triton]', or pip install 'tritonclient[grpc]>=2.40'"
_TYPES = {"float32": "TYPE_FP32", "float16": "TYPE_FP16", "int64": "TYPE_INT64", "int32": "TYPE_INT32",
          "string": "TYPE_STRING"}


class Enum(str):
    """An enum value of the schema (written without quotes)."""


def model_config_schema():
    """Triton's ``model_config_pb2`` module and protobuf's ``text_format``, or ``MissingExtra``."""
    try:
        from google.protobuf import text_format
        try:
            from tritonclient.grpc import model_config_pb2
        except RuntimeError:            # tritonclient without its [grpc] part: the schema file is there all the same
            model_config_pb2 = _schema_file()
    except ImportError as exc:          # tritonclient or protobuf absent
        raise MissingExtra("edgebert triton-repo checks every config.pbtxt with Triton's own schema, which "
                           f"ships in tritonclient ({exc.name or 'tritonclient'} is not installed)",
                           TRITON_HINT) from exc
    return model_config_pb2, text_format


def _schema_file():
    """``tritonclient/grpc/model_config_pb2.py`` loaded by path (``tritonclient.grpc`` itself refuses to import
    without grpcio, which the schema does not need)."""
    import importlib.util
    import sys
    from pathlib import Path

    if "tritonclient.grpc.model_config_pb2" in sys.modules:
        return sys.modules["tritonclient.grpc.model_config_pb2"]
    spec = importlib.util.find_spec("tritonclient")
    path = Path(next(iter(spec.submodule_search_locations))) / "grpc" / "model_config_pb2.py"
    if not path.is_file():
        raise ImportError("tritonclient has no grpc/model_config_pb2.py", name="tritonclient")
    module_spec = importlib.util.spec_from_file_location("tritonclient.grpc.model_config_pb2", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    sys.modules[module_spec.name] = module
    return module


def _scalar(value: Any) -> str:
    if isinstance(value, Enum):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    text = str(value)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def config_text(config: dict[str, Any], indent: int = 0) -> str:
    """``config`` in protobuf text format (see the module docstring for its shape)."""
    pad, lines = "  " * indent, []
    for key, value in config.items():
        items = value if isinstance(value, list) else [value]
        for item in items:
            if isinstance(item, dict):
                lines.append(f"{pad}{key} {{")
                body = config_text(item, indent + 1)
                if body:
                    lines.append(body)
                lines.append(f"{pad}}}")
            elif isinstance(value, list) and not isinstance(item, dict):
                lines.append(f"{pad}{key}: [ {', '.join(_scalar(v) for v in value)} ]")
                break
            else:
                lines.append(f"{pad}{key}: {_scalar(item)}")
    return "\n".join(lines)


def parse_config(text: str, where: str):
    """``text`` parsed into Triton's ``ModelConfig``; ``ConfigError`` naming ``where`` if Triton's schema
    refuses it (a field it does not have, a wrong type)."""
    model_config_pb2, text_format = model_config_schema()
    try:
        return text_format.Parse(text, model_config_pb2.ModelConfig())
    except text_format.ParseError as exc:
        raise ConfigError(f"{where}: Triton's model config schema refuses it ({' '.join(str(exc).split())})",
                          "this is a bug in edgebert triton-repo: report it with the bundle's manifest.json") from exc


def triton_type(dtype: str) -> str:
    try:
        return _TYPES[dtype]
    except KeyError:
        raise ConfigError(f"a tensor of type {dtype!r} has no Triton data type here",
                          "re-export the bundle (its inputs are int64, its outputs float32)") from None


def triton_dims(shape: Sequence[int | str]) -> list[int]:
    """A manifest shape as Triton's ``dims`` under ``max_batch_size`` > 0: the batch axis left out, named
    (dynamic) axes as -1."""
    return [d if isinstance(d, int) and not isinstance(d, bool) else -1 for d in list(shape)[1:]]


def _io(message) -> dict[str, tuple[str, list[int]]]:
    model_config_pb2, _ = model_config_schema()
    return {t.name: (model_config_pb2.DataType.Name(t.data_type), list(t.dims)) for t in message}


def check_io(config, where: str, inputs: dict[str, tuple[str, list[int]]],
             outputs: dict[str, tuple[str, list[int]]]) -> None:
    """``config`` (a parsed ``ModelConfig``) declares exactly these inputs and outputs ({name: (type, dims)},
    worked out from the manifest or the graph file); ``ConfigError`` naming the first difference."""
    for kind, have, want in (("inputs", _io(config.input), inputs), ("outputs", _io(config.output), outputs)):
        if set(have) != set(want):
            raise ConfigError(f"{where}: its {kind} {sorted(have)} are not the bundle's {sorted(want)}",
                              "this is a bug in edgebert triton-repo: report it with the bundle's manifest.json")
        for name, (dtype, dims) in want.items():
            if have[name] != (dtype, list(dims)):
                raise ConfigError(f"{where}: {kind[:-1]} {name} is {have[name][0]} {have[name][1]}, the bundle's is "
                                  f"{dtype} {list(dims)}",
                                  "this is a bug in edgebert triton-repo: report it with the bundle's manifest.json")
