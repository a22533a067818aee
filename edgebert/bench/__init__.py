"""``edgebert bench``: latency, throughput, memory, roofline and accuracy of a bundle per provider x
precision x batch x seq, beside the PyTorch reference.

Modules, each with one job:

* ``config``: ``BenchConfig``, what a run measures (validated), and its presets;
* ``runner``: ``measure`` (a ``BenchReport``) / ``run_bench`` (its JSON): the order of the work;
* ``paths``: measuring one path (PyTorch reference, PyTorch on CUDA, an ONNX provider x precision);
* ``timing``: how paths are timed (the CPU paths side by side in interleaved rounds, GPU paths in blocks);
* ``startup``: cold start of an ONNX path (TensorRT: empty, then warm engine cache);
* ``measure``: timing loops, process memory, other programs' CPU share; ``gpu``: GPU facts and NVML memory;
* ``workloads``: the inputs (fixed shapes, a real length mix); ``entities``: entity F1 on ``--data``
  (CoNLL); ``answers``: SQuAD EM / F1 on ``--data`` (qa bundles; its windows are the length mix);
* ``reference``: the PyTorch model (torch imported there only, when a reference is given);
* ``flops``, ``peak``, ``derived``: FLOP count, measured matmul peak, the figures derived from both;
* ``record``, ``rows``, ``schema``: the typed report (``BenchReport``) and its JSON;
* ``header``: machine, versions, threads, bundle facts and methods of a new report;
* ``report``: rendering (terminal tables, report.md, report.json; ``plot``: latency.png);
* ``verdict``: ``speed_caveat``, the line that says when the speed figures are unreliable;
* ``gpu_check``: the GPU acceptance check (every GPU path runs where it says, with the CPU's answers).

Accuracy against the reference is ``edgebert.runtime.fidelity.FidelityTracker`` (the tracker of the INT8
gate and ``edgebert check`` too); a qa bundle's start / end logits, ``answers.SpanTracker``.
"""

from edgebert.bench.config import PRESETS, BenchConfig
from edgebert.bench.flops import ModelShape, forward_flops
from edgebert.bench.peak import calibrate
from edgebert.bench.report import print_report, to_markdown, write_reports
from edgebert.bench.runner import measure, run_bench
from edgebert.bench.schema import REPORT_SCHEMA, REPORT_VERSION, BenchReport

__all__ = ["BenchConfig", "PRESETS", "measure", "run_bench", "BenchReport", "write_reports", "print_report",
           "to_markdown", "forward_flops", "ModelShape", "calibrate", "REPORT_SCHEMA", "REPORT_VERSION"]
