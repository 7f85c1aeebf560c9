"""Seeding: list-scheduling plans next to the incoming one, the best of them kept (issue 14, step 2).

On graphs with much op-level parallelism and K >= 4 devices, list schedulers
(ETF, HEFT) beat a path-based plan. This pass computes list-scheduling plans
whose link reservations follow the machine model (`_listsched`: one transfer
per (port, destination), a link held for latency + bytes / bandwidth, control
edges cost latency), simulates each of them and the incoming assignment
(SPEC §1), and keeps the best:

* the order: the ``best`` pass's `plan_key` (plans that fit memory first, when
  some device's memory is bounded; then the shorter step, or among plans that
  do not fit less total overflow), then the incoming plan before the seeds,
  the seeds in ``schedulers`` order;
* ``alternatives``: the incoming plan when it is not chosen, then the other
  plans within ``keep_within`` of the chosen one's step time (and fitting
  memory if it fits), then the alternatives the state already had, at most
  ``max_alternatives`` in all, none twice. Refinement starts from each.

On graphs up to ``exact_max_nodes`` ops the plain list schedules and SCT are
also made as the Python baselines make them (``-x``), simulated and recorded
as starts for the ``best`` pass only (`Seed.exact_max_nodes`); so is the
``cut`` start, a pipeline split of a topological order (`Seed.schedulers`).

So the plan never gets worse by the simulator's measure, and the same input
gives the same plan.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..cluster import Cluster
from ..ir import OpGraph
from ..machine import Schedule, simulate
from ..pipeline import PlanState, check_pass_options
from ..baselines import metis
from . import _cuts, _listsched
from .keep_best import plan_key
from ._threads import THREADS_FROM, map_in_order, workers_for

STARTS = (*_listsched.MODES, "metis", "sct", "cut")
"""The starting plans the seed pass knows."""
MAX_METIS_VARIANTS = 256
"""The most ``metis_variants`` taken: the partitions are all kept until the best is chosen (256 of a 200k-op
graph hold 410 MB), and ``metis_variants=1e15`` grew to 18 GB in a minute."""


def _best_simulated(g: OpGraph, cluster: Cluster, plans: list[np.ndarray], bounded: bool
                    ) -> tuple[int, list[Schedule]]:
    """The index of the best of ``plans`` by `plan_key` (the first of equals), and their schedules
    (``simulate(..., memory=bounded)``)."""
    scheds = [simulate(g, cluster, dev, memory=bounded) for dev in plans]
    return min(range(len(plans)), key=lambda j: plan_key(scheds[j], bounded) + (j,)), scheds


@dataclass(frozen=True)
class Seed:
    name: ClassVar[str] = "seed"
    requires: ClassVar[tuple[str, ...]] = ("assignment",)
    schedulers: str = "heft+etf+cpop+metis+sct+cut"
    """Starting plans to seed with, joined by ``+`` (a comma would end the option in a pipeline spec): the
    list schedulers ``heft`` (upward-rank order, earliest finish), ``etf`` (earliest start among ready ops,
    ties by static level), ``etf-rank`` (ties by upward rank) and ``cpop`` (HEFT's engine in CPOP's order, the
    critical path on the fastest device), all contention-aware
    (`pardnn.passes._listsched`); ``metis``, a balanced minimum-cut partition of the units
    (`pardnn.baselines.metis`: compute balanced in proportion to speed, the fewest bytes cut); and ``sct``,
    Baechi's SCT (`pardnn.baselines.sct`: favourite children from Hanen and Munier's LP, then ETF that keeps
    a favourite child on its parent's device), on graphs up to ``sct_max_nodes`` ops; and ``cut``, consecutive
    segments of a topological order (`_cuts`), on graphs up to ``cut_max_nodes`` ops, recorded for the
    ``best`` pass only (a floor, never refinement's start: on a chain, such as ResNet18's inference step, no
    one-op move reaches a single cut from the other plans, and the cut is the best plan; as a start it was
    chosen at K=3 for a plan that refined worse, 699.9 against 608.0 us)."""
    contention: bool | str = "both"
    """How the list schedulers price a transfer: True, as the machine model runs it (a link carries one
    transfer at a time, reserved in the scheduler's order); False, as if each transfer had its link to
    itself (the Python baselines' pricing, labels ``heft-nc`` etc.); "both" (the default) runs each both
    ways on graphs up to ``etf_max_nodes`` ops (contention only above). Neither wins everywhere: reservations
    in placement order overstate the queueing the simulator sees when transfers are many and short, and
    ignoring it understates it when they are long. On a 200k-op synthetic Transformer at K=8 under tight
    memory, ``m-heft-nc`` overflowed least, was chosen, and the memory pass made an 8.9 s step of it where
    ``m-heft`` gave 2.5 s; hence the size rule."""
    memory: bool | str = "auto"
    """Steer the list schedulers by device memory: True (memory-aware plans only), False (plain plans
    only), or "auto" (plain plans, and memory-aware ones too when some device's memory is bounded)."""
    keep_within: float = 0.10
    """Hand runners-up whose step time is within this fraction of the chosen plan's to refinement."""
    max_alternatives: int = 4
    """At most this many alternatives in the returned state (the incoming plan first when not chosen)."""
    etf_max_nodes: int = 50_000
    """The ETF-like schedulers (about 5x HEFT's time) run only on graphs up to this many ops."""
    sct_max_nodes: int = 30_000
    """``sct`` runs only on graphs up to this many ops. Its LP (windowed above 30k variables) takes about 0.4-1 s
    at 10k-40k ops, 3.2 s at 50k, 6.7 s at 100k and 14.7 s at 200k (K=8, eleventh round); the favourite-aware
    ETF run after it, compiled, 0.02-0.2 s. On the tuning suite SCT never gave the chosen plan, but on the
    real models of held-out set v1 (tuning data since set v3) it was the best baseline in 4 of 33 loose cases
    (10k-25k ops), up to 6.5% ahead, and seeding with it made all 33 best or tied. At a cap of 50k the LP made
    the 50k-op synthetic Transformer's seed pass 3.3 s instead of 0.6 s, for no plan that changed."""

    sct_lp_iterations: float | None = 1.0
    """Give SCT's LP up after this many simplex iterations per LP variable (at least
    `sct.MIN_ITERATION_LIMIT`; None: no limit), and match its favourite children greedily, heaviest edge first
    (`sct.favourites`; the figures say so under ``lp``). On the DL graphs of the tuning suite HiGHS needs at most
    0.57 iterations per variable (0.1-1 s), but on a random layered graph of 3000 ops and 8826 edges, each op
    reading three ops of the four layers before, it needs 14 (167k iterations, 66 s), and the seed pass took
    that long. The limit counts iterations, so the plan is the same on any machine; it bounds iterations, not
    time (a layered graph of 5000 ops, 50 a layer, still spends 8 s in the LP before giving it up at K=8).
    The ``sct`` baseline has no limit."""

    exact_max_nodes: int = 50_000
    """On graphs up to this many ops, the plain plans of the list schedulers and SCT asked for (those that run
    at this size) are also made as the Python baselines make them (labels ``-x``: each edge priced alone, every
    idle gap kept; `_listsched.EXACT`) and recorded as starts for the ``best`` pass only: they are simulated
    and shown, but neither chosen here nor handed to refinement. So the result is never worse than the
    ``heft``, ``etf``, ``cpop`` and ``sct`` baselines' plans (``sct``'s where its LP is solved within
    ``sct_lp_iterations``; 30k ops at most, ``sct_max_nodes``). Those differ from the ``-nc`` starts where one
    output feeds several ops on a device over edges of different sizes, or a device has more than 512 idle
    gaps; the ``-nc`` plans were kept as refinement's starts since they refined better (eighteenth round: made
    the baselines' own, two loose tuning plans got longer, msr resnet50 K=2 by 15%, and none shorter). 0: none."""

    metis_variants: int = 8
    """Next to METIS's own partition (the ``metis`` start, the baseline's), the ``metis-var`` start is the best,
    by the simulator, of this many METIS partitions (`metis.variants`: other random seeds and imbalance
    tolerances; the first is METIS's own), on graphs up to ``metis_variants_max_nodes`` ops (labels ``-nc``
    after them when ``contention`` is false); 1: no such start. METIS's cut is only a proxy for the step
    time: on 81 loose cases of the tuning data the best of 7 partitions (METIS's own and 6 variants) was 5.5%
    shorter than METIS's own (geomean). Both starts are kept: a shorter start is not always the easier one to refine
    or to repair (replacing METIS's own partition by the variant lost feasibility in 3 tight tuning cases)."""
    metis_variants_max_nodes: int = 50_000
    """No ``metis-var`` start above this many ops."""

    cut_choices: int = 4
    """The ``cut`` start (`_cuts.cut_plans`: consecutive segments of a topological order, one per device,
    each boundary where the fewest bytes cross it) is the best, by the simulator, of this many such plans."""
    cut_max_nodes: int = 50_000
    """No ``cut`` start above this many ops."""

    threads: int | None = None
    """Compute the starts, then simulate them, on this many threads at once; None: as many as there are
    jobs, at most the CPUs this process may use, on graphs of `_threads.THREADS_FROM` to `THREADS_UP_TO` nodes
    plus edges (one thread outside); 1 or less: one after the other. The plans are the same either way."""

    def __post_init__(self) -> None:
        self._starts(False)     # unknown schedulers and bad option values fail here, before any pass runs
        it = self.sct_lp_iterations
        if it is not None and (isinstance(it, bool) or not isinstance(it, (int, float)) or not 0 < it < math.inf):
            raise ValueError(f"seed: sct_lp_iterations must be a positive number or none, got {it!r}")
        check_pass_options(self)
        if self.metis_variants > MAX_METIS_VARIANTS:
            raise ValueError(f"seed: metis_variants must be at most {MAX_METIS_VARIANTS} (each is a METIS run, "
                             f"all kept until the best is chosen), got {self.metis_variants}")

    def _starts(self, bounded: bool, big: bool = False, small: bool = True, variants: bool = False,
                exact: bool = False, cuts: bool = True) -> list[tuple[str, str, bool, bool | str]]:
        """``(label, scheduler, memory-aware, contention)`` of every start, in the order that breaks ties; with
        ``variants``, each METIS start is followed by the best of its variants (``metis-var``, `_metis`); with
        ``exact``, the plain list schedules and SCT as the baselines make them come last (contention
        ``"exact"``, recorded for the ``best`` pass only)."""
        # a scheduler named twice runs once
        names = list(dict.fromkeys(s.strip() for s in str(self.schedulers).replace(",", "+").split("+") if s.strip()))
        for s in names:
            if s not in STARTS:
                raise ValueError(f"seed: unknown scheduler {s!r}; known: {', '.join(STARTS)}")
        mem = self.memory
        if mem not in (True, False, "auto"):
            raise ValueError(f"seed: memory must be true, false or auto, got {mem!r}")
        ways = {True: (True,), False: (False,), "both": (True,) if big else (True, False)}.get(self.contention)
        if ways is None:
            raise ValueError(f"seed: contention must be true, false or both, got {self.contention!r}")
        out = []
        # on large graphs the ETF-like schedulers (time) and SCT (its LP) are left out, HEFT seeding instead
        # when nothing else is named
        drop = {s for s in names if (big and s.startswith("etf")) or (not small and s == "sct")
                or (not cuts and s == "cut")}
        cut = "cut" in names and "cut" not in drop
        names = [s for s in names if s not in drop and s != "cut"] or ["heft"]
        # a list scheduler once per pricing (contention first), metis and sct once
        priced = [(s, c) for c in ways for s in names if c == ways[0] or s in _listsched.MODES]
        tag = {True: "", False: "-nc"}
        if variants and int(self.metis_variants) > 1:
            priced = [x for s, c in priced for x in ([(s, c), ("metis-var", c)] if s == "metis" else [(s, c)])]
        if mem is not True:
            out += [(f"{s}{tag[c]}", s, False, c) for s, c in priced]
        if mem is True or (mem == "auto" and bounded):
            out += [(f"m-{s}{tag[c]}", s, True, c) for s, c in priced]
        if exact:
            out += [(f"{s}-x", s, False, "exact") for s in names if s in _listsched.MODES or s == "sct"]
        if cut:
            out.append(("cut", "cut", False, "floor"))
        return out

    def _metis(self, g: OpGraph, cluster: Cluster, memory: bool, bounded: bool, n: int
               ) -> tuple[np.ndarray, np.ndarray, int, dict[int, Schedule]]:
        """METIS's own partition (the baseline's), the best of ``n`` partitions (`metis.variants`, the first by
        the simulator's `plan_key`, then the variants' order), that one's index, and the schedules of the two
        by index (``simulate(..., memory=bounded)``; none when ``n`` is 1)."""
        plans = metis.assignments(g, cluster, memory=memory, runs=metis.variants(max(1, n)))
        if len(plans) == 1:
            return plans[0], plans[0], 0, {}
        i, scheds = _best_simulated(g, cluster, plans, bounded)
        return plans[0], plans[i], i, {0: scheds[0], i: scheds[i]}

    def __call__(self, g: OpGraph, cluster: Cluster, state: PlanState) -> PlanState:
        if state.assignment is None:
            raise ValueError("seed needs an assignment: run the map pass first")
        if cluster.num_devices == 1 or g.num_nodes == 0:
            return state.with_stats(self.name, skipped="one device" if g.num_nodes else "empty graph")
        t_all = time.perf_counter()
        bounded = bool(np.isfinite(cluster.capacity).any())
        starts = self._starts(bounded, g.num_nodes > self.etf_max_nodes, g.num_nodes <= self.sct_max_nodes,
                              g.num_nodes <= self.metis_variants_max_nodes, g.num_nodes <= self.exact_max_nodes,
                              g.num_nodes <= self.cut_max_nodes)
        recorded = {label for label, _, _, c in starts if c in ("exact", "floor")}     # for the ``best`` pass only
        t0 = time.perf_counter()
        arrays = _listsched.prepare(g)
        rank = _listsched.ranks(g, cluster, arrays)
        level = (_listsched.static_levels(g, cluster, arrays) if any(m in ("etf", "sct") for _, m, _, _ in starts)
                 else None)
        prep_s = time.perf_counter() - t0
        # the starts as jobs: a scheduler asked for with and without memory (SCT or a list scheduler) is one
        # job that runs once when memory never binds, SCT one job (its LP once); the jobs, then the simulations
        # of the distinct plans, run on threads at once (the kernels release Python's lock); each is a pure
        # function of its inputs, so the plans and their order are the same on any number of threads
        jobs: dict[tuple, list[tuple[str, str, bool, bool | str]]] = {}
        for label, mode, mem, c in starts:
            paired = mode in _listsched.MODES and sum(m == mode and cc == c for _, m, _, cc in starts) == 2
            key = (("metis", mem) if mode.startswith("metis") else (mode,) if mode in ("sct", "cut")
                   else (mode, c) if paired else (label,))
            jobs.setdefault(key, []).append((label, mode, mem, c))

        variant: dict[str, int] = {}     # the METIS variant each ``metis-var`` start took (`metis.variants`)
        known: dict[str, Schedule] = {}  # starts a job already simulated as the pass scores them
        lp_given_up: dict[str, str] = {}   # the SCT starts whose LP was given up at its iteration limit

        def run(members: list[tuple[str, str, bool, bool]]) -> tuple[dict[str, np.ndarray], float]:
            t0 = time.perf_counter()
            mode, contend = members[0][1], members[0][3]
            if mode.startswith("metis"):       # METIS's own partition, then the best variant
                var = [label for label, m, _, _ in members if m == "metis-var"]
                own, best, i, sims = self._metis(g, cluster, members[0][2], bounded,
                                                 int(self.metis_variants) if var else 1)
                out = {members[0][0]: own}
                if sims:
                    known[members[0][0]] = sims[0]
                for label in var:
                    out[label], variant[label], known[label] = best, i, sims[i]
            elif mode == "cut":
                plans = _cuts.cut_plans(g, cluster, choices=int(self.cut_choices)) or [state.assignment]
                i, sims = _best_simulated(g, cluster, plans, bounded)
                out = {members[0][0]: plans[i]}
                known[members[0][0]] = sims[i]
            elif mode == "sct":
                from ..baselines import sct     # scipy's LP solver loads only when it is used
                fv = sct.favourites(g, cluster, iterations_per_variable=self.sct_lp_iterations)
                favourite = fv.child       # the LP once, for sct, m-sct and sct-x
                if fv.capped:
                    lp_given_up.update((label, f"{fv.capped} of {fv.lps} LPs reached the iteration limit; their "
                                               "favourites were matched greedily") for label, *_ in members)
                out = {}
                for label, _, mem, c in members:
                    if c == "exact":
                        out[label] = _listsched.schedule(g, cluster, "etf", arrays=arrays, rank=rank, level=level,
                                                         contention=c, favourite=favourite)[0]
                    elif label not in out:
                        pair = _listsched.sct_schedule_both(g, cluster, favourite, arrays=arrays, level=level)
                        out.update((lb, pair[int(m)]) for lb, _, m, cc in members if cc != "exact")
            elif len(members) == 2:
                pair = _listsched.schedule_both(g, cluster, mode, arrays=arrays, rank=rank, level=level,
                                                contention=contend)
                out = {label: pair[int(mem)] for label, _, mem, _ in members}
            else:
                label, _, mem, _ = members[0]
                out = {label: _listsched.schedule(g, cluster, mode, memory=mem, arrays=arrays, rank=rank,
                                                  level=level, contention=contend)[0]}
            return out, time.perf_counter() - t0

        workers = workers_for(len(jobs), self.threads, g, smallest=THREADS_FROM)
        order = sorted(jobs, key=lambda k: jobs[k][0][1] != "sct")      # the slowest (SCT's LP) first
        made: dict[str, tuple[np.ndarray, float]] = {}     # each start's plan, and its job's seconds (first member)
        for key, (plans, secs) in zip(order, map_in_order(run, [jobs[k] for k in order], workers)):
            made.update((label, (plans[label], secs if i == 0 else 0.0)) for i, (label, *_) in enumerate(jobs[key]))
        cands: list[tuple[str, np.ndarray, float]] = [("incoming", state.assignment, 0.0)]
        cands += [(label, *made[label]) for label, *_ in starts]      # in ``starts`` order (it breaks ties)
        distinct = []       # (index into cands, index of the earlier equal plan or None)
        for i, (label, dev, secs) in enumerate(cands):
            distinct.append((i, next((j for j in range(i) if np.array_equal(cands[j][1], dev)), None)))
        runs = [i for i, same in distinct if same is None]
        workers = workers_for(len(runs), self.threads, g, smallest=THREADS_FROM)
        def score(i: int) -> Schedule:
            label, dev, _ = cands[i]
            return known[label] if label in known else simulate(g, cluster, dev, memory=bounded)

        scheds = dict(zip(runs, map_in_order(score, runs, workers)))
        scored = []
        later = []      # the ``-x`` starts that differ from every other: recorded for the ``best`` pass
        figures = {}
        for i, same in distinct:
            label, dev, secs = cands[i]
            if same is not None:     # a duplicate plan: the same score, no second simulation
                figures[label] = {**figures[cands[same][0]], "seconds": round(secs, 4), "same_as": cands[same][0]}
                figures[label].pop("recorded_only", None)
                continue
            s = scheds[i]
            over = float(s.overflow().sum()) if bounded else 0.0
            figures[label] = {"makespan_us": float(s.makespan_us), "feasible": bool(s.feasible),
                              "overflow_bytes": over, "seconds": round(secs, 4)}
            if label in recorded:
                figures[label]["recorded_only"] = True
                later.append((plan_key(s, bounded), label, dev))
                continue
            scored.append((plan_key(s, bounded) + (i,), label, dev, s))
        for label, i in variant.items():
            figures[label]["metis_variant"] = i
        for label, note in lp_given_up.items():
            figures[label]["lp"] = note
        scored.sort(key=lambda r: r[0])
        best_key, best_label, best_dev, best_s = scored[0]
        alts: list[np.ndarray] = []

        def add(dev: np.ndarray) -> None:
            if len(alts) < self.max_alternatives and not np.array_equal(dev, best_dev) and \
                    not any(np.array_equal(dev, a) for a in alts):
                alts.append(dev)

        if best_label != "incoming":
            add(state.assignment)
        limit = float(best_s.makespan_us) * (1.0 + self.keep_within)
        for key, label, dev, s in scored[1:]:
            if s.makespan_us <= limit and key[0] <= best_key[0]:
                add(dev)
        for dev in state.alternatives:
            add(dev)
        # every distinct plan is a start the pipeline's result must not be worse than (the ``best`` pass)
        starts_seen = (tuple(state.starts) + tuple((label, dev) for _, label, dev, _ in scored)
                       + tuple((label, dev) for _, label, dev in later))
        keys = {**state.start_keys, **{label: (key[:-1], dev) for key, label, dev, _ in scored},
                **{label: (key, dev) for key, label, dev in later}}
        return state.replace(assignment=best_dev, makespan_us=float(best_s.makespan_us),
                             alternatives=tuple(alts), starts=starts_seen, start_keys=keys).with_stats(
            self.name, chosen=best_label, starts=figures, alternatives=len(alts), prepare_seconds=round(prep_s, 4),
            seconds=round(time.perf_counter() - t_all, 4))
