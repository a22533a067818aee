"""``Record``: the base of the bench report's dataclasses (``edgebert.bench.rows``, ``edgebert.bench.schema``):
``to_dict()`` writes a row's JSON (keys the field names, in field order, minus what ``omitted()`` leaves
out), ``from_dict()`` reads it back, keeping keys the row does not model (``extra``) and leaving out of
``to_dict()`` the keys the JSON lacked, so a report.json read back is written back as it was.
"""

from __future__ import annotations

from dataclasses import MISSING, fields
from typing import Any, ClassVar

INTERNAL = {"json": False}  # field metadata: kept in memory, never written


def _plain(value: Any) -> Any:
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _typed(spec: Any, value: Any) -> Any:
    """``value`` (JSON) as ``spec`` says: a Record class, ``[cls]`` (a list of them) or ``{str: cls}``."""
    if spec is None or value is None:
        return value
    if isinstance(spec, list):
        return [spec[0].from_dict(v) for v in value]
    if isinstance(spec, dict):
        return {k: spec[str].from_dict(v) for k, v in value.items()}
    return spec.from_dict(value)


def _default(f) -> Any:
    return f.default_factory() if f.default_factory is not MISSING else f.default


class Record:
    """Base of the rows: ``to_dict()`` in field order (keys the field names), ``from_dict()`` back."""

    NESTED: ClassVar[dict[str, Any]] = {}   # field -> how its JSON is typed (see ``_typed``)

    def omitted(self) -> set[str]:
        """Keys this row leaves out of its JSON (by default none)."""
        return set()

    def to_dict(self) -> dict[str, Any]:
        absent = getattr(self, "_absent", {})
        skip = self.omitted() | {k for k, v in absent.items() if getattr(self, k) == v}
        out = {f.name: _plain(getattr(self, f.name)) for f in fields(self)
               if f.name not in skip and f.metadata.get("json", True) and f.name != "extra"}
        out.update(_plain(getattr(self, "extra", {})))
        return out

    @classmethod
    def from_dict(cls, value: dict[str, Any], exact: bool = True):
        """A row from its JSON. ``exact``: a key the JSON lacks stays out of ``to_dict()`` while its field
        keeps the default (so an older report.json is written back as it was)."""
        known = {f.name: f for f in fields(cls) if f.metadata.get("json", True) and f.name != "extra"}
        # a key the JSON lacks takes the field's default, None where it has none (an older report)
        lacking = {k: None if _default(f) is MISSING else _default(f) for k, f in known.items() if k not in value}
        row = cls(**{k: _typed(cls.NESTED.get(k), v) for k, v in value.items() if k in known},
                  **{k: v for k, v in lacking.items() if _default(known[k]) is MISSING})
        if "extra" in {f.name for f in fields(cls)}:
            row.extra = {k: v for k, v in value.items() if k not in known}
        if exact:
            row._absent = lacking
        return row
