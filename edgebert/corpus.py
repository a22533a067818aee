"""Corpus readers: text files -> documents (one string each, paragraphs separated by newlines).

Formats:
- ``text``: plain text, one document per blank-line-separated block (lines of a block are joined).
- ``wikitext``: WikiText raw files; one document per article (`` = Title = `` headings), section
  headings and bodies kept in order, the ``@-@``/``@,@``/``@.@`` markers turned back into ``-``,
  ``,``, ``.`` joined to their neighbours as in the original text (``1 @,@ 000`` -> ``1,000``).
- ``auto``: wikitext when the file has WikiText article headings, else text.

With no file at all, ``builtin_corpus()`` gives Python's own documentation (``pydoc_data.topics``),
so pretraining works without any download.
"""

from __future__ import annotations

import random

import re
from pathlib import Path
from typing import Sequence

from .errors import ConfigError, DataError

FORMATS = ("auto", "text", "wikitext")

_WIKI_TITLE = re.compile(r"^ = (?!=)(.+?) = $")            # " = Title = "
_WIKI_SECTION = re.compile(r"^ (?:= ){2,}(.+?)(?: =){2,} $")  # " = = Section = = ", deeper levels too
_WIKI_MARKER = re.compile(r" ?@([-,.])@ ?")
_RST_UNDERLINE = re.compile(r"^([*=\-~^#+])\1{2,}$")


def read_text(path: str | Path) -> str:
    """Read a UTF-8 text file; DataError naming file and line if missing, not UTF-8 or empty."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"corpus {path} not found", "check the path")
    if not path.is_file():
        raise DataError(f"corpus {path} is not a file")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise DataError(f"{path}:{line} is not UTF-8 (byte 0x{data[exc.start]:02x} at column {column})",
                        "convert the file to UTF-8, e.g. with iconv") from exc
    text = text.removeprefix("\ufeff")
    if not text.strip():
        raise DataError(f"corpus {path} is empty", "give a file with text in it")
    return text


def detokenize_wikitext(line: str) -> str:
    """``1 @,@ 000`` -> ``1,000``; ``state @-@ of`` -> ``state-of``."""
    return _WIKI_MARKER.sub(r"\1", line)


def parse_wikitext(text: str) -> list[str]:
    """WikiText raw -> one document per article: title, then each section heading and paragraph."""
    docs: list[list[str]] = []
    for raw in text.splitlines():
        title = _WIKI_TITLE.match(raw)
        if title and not _WIKI_SECTION.match(raw):
            docs.append([detokenize_wikitext(title.group(1).strip())])
            continue
        section = _WIKI_SECTION.match(raw)
        line = section.group(1) if section else raw
        line = detokenize_wikitext(line.strip())
        if not line:
            continue
        if not docs:  # text before the first heading is an article of its own
            docs.append([])
        docs[-1].append(line)
    return ["\n".join(paragraphs) for paragraphs in docs if any(p.strip() for p in paragraphs)]


def parse_plain(text: str) -> list[str]:
    """Plain text -> one document per blank-line-separated block (its lines joined by spaces)."""
    docs, block = [], []
    for line in text.splitlines() + [""]:
        if line.strip():
            block.append(line.strip())
        elif block:
            docs.append(" ".join(block))
            block = []
    return docs


def detect_format(text: str) -> str:
    """``wikitext`` when the text has WikiText article headings (`` = Title = ``), else ``text``."""
    for line in text.splitlines()[:2000]:
        if _WIKI_TITLE.match(line):
            return "wikitext"
    return "text"


def read_corpus(path: str | Path, format: str = "auto") -> list[str]:
    """Documents of one corpus file."""
    if format not in FORMATS:
        raise ConfigError(f"unknown corpus format {format!r}", f"use one of {', '.join(FORMATS)}")
    text = read_text(path)
    fmt = detect_format(text) if format == "auto" else format
    docs = parse_wikitext(text) if fmt == "wikitext" else parse_plain(text)
    if not docs:
        raise DataError(f"corpus {path} has no documents", "give a file with text in it")
    return docs


def read_corpora(paths: Sequence[str | Path], format: str = "auto") -> list[str]:
    """Documents of several files in order; no files means the built-in corpus."""
    if not paths:
        return builtin_corpus()
    docs: list[str] = []
    for path in paths:
        docs.extend(read_corpus(path, format))
    return docs


def _rst_documents(text: str) -> list[str]:
    """Split one pydoc topic (reStructuredText-like) into sections, each a document of paragraphs."""
    lines = text.splitlines()
    sections: list[list[str]] = [[]]
    for i, line in enumerate(lines):
        if _RST_UNDERLINE.match(line.strip()):
            continue
        next_is_underline = i + 1 < len(lines) and _RST_UNDERLINE.match(lines[i + 1].strip())
        if next_is_underline and line.strip() and sections[-1]:
            sections.append([])
        sections[-1].append(line)
    docs = []
    for section in sections:
        paragraphs = parse_plain("\n".join(section))
        if paragraphs:
            docs.append("\n".join(paragraphs))
    return docs


def builtin_corpus() -> list[str]:
    """Python's own reference documentation (``pydoc_data.topics``), one document per section.

    About 470k characters of English with code: enough to show pretraining working end to end.
    """
    from pydoc_data.topics import topics

    docs: list[str] = []
    for name in sorted(topics):
        docs.extend(_rst_documents(topics[name]))
    return docs


def split_documents(docs: list[str], fraction: float, seed: int) -> tuple[list[str], list[str]]:
    """Hold out ``fraction`` of the documents (at least one), chosen with ``seed``: (train, held out)."""
    if len(docs) < 3:
        raise DataError(f"the corpus has only {len(docs)} documents, too few to hold some out",
                        "give more text or an --eval-corpus")
    order = list(range(len(docs)))
    random.Random(seed).shuffle(order)
    held = set(order[:max(1, round(fraction * len(docs)))])
    return [d for i, d in enumerate(docs) if i not in held], [docs[i] for i in sorted(held)]
