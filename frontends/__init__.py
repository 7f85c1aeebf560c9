"""Importers that turn models and peer projects' files into ``pardnn.graph`` graphs.

* `pardnn.frontends.peers`: MSR device-placement JSON, PipeDream ``graph.txt``,
  ParDNN's DOT/size/duration text files (no extra needed);
* `pardnn.frontends.tensorflow`: SavedModel, GraphDef, Keras train steps (``tf`` extra);
* `pardnn.frontends.onnx`: ONNX models (``onnx`` extra).
"""
