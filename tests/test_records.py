"""``edgebert.records.record``: the frozen dataclass the runtime's import path uses, behaving as
``dataclass(frozen=True)`` does where the runtime relies on it."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from edgebert.files.atomic import jsonable
from edgebert.records import record


@record
class Point:
    x: int
    y: int = 2
    tags: dict = dataclasses.field(default_factory=dict)
    secret: str = dataclasses.field(default="s", repr=False)


@record(eq=False)
class Handle:
    name: str


@record
class Checked:
    size: int

    def __post_init__(self) -> None:
        if self.size < 0:
            raise ValueError(f"size {self.size} < 0")


def test_a_record_builds_compares_and_prints_like_a_frozen_dataclass():
    p = Point(1)
    assert (p.x, p.y, p.tags, p.secret) == (1, 2, {}, "s")
    assert Point(1, y=3) == Point(x=1, y=3) != Point(1)
    assert hash(Checked(3)) == hash(Checked(3)) == hash((3,))
    assert repr(Point(1, 3)) == "Point(x=1, y=3, tags={})"          # repr=False field left out
    assert Point(1).tags is not Point(1).tags                          # a factory per instance
    assert Point(1) != (1, 2, {}, "s") and Point.__match_args__ == ("x", "y", "tags", "secret")
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.x = 5
    with pytest.raises(dataclasses.FrozenInstanceError):
        del p.y


def test_record_arguments_are_checked_as_a_dataclass_checks_them():
    with pytest.raises(TypeError, match="missing the field 'x'"):
        Point()
    with pytest.raises(TypeError, match="unexpected field 'z'"):
        Point(1, z=3)
    with pytest.raises(TypeError, match="two values for 'x'"):
        Point(1, x=2)
    with pytest.raises(TypeError, match="takes 4 fields, 5 were given"):
        Point(1, 2, {}, "s", 9)
    with pytest.raises(ValueError, match="size -1 < 0"):
        Checked(-1)
    with pytest.raises(TypeError, match="non-default field 'b' follows a default field"):
        @record
        class Bad:
            a: int = 1
            b: int


def test_eq_false_is_identity_and_the_dataclasses_module_reads_a_record():
    h = Handle("a")
    assert h == h and Handle("a") != Handle("a")
    assert dataclasses.is_dataclass(Point(1)) and dataclasses.is_dataclass(Point)
    assert [f.name for f in dataclasses.fields(Point)] == ["x", "y", "tags", "secret"]
    assert dataclasses.fields(Point)[2].default_factory is dict
    assert dataclasses.asdict(Point(1, tags={"a": [1]})) == {"x": 1, "y": 2, "tags": {"a": [1]}, "secret": "s"}
    assert dataclasses.replace(Point(1), y=7) == Point(1, 7)
    with pytest.raises(ValueError, match="size -2 < 0"):
        dataclasses.replace(Checked(1), size=-2)                 # __post_init__ checks the copy too
    assert jsonable({"p": Point(1, (3, 4))}) == {"p": {"x": 1, "y": [3, 4], "tags": {}, "secret": "s"}}


def test_the_runtime_defines_no_dataclass_on_its_import_path():
    """What the records are for: ``import edgebert.runtime`` compiles no dataclass and loads no GPU probe (issue #50's
    first open: 22 -> 14.5 ms on the 2-vCPU Xeon)."""
    code = ("import dataclasses, sys\nmade = []\nreal = dataclasses._process_class\n"
            "dataclasses._process_class = lambda cls, *a, **k: made.append(cls.__qualname__) or real(cls, *a, **k)\n"
            "import edgebert.runtime\nfrom edgebert.runtime import EdgeSession, probe\nprobe('cpu')\n"
            "print(made, 'edgebert.runtime.gpu_probe' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[] False"


def test_without_the_dataclasses_field_marker_a_record_is_a_real_frozen_dataclass(monkeypatch):
    import edgebert.records as records

    monkeypatch.setattr(records, "_FIELD_MARK", None)

    @records.record(eq=False)
    class Fallback:
        a: int = 1

    assert Fallback.__dataclass_params__.frozen and not Fallback.__dataclass_params__.eq
    with pytest.raises(dataclasses.FrozenInstanceError):
        Fallback().a = 2
