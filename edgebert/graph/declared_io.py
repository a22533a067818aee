"""The inputs and outputs an ONNX file declares, read without onnx or onnxruntime (stdlib only).

An ``.onnx`` file is a protobuf ``ModelProto``; its ``graph`` field holds ``input`` and ``output``
``ValueInfoProto``\\ s (name, element type, shape). This reads just those, walking the wire format and
skipping everything else (weights included) through a memory map, so checking a bundle's graphs on
load costs milliseconds whatever their size. ``read_graph`` also gives every initializer's name and
dims (never its data): the embedding tables say how many token ids, positions and token types a graph
takes. ``edgebert.bundle`` uses it to check that a manifest and its tokenizer agree with its graphs
before any session is made.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass
from typing import Iterator

# onnx.TensorProto.DataType values the runtime cares about
ELEM_TYPES = {1: "float32", 6: "int32", 7: "int64", 10: "float16", 11: "float64", 16: "bfloat16"}
FLOAT_TYPES = ("float32", "float16", "float64", "bfloat16")


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str                          # "float32", "int64" ... ("type-N" for others, "" if not a tensor)
    shape: tuple[int | str, ...] | None  # ints, symbolic names ("batch"), "?" for unknown; None: no shape


class NotOnnx(ValueError):
    """The bytes are not a protobuf ModelProto with a graph."""


def _varint(buf, i: int, end: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        if i >= end or shift > 63:
            raise NotOnnx("truncated varint")
        byte = buf[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i
        shift += 7


def _fields(buf, start: int, end: int) -> Iterator[tuple[int, int, object]]:
    """(field number, wire type, value) of one message; LEN values as (start, end) offsets."""
    i = start
    while i < end:
        key, i = _varint(buf, i, end)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(buf, i, end)
        elif wire == 1:
            value, i = None, i + 8
        elif wire == 2:
            length, i = _varint(buf, i, end)
            value, i = (i, i + length), i + length
        elif wire == 5:
            value, i = None, i + 4
        else:
            raise NotOnnx(f"unsupported wire type {wire}")
        if i > end or number == 0:
            raise NotOnnx("field runs past its message")
        yield number, wire, value


def _text(buf, span) -> str:
    return bytes(buf[span[0]:span[1]]).decode("utf-8", errors="replace")


def _shape(buf, span) -> tuple[int | str, ...]:
    dims: list[int | str] = []
    for number, wire, dim in _fields(buf, *span):
        if number != 1 or wire != 2:
            continue
        value: int | str = "?"
        for n, w, v in _fields(buf, *dim):
            if n == 1 and w == 0:
                value = v
            elif n == 2 and w == 2:
                value = _text(buf, v)
        dims.append(value)
    return tuple(dims)


def _value_info(buf, span) -> TensorInfo:
    name, dtype, shape = "", "", None
    for number, wire, value in _fields(buf, *span):
        if number == 1 and wire == 2:
            name = _text(buf, value)
        elif number == 2 and wire == 2:                       # TypeProto
            for n, w, v in _fields(buf, *value):
                if n == 1 and w == 2:                         # TypeProto.Tensor
                    for tn, tw, tv in _fields(buf, *v):
                        if tn == 1 and tw == 0:
                            dtype = ELEM_TYPES.get(tv, f"type-{tv}")
                        elif tn == 2 and tw == 2:
                            shape = _shape(buf, tv)
    return TensorInfo(name, dtype, shape)


@dataclass(frozen=True)
class DeclaredGraph:
    """What an ONNX file declares: its inputs and outputs (initializers listed as inputs left out) and
    the dims of every initializer, by name."""
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    initializers: dict[str, tuple[int, ...]]


def _dims(buf, span) -> tuple[str, tuple[int, ...]]:
    """(name, dims) of a TensorProto: dims is field 1 (packed or not), name field 8."""
    name, dims = "", []
    for number, wire, value in _fields(buf, *span):
        if number == 1 and wire == 0:
            dims.append(value)
        elif number == 1 and wire == 2:
            i, end = value
            while i < end:
                dim, i = _varint(buf, i, end)
                dims.append(dim)
        elif number == 8 and wire == 2:
            name = _text(buf, value)
    return name, tuple(dims)


def read_graph(path: str | os.PathLike) -> DeclaredGraph:
    """The inputs, outputs and initializer dims of the ONNX model at ``path``; ``NotOnnx`` if it is not one."""
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size == 0:
            raise NotOnnx("the file is empty")
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            graph = next((v for n, w, v in _fields(buf, 0, size) if n == 7 and w == 2), None)
            if graph is None:
                raise NotOnnx("no graph")
            inputs, outputs, initializers = [], [], {}
            for number, wire, value in _fields(buf, *graph):
                if wire != 2:
                    continue
                if number == 11:
                    inputs.append(_value_info(buf, value))
                elif number == 12:
                    outputs.append(_value_info(buf, value))
                elif number == 5:                             # TensorProto
                    name, dims = _dims(buf, value)
                    initializers[name] = dims
    return DeclaredGraph([i for i in inputs if i.name not in initializers], outputs, initializers)


def graph_io(path: str | os.PathLike) -> tuple[list[TensorInfo], list[TensorInfo]]:
    """(inputs, outputs) of the ONNX model at ``path``; ``NotOnnx`` if it is not one. Initializers
    listed as graph inputs (old exporters do that) are left out."""
    graph = read_graph(path)
    return graph.inputs, graph.outputs
