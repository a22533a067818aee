"""``@record``: a frozen dataclass that costs microseconds to define, for the classes on the runtime's import path.

``dataclasses.dataclass(frozen=True)`` writes ``__init__``, ``__repr__``, ``__eq__``, ``__hash__``, ``__setattr__``
and ``__delattr__`` as source and compiles each with ``exec`` when the class is defined: 0.6-1.4 ms a class on
the 2-vCPU Xeon, 12 ms of the 22 ms that ``import edgebert.runtime`` took with its 14 records (an app's first
result should come within 1.2x of a plain onnxruntime session's). ``record`` makes the same class from shared methods:
fields in annotation order, defaults and ``dataclasses.field(default=..., default_factory=..., repr=...)``,
``__post_init__``, positional or keyword construction, ``repr``, ``==`` and ``hash`` over the fields (``eq=False``:
identity, as ``dataclass(eq=False)``), ``dataclasses.FrozenInstanceError`` on assignment. It registers its fields
as a dataclass does, so ``dataclasses.fields`` / ``asdict`` / ``replace`` / ``is_dataclass`` work on it.

That registration uses the ``dataclasses`` module's field marker (``_FIELD``, present since Python 3.7); where a
Python lacks it, ``record`` is ``dataclass(frozen=True, eq=...)`` itself: slower to import, never different.
Everywhere else (configs, reports) ``dataclasses`` stays: their import time does not reach an app.
"""

from __future__ import annotations

import dataclasses
from typing import Any

try:                                   # Python 3.11+: type checkers read a record as the dataclass it is
    from typing import dataclass_transform
except ImportError:                    # 3.10
    def dataclass_transform(**_: Any) -> Any:
        return lambda fn: fn

__all__ = ["record"]

_MISSING = dataclasses.MISSING
_FIELD_MARK = getattr(dataclasses, "_FIELD", None)


@dataclass_transform(eq_default=True, frozen_default=True, field_specifiers=(dataclasses.field,))
def record(cls: type | None = None, *, eq: bool = True) -> Any:
    """Make ``cls`` a frozen record (see the module docstring); ``@record`` or ``@record(eq=False)``."""
    def wrap(cls: type) -> type:
        if _FIELD_MARK is None:
            return dataclasses.dataclass(frozen=True, eq=eq)(cls)
        fields: dict[str, dataclasses.Field] = {}
        for name, kind in cls.__dict__.get("__annotations__", {}).items():
            if str(kind).startswith(("ClassVar", "typing.ClassVar")):
                continue
            value = cls.__dict__.get(name, _MISSING)
            spec = value if isinstance(value, dataclasses.Field) else dataclasses.field(default=value)
            if spec.default is _MISSING and spec.default_factory is _MISSING and any(
                    f.default is not _MISSING or f.default_factory is not _MISSING for f in fields.values()):
                raise TypeError(f"non-default field {name!r} follows a default field in {cls.__name__}")
            if isinstance(value, dataclasses.Field):          # as dataclass: the class keeps a plain default
                if spec.default is _MISSING:
                    delattr(cls, name)
                else:
                    setattr(cls, name, spec.default)
            spec.name, spec.type, spec._field_type = name, kind, _FIELD_MARK
            fields[name] = spec
        cls.__dataclass_fields__ = fields
        cls.__match_args__ = tuple(fields)
        methods = {"__init__": _init, "__repr__": _repr, "__setattr__": _setattr, "__delattr__": _delattr}
        if eq:
            methods.update(__eq__=_eq, __hash__=_hash)
        for name, method in methods.items():       # as dataclass: a method the class writes itself is kept
            if name not in cls.__dict__ or (name == "__hash__" and cls.__dict__[name] is None):
                setattr(cls, name, method)
        return cls

    return wrap if cls is None else wrap(cls)


def _init(self, *args: Any, **kwargs: Any) -> None:
    fields = type(self).__dataclass_fields__
    if len(args) > len(fields):
        raise TypeError(f"{type(self).__name__}() takes {len(fields)} fields, {len(args)} were given")
    for i, (name, spec) in enumerate(fields.items()):
        if i < len(args):
            if name in kwargs:
                raise TypeError(f"{type(self).__name__}() got two values for {name!r}")
            value = args[i]
        elif name in kwargs:
            value = kwargs.pop(name)
        elif spec.default is not _MISSING:
            value = spec.default
        elif spec.default_factory is not _MISSING:
            value = spec.default_factory()
        else:
            raise TypeError(f"{type(self).__name__}() is missing the field {name!r}")
        object.__setattr__(self, name, value)
    if kwargs:
        raise TypeError(f"{type(self).__name__}() got an unexpected field {next(iter(kwargs))!r}")
    post_init = getattr(self, "__post_init__", None)
    if post_init is not None:
        post_init()


def _values(self) -> tuple:
    return tuple(getattr(self, name) for name in type(self).__dataclass_fields__)


def _repr(self) -> str:
    shown = ", ".join(f"{name}={getattr(self, name)!r}" for name, spec in type(self).__dataclass_fields__.items()
                      if spec.repr)
    return f"{type(self).__qualname__}({shown})"


def _eq(self, other: Any) -> bool:
    if other.__class__ is not self.__class__:
        return NotImplemented
    return _values(self) == _values(other)


def _hash(self) -> int:
    return hash(_values(self))


def _setattr(self, name: str, value: Any) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")


def _delattr(self, name: str) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
