"""CLI commands: bench_cmds (filled by its issue)."""

from .app import app, console  # noqa: F401
