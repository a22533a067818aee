"""``edgebert bench``: latency, throughput, memory, roofline and accuracy of a bundle per provider.

torch is imported only when a PyTorch reference is benchmarked (``BenchConfig.reference``).
"""

from .config import PRESETS, BenchConfig
from .flops import ModelShape, forward_flops
from .peak import calibrate
from .report import print_report, to_markdown, write_reports
from .runner import REPORT_SCHEMA, REPORT_VERSION, run_bench

__all__ = ["BenchConfig", "PRESETS", "run_bench", "write_reports", "print_report", "to_markdown",
           "forward_flops", "ModelShape", "calibrate", "REPORT_SCHEMA", "REPORT_VERSION"]
