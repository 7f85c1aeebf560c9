"""``pardnn plan``: how many devices a graph needs, and what each count buys.

For each device count K of a range, with the ParDNN method (`pardnn.api.partition`):

* **fit**: a placement at the given memory per device (`PlanSettings.effort`, ``fast`` by default):
  whether it fits, its predicted step time and its speedup over one device;
* **smallest memory**: the smallest memory per device at which pardnn finds a fitting placement, by
  bisection to a relative tolerance (`PlanSettings.rel_tol`, 5%). Its probes are placements at the
  ``fast`` effort without the memory-aware refinement (`pardnn.methods.Method.probe_options`), which never
  changes whether a plan fits. The answer is always a capacity a probe fitted at, so it is an upper bound
  on the true minimum, within the tolerance of the boundary the bisection found. The step time there is
  that of one more placement at that memory with the fit's effort (the whole pipeline, as ``pardnn
  partition`` runs it), or the probe's when that is shorter.

The search is bracketed so that few probes are needed:

* below, by `memory_lower_bound` (sound: no placement on K devices fits under it), raised to the given
  memory when the fit at that memory failed;
* above, by the smallest capacity known to fit at K: the given memory when it fitted; else candidates
  from the answers at smaller counts (`_candidates`): where the answer stopped falling, the previous
  answer; otherwise that answer scaled by the counts (memory falling as 1/K) and a few capacities a little
  above it, then the previous answer itself (more devices never need more memory per device: the previous
  placement fits, with devices left idle); last, the largest device peak of a placement at unlimited
  memory. A candidate is probed before it is used; one that does not fit raises the lower end instead
  (pardnn is a heuristic), and the next is tried, then doubling (at most 64x the lower bound). When the
  first candidate fits, the first probe is one tolerance under it, which ends the search when the guess
  was the answer.

K=1 needs no placement: the whole graph on one device (pins ignored, SPEC §1.1 rule 10) gives the step
time every speedup is relative to, and its peak is the smallest memory. A K below the device the graph's
pins need is reported as unavailable, K=1 included (its step stays the reference). Everything is deterministic except the seconds.
"""

from __future__ import annotations

import dataclasses
import math
import re
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Sequence

import numpy as np

from .api import partition
from .bounds import makespan_lower_bound
from .cluster import MAX_DEVICES, Cluster, Device
from .ir import OpGraph
from .machine import simulate
from .methods import DEFAULT_METHOD, METHODS
from .partitioner import PardnnOptions
from .progress import Progress
from .units import format_bytes

DEFAULT_DEVICES = tuple(range(1, 9))
"""The device counts ``pardnn plan`` tries without ``--devices``: 1 to 8 (capped by a ``--cluster`` file)."""
MAX_DEVICE_COUNTS = 64
"""At most this many device counts in one plan (each costs several placements)."""
SEARCH_EFFORT = "fast"
"""The effort of the capacity search's probes."""
MAX_SCALE = 64
"""The search gives up above this many times the lower bound."""


def parse_device_counts(text: str, *, limit: int = MAX_DEVICES) -> tuple[int, ...]:
    """``"1..16"``, ``"1,2,4,8"`` or ``"4"`` as sorted distinct device counts; ValueError says what is wrong."""
    text = text.strip()
    m = re.fullmatch(r"(\d+)\s*\.\.\s*(\d+)", text)
    if m:
        a, b = int(m.group(1)), int(m.group(2))
        if a > b:
            raise ValueError(f"the range {text!r} runs backwards (write LOW..HIGH)")
        if b > limit:   # before the list: 1..100000000 took 14 s and 4 GB to be refused, 400 digits overflowed
            raise ValueError(f"{b} devices is more than the {limit} available")
        counts = list(range(a, b + 1))
    else:
        counts = []
        for item in text.split(","):
            item = item.strip()
            if not item.isdigit():
                raise ValueError(f"expected a range such as 1..16 or a list such as 1,2,4,8, got {text!r}")
            counts.append(int(item))
    if min(counts) < 1:
        raise ValueError("device counts start at 1")
    if max(counts) > limit:
        raise ValueError(f"{max(counts)} devices is more than the {limit} available")
    counts = sorted(set(counts))
    if len(counts) > MAX_DEVICE_COUNTS:
        raise ValueError(f"{len(counts)} device counts; at most {MAX_DEVICE_COUNTS} in one plan")
    return tuple(counts)


def memory_lower_bound(g: OpGraph, k: int) -> int:
    """Memory per device below which no placement of ``g`` on ``k`` equal devices can fit (machine model).

    The largest of: the graph's persistent bytes over ``k`` (they never leave their device); a colocation
    group's persistent bytes; and for each op, its group's persistent bytes plus what the op allocates
    when it starts (its outputs and scratch), all live on its device at once.
    """
    if g.num_nodes == 0:
        return 0
    pers = np.bincount(g.unit, weights=g.persistent_bytes.astype(np.float64))
    op_need = pers[g.unit] + g.alloc_bytes_total.astype(np.float64) + g.temp_bytes.astype(np.float64)
    return int(math.ceil(max(float(pers.sum()) / k, float(pers.max()), float(op_need.max()))))


@dataclass(frozen=True)
class Probe:
    """One placement at one memory per device."""

    capacity: int
    fits: bool
    step_us: float | None      # predicted step time of that placement
    peak_bytes: int            # its largest device peak


@dataclass
class CapacitySearch:
    """The smallest memory per device at which ``fits`` holds, by bisection between brackets.

    ``probe(capacity)`` places once; every result is kept, and `run` reuses them (``known``).
    """

    probe: Callable[[int], Probe]
    lower: int
    rel_tol: float = 0.05
    known: dict[int, Probe] = field(default_factory=dict)
    probes: int = 0
    bracket: tuple[int, int] | None = None
    """The bisection's starting bracket, once `run` has found an upper end."""

    def at(self, capacity: int) -> Probe:
        capacity = int(capacity)
        if capacity not in self.known:
            self.probes += 1
            self.known[capacity] = self.probe(capacity)
        return self.known[capacity]

    def run(self, candidates: Sequence[int | Callable[[], int | None] | None], *,
            just_under: bool = False) -> Probe | None:
        """The smallest fitting probe found, or None.

        The upper end starts at the smallest capacity already known to fit. ``candidates`` are further upper
        bounds, tried in order: a number below the upper end is probed, and becomes the upper end if it fits
        or raises the lower end if not; a callable (costly to evaluate) is asked only while no upper end is
        known; None is skipped. Without any fitting capacity, capacities double from the lower end. Then
        bisection, until the bracket is within ``rel_tol`` of its upper end. With ``just_under``, when the
        first candidate probed fits, the bisection's first probe is one tolerance under it (a good guess is
        often the answer already: then that single failure ends the search).
        """
        lo = max([self.lower] + [c for c, p in self.known.items() if not p.fits])
        hi = min((c for c, p in self.known.items() if p.fits), default=None)
        probes_before = self.probes
        first_fit = False
        for cand in candidates:
            if callable(cand):
                if hi is not None:
                    continue
                cand = cand()
            if cand is None or cand <= lo or (hi is not None and cand >= hi):
                continue
            if self.at(cand).fits:
                hi = int(cand)
                first_fit = self.probes == probes_before + 1
            else:
                lo = int(cand)
        if hi is None and lo <= 0 and self.at(0).fits:     # a graph that holds no memory at all (empty)
            self.bracket = (0, 0)
            return self.known[0]
        c = max(lo, 1)
        while hi is None and c < MAX_SCALE * max(self.lower, 1):
            c *= 2
            if self.at(c).fits:
                hi = c
            else:
                lo = c
        if hi is None:
            return None
        lo = max([lo] + [c for c, p in self.known.items() if not p.fits and c < hi])
        self.bracket = (lo, hi)
        first = just_under and first_fit
        while hi - lo > self.rel_tol * hi:
            mid = hi - int(self.rel_tol * hi) if first else (lo + hi) // 2
            first = False
            if mid <= lo:
                break
            if self.at(mid).fits:
                hi = mid
            else:
                lo = mid
        return self.known[hi]


@dataclass(frozen=True)
class PlanRow:
    """One device count."""

    k: int
    available: bool                   # False: the graph's pins need more devices
    fits: bool | None                 # at the given memory (None when unavailable)
    step_us: float | None             # predicted step time at the given memory (None unless it fits)
    speedup: float | None             # single-device step time / step_us
    peak_bytes: int | None            # largest device peak of the placement at the given memory
    min_memory_bytes: int | None      # smallest memory per device found (None: none found)
    min_memory_step_us: float | None  # the step time of the search's placement there
    lower_bound_bytes: int            # `memory_lower_bound`
    step_lower_bound_us: float        # `pardnn.bounds.makespan_lower_bound` on the first K devices
    search_lower_bytes: int | None    # the bisection's starting bracket (after the candidates were probed)
    search_upper_bytes: int | None
    placements: int                   # placements made for this row (the fit and the probes)
    note: str = ""


@dataclass(frozen=True)
class PlanSettings:
    counts: tuple[int, ...] = DEFAULT_DEVICES
    effort: str = "fast"
    """The effort of the placement at the given memory (the step times); the probes are always ``fast``."""
    rel_tol: float = 0.05
    search: bool = True
    """Also find the smallest memory per device."""


@dataclass(frozen=True)
class DevicePlan:
    graph: str
    nodes: int
    memory: tuple[int | None, ...]    # the given memory, per device of the largest cluster (None: unlimited)
    settings: PlanSettings
    single_step_us: float
    single_peak_bytes: int
    rows: tuple[PlanRow, ...]
    seconds: float

    @property
    def placements(self) -> int:
        return sum(r.placements for r in self.rows)

    def speedup_bound(self, row: PlanRow) -> float | None:
        """One device's step time over ``row``'s step-time lower bound: no placement on K devices is faster
        (None for an empty graph, whose bound is 0, and for a count too small for the graph's pins, which
        has no placement at all)."""
        lb = row.step_lower_bound_us
        return self.single_step_us / lb if lb > 0 and row.available else None

    def memory_text(self) -> str:
        distinct = sorted({m for m in self.memory}, key=lambda m: (m is None, m or 0))
        if distinct == [None]:
            return "unlimited memory"
        return "/".join(format_bytes(m) if m is not None else "unlimited" for m in distinct)

    def verdict(self) -> str:
        """The answer in one line: the fewest devices that fit and the fastest count, or that none fits (and the
        least memory found, or with ``--no-search`` how to find it). `pardnn plan` prints it under its table, and
        its page shows it above the figure."""
        fitting = [r for r in self.rows if r.fits and r.speedup is not None]
        if fitting:
            fewest = fitting[0]
            fastest = max(fitting, key=lambda r: (r.speedup, -r.k))
            best = (f"fastest: K={fastest.k} ({fastest.speedup:.2f}x)" if fastest.speedup > 1.0 else
                    "no count is faster than one device")
            return f"fewest devices that fit: K={fewest.k} ({fewest.speedup:.2f}x); {best}"
        if not any(r.available for r in self.rows):
            return "no count asked for has as many devices as the graph's pins need; ask for more with --devices"
        if not self.settings.search:
            return f"no device count fits {self.memory_text()}; leave out --no-search for the least memory that does"
        found = [r.min_memory_bytes for r in self.rows if r.min_memory_bytes is not None]
        return f"no device count fits {self.memory_text()}" + (
            f"; the least memory found is {format_bytes(min(found))} per device" if found else "")

    def to_dict(self) -> dict:
        s = self.settings
        return {"graph": self.graph, "nodes": self.nodes, "memory_bytes": list(self.memory),
                "method": DEFAULT_METHOD, "effort": s.effort, "search_effort": SEARCH_EFFORT,
                "rel_tol": s.rel_tol, "single_device_step_us": self.single_step_us,
                "single_device_peak_bytes": self.single_peak_bytes, "placements": self.placements,
                "seconds": self.seconds, "rows": [asdict(r) for r in self.rows]}


def first_devices(cluster: Cluster, k: int) -> Cluster:
    """The cluster of ``cluster``'s first ``k`` devices (and the links between them)."""
    links = None if cluster.links is None else tuple(tuple(row[:k]) for row in cluster.links[:k])
    return Cluster(cluster.devices[:k], cluster.latency_us, cluster.bandwidth_bytes_per_us, links)


def _candidates(previous: int | None, history: list[tuple[int, int]], k: int, bound: int,
                rel_tol: float) -> list[int]:
    """Upper ends for the search at ``k`` from the answers at smaller counts, in the order to try them.

    Where the answer stopped falling at the last step (a colocation group or an op sets it), the previous
    answer first. Otherwise the previous answer scaled by the counts (memory falling as 1/K) and a few
    capacities a little above it, since the answer is rarely below that; then the previous answer, which
    holds on more devices.
    """
    if previous is None or not history:
        return []
    if len(history) >= 2 and history[-1][1] > (1 - rel_tol) * history[-2][1]:
        return [previous]
    guess = max(bound, int(math.ceil(previous * history[-1][0] / k)))
    return [int(guess * (1 + f * rel_tol)) for f in (0, 2, 6, 14)] + [previous]


def _peak(sched) -> int:
    return int(np.max(sched.peak_bytes)) if len(sched.peak_bytes) else 0


def plan_devices(g: OpGraph, cluster: Cluster, settings: PlanSettings = PlanSettings(), *,
                 progress: Progress | None = None) -> DevicePlan:
    """The plan over ``settings.counts``: ``cluster`` has at least the largest count of devices, and its
    capacities are the given memory (each K uses its first K devices). With the default counts (1 to 8) a
    smaller cluster plans up to its own size, as ``pardnn plan --cluster`` does."""
    progress = progress or Progress.off()
    if settings.counts == DEFAULT_DEVICES and cluster.num_devices < max(DEFAULT_DEVICES):
        settings = dataclasses.replace(settings, counts=tuple(range(1, cluster.num_devices + 1)))
    if max(settings.counts) > cluster.num_devices:
        raise ValueError(f"the cluster has {cluster.num_devices} devices, fewer than {max(settings.counts)} "
                         f"(the largest of PlanSettings.counts)")
    t0 = time.perf_counter()
    first = cluster.devices[0]
    with progress.stage("simulating the graph on one device"):
        one = simulate(g, Cluster((Device(first.name, None, first.speed),)), np.zeros(g.num_nodes, dtype=np.int64))
    single_step, single_peak = float(one.makespan_us), _peak(one)
    need_k = int(g.pinned.max()) + 1 if g.num_nodes and g.pinned.max() >= 0 else 1
    fit_options = PardnnOptions(effort=settings.effort)
    probe_options = METHODS[DEFAULT_METHOD].probe_options(PardnnOptions(effort=SEARCH_EFFORT))
    rows: list[PlanRow] = []
    previous: int | None = None        # the smallest memory found at the previous count
    history: list[tuple[int, int]] = []   # (K, smallest memory) found so far

    for k in settings.counts:
        ck = first_devices(cluster, k)
        bound = memory_lower_bound(g, k)
        step_bound = makespan_lower_bound(g, ck).value_us
        cap = ck.capacity
        if k == 1 and need_k > 1:     # the reference step (pins ignored) is no placement a user can run
            rows.append(PlanRow(1, False, None, None, None, None, None, None, bound, step_bound, None, None, 0,
                                f"the graph's pins need {need_k} devices"))
            previous = single_peak
            history.append((1, single_peak))
            continue
        if k == 1:
            fits = bool(single_peak <= cap[0])
            rows.append(PlanRow(1, True, fits, single_step if fits else None, 1.0 if fits else None, single_peak,
                                single_peak, single_step, bound, step_bound, None, None, 0,
                                "the whole graph on one device"))
            previous = single_peak
            history.append((1, single_peak))
            continue
        if k < need_k:
            rows.append(PlanRow(k, False, None, None, None, None, None, None, bound, step_bound, None, None, 0,
                                f"the graph's pins need {need_k} devices"))
            continue

        def probe(capacity: int, ck=ck, k=k) -> Probe:
            with progress.stage(f"K={k}: trying {format_bytes(capacity)} per device"):
                _, s = partition(g, ck.with_memory(capacity), require_feasible=False, search_capacity=False,
                                 options=probe_options)
            return Probe(capacity, bool(s.feasible), float(s.makespan_us), _peak(s))

        search = CapacitySearch(probe, bound, settings.rel_tol)
        placements = 0
        finite = cap[np.isfinite(cap)]
        uniform = finite.size == cap.size and np.all(cap == cap[0])
        free_peak = None                  # the largest device peak at unlimited memory, when the fit is that
        if finite.size == cap.size and cap.max() < bound:
            fits, step, peak = False, None, None
            note = f"below the lower bound ({format_bytes(bound)})"
        else:
            with progress.stage(f"K={k}: placing at {format_bytes(cap.max()) if finite.size else 'unlimited'} "
                                f"memory"):
                _, s = partition(g, ck, require_feasible=False, search_capacity=False, options=fit_options)
            placements += 1
            fits, peak = bool(s.feasible), _peak(s)
            step = float(s.makespan_us) if fits else None
            note = ""
            if finite.size == 0:
                free_peak = peak
            if uniform and settings.effort == SEARCH_EFFORT:
                # the capacity the search would try, at the probes' effort (the memory-aware refinement the
                # probes leave out never changes whether a plan fits): the search reuses it
                search.known[int(cap[0])] = Probe(int(cap[0]), fits, float(s.makespan_us), peak)
        min_probe = None
        lo_start = hi_start = None
        if settings.search:
            unconstrained_peak: list[int] = []

            def unlimited(ck=ck, k=k) -> int:
                with progress.stage(f"K={k}: placing at unlimited memory"):
                    _, s = partition(g, ck.with_memory(None), require_feasible=False, search_capacity=False,
                                     options=probe_options)
                unconstrained_peak.append(_peak(s))
                return _peak(s)

            min_probe = search.run(_candidates(previous, history, k, bound, settings.rel_tol) + [free_peak, unlimited],
                                   just_under=True)
            placements += search.probes + len(unconstrained_peak)
            if min_probe is not None:
                history.append((k, min_probe.capacity))
                previous = min_probe.capacity
                lo_start, hi_start = search.bracket
                # the step at that memory as `pardnn partition` would place it (the probes leave out the
                # memory-aware refinement, which only shortens a plan that fits)
                with progress.stage(f"K={k}: placing at {format_bytes(min_probe.capacity)} per device"):
                    _, s = partition(g, ck.with_memory(min_probe.capacity), require_feasible=False,
                                     search_capacity=False, options=fit_options)
                placements += 1
                if s.feasible and float(s.makespan_us) < min_probe.step_us:
                    min_probe = Probe(min_probe.capacity, True, float(s.makespan_us), _peak(s))
            else:
                note = note or f"no fit found up to {MAX_SCALE}x the lower bound"
        rows.append(PlanRow(k, True, fits, step, single_step / step if step else None, peak,
                            None if min_probe is None else min_probe.capacity,
                            None if min_probe is None else min_probe.step_us, bound, step_bound, lo_start,
                            hi_start, placements, note))
    return DevicePlan(g.name, g.num_nodes, tuple(None if not math.isfinite(c) else int(c) for c in cluster.capacity),
                      settings, single_step, single_peak, tuple(rows), time.perf_counter() - t0)
