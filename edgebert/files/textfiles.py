"""Reading text files (torch-free): the one UTF-8 reader, the one WikiText heading rule, the one CoNLL
reader, and the streaming reader of texts behind INT8 calibration, the accuracy guard and the
benchmark's length mix.

``read_utf8`` reads a whole file (corpora, task TSVs, CoNLL files); a missing or non-UTF-8 file is a
DataError naming the file, and for bad bytes the line and column. ``iter_texts`` streams one text at a
time from three kinds of file:

* a TSV with a header naming its text column(s): GLUE SST-2 ``sentence``; pairs ``sentence1`` /
  ``sentence2``, MRPC ``#1 String`` / ``#2 String``, QNLI ``question`` / ``sentence``; also ``text``;
* WikiText raw (``= Heading =`` lines and blank lines skipped; each paragraph is one text);
* CoNLL token tags (``read_conll``; each sentence is one text, its words joined by single spaces);
* plain text, one text per line.

``pairs=True`` yields ``(a, b)`` tuples for pair TSVs; ``pairs=False`` yields the first text column.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Iterator, Union

from edgebert.errors import DataError

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


def unreadable(path: Path, exc: OSError, what: str = "file") -> DataError:
    """An OS error while reading an input (EIO on ``/proc/self/mem``, a permission) as one line naming it."""
    return DataError(f"cannot read {what} {path}: {exc.strerror or type(exc).__name__}",
                     "pass a file you can read")


def read_utf8(path: str | Path, what: str = "file", hint: str = "check the path") -> str:
    """The text of a UTF-8 file (a leading BOM dropped); DataError naming ``what`` and the file if it
    is missing, not a file or cannot be read, and the line and column of the first byte that is not
    UTF-8."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"{what} {path} not found", hint)
    if not path.is_file():
        raise DataError(f"{what} {path} is not a file")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise unreadable(path, exc, what) from exc
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
    missing, unreadable, not UTF-8 or holds no text. Nothing is read past what the caller takes."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{what} {path} not found", hint)
    count = 0
    try:
        with open(path, encoding="utf-8-sig", newline="") as fh:
            first = fh.readline()
            if is_conll(path):
                texts = (" ".join(s.words) for s in read_conll(path, what=what))
            elif "\t" in first or path.suffix.lower() == ".tsv":
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
    except OSError as exc:
        raise unreadable(path, exc, what) from exc
    if count == 0:
        raise DataError(f"{path} holds no text", "pass a file with at least one sentence")


# ------------------------------------------------------------------ CoNLL token tags
# an IOB tag (IOB1 or IOB2): what a CoNLL file's tag column holds
IOB_TAG = re.compile(r"^(O|[BI]-\S+)$")
DOCSTART = "-DOCSTART-"


@dataclass(frozen=True)
class TaggedWords:
    """One sentence of a CoNLL file: its words and their tags as written, and where it starts."""

    words: tuple[str, ...]
    tags: tuple[str, ...]
    line: int                      # line number of the first word
    tag_lines: tuple[int, ...] = ()  # line number of each word (for errors about one tag)


def _columns(line: str) -> list[str]:
    """A tab-separated line splits on tabs, any other on runs of whitespace."""
    return [c.strip() for c in line.split("\t")] if "\t" in line else line.split()


def read_conll(path: str | Path, tag_column: int | None = None, what: str = "CoNLL file") -> list[TaggedWords]:
    """Sentences of a CoNLL file: one word per line, a blank line between sentences, ``-DOCSTART-``
    lines skipped. Columns are separated by a tab or by whitespace: ``TOKEN TAG`` (the shared data) or
    the original four columns ``TOKEN POS CHUNK TAG``. The word is the first column, the tag the last
    one, or column ``tag_column`` (1-based: 2 is the column after the word). A short line is a
    DataError naming the file and line."""
    path = Path(path)
    if tag_column is not None and (not isinstance(tag_column, int) or tag_column < 2):
        raise DataError(f"--tag-column {tag_column!r} must be 2 or more", "column 1 holds the word")
    sentences: list[TaggedWords] = []
    words: list[str] = []
    tags: list[str] = []
    lines: list[int] = []

    def close() -> None:
        if words:
            sentences.append(TaggedWords(tuple(words), tuple(tags), lines[0], tuple(lines)))
            words.clear(), tags.clear(), lines.clear()

    for n, line in enumerate(read_utf8(path, what, "pass an existing CoNLL file").splitlines(), start=1):
        if not line.strip():
            close()
            continue
        cols = _columns(line)
        if cols[0] == DOCSTART:
            close()
            continue
        need = tag_column or 2
        if len(cols) < need or not cols[0] or not cols[(tag_column or len(cols)) - 1]:
            raise DataError(f"{path}:{n} has {len(cols)} column(s), a CoNLL line needs the word and its tag"
                            + (f" in column {tag_column}" if tag_column else "") + f": {line.strip()[:60]!r}",
                            "write 'TOKEN TAG' (or 'TOKEN POS CHUNK TAG') per line")
        words.append(cols[0])
        tags.append(cols[(tag_column or len(cols)) - 1])
        lines.append(n)
    close()
    if not sentences:
        raise DataError(f"{path} has no tagged words", "write one 'TOKEN TAG' per line")
    return sentences


def is_conll(path: str | Path, sniff: int = 20) -> bool:
    """Whether a file looks like CoNLL token tags: its first ``sniff`` non-blank lines (``-DOCSTART-``
    aside) all have two or more columns, the last one an IOB tag. False for unreadable files."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as fh:
            lines = [ln for ln in islice(fh, 4 * sniff) if ln.strip()][:sniff]
    except (OSError, UnicodeDecodeError):
        return False
    rows = [_columns(ln) for ln in lines]
    rows = [r for r in rows if r[0] != DOCSTART]
    return bool(rows) and all(len(r) >= 2 and IOB_TAG.match(r[-1]) for r in rows)


# ------------------------------------------------------------------ the built-in English text
BUILTIN_TEXT = Path(__file__).resolve().parents[1] / "assets" / "calibration_en.txt"
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
