"""Torch-free runtime for apps: an exported bundle behind ``embed`` / ``classify`` / ``tag`` / ``fill_mask``.

Needs only onnxruntime, tokenizers and numpy::

    from edgebert.runtime import EdgeSession

    session = EdgeSession("bundle/", provider="auto", precision="int8")
    vectors = session.embed(["a sentence", "another one"])     # (2, hidden), unit norm
    print(session.providers, session.provider_notes)            # what really runs, and why
"""

from ..errors import BundleError, ProviderUnavailable
from .providers import PROVIDERS, ProviderStatus, probe
from .results import ClassificationResult, MaskPrediction
from .session import POOLINGS, EdgeSession, softmax
from .tagging import AGGREGATIONS
from .text import Encoded, pad_batch

__all__ = ["EdgeSession", "ClassificationResult", "MaskPrediction", "ProviderStatus", "probe",
           "PROVIDERS", "POOLINGS", "AGGREGATIONS", "BundleError", "ProviderUnavailable", "Encoded", "pad_batch", "softmax"]
