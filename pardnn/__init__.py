"""pardnn: a graph-partitioning compiler for deep-learning training graphs.

The core types and entry points::

    from pardnn import load_graph, Cluster, partition, simulate
    g = load_graph("sample_graphs/pardnn_vgg16.json.gz")
    plan, schedule = partition(g, Cluster.homogeneous(4, memory_bytes=2**31))
    print(schedule.makespan_us, schedule.peak_bytes)
"""

__version__ = "0.1.0"

from .api import evaluate, partition  # noqa: E402
from .cluster import Cluster, Device, load_cluster, save_cluster  # noqa: E402
from .errors import (GraphError, InfeasibleError, InputError, PardnnError,  # noqa: E402
                     PlacementError)
from .ir import GraphBuilder, OpGraph, graph_from_networkx, load_graph, save_graph  # noqa: E402
from .machine import Schedule, simulate, single_device_peak  # noqa: E402
from .placement import Placement, load_placement, save_placement  # noqa: E402

__all__ = [
    "Cluster", "Device", "GraphBuilder", "GraphError", "InfeasibleError", "InputError", "OpGraph",
    "PardnnError", "Placement", "PlacementError", "Schedule", "evaluate", "graph_from_networkx",
    "load_cluster", "load_graph", "load_placement", "partition", "save_cluster", "save_graph",
    "save_placement", "simulate", "single_device_peak", "__version__",
]
