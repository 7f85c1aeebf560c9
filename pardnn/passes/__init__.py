"""The partitioner's passes, by name: the registry a pipeline spec is read against.

A pass is a frozen dataclass in its own module of this package: a class-level
``name``, one field per option (each with a docstring), and
``__call__(g, cluster, state) -> PlanState`` (see `pardnn.pipeline.Pass`).
`PASSES` maps each name a pipeline spec may use to ``"module:Class"`` and the
option values that entry presets; modules are imported only when a pipeline
uses them. Adding a pass is one new module and one line here; it is then
usable from ``pardnn partition --pipeline`` and from `PardnnOptions.pipeline`
(docs/partitioner.md has a worked example).

==========  =====================================================================================
slice       ParDNN step 1.1: critical-path slicing into one primary path per device (`slicing`)
map         ParDNN step 1.2: level-aware mapping of the paths onto devices (`mapping`)
seed        list-scheduling plans (HEFT, ETF, link-contention aware), the simulated best kept (`seed`)
refine      ParDNN step 1.3: refinement on the simulated critical chain (`refine`)
memory      ParDNN step 2: move units off devices over their memory (`memory`)
refine-mem  refine after step 2: only moves that keep memory, only when step 2 changed the plan
fewer       the whole pipeline on the faster half of the devices, its plan a start (`fewer`)
rerun       the passes before it again at the default effort, its plan a start (`rerun`)
best        keep the best of the plan and every recorded start (`keep_best`)
==========  =====================================================================================
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Mapping

MAX_EVALS = 10**12
"""The largest simulation budget a pass or ``--refine-evals`` takes (a larger one overflowed the kernels'
64-bit counters, and would run for years)."""


@dataclass(frozen=True)
class PassEntry:
    """Where a pass lives, and the option values this name presets."""

    target: str
    """``"module:Class"``: a module of this package, or a full dotted module path."""
    preset: Mapping[str, Any] = field(default_factory=dict)
    summary: str = ""


PASSES: dict[str, PassEntry] = {
    "slice": PassEntry("slicing:Slice", summary="critical-path slicing"),
    "map": PassEntry("mapping:Map", summary="level-aware mapping of paths onto devices"),
    "seed": PassEntry("seed:Seed", summary="list-scheduling plans next to the incoming one, the best kept"),
    "refine": PassEntry("refine:Refine", summary="refinement on the simulated critical chain"),
    "memory": PassEntry("memory:FitMemory", summary="move units off devices over their memory"),
    "refine-mem": PassEntry("refine:Refine", {"respect_memory": True, "only_if_changed": True, "floor_share": 0.4,
                                              "first_share": 0.5},
                            summary="refine within memory, after a pass that changed the plan"),
    "fewer": PassEntry("fewer:Fewer", summary="the whole pipeline on the faster half of the devices, its plan a start"),
    "rerun": PassEntry("rerun:Rerun", summary="the passes before it again at another effort, its plan a start"),
    "best": PassEntry("keep_best:KeepBest", summary="never worse than any recorded start"),
}


def pass_class(name: str) -> type:
    """The class behind registry entry ``name`` (imported on first use); KeyError for an unknown name.

    A target's module is a module of this package, or a full dotted path (a pass kept elsewhere).
    """
    module, _, cls = PASSES[name].target.partition(":")
    return getattr(importlib.import_module(module if "." in module else f"{__name__}.{module}"), cls)


def make_pass(name: str, **options: Any):
    """An instance of pass ``name`` with its preset options, overridden by ``options``."""
    return pass_class(name)(**{**PASSES[name].preset, **options})
