"""The Python API: the same functions the command line calls.

>>> from pardnn.frontends.synthetic import transformer_training_graph
>>> from pardnn.cluster import Cluster
>>> g = transformer_training_graph(1500)
>>> plan, sched = partition(g, Cluster.homogeneous(2), method="m-topo")
>>> sched.feasible and plan.num_devices == 2
True
"""

from __future__ import annotations

import numpy as np

from .cluster import Cluster
from .errors import InfeasibleError, InputError
from .ir import OpGraph
from .machine import Schedule, simulate
from .machine.schedule import check_arguments
from .methods import DEFAULT_METHOD, METHODS, method_names
from .placement import Placement
from .progress import Progress
from .units import format_bytes


def all_methods() -> dict:
    """Every placement method by name (`pardnn.methods.METHODS`)."""
    return dict(METHODS)


def methods() -> list[str]:
    return method_names()


def evaluate(g: OpGraph, cluster: Cluster, placement: Placement | np.ndarray) -> Schedule:
    """Simulate ``placement`` (SPEC §1) and return the schedule."""
    check_arguments(g, cluster, "evaluate")
    return simulate(g, cluster, placement)


def capacity_lower_bound_violation(g: OpGraph, cluster: Cluster) -> tuple[str, int] | None:
    """A reason no placement can be feasible and the bytes short, found without placing, or None.

    Persistent bytes never leave their device, so a colocation group (or a
    single op) whose persistent bytes exceed every device's capacity, or a
    graph whose persistent bytes exceed the cluster's total, cannot fit.
    """
    cap = cluster.capacity
    unit_pers = np.bincount(g.unit, weights=g.persistent_bytes.astype(np.float64))
    if unit_pers.size == 0:
        return None
    u = int(np.argmax(unit_pers))
    if unit_pers[u] > cap.max():
        who = (f"colocation group {g.group_names[u]!r}" if u < len(g.group_names)
               else f"node {g.names[int(np.flatnonzero(g.unit == u)[0])]!r}")
        short = int(unit_pers[u] - cap.max())
        return (f"{who} alone holds {format_bytes(unit_pers[u])} of persistent memory, more than the largest "
                f"device ({format_bytes(cap.max())}): {short} bytes short"), short
    total = float(unit_pers.sum())
    if total > cap.sum():
        short = int(total - cap.sum())
        return (f"the graph's persistent memory ({format_bytes(total)}) exceeds the cluster's total "
                f"({format_bytes(cap.sum())}): {short} bytes short"), short
    return None


def infeasible_message(g: OpGraph, cluster: Cluster, sched: Schedule, method: str) -> str:
    mem = [v for v in sched.violations if v.kind == "memory"]
    if mem:
        worst = max(mem, key=lambda v: v.bytes_over)
        d = worst.device
        return (f"{method} found no placement within memory: device {d} ({cluster.devices[d].name}) needs "
                f"{format_bytes(sched.peak_bytes[d])} at t={worst.time_us:.1f}us but has "
                f"{format_bytes(cluster.capacity[d])}: {worst.bytes_over} bytes short")
    return f"{method} produced an invalid placement: {sched.violations[0].message}"


def _place(g: OpGraph, cluster: Cluster, method: str, options, progress, timings: list | None) -> Placement:
    plan, pass_timings = METHODS[method].place(g, cluster, options, progress=progress)
    if timings is not None:
        timings.extend(pass_timings)
    return plan


def check_method(method: object) -> None:
    """Refuse a method name `methods()` does not list (an InputError naming it and the known ones)."""
    if not isinstance(method, str) or method not in METHODS:
        raise InputError(f"unknown method {method!r}; choose one of {', '.join(methods())}")


def smallest_feasible_scale(g: OpGraph, cluster: Cluster, *, method: str = DEFAULT_METHOD, options=None,
                            max_runs: int = 10, rel_tol: float = 0.02, progress=None) -> float | None:
    """The smallest factor by which every device's memory must grow for ``method`` to fit ``g``.

    Doubles the capacities until a placement fits (at most 64x), then bisects down to ``rel_tol``.
    Each probe is a full placement, so at most ``max_runs`` are made; the answer is an upper bound on the
    true minimum (None when even 64x does not fit within the budget). ``progress`` shows each probe.
    """
    check_arguments(g, cluster, "smallest_feasible_scale")
    check_method(method)
    progress = progress or Progress.off()
    cap = cluster.capacity
    options = METHODS[method].probe_options(options)

    def fits(scale: float) -> bool:
        scaled = cluster.with_memory([None if not np.isfinite(c) else int(np.ceil(c * scale)) for c in cap])
        with progress.stage(f"capacity search {runs}/{max_runs} ({scale:.2f}x memory)"):
            return simulate(g, scaled, _place(g, scaled, method, options, None, None)).feasible

    runs = 0
    lo, hi = 1.0, 2.0
    while True:
        runs += 1
        if fits(hi):
            break
        lo, hi = hi, hi * 2
        if hi > 64 or runs >= max_runs:
            return None
    while runs < max_runs and hi - lo > rel_tol * hi:
        mid = (lo + hi) / 2
        runs += 1
        if fits(mid):
            hi = mid
        else:
            lo = mid
    return hi


def partition(g: OpGraph, cluster: Cluster, *, method: str = DEFAULT_METHOD, require_feasible: bool = True,
              progress=None, timings: list | None = None, options=None,
              search_capacity: bool = True, source: str | None = None) -> tuple[Placement, Schedule]:
    """Place ``g`` on ``cluster`` and simulate the result.

    Raises `InfeasibleError` (with the bytes short) when the placement breaks
    a memory limit and ``require_feasible`` is set. Pins to devices the
    cluster does not have are an input error. For the pardnn pipeline, the
    pass timings are appended to ``timings`` when a list is given. ``source``
    (the graph's file) starts the message of an input error and of an `InfeasibleError`.
    """
    check_arguments(g, cluster, "partition")
    check_method(method)
    bad_pin = np.flatnonzero(g.pinned >= cluster.num_devices)
    if bad_pin.size:
        v = int(bad_pin[0])
        K = cluster.num_devices
        raise InputError(f"{source + ': ' if source else ''}node {g.names[v]!r} is pinned to device "
                         f"{int(g.pinned[v])}, but the cluster has {K} device{'s' if K != 1 else ''} "
                         f"(0 to {K - 1})")
    bound = capacity_lower_bound_violation(g, cluster)
    if bound and require_feasible:
        raise InfeasibleError(f"{source + ': ' if source else ''}no feasible placement exists: {bound[0]}",
                              short_bytes=bound[1])
    plan = _place(g, cluster, method, options, progress, timings)
    sched = simulate(g, cluster, plan)
    plan = plan.with_predicted(sched.predicted())
    if require_feasible and not sched.feasible:
        message = infeasible_message(g, cluster, sched, method)
        min_cap = None
        if search_capacity and any(v.kind == "memory" for v in sched.violations):
            scale = smallest_feasible_scale(g, cluster, method=method, options=options, progress=progress)
            finite = cluster.capacity[np.isfinite(cluster.capacity)]
            if scale is not None and finite.size:
                min_cap = int(np.ceil(finite.max() * scale))
                # the flag that gives exactly the memory that fitted: a rounded figure may not (whether a plan
                # fits is not monotonic in the memory; 23.44 MiB failed where 23.4375 MiB fitted)
                probed = [int(np.ceil(c * scale)) for c in finite]
                flag = None if finite.size < cluster.capacity.size else (
                    f"--memory {min_cap}" if len(set(probed)) == 1 else f"--memory {','.join(map(str, probed))}")
                message += (f"; {method} fits with {format_bytes(min_cap)} per device "
                            f"({f'{flag}, ' if flag else ''}{scale:.2f}x the given memory, found by search)")
            else:
                message += f"; {method} does not fit even with 64x the memory"
        raise InfeasibleError(f"{source + ': ' if source else ''}{message}", short_bytes=sched.memory_shortfall(),
                              min_capacity_bytes=min_cap)
    return plan, sched
