"""``edgebert answer``: ask a question-answering bundle about a text (torch-free). Thin: read the context
(the text itself, a file, or standard input), call ``EdgeSession.answer``, print the answers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from edgebert.cli import options as o
from edgebert.cli.app import app, say


@app.command("answer")
def answer_cmd(
    bundle_dir: Annotated[Path, typer.Argument(metavar="BUNDLE", help="A question-answering bundle (task qa) "
                                                                    "written by `edgebert export`, or its archive.")],
    question: Annotated[str, typer.Argument(metavar="QUESTION", help="The question, in quotes.")],
    context: Annotated[str, typer.Option("--context", help="The text to answer from: the text itself, a UTF-8 "
                                                           "file holding it, or - for standard input (long texts "
                                                           "are read in overlapping windows).")],
    top_k: Annotated[int, typer.Option("--top-k", min=1, help="How many answers, best first.")] = 1,
    max_answer_len: Annotated[int, typer.Option("--max-answer-len", min=1, help="Longest answer, in tokens "
                                                                                   "(the pipeline's default).")] = 15,
    doc_stride: o.AnswerDocStride = None,
    max_length: Annotated[int, typer.Option("--max-length", min=8, help="Tokens per window, question included "
                                                                        "(at most the bundle's).")] = 384,
    handle_impossible_answer: Annotated[bool, typer.Option(
        "--handle-impossible-answer", help="Let the empty answer (the text does not answer) compete.")] = False,
    precision: Annotated[Optional[str], typer.Option(
        "--precision", help="int8 | fp32 (default: the best the bundle has here).")] = None,
    threads: o.RuntimeThreads = None,
    as_json: o.Json = False,
) -> None:
    """Answer a question from a text with a question-answering bundle, as transformers'
    question-answering pipeline would: the answer, its score and its character offsets in the text."""
    from edgebert.runtime import EdgeSession

    text = context_text(context)
    session = EdgeSession(bundle_dir, provider="cpu", precision=precision, threads=threads)
    result = session.answer(question, text, top_k=top_k, max_answer_len=max_answer_len,
                            doc_stride=doc_stride,
                            max_length=max_length, handle_impossible_answer=handle_impossible_answer)
    answers = result if isinstance(result, list) else [result]
    if as_json:
        print(json.dumps(result, indent=2, ensure_ascii=False))
        return
    for a in answers:
        shown = repr(a["answer"]) if a["answer"] else "(no answer)"
        say(f"{shown}  score {a['score']:.4f}  characters {a['start']}-{a['end']}")
    say(f"({session.precision} on {session.provider}: {session.describe()['precision_reason']})")


def context_text(value: str) -> str:
    """``--context``: standard input for ``-``, a file's text when ``value`` names an existing file, else the
    text itself."""
    import sys

    from edgebert.files.textfiles import read_utf8

    if value == "-":
        return sys.stdin.read()
    try:
        is_file = "\n" not in value and Path(value).is_file()
    except OSError:                       # a text too long to be a file name
        is_file = False
    # one word shaped like a path (a folder part or a file suffix) that is not there: a mistyped file name,
    # refused by read_utf8 ("not found") rather than answered from as if it were the text
    looks_like_path = not is_file and len(value.split()) == 1 and ("/" in value or bool(Path(value).suffix))
    if is_file or looks_like_path:
        return read_utf8(value, "context file", "pass the text to answer from as UTF-8")
    return value
