"""Which install extra brings which package, so a command that lacks one says what to install.

The runtime install (``pip install 'edgebert[cpu]'``, or ``[gpu]``) has onnxruntime, tokenizers, numpy,
typer and rich: ``EdgeSession``, ``edgebert check``, ``bench`` (without ``--reference``) and ``info``.
Training, export and everything else that runs PyTorch need ``edgebert[train]``; the Hugging Face
interop tests ``edgebert[hf]``. The hints name the extra (``pip install 'edgebert[train]'``): with edgebert
installed, from a checkout (``pip install '.[cpu]'``) or a built wheel, pip satisfies ``edgebert`` from
the installed copy and adds the extra's packages, so the hint works without edgebert on any package
index (the README's install section says the same). Torch-free (stdlib only).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from edgebert.errors import MissingExtra

ORT_HINT = "pip install 'edgebert[cpu]', or 'edgebert[gpu]' for CUDA/TensorRT"
# top-level module -> (what it is called, the install hint)
PROVIDED_BY: dict[str, tuple[str, str]] = {
    "torch": ("PyTorch", "pip install 'edgebert[train]'"),
    "onnx": ("onnx", "pip install 'edgebert[train]'"),
    "onnxscript": ("onnxscript", "pip install 'edgebert[train]'"),
    "safetensors": ("safetensors", "pip install 'edgebert[train]'"),
    "matplotlib": ("matplotlib", "pip install 'edgebert[train]'"),
    "onnxruntime": ("onnxruntime", ORT_HINT),
    "transformers": ("transformers", "pip install 'edgebert[hf]'"),
    "optimum": ("optimum", "pip install 'edgebert[optimum]' (it brings transformers < 4.58)"),
    "seqeval": ("seqeval", "pip install 'edgebert[train]' (or pip install seqeval)"),
    "torchmetrics": ("torchmetrics", "pip install 'edgebert[train]' (or pip install torchmetrics)"),
    "sklearn": ("scikit-learn", "pip install 'edgebert[train]' (or pip install scikit-learn)"),
    "openvino": ("openvino", "pip install 'edgebert[openvino]'"),
    "nncf": ("nncf", "pip install 'edgebert[openvino]'"),
    "pyarrow": ("pyarrow", "pip install 'edgebert[batch]'"),                 # edgebert batch, edgebert.scaleout
    "ray": ("Ray Data", "pip install 'edgebert[ray]'"),
    "pyspark": ("pyspark", "pip install 'edgebert[spark]'"),
    "pandas": ("pandas", "pip install 'edgebert[spark]'"),                   # Spark's pandas UDFs
}


def missing_extra(exc: ModuleNotFoundError, command: str) -> MissingExtra | None:
    """The one-line error for a missing optional package (None if ``exc`` is about another module)."""
    top = (exc.name or "").split(".")[0]
    if top not in PROVIDED_BY:
        return None
    what, hint = PROVIDED_BY[top]
    return MissingExtra(f"{command} needs {what}", hint)


def import_extra(module: str, purpose: str) -> ModuleType:
    """``module`` imported, or ``MissingExtra`` saying that ``purpose`` (a plural: "SQuAD scores") need it
    and which extra brings it."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        top = (exc.name or "").split(".")[0]
        if top not in PROVIDED_BY:
            raise
        what, hint = PROVIDED_BY[top]
        raise MissingExtra(f"{purpose} need {what}, which is not installed", hint) from exc
