"""TensorFlow, imported once and quietly.

Every module of this package imports TensorFlow through here, so its C++
INFO/WARNING lines stay off stderr (``TF_CPP_MIN_LOG_LEVEL=2`` unless the user
set it) and a missing installation surfaces as one `ImportError`, which
`pardnn.inputs` turns into a `MissingDependencyError` (exit code 6).
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402
from tensorflow.core.framework import graph_pb2  # noqa: E402
from tensorflow.core.protobuf import (config_pb2, meta_graph_pb2, rewriter_config_pb2,  # noqa: E402
                                      saved_model_pb2)

__all__ = ["tf", "graph_pb2", "config_pb2", "meta_graph_pb2", "rewriter_config_pb2", "saved_model_pb2"]
