"""Every error a user can cause is an EdgebertError: one line saying what was wrong and what to do.

The CLI prints these as a single line (see ``edgebert.cli.main``); library callers can catch them.
"""

from __future__ import annotations


class EdgebertError(Exception):
    """Base class. ``hint`` says what to do about it."""

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        text = self.message if not self.hint else f"{self.message} ({self.hint})"
        return " ".join(text.split())


class ConfigError(EdgebertError):
    """A configuration value or combination is invalid."""


class DataError(EdgebertError):
    """An input file (corpus, TSV, vocab) is missing, empty or malformed."""


class CheckpointError(EdgebertError):
    """A model directory is missing, incomplete or corrupt."""


class TrainingError(EdgebertError):
    """Training cannot go on (e.g. the loss became NaN)."""


class ValidationError(EdgebertError):
    """An exported or transformed graph does not match its reference.

    ``figures`` holds what was measured (e.g. ``{"max_abs_diff": 0.3, "tolerance": 1e-4}``).
    """

    def __init__(self, message: str, hint: str | None = None, figures: dict | None = None):
        super().__init__(message, hint)
        self.figures = dict(figures or {})


class BundleError(EdgebertError):
    """An ONNX bundle is missing files, or a file does not match its manifest hash."""


class OutputError(EdgebertError):
    """An output path cannot be used: a file where a folder is wanted (or the other way round), a
    folder that holds someone else's files, or a place the OS will not let us write."""


class MissingExtra(EdgebertError):
    """A command needs a package of an extra that is not installed (e.g. PyTorch: ``edgebert[train]``)."""


class ProviderUnavailable(EdgebertError):
    """An onnxruntime execution provider cannot be used on this machine."""


class RuntimeFault(EdgebertError):
    """A bundle's graph failed inside onnxruntime, or gave NaN / infinite outputs, at run time."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) that stopped a command; ``message`` says what was kept. The CLI raises it from
    its SIGINT handler and prints ``error: interrupted (<message>)``, exit 130; code that keeps
    something on the way out (the trainer's last checkpoint) sets ``message`` and re-raises it."""

    def __init__(self, message: str = "nothing half-written is left"):
        super().__init__(message)
        self.message = message
