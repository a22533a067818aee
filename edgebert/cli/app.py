"""The Typer app and the one place where errors become a one-line message and an exit code."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Annotated, Iterator

import typer
from rich.console import Console

from edgebert.errors import EdgebertError, Interrupted
from edgebert.files.failures import DISK_FULL, os_error
from edgebert.system.extras import missing_extra

# typer >= 0.20 vendors click as typer._click and no longer installs click; older typer uses click.
try:
    from typer._click import exceptions as _vendored_click
except ImportError:  # pragma: no cover
    _vendored_click = None
try:
    from click import exceptions as _click
except ImportError:
    _click = None


def _both(name: str) -> tuple[type[BaseException], ...]:
    found = {getattr(mod, name, None) for mod in (_click, _vendored_click, typer.exceptions) if mod}
    return tuple(cls for cls in found if isinstance(cls, type))


_Exit, _Abort = _both("Exit"), _both("Abort")
_UsageError, _ClickException = _both("UsageError"), _both("ClickException")

app = typer.Typer(
    name="edgebert",
    help="Train or import a BERT, shrink it, export it to ONNX, and benchmark it on edge devices.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,          # plain help: switches read --json / --no-json, no <bool> hints
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    if value:
        from edgebert.system.environment import versions

        say(f"edgebert {versions()['edgebert'] or 'unknown (not installed)'}")
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[bool, typer.Option("--version", "-V", is_eager=True, callback=_print_version,
                                                help="Print edgebert's version and exit.")] = False) -> None:
    """Train or import a BERT, shrink it, export it to ONNX, and benchmark it on edge devices."""


console = Console()            # results
err_console = Console(stderr=True)

EXIT_USER_ERROR = 2
EXIT_INTERNAL_ERROR = 1


def _debug() -> bool:
    return os.environ.get("EDGEBERT_DEBUG", "") not in ("", "0")


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point. Every error ends here as one line on stderr."""
    with _sigint_as_interrupted() as interrupts:
        code = _main(argv)
    if code == 130:   # typer turns a KeyboardInterrupt into a silent exit 130: say what was kept
        _print_error(f"interrupted ({interrupts[-1].message if interrupts else Interrupted().message})")
    return code


@contextlib.contextmanager
def _sigint_as_interrupted() -> Iterator[list[Interrupted]]:
    """While a command runs, Ctrl-C raises ``Interrupted`` (a ``KeyboardInterrupt``) and is remembered,
    so ``main`` can print its message after typer swallowed it (main thread, default handler only)."""
    seen: list[Interrupted] = []

    def handler(signum, frame):
        seen.append(Interrupted())
        raise seen[-1]

    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield seen
        return
    signal.signal(signal.SIGINT, handler)
    try:
        yield seen
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _main(argv: list[str] | None) -> int:
    try:
        result = app(args=argv, prog_name="edgebert", standalone_mode=False)
        return result if isinstance(result, int) else 0
    except _Exit as exc:  # --help, typer.Exit
        return exc.exit_code
    except _Abort:   # end of input at a prompt (Ctrl-C is an exit 130, see main)
        _print_error("aborted (end of input)")
        return EXIT_USER_ERROR
    except KeyboardInterrupt:   # main prints the line
        return 130
    except _UsageError as exc:
        if not exc.format_message().strip() and exc.ctx is not None:  # bare `edgebert`: show help
            console.print(exc.ctx.get_help(), highlight=False, markup=False)
            return 0
        cmd = exc.ctx.command_path if exc.ctx else "edgebert"
        _print_error(f"{exc.format_message()} (see '{cmd} --help')")
        return EXIT_USER_ERROR
    except _ClickException as exc:
        _print_error(exc.format_message())
        return EXIT_USER_ERROR
    except EdgebertError as exc:
        if _debug():
            raise
        _print_error(exc.one_line())
        return EXIT_USER_ERROR
    except ModuleNotFoundError as exc:  # an optional extra is not installed (the runtime install)
        user_error = missing_extra(exc, _command(argv))
        if user_error is None or _debug():
            raise
        _print_error(user_error.one_line())
        return EXIT_USER_ERROR
    except OSError as exc:  # a path the user named cannot be read or written (/proc, a file as a folder ...)
        if _debug():
            raise
        _print_error(_os_error_line(exc, argv))
        return EXIT_USER_ERROR
    except Exception as exc:  # a bug or an unexpected environment problem
        if _debug():
            raise
        _print_error(f"unexpected {type(exc).__name__}: {' '.join(str(exc).split())} "
                     "(set EDGEBERT_DEBUG=1 for a traceback and report it)")
        return EXIT_INTERNAL_ERROR


def _os_error_line(exc: OSError, argv: list[str] | None) -> str:
    """An OS error no writer or reader turned into an EdgebertError, as one line: the file when the OS
    names it, else what failed and in which command (a full disk: where to free space)."""
    if exc.filename:
        return os_error(Path(exc.filename), exc, "use").one_line()
    if exc.errno in DISK_FULL:
        return (f"no space left on device while running {_command(argv)} (free space on the disk of its "
                "output, or set TMPDIR to a folder on a disk with room)")
    reason = exc.strerror or " ".join(str(exc).split()) or type(exc).__name__
    return f"{reason} while running {_command(argv)} (an input or output file failed; " \
           "set EDGEBERT_DEBUG=1 for a traceback)"


def _command(argv: list[str] | None) -> str:
    """``edgebert <command>`` as typed (for messages)."""
    args = sys.argv[1:] if argv is None else argv
    name = next((a for a in args if not a.startswith("-")), None)
    return f"edgebert {name}" if name else "edgebert"


def _print_error(line: str) -> None:
    # soft_wrap: one physical line whatever the terminal width
    err_console.print(f"error: {line}", highlight=False, markup=False, soft_wrap=True)


def run() -> None:
    sys.exit(main())


def say(line: str) -> None:
    """One result line on stdout, as written (no markup, no wrapping); under torchrun rank 0 only (read
    from ``RANK`` as ``edgebert.training.distributed`` does, without importing torch)."""
    if int(os.environ.get("RANK", "0")) == 0:
        console.print(line, highlight=False, markup=False, soft_wrap=True)


def metrics_line(metrics: dict) -> str:
    return "  ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in metrics.items())
