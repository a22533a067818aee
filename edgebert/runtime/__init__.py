"""Torch-free runtime for apps: an exported bundle behind ``embed`` / ``classify`` / ``tag`` / ``fill_mask``.

Needs only onnxruntime, tokenizers and numpy::

    from edgebert.runtime import EdgeSession

    session = EdgeSession("bundle/")                            # or "bundle.tar.gz" (export --archive)
    vectors = session.embed(["a sentence", "another one"])     # (2, hidden), unit norm, the model's pooling
    print(session.describe()["precision_reason"])               # the best graph here (INT8 if exact), and why
    print(session.providers, session.provider_notes)            # what really runs, and why

``encode`` / ``similarity`` are sentence-transformers' (``runtime.sentences``): replacing
``SentenceTransformer(path)`` by ``EdgeSession(bundle)`` is a one-line change.

Every failure is an ``edgebert.errors`` type: ``BundleError`` (a bundle whose parts disagree),
``DataError`` (an input the graph cannot take), ``RuntimeFault`` (onnxruntime failed, or an output
holds NaN / infinity), ``ProviderUnavailable``, ``ConfigError``. onnxruntime's own log stays off stderr
unless ``EDGEBERT_ORT_LOG_LEVEL`` (0 verbose ... 4 fatal) or ``EdgeSession(ort_log_level=...)`` asks for it.
"""

from edgebert.errors import BundleError, ProviderUnavailable, RuntimeFault
from edgebert.runtime.numeric import softmax
from edgebert.runtime.providers import PROVIDERS, ProviderStatus, probe
from edgebert.runtime.session import POOLINGS, EdgeSession
from edgebert.runtime.text import Encoded, pad_batch

__all__ = ["EdgeSession", "ClassificationResult", "MaskPrediction", "ProviderStatus", "probe",
           "PROVIDERS", "POOLINGS", "AGGREGATIONS", "BundleError", "ProviderUnavailable", "RuntimeFault", "Encoded",
           "pad_batch", "softmax", "answer_questions"]


def __getattr__(name: str):
    """The question-answering and tagging helpers and the result types load on first use (an embedding app
    never pays for them)."""
    if name in ("ClassificationResult", "MaskPrediction"):
        from edgebert.runtime import results
        return getattr(results, name)
    if name == "answer_questions":
        from edgebert.runtime.answer import answer_questions
        return answer_questions
    if name == "AGGREGATIONS":
        from edgebert.runtime.tagging import AGGREGATIONS
        return AGGREGATIONS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
