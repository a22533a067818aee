"""``edgebert batch``'s input: a Parquet, JSON Lines or CSV file read with pyarrow, cut into parts of fixed rows.

The format is the file's suffix (``.parquet`` / ``.pq``, ``.jsonl`` / ``.ndjson`` / ``.json`` (one object per
line), ``.csv``); a folder is read as a Parquet dataset (its ``*.parquet`` files in name order). The parts are
row ranges of the table as read, so the same input always cuts into the same parts (what ``--resume``
relies on). ``fingerprint`` identifies the input (paths, sizes, modification times) so a resumed run refuses an
input that changed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

from edgebert.errors import ConfigError, DataError, MissingExtra

SUFFIXES = {".parquet": "parquet", ".pq": "parquet", ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl",
            ".csv": "csv"}
BATCH_HINT = "pip install 'edgebert[batch]' (pyarrow; [ray] / [spark] include it)"


def pyarrow():
    """The pyarrow module, or ``MissingExtra`` naming the extra that brings it."""
    try:
        import pyarrow as pa
    except ModuleNotFoundError as exc:
        raise MissingExtra("edgebert batch reads and writes Parquet with pyarrow, which is not installed",
                           BATCH_HINT) from exc
    return pa


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix.lower() in (".parquet", ".pq") and p.is_file())
        if not files:
            raise DataError(f"--input {path} is a folder holding no .parquet files",
                            "pass a .parquet, .jsonl or .csv file, or a folder of .parquet files")
        return files
    if not path.is_file():
        raise ConfigError(f"--input {path} does not exist", "pass a .parquet, .jsonl or .csv file")
    return [path]


def input_format(path: str | os.PathLike) -> str:
    path = Path(path)
    if path.is_dir():
        return "parquet"
    fmt = SUFFIXES.get(path.suffix.lower())
    if fmt is None:
        raise ConfigError(f"--input {path}: unknown format {path.suffix or '(no suffix)'}",
                          f"name the file with one of {', '.join(SUFFIXES)}")
    return fmt


def fingerprint(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Each input file's resolved path, size and modification time (nanoseconds)."""
    out = []
    for f in _files(Path(path)):
        st = f.stat()
        out.append({"path": str(f.resolve()), "bytes": st.st_size, "mtime_ns": st.st_mtime_ns})
    return out


def read_table(path: str | os.PathLike, columns: Sequence[str]):
    """The input as one ``pyarrow.Table`` holding ``columns`` (every column is kept for the output);
    ``DataError`` naming the columns there are when one is missing, or the line pyarrow could not read."""
    pa = pyarrow()
    path = Path(path)
    fmt = input_format(path)
    files = _files(path)
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq
            tables = [pq.read_table(f) for f in files]
            table = pa.concat_tables(tables, promote_options="default") if len(tables) > 1 else tables[0]
        elif fmt == "jsonl":
            import pyarrow.json as pj
            table = pj.read_json(files[0])
        else:
            import pyarrow.csv as pc
            table = pc.read_csv(files[0])
    except pa.ArrowInvalid as exc:
        raise DataError(f"--input {path} cannot be read as {fmt}: {' '.join(str(exc).split())[:200]}",
                        f"check the file is {fmt} (the format comes from its suffix)") from exc
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise DataError(f"--input {path} has no column {', '.join(repr(c) for c in missing)} "
                        f"(its columns: {', '.join(table.column_names)})", "name the text column with --column")
    for name in columns:
        kind = table.schema.field(name).type
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_null(kind)):
            raise DataError(f"--input {path}: column {name!r} holds {kind}, not text", "name a text column")
    return table


def part_ranges(rows: int, part_rows: int) -> list[tuple[int, int]]:
    """``[start, stop)`` of each part: ``part_rows`` rows each, the last one the rest (no part for 0 rows)."""
    if part_rows < 1:
        raise ConfigError(f"--part-rows {part_rows} must be at least 1")
    return [(s, min(s + part_rows, rows)) for s in range(0, rows, part_rows)]
