"""TensorFlow, imported once and quietly.

Every module of this package imports TensorFlow through here, so its C++
INFO/WARNING lines stay off stderr (``TF_CPP_MIN_LOG_LEVEL=2`` unless the user
set it) and a missing installation surfaces as one `ImportError`, which
`pardnn.frontends.registry` turns into a `MissingDependencyError` (exit code 6). Its Python
loggers (``tensorflow``, ``absl``: deprecation notices and the like) follow the
same setting: errors only, unless ``TF_CPP_MIN_LOG_LEVEL`` is 0 or 1 (the
``pardnn`` program sets 0 for ``-vv``). The ``pardnn`` program also keeps the
C++ log's file descriptor off stderr below ``-vv`` (`pardnn.cli.main`).
It also sets ``TF_CPU_ALLOCATOR_USE_BFC=true`` unless the user set it, so that
TensorFlow's CPU allocator keeps the statistics `pardnn.backend.tf_memory`
reads, whatever the CPU (with oneDNN off the plain allocator keeps none).
"""

from __future__ import annotations

import logging
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# A CPU allocator that keeps statistics, so that `pardnn run` can report TensorFlow's own peak on any CPU
# (pardnn.backend.tf_memory); read when TensorFlow first allocates, not at import.
os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")

import tensorflow as tf  # noqa: E402
from tensorflow.core.framework import graph_pb2  # noqa: E402
from tensorflow.core.protobuf import (config_pb2, meta_graph_pb2, rewriter_config_pb2,  # noqa: E402
                                      saved_model_pb2)

if os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2").strip() not in ("0", "1"):
    for _name in ("tensorflow", "absl"):
        logging.getLogger(_name).setLevel(logging.ERROR)

__all__ = ["tf", "graph_pb2", "config_pb2", "meta_graph_pb2", "rewriter_config_pb2", "saved_model_pb2"]
