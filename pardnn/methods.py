"""Every placement method by name, behind one interface: the pardnn pipeline and each baseline.

`METHODS` is what `pardnn.api.partition`, ``pardnn bench`` and the command
line all consult, so they run the same code for the same name. A `Method`
places a graph given its options object (`PardnnOptions` for ``pardnn``;
baselines take none) and returns the placement and the pass timings (empty
for baselines). ``probe_options`` gives the options a capacity search uses
for its probes (for pardnn: without the memory-aware refinement, which never
changes whether a plan fits).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

from .baselines import PLACERS
from .cluster import Cluster
from .errors import InputError
from .ir import OpGraph
from .partitioner import METHOD as PARDNN, PardnnOptions, run as run_pardnn
from .pipeline import PassTiming
from .placement import Placement
from .progress import Progress

DEFAULT_METHOD = PARDNN


@dataclass(frozen=True)
class Method:
    name: str
    run: Callable[[OpGraph, Cluster, Any, Progress | None], tuple[Placement, list[PassTiming]]]
    options_type: type | None = None
    probe_options: Callable[[Any], Any] = lambda options: options

    def place(self, g: OpGraph, cluster: Cluster, options: Any = None, *,
              progress: Progress | None = None) -> tuple[Placement, list[PassTiming]]:
        if options is not None and (self.options_type is None or not isinstance(options, self.options_type)):
            want = self.options_type.__name__ if self.options_type else "no options"
            raise InputError(f"method {self.name!r} takes {want}, not {type(options).__name__}")
        return self.run(g, cluster, options, progress)


def _pardnn(g: OpGraph, cluster: Cluster, options: PardnnOptions | None, progress: Progress | None):
    plan, _, timings = run_pardnn(g, cluster, options, progress=progress)
    return plan, timings


def _baseline(placer) -> Callable:
    def run(g: OpGraph, cluster: Cluster, _options: None, _progress: Progress | None):
        return placer(g, cluster), []
    return run


METHODS: dict[str, Method] = {
    PARDNN: Method(PARDNN, _pardnn, PardnnOptions,
                   lambda o: replace(o or PardnnOptions(), refine_memory=False)),
    **{name: Method(name, _baseline(placer)) for name, placer in PLACERS.items()},
}


def method_names() -> list[str]:
    """The default method first, then the rest in name order."""
    return sorted(METHODS, key=lambda m: (m != DEFAULT_METHOD, m))
