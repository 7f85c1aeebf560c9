"""pardnn: a graph-partitioning compiler for deep-learning training graphs.

The core types and entry points::

    from pardnn import load_graph, Cluster, partition, simulate
    g = load_graph("sample_graphs/pardnn_vgg16.json.gz")
    plan, schedule = partition(g, Cluster.homogeneous(4, memory_bytes=2**31))
    print(schedule.makespan_us, schedule.peak_bytes)

The names below load their modules on first use (PEP 562), so ``import pardnn`` alone loads nothing heavy:
the ``pardnn`` program (`pardnn._entry`) starts inside the package and only then loads numpy, numba and
scipy, where a Ctrl-C must end like one during a command.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

if TYPE_CHECKING:   # what a type checker sees: the names themselves (at run time they load on first use)
    from .api import evaluate, partition
    from .cluster import Cluster, Device, load_cluster, save_cluster
    from .errors import GraphError, InfeasibleError, InputError, PardnnError, PlacementError
    from .ir import GraphBuilder, OpGraph, graph_from_networkx, load_graph, save_graph
    from .machine import Schedule, simulate, single_device_peak
    from .placement import Placement, load_placement, save_placement

_EXPORTS = {
    "evaluate": "api", "partition": "api",
    "Cluster": "cluster", "Device": "cluster", "load_cluster": "cluster", "save_cluster": "cluster",
    "GraphError": "errors", "InfeasibleError": "errors", "InputError": "errors", "PardnnError": "errors",
    "PlacementError": "errors",
    "GraphBuilder": "ir", "OpGraph": "ir", "graph_from_networkx": "ir", "load_graph": "ir", "save_graph": "ir",
    "Schedule": "machine", "simulate": "machine", "single_device_peak": "machine",
    "Placement": "placement", "load_placement": "placement", "save_placement": "placement",
}
"""Each public name and the module (under `pardnn`) that defines it."""

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> object:
    """A public name, loaded with its module; or a submodule (``pardnn.machine`` after ``import pardnn``, as
    when the package loaded them all at once)."""
    module = _EXPORTS.get(name)
    if module is not None:
        value = getattr(importlib.import_module(f".{module}", __name__), name)
    elif name.startswith("__"):
        raise AttributeError(f"module 'pardnn' has no attribute {name!r}")
    else:
        try:
            value = importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise       # the submodule exists but needs something missing: say what
            raise AttributeError(f"module 'pardnn' has no attribute {name!r}") from None
    globals()[name] = value     # later lookups find it directly
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
