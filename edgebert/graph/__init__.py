"""ONNX graphs as files: the inputs and outputs a graph declares, read stdlib-only (``declared_io``,
used by the bundle reader), and small questions about a graph with the ``onnx`` package (``ops``:
op counts, weight-bearing nodes, quiet onnxruntime logs) shared by ``exporters`` and ``quantization``."""
