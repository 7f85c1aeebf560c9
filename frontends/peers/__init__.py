"""Importers for the peers' graph formats (the data in ../shared/data).

* `msr.load_msr`: MSR "Efficient Algorithms for Device Placement" JSON;
* `pipedream.load_pipedream`: PipeDream profiler ``graph.txt``;
* `pardnn_text.load_pardnn_dot`: ParDNN's DOT edge list with its tensor-size
  and duration files (``name::value`` tables or Chrome-trace timelines).

Each docstring states its unit conversions and how it fills gaps.
"""

from .msr import load_msr
from .pardnn_text import load_pardnn_dot
from .pipedream import load_pipedream

__all__ = ["load_msr", "load_pipedream", "load_pardnn_dot"]
