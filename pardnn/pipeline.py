"""Passes composed into a pipeline, with timing and verification between them.

A pass is a frozen dataclass with a class-level ``name``; its fields are its
options, and ``requires`` names the `PlanState` fields it needs. Calling it
with ``(g, cluster, state)`` returns a new `PlanState`. `Pipeline` runs passes
in order, checks each one's ``requires`` before it runs, times each
(``--time-passes``), records whether it changed the assignment
(`PlanState.changed`, which a later pass may read), verifies the state after
each one (every node placed on a real device, colocation groups whole, pins
honoured: the machine model's own rules) and re-raises any failure as a
`PassError` naming the pass that failed and those that ran before it. A pass
that runs passes of its own (``fewer``) has an ``inside(pipeline, i)``
method: the pipeline calls what it returns, the pass as entry ``i`` of this
pipeline, instead of the pass itself.

A pipeline is also a string, after xDSL's pass pipelines:
``"slice,map,refine{max_evals=400},memory{heuristic=residual},refine-mem"``
names registry entries (`pardnn.passes.PASSES`) with option values in braces
(numbers, ``true``/``false``, ``none`` or bare words). `parse_pipeline` reads
one; ``str(pipeline)`` writes it back.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import re
import time
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Protocol, Sequence

import numpy as np

from .cluster import Cluster
from .errors import InfeasibleError, OutOfMemory, PardnnError, PassError, interrupted
from .ir import OpGraph
from .machine import rule_violations
from .passes import PASSES, make_pass, pass_class
from .progress import Progress
from .units import is_number, is_whole

log = logging.getLogger("pardnn.pipeline")


@dataclass(frozen=True, eq=False)
class Paths:
    """The result of slicing: the slicing path of each node, and which paths are primary.

    Paths ``0 .. num_primary-1`` are the primary paths (one per device);
    the rest are secondary, numbered in extraction order (heaviest first).
    ("Cluster" in this code base means the set of devices, never a path.)
    """

    path: np.ndarray           # int64 [V]
    num_primary: int
    num_paths: int

    def members(self) -> list[np.ndarray]:
        order = np.argsort(self.path, kind="stable")
        counts = np.bincount(self.path, minlength=self.num_paths)
        return np.split(order, np.cumsum(counts)[:-1])


@dataclass(frozen=True, eq=False)
class PlanState:
    """What passes hand to each other. Every field is a value; passes return new states."""

    assignment: np.ndarray | None = None     # device per node
    paths: Paths | None = None
    makespan_us: float | None = None         # of `assignment`, when a pass simulated it
    alternatives: tuple[np.ndarray, ...] = ()    # other promising assignments, for multi-start refinement
    starts: tuple[tuple[str, np.ndarray], ...] = ()
    """Starting plans, by name, that the result must never be worse than (the ``best`` pass checks)."""
    start_keys: dict[str, tuple[tuple, np.ndarray]] = field(default_factory=dict)
    """``(plan_key, assignment)`` of a start, by name, where the pass that recorded it had simulated it on this
    cluster, so the ``best`` pass need not simulate it again. The key counts only for that very assignment
    object: a later start under the same name (a pipeline that seeds twice) is simulated."""
    stats: dict[str, Any] = field(default_factory=dict)   # per-pass figures, for reports
    changed: bool = True
    """Whether the pass that ran last changed the assignment (set by `Pipeline.run`)."""

    def replace(self, **changes: Any) -> "PlanState":
        return dataclasses.replace(self, **changes)

    def with_stats(self, pass_name: str, **figures: Any) -> "PlanState":
        stats = dict(self.stats)
        stats[pass_name] = {**stats.get(pass_name, {}), **figures}
        return self.replace(stats=stats)


class Pass(Protocol):
    name: ClassVar[str]
    requires: ClassVar[tuple[str, ...]]
    """`PlanState` fields that must be set before the pass runs (e.g. ``("assignment",)``)."""
    # optional: ``makes``, the fields a pass sets from nothing (slice: paths, map: the assignment), which
    # `order_problem` reads

    def __call__(self, g: OpGraph, cluster: Cluster, state: PlanState) -> PlanState: ...


def check_pass_options(p: Any, *, signed: Sequence[str] = ("threads",)) -> None:
    """Refuse a pass option the field's type does not admit, from its annotation (each pass's
    ``__post_init__`` calls this after its own checks): an ``int`` is a whole number, 0 or more (a whole
    float such as ``1e3`` from a spec is taken as the int), a ``float`` a finite number, 0 or more, a
    ``bool`` true or false (0 and 1 taken). ``signed`` fields may be negative (``threads``: 1 or less is
    one after the other). Before, ``refine{patience=-1}`` or ``map{merge_factor=-2}`` ran without a word.
    """
    for f in fields(p):
        kinds = set(re.findall(r"\w+", str(f.type)))
        nullable = "None" in kinds
        kinds.discard("None")
        v = getattr(p, f.name)
        if v is None and nullable:
            continue
        bad = None
        if kinds == {"int"}:
            if not (is_number(v) and math.isfinite(v) and float(v).is_integer()) or (v < 0 and f.name not in signed):
                bad = "a whole number" + ("" if f.name in signed else ", 0 or more")
            else:
                object.__setattr__(p, f.name, int(v))
        elif kinds == {"float"}:
            if not (is_number(v) and 0 <= v < math.inf):
                bad = "a finite number, 0 or more"
            else:
                object.__setattr__(p, f.name, int(v) if is_whole(v) else float(v))
        elif kinds == {"bool"}:
            if isinstance(v, (bool, np.bool_)) or is_whole(v) and v in (0, 1):
                object.__setattr__(p, f.name, bool(v))
            else:
                bad = "true or false"
        if bad:
            raise ValueError(f"{f.name} must be {bad}{', or none' if nullable else ''}, got {v!r}")


def verify_state(g: OpGraph, cluster: Cluster, state: PlanState) -> None:
    """Raise ValueError describing the first broken invariant of ``state``."""
    if state.paths is not None:
        c = state.paths.path
        if c.shape != (g.num_nodes,) or (c.size and (c.min() < 0 or c.max() >= state.paths.num_paths)):
            raise ValueError("the slicing does not give every node exactly one path")
    a = state.assignment
    if a is None:
        return
    if a.shape != (g.num_nodes,):
        raise ValueError(f"the assignment has {a.size} entries for {g.num_nodes} nodes")
    K = cluster.num_devices
    if a.size and (a.min() < 0 or a.max() >= K):
        v = int(np.flatnonzero((a < 0) | (a >= K))[0])
        raise ValueError(f"node {g.names[v]!r} is on device {int(a[v])}, outside 0..{K - 1}")
    broken = rule_violations(g, a)
    if broken:
        raise ValueError(broken[0].message)


@dataclass(frozen=True)
class PassTiming:
    name: str
    seconds: float
    makespan_us: float | None


@dataclass(frozen=True)
class Pipeline:
    """Passes run in order on one graph and cluster."""

    passes: tuple[Any, ...]
    verify: bool = True
    """Check the state's invariants after every pass."""
    labels: tuple[str, ...] = ()
    """The name each pass is known by (its registry entry); default: the pass's own name."""
    within: str = ""
    """The pass this pipeline runs inside (``fewer``), whose name its log lines and errors give first
    (``fewer > refine``)."""

    def label(self, i: int) -> str:
        return self.labels[i] if i < len(self.labels) else self.passes[i].name

    def __str__(self) -> str:
        """The pipeline as a spec string (options that differ from the registry entry's)."""
        parts = []
        for i, p in enumerate(self.passes):
            label = self.label(i)
            base = make_pass(label) if label in PASSES else type(p)()
            parts.append(spec_entry(label, **{f.name: getattr(p, f.name) for f in fields(p)
                                               if getattr(p, f.name) != getattr(base, f.name)}))
        return ",".join(parts)

    def run(self, g: OpGraph, cluster: Cluster, state: PlanState | None = None, *,
            progress: Progress | None = None) -> tuple[PlanState, list[PassTiming]]:
        progress = progress or Progress.off()
        state = state or PlanState()
        timings: list[PassTiming] = []
        done: list[str] = []
        for i, p in enumerate(self.passes):
            label = self.label(i)
            shown = f"{self.within} > {label}" if self.within else label     # in messages
            t0 = time.perf_counter()
            missing = [f for f in getattr(p, "requires", ()) if getattr(state, f) is None]
            if missing:
                raise PassError(f"pass {shown!r} needs {' and '.join(missing)} in the plan, which no pass before it "
                                f"made ({', '.join(done) or 'it runs first'})")
            try:
                before, prior = state.assignment, state.stats.get(p.name)
                if prior is not None:   # a second entry of a pass starts its figures afresh (its own label or not)
                    state = state.replace(stats={k: v for k, v in state.stats.items() if k != p.name})
                run_pass = p.inside(self, i) if hasattr(p, "inside") else p
                with progress.stage(f"pass {shown}", log_time=False):   # logged below, with the makespan
                    state = run_pass(g, cluster, state)
                state = state.replace(changed=not (before is not None and state.assignment is not None
                                                   and np.array_equal(before, state.assignment)),
                                      stats=_filed_under(state.stats, p.name, label, prior))
                if self.verify:
                    verify_state(g, cluster, state)
            except InfeasibleError:
                raise
            except MemoryError:
                oom = OutOfMemory(f"out of memory in pass {shown!r} on {g.num_nodes:,} nodes and "
                                  f"{g.num_edges:,} edges, {cluster.num_devices} devices"
                                  + (f" (after {', '.join(done)})" if done else ""))
                oom.in_pass = shown
                raise oom from None
            except PardnnError as exc:
                if isinstance(exc, PassError) or getattr(exc, "in_pass", None):
                    raise     # named already, by a nested pipeline ('fewer > refine'): not again as 'fewer'
                named = type(exc)(f"{exc} (in pass {shown!r})")
                named.__dict__.update(exc.__dict__, in_pass=shown)
                raise named from exc
            except Exception as exc:
                if interrupted(exc):    # Ctrl-C inside a compiled kernel: an interrupt, not a failed pass
                    raise KeyboardInterrupt from None
                after = f" after {', '.join(done)}" if done else ""
                raise PassError(f"pass {shown!r} failed{after}: {type(exc).__name__}: {exc}") from exc
            dt = time.perf_counter() - t0
            timings.append(PassTiming(label, dt, state.makespan_us))
            log.info("pass %-*s %7.3f s%s", 10 + len(shown) - len(label), shown, dt,     # a nested one indented
                     f"  makespan {state.makespan_us / 1000:.3f} ms" if state.makespan_us is not None else "")
            done.append(label)
        return state, timings


def order_problem(pipeline: Pipeline) -> str | None:
    """Why ``pipeline`` cannot place from an empty plan (as `pardnn.partitioner.run` starts), or None: a pass
    whose ``requires`` no pass before it ``makes``, or no pass that makes the assignment. The command line
    refuses it when it reads ``--pipeline`` (exit 2); run, ``refine`` alone was a `PassError` (exit 1, "a
    bug") and ``slice`` alone an invalid placement of shape () (exit 3)."""
    made: set[str] = set()
    for i, p in enumerate(pipeline.passes):
        missing = [f for f in getattr(p, "requires", ()) if f not in made]
        if missing:
            before = ", ".join(pipeline.label(j) for j in range(i)) or "it comes first"
            return (f"pass {pipeline.label(i)!r} needs {' and '.join(missing)} in the plan, which no pass before "
                    f"it makes ({before}); start with slice,map")
        made.update(getattr(p, "makes", ()))
    if "assignment" not in made:
        return "the pipeline makes no assignment: slice,map must come first"
    return None


def _filed_under(stats: dict, name: str, label: str, prior: Any) -> dict:
    """A pass's figures under its pipeline label (two refine entries keep theirs apart); ``prior``, the figures
    under ``name`` before it ran, stay where this entry made none under that name (a second ``fewer`` entry's
    are its own: merged, a first one's ``skipped`` was logged for a second that ran)."""
    out = dict(stats)
    if label != name and name in out:
        out[label] = out.pop(name)
    if prior is not None and name not in out:
        out[name] = prior
    return out


def spec_entry(name: str, **options: Any) -> str:
    """One entry of a pipeline spec: ``name`` with ``options`` in braces (``refine{max_evals=400}``)."""
    if not options:
        return name
    return name + "{" + ",".join(f"{k}={_format_value(v)}" for k, v in options.items()) + "}"


def _format_value(v: Any) -> str:
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _parse_value(text: str) -> Any:
    t = text.strip()
    low = t.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    for kind in (int, float):
        try:
            return kind(t)
        except ValueError:
            pass
    return t


def _split_top(spec: str) -> list[str]:
    """``spec`` split at the commas outside braces."""
    parts, depth, cur = [], 0, []
    for ch in spec:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced '}}' in pipeline {spec!r}")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise ValueError(f"unbalanced '{{' in pipeline {spec!r}")
    parts.append("".join(cur))
    return parts


def parse_pipeline(spec: str) -> Pipeline:
    """A `Pipeline` from a spec such as ``"slice,map,refine{max_evals=400},memory,refine-mem"``.

    Raises ValueError naming the unknown pass or option (and what is known).
    """
    passes, labels = [], []
    for raw in _split_top(spec):
        item = raw.strip()
        if not item:
            raise ValueError(f"empty pass name in pipeline {spec!r}")
        name, brace, rest = item.partition("{")
        name = name.strip()
        if name not in PASSES:
            raise ValueError(f"unknown pass {name!r}; known passes: {', '.join(PASSES)}")
        options: dict[str, Any] = {}
        if brace:
            if not rest.endswith("}"):
                raise ValueError(f"pass {name!r}: options must end with '}}'")
            known = {f.name: f for f in fields(pass_class(name))}
            for pair in filter(None, (x.strip() for x in rest[:-1].split(","))):
                key, eq, value = pair.partition("=")
                key = key.strip().replace("-", "_")
                if not eq or key not in known:
                    raise ValueError(f"pass {name!r} has no option {key!r}; its options: {', '.join(sorted(known))}")
                if key in options:      # the last one would win without a word
                    raise ValueError(f"pass {name!r}: option {key!r} is given twice")
                options[key] = _parse_value(value)
                kinds = set(re.findall(r"\w+", str(known[key].type)))
                if isinstance(options[key], str) and kinds and kinds <= {"int", "float", "bool", "None"}:
                    raise ValueError(f"pass {name!r}: option {key!r} takes {known[key].type}, got {value.strip()!r}")
        try:
            passes.append(make_pass(name, **options))
        except ValueError as exc:     # an option value the pass rejects
            msg = str(exc)
            raise ValueError(msg if msg.startswith(f"{name}:") else f"pass {name!r}: {msg}") from None
        labels.append(name)
    return Pipeline(tuple(passes), labels=tuple(labels))


def format_timings(timings: Sequence[PassTiming]) -> str:
    """The ``--time-passes`` table."""
    total = sum(t.seconds for t in timings) or 1.0
    lines = [f"{'pass':<12} {'seconds':>8} {'share':>6} {'makespan after':>15}"]
    for t in timings:
        ms = "-" if t.makespan_us is None else f"{t.makespan_us / 1000:.3f} ms"
        lines.append(f"{t.name:<12} {t.seconds:>8.3f} {100 * t.seconds / total:>5.1f}% {ms:>15}")
    lines.append(f"{'total':<12} {sum(t.seconds for t in timings):>8.3f}")
    return "\n".join(lines)
