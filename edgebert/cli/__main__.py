"""``python -m edgebert.cli ...`` (e.g. under ``torchrun``) runs the ``edgebert`` command."""

from edgebert.cli import run

run()
