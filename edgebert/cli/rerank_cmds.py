"""``edgebert rerank``: order passages by their relevance to a query with a reranker bundle (torch-free). Thin: read
the passages (one per line of a file, or standard input), call ``EdgeSession.rank``, print a table or JSON."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from edgebert.cli import options as o
from edgebert.cli.app import app, say

SHOWN = 90          # characters of a passage in the table


@app.command("rerank")
def rerank_cmd(
    bundle_dir: Annotated[Path, typer.Argument(metavar="BUNDLE", help="A reranker bundle (task rerank: a "
                                                                    "cross-encoder) written by `edgebert export`.")],
    query: Annotated[str, typer.Option("--query", help="The query, in quotes.")],
    documents: Annotated[str, typer.Option("--documents", metavar="FILE", help="The passages to order: a UTF-8 "
                                                                                "file, one per line (blank lines "
                                                                                "skipped), or - for standard input.")],
    top_k: Annotated[Optional[int], typer.Option("--top-k", min=1, help="Show the best K (default: all).")] = None,
    precision: Annotated[Optional[str], typer.Option(
        "--precision", help="int8 | fp32 | int4 (default: the best the bundle has here).")] = None,
    threads: o.RuntimeThreads = None,
    as_json: o.Json = False,
) -> None:
    """Order passages by relevance to a query, as sentence-transformers' CrossEncoder.rank would: rank, passage
    number (its line among the passages), score (the model's activation of its logit) and the passage."""
    from edgebert.files.textfiles import read_utf8
    from edgebert.runtime import EdgeSession

    text = sys.stdin.read() if documents == "-" else read_utf8(documents, "--documents file",
                                                               "pass a UTF-8 file of passages, one per line")
    passages = [line.strip() for line in text.splitlines() if line.strip()]
    if not passages:
        from edgebert.errors import DataError

        raise DataError(f"--documents {documents} holds no passage", "write one passage per line")
    session = EdgeSession(bundle_dir, provider="cpu", precision=precision, threads=threads)
    ranked = session.rank(query, passages, top_k=top_k, return_documents=True)
    if as_json:
        print(json.dumps(ranked, indent=2, ensure_ascii=False))
        return
    for place, r in enumerate(ranked, start=1):
        shown = r["text"] if len(r["text"]) <= SHOWN else r["text"][:SHOWN - 3] + "..."
        say(f"{place:>3}. #{r['corpus_id']:<4} {r['score']:.4f}  {shown}")
    say(f"({len(ranked)} of {len(passages)} passages; {session.precision} on {session.provider}: "
        f"{session.describe()['precision_reason']})")
