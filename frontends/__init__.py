"""Importers that turn models and peer projects' files into ``pardnn.graph`` graphs, and the registry of them.

* `pardnn.frontends.registry`: `detect_format` and `load_input`, which pick
  the importer for a path and import it on first use (what the command
  line calls); `FrontendOptions` (`pardnn.frontends.options`) carries the
  user's flags to every importer;
* `pardnn.frontends.peers`: MSR device-placement JSON, PipeDream
  ``graph.txt``, ParDNN's DOT/size/duration text files (no extra needed);
* `pardnn.frontends.tensorflow`: SavedModel, GraphDef, Keras train steps
  (``tf`` extra);
* `pardnn.frontends.onnx`: ONNX models (``onnx`` extra);
* `pardnn.frontends.synthetic`, `pardnn.frontends.synthetic_wide`: generated
  training steps of any size (Transformer stacks; wide multi-tower graphs),
  for benchmarks, scaling tests and the held-out set;
* `pardnn.frontends.roofline`, `pardnn.frontends.common`: the cost model
  and the profile averaging the importers share.

The directory is ``frontends/`` at the top of the repository; it installs
as ``pardnn.frontends``. Importing this package imports no framework. The
IR, the simulator and the placers never import it.
"""

from .options import FrontendOptions
from .registry import FORMATS, FRONTENDS, Frontend, detect_format, input_files, input_format, load_input

__all__ = ["FORMATS", "FRONTENDS", "Frontend", "FrontendOptions", "detect_format", "input_files", "input_format",
           "load_input"]
