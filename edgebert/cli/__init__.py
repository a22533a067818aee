"""``edgebert`` command line. Commands are thin: parse, call one library function, print.

Each group of commands lives in its own module and registers itself on ``app``.
"""

from .app import app, main, run  # noqa: F401
from . import train_cmds, distill_cmds, interop_cmds, export_cmds, check_cmds, bench_cmds, pipeline_cmds  # noqa: F401,E402  (register commands)
