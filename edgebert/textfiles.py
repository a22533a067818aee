"""Reading text files (torch-free): the one UTF-8 reader, the one WikiText heading rule, and the
streaming reader of texts behind INT8 calibration, the accuracy guard and the benchmark's length mix.

``read_utf8`` reads a whole file (corpora, task TSVs, CoNLL files); a missing or non-UTF-8 file is a
DataError naming the file, and for bad bytes the line and column. ``iter_texts`` streams one text at a
time from three kinds of file:

* a TSV with a header naming its text column(s): GLUE SST-2 ``sentence``; pairs ``sentence1`` /
  ``sentence2``, MRPC ``#1 String`` / ``#2 String``, QNLI ``question`` / ``sentence``; also ``text``;
* WikiText raw (``= Heading =`` lines and blank lines skipped; each paragraph is one text);
* plain text, one text per line.

``pairs=True`` yields ``(a, b)`` tuples for pair TSVs; ``pairs=False`` yields the first text column.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Iterator, Union

from .errors import DataError

PAIR_COLUMNS = (("sentence1", "sentence2"), ("#1 String", "#2 String"), ("question", "sentence"))
SINGLE_COLUMNS = ("sentence", "sentence1", "#1 String", "text", "question")
# WikiText raw headings: " = Title = " (level 1, an article), " = = Section = = " (level 2), ...
_WIKITEXT_HEADING = re.compile(r"^\s*((?:= )+)(.+?)((?: =)+)\s*$")

Text = Union[str, tuple[str, str]]


def wikitext_heading(line: str) -> tuple[int, str] | None:
    """(level, title) of a WikiText heading line (1 = article title), None for any other line."""
    match = _WIKITEXT_HEADING.match(line)
    if match is None or match.group(1).count("=") != match.group(3).count("="):
        return None
    return match.group(1).count("="), match.group(2).strip()


def _not_utf8(path: Path, data: bytes, exc: UnicodeDecodeError) -> DataError:
    line = data.count(b"\n", 0, exc.start) + 1
    column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
    return DataError(f"{path}:{line} is not UTF-8 (byte 0x{data[exc.start]:02x} at column {column})",
                     "convert the file to UTF-8, e.g. with iconv")


def read_utf8(path: str | Path, what: str = "file", hint: str = "check the path") -> str:
    """The text of a UTF-8 file (a leading BOM dropped); DataError naming ``what`` and the file if it
    is missing or not a file, and the line and column of the first byte that is not UTF-8."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"{what} {path} not found", hint)
    if not path.is_file():
        raise DataError(f"{what} {path} is not a file")
    data = path.read_bytes()
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise _not_utf8(path, data, exc) from exc


def first_line(path: str | Path, what: str = "file") -> str:
    """The first line of a UTF-8 file, without its line break (e.g. a TSV header)."""
    return read_utf8(path, what).split("\n", 1)[0].rstrip("\r")


def _tsv_rows(path: Path, fh, header_line: str, pairs: bool) -> Iterator[Text]:
    header = [h.strip() for h in header_line.rstrip("\r\n").split("\t")]
    pair = next((cols for cols in PAIR_COLUMNS if all(c in header for c in cols)), None) if pairs else None
    column = next((c for c in SINGLE_COLUMNS if c in header), None)
    if pair is None and column is None:
        raise DataError(f"{path}:1 has no text column (header: {header})",
                        f"a TSV needs one of the columns {', '.join(SINGLE_COLUMNS)}")
    idx = [header.index(c) for c in pair] if pair else [header.index(column)]
    for lineno, row in enumerate(csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE), start=2):
        if not row or not any(x.strip() for x in row):
            continue
        if len(row) <= max(idx):
            raise DataError(f"{path}:{lineno} has {len(row)} columns, the header has {len(header)}")
        texts = [row[i].strip() for i in idx]
        if all(texts):
            yield texts[0] if len(texts) == 1 else (texts[0], texts[1])


def _lines(first: str, rest) -> Iterator[str]:
    yield first
    yield from rest


def iter_texts(path: str | Path, limit: int | None = None, *, pairs: bool = False,
               what: str = "text file", hint: str = "pass a text file, a TSV with a 'sentence' column, "
                                                    "or WikiText raw") -> Iterator[Text]:
    """Texts of ``path`` in file order, at most ``limit``; DataError (naming ``what``) if the file is
    missing, not UTF-8 or holds no text. Nothing is read past what the caller takes."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{what} {path} not found", hint)
    count = 0
    try:
        with open(path, encoding="utf-8-sig", newline="") as fh:
            first = fh.readline()
            if "\t" in first or path.suffix.lower() == ".tsv":
                texts: Iterator[Text] = _tsv_rows(path, fh, first, pairs)
            else:
                stripped = (line.strip() for line in _lines(first, fh))
                texts = (t for t in stripped if t and wikitext_heading(t) is None)
            for text in texts:
                if limit is not None and count >= limit:
                    return
                count += 1
                yield text
    except UnicodeDecodeError:
        read_utf8(path, what)    # raises the error that names the line and column
        raise
    if count == 0:
        raise DataError(f"{path} holds no text", "pass a file with at least one sentence")


# ------------------------------------------------------------------ the built-in English text
BUILTIN_TEXT = Path(__file__).resolve().parent / "assets" / "calibration_en.txt"
BUILTIN_PARTS = ("calibration", "held-out")


def builtin_texts(part: str) -> list[str]:
    """The built-in English text (808 original lines of mixed genre and length, Apache-2.0, shipped in
    the package): ``calibration`` = the 606 lines with index % 4 != 3, ``held-out`` = the other 202.

    INT8 export calibrates on the first part and gates accuracy on the second; ``edgebert check``
    re-measures on the second, so a device check repeats exactly what the export measured.
    """
    if part not in BUILTIN_PARTS:
        raise ValueError(f"unknown part {part!r}; use one of {BUILTIN_PARTS}")
    lines = [t for t in BUILTIN_TEXT.read_text(encoding="utf-8").splitlines() if t.strip()]
    return [t for i, t in enumerate(lines) if (i % 4 == 3) == (part == "held-out")]
