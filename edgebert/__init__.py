"""edgebert: train or import a BERT, shrink it, export it to a fast ONNX model for edge devices.

The training core (``edgebert.model`` etc.) needs torch; ``edgebert.runtime`` needs only
onnxruntime, tokenizers and numpy, so importing this package must stay torch-free.
"""

__version__ = "0.1.0"
