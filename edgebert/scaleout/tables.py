"""``edgebert batch``'s input: a Parquet, JSON Lines or CSV file read with pyarrow, cut into parts of fixed rows.

The format is the file's suffix (``.parquet`` / ``.pq``, ``.jsonl`` / ``.ndjson`` / ``.json`` (one object per
line), ``.csv``); a folder is read as a Parquet dataset (its ``*.parquet`` files in name order). The parts are
row ranges of the table as read, so the same input always cuts into the same parts (what ``--resume``
relies on). ``fingerprint`` identifies the input (paths, sizes, content hashes) so a resumed run refuses an
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
    """Each input file's resolved path, size and sha256: what the parts were cut from (a rewrite with the same
    size and its modification time put back is another input; a file touched but unchanged is the same)."""
    from edgebert.files.hashing import sha256_file

    return [{"path": str(f.resolve()), "bytes": f.stat().st_size, "sha256": sha256_file(f)}
            for f in _files(Path(path))]


JSON_BLOCK = 1 << 26          # pyarrow's JSON reader needs a whole line in one block: 64 MB lines are read


def _parquet(files: list[Path], columns: Sequence[str]):
    """A folder's Parquet files as one table: the named text columns as text in each file (a dictionary-encoded
    column, a pandas category, is text too), the other columns as the files agree on them; files whose other
    columns disagree in type are one line naming both."""
    import pyarrow.parquet as pq

    pa = pyarrow()
    tables = [_text_columns(pq.read_table(f), columns, f) for f in files]
    try:
        return pa.concat_tables(tables, promote_options="default") if len(tables) > 1 else tables[0]
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        first = tables[0].schema
        clash = next(((f, t.schema.field(n).type, first.field(n).type) for f, t in zip(files, tables)
                      for n in t.column_names if n in first.names and t.schema.field(n).type != first.field(n).type),
                     None)
        where = (f": {clash[0].name} has {clash[1]} where {files[0].name} has {clash[2]}" if clash
                 else f": {' '.join(str(exc).split())[:160]}")
        raise DataError(f"--input {files[0].parent}: its Parquet files do not share one schema{where}",
                        "write the files with the same column types, or pass one file") from exc


def _text_columns(table, columns: Sequence[str], where: Path):
    """``table`` with each named column as plain text: dictionary-encoded strings decoded; ``DataError`` for a
    column of another type, naming it."""
    pa = pyarrow()
    for name in columns:
        if name not in table.column_names:
            continue                                       # said with the columns there are, below
        kind = table.schema.field(name).type
        if pa.types.is_dictionary(kind) and (pa.types.is_string(kind.value_type)
                                             or pa.types.is_large_string(kind.value_type)):
            table = table.set_column(table.column_names.index(name), name, table.column(name).cast(pa.string()))
            continue
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_null(kind)):
            raise DataError(f"--input {where}: column {name!r} holds {kind}, not text", "name a text column")
    return table


def read_table(path: str | os.PathLike, columns: Sequence[str]):
    """The input as one ``pyarrow.Table`` holding ``columns`` (every column is kept for the output);
    ``DataError`` naming the columns there are when one is missing, or the line pyarrow could not read. The
    named columns are read as text whatever they look like (a CSV column of digits is text, not int64)."""
    pa = pyarrow()
    path = Path(path)
    fmt = input_format(path)
    files = _files(path)
    try:
        if fmt == "parquet":
            table = _parquet(files, columns)
        elif fmt == "jsonl":
            import pyarrow.json as pj
            table = pj.read_json(files[0], read_options=pj.ReadOptions(block_size=JSON_BLOCK))
        else:
            import pyarrow.csv as pc
            table = pc.read_csv(files[0], convert_options=pc.ConvertOptions(
                column_types={c: pa.string() for c in columns}))
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        detail = " ".join(str(exc).split())[:200]
        hint = f"check the file is {fmt} (the format comes from its suffix)"
        if fmt == "jsonl" and "straddling" in detail:
            detail = f"a line is longer than {JSON_BLOCK >> 20} MB"
            hint = "split the longest texts, or write the rows as Parquet"
        raise DataError(f"--input {path} cannot be read as {fmt}: {detail}", hint) from exc
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise DataError(f"--input {path} has no column {', '.join(repr(c) for c in missing)} "
                        f"(its columns: {', '.join(table.column_names)})", "name the text column with --column")
    return _text_columns(table, columns, path)


def part_ranges(rows: int, part_rows: int) -> list[tuple[int, int]]:
    """``[start, stop)`` of each part: ``part_rows`` rows each, the last one the rest (no part for 0 rows)."""
    if part_rows < 1:
        raise ConfigError(f"--part-rows {part_rows} must be at least 1")
    return [(s, min(s + part_rows, rows)) for s in range(0, rows, part_rows)]
