"""``edgebert`` command line. Commands are thin: parse, call one library function, print.

Each command lives in its own module and registers itself on ``app``; options that several commands
take are declared once in ``options``; every error becomes one line in ``app.main``.
"""

from edgebert.cli import (  # noqa: F401,E402
               answer_cmds,
               attention_cmds,
               batch_cmds,
               bench_cmds,
               check_cmds,
               distill_cmds,
               evaluate_cmds,
               export_cmds,
               finetune_cmds,
               info_cmds,
               interop_cmds,
               pack_cmds,
               pipeline_cmds,
               pretrain_cmds,
               rerank_cmds,
               triton_cmds,
               tune_cmds,
)
from edgebert.cli.app import app, main, run  # noqa: F401
