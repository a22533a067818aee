"""Corpus readers: text files -> documents (one string each, paragraphs separated by newlines).

Formats:
- ``text``: plain text, one document per blank-line-separated block (lines of a block are joined).
- ``lines``: one paragraph per line, a blank line between documents (what ``edgebert pipeline``
  writes when it splits a corpus: documents keep their paragraphs).
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

from edgebert.errors import ConfigError, DataError
from edgebert.files.textfiles import read_utf8, wikitext_heading

FORMATS = ("auto", "text", "lines", "wikitext")

_WIKI_MARKER = re.compile(r" ?@([-,.])@ ?")
_RST_UNDERLINE = re.compile(r"^([*=\-~^#+])\1{2,}$")


def read_text(path: str | Path) -> str:
    """A corpus file's text; DataError naming file (and line) if missing, not UTF-8 or empty."""
    text = read_utf8(path, "corpus")
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
        heading = wikitext_heading(raw)
        if heading is not None and heading[0] == 1:
            docs.append([detokenize_wikitext(heading[1])])
            continue
        line = detokenize_wikitext((heading[1] if heading else raw).strip())
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


def parse_lines(text: str) -> list[str]:
    """One paragraph per line -> one document per blank-line-separated block (its lines kept)."""
    return ["\n".join(block) for block in (
        [line.strip() for line in chunk.splitlines() if line.strip()] for chunk in text.split("\n\n")) if block]


def detect_format(text: str) -> str:
    """``wikitext`` when the text has WikiText article headings (`` = Title = ``), else ``text``."""
    for line in text.splitlines()[:2000]:
        heading = wikitext_heading(line)
        if heading is not None and heading[0] == 1:
            return "wikitext"
    return "text"


def read_corpus(path: str | Path, format: str = "auto") -> list[str]:
    """Documents of one corpus file."""
    if format not in FORMATS:
        raise ConfigError(f"unknown corpus format {format!r}", f"use one of {', '.join(FORMATS)}")
    text = read_text(path)
    fmt = detect_format(text) if format == "auto" else format
    docs = {"wikitext": parse_wikitext, "lines": parse_lines}.get(fmt, parse_plain)(text)
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


def paragraphs(documents: Sequence[str], min_words: int = 3) -> list[str]:
    """One text per paragraph (line) of ``documents``, those of at least ``min_words`` words."""
    return [line.strip() for doc in documents for line in doc.splitlines() if len(line.split()) >= min_words]


def split_documents(docs: list[str], fraction: float, seed: int) -> tuple[list[str], list[str]]:
    """Hold out ``fraction`` of the documents (at least one), chosen with ``seed``: (train, held out)."""
    if len(docs) < 3:
        raise DataError(f"the corpus has only {len(docs)} documents, too few to hold some out",
                        "give more text or an --eval-corpus")
    order = list(range(len(docs)))
    random.Random(seed).shuffle(order)
    held = set(order[:max(1, round(fraction * len(docs)))])
    return [d for i, d in enumerate(docs) if i not in held], [docs[i] for i in sorted(held)]
