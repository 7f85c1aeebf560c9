"""`pardnn.api` itself: one entry for every method, options reaching the pipeline, the capacity search."""

from __future__ import annotations

import numpy as np
import pytest

from pardnn import (Cluster, InfeasibleError, InputError, Placement, evaluate, load_placement, partition, save_cluster,
                    save_graph, save_placement, simulate, single_device_peak)
from pardnn.api import capacity_lower_bound_violation, smallest_feasible_scale
from pardnn.bench import place_and_score
from pardnn.methods import DEFAULT_METHOD, METHODS, method_names
from pardnn.partitioner import PardnnOptions

from .helpers import tiny


def diamond(**extra):
    """a(10) -> b(30), c(30) -> d(10); every output 1000 B; ``extra`` adds node fields by name."""
    nodes = [(n, t, 1000, extra.get(n, {})) for n, t in (("a", 10), ("b", 30), ("c", 30), ("d", 10))]
    return tiny(nodes, [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")])


def test_every_method_is_one_registry_entry_and_places_validly():
    g, c = diamond(), Cluster.homogeneous(2)
    assert method_names()[0] == DEFAULT_METHOD and set(method_names()) == set(METHODS)
    for name in METHODS:
        plan, sched = partition(g, c, method=name)
        assert plan.num_devices == 2 and sched.feasible
        assert sched.makespan_us == simulate(g, c, plan).makespan_us
        assert plan.predicted["makespan_us"] == round(sched.makespan_us, 6)


def test_the_bench_scores_exactly_what_partition_returns():
    g, c = diamond(), Cluster.homogeneous(2, memory_bytes=10_000)
    for name in ("pardnn", "heft", "m-topo"):
        _, sched = partition(g, c, method=name)
        makespan, feasible, frac, seconds, err = place_and_score(g, c, name)
        assert (makespan, feasible, err) == (sched.makespan_us, True, "") and seconds > 0
        assert frac == pytest.approx(float(np.max(sched.peak_bytes / c.capacity)))


def test_options_reach_the_pipeline_and_baselines_take_none():
    g, c = diamond(), Cluster.homogeneous(2)
    plan, _ = partition(g, c, options=PardnnOptions(pipeline="slice,map"))
    assert plan.meta["passes"] == ["slice", "map"] and "pass_seconds" not in plan.meta   # the same bytes each run
    timings: list = []
    partition(g, c, options=PardnnOptions(refine_evals=0), timings=timings)
    assert [t.name for t in timings] == ["slice", "map", "seed", "memory", "best"]
    with pytest.raises(InputError, match="method 'heft' takes no options"):
        partition(g, c, method="heft", options=PardnnOptions())
    with pytest.raises(InputError, match="unknown method 'nope'"):
        partition(g, c, method="nope")
    with pytest.raises(InputError, match="unknown method 'bogus'"):      # was a KeyError
        smallest_feasible_scale(g, c, method="bogus")


def test_an_unknown_effort_is_named_when_the_options_are_made():
    """A library trial: ``PardnnOptions(effort="hard")`` reached `partition` and came out as ``KeyError: 'hard'``."""
    with pytest.raises(ValueError, match="unknown effort 'hard'; choose fast, default, best"):
        PardnnOptions(effort="hard")


@pytest.mark.parametrize("field, value", [("refine_evals", -1), ("refine_evals", 2.5), ("refine_evals", True),
                                          ("comm_weight", -1.0), ("comm_weight", float("nan")),
                                          ("comm_weight", float("inf")), ("comm_weight", "1")])
def test_options_out_of_range_are_refused_naming_the_field(field, value):
    """``refine_evals=-1`` and ``comm_weight=-1`` or NaN were taken and partitioned with some budget or weight;
    the command line refuses them (``--refine-evals`` is ``IntRange(min=0)``)."""
    with pytest.raises(ValueError, match=f"^{field} must be"):
        PardnnOptions(**{field: value})
    PardnnOptions(refine_evals=0, comm_weight=0)     # the edges are valid


def test_pins_outside_the_cluster_are_bad_input():
    g = diamond(b={"pinned": 3})
    with pytest.raises(InputError, match=r"node 'b' is pinned to device 3, but the cluster has 2 devices"):
        partition(g, Cluster.homogeneous(2))


def test_an_impossible_fit_is_reported_before_placing_with_the_bytes_short():
    g = diamond(b={"persistent_bytes": 5000, "colocation": "w"}, c={"persistent_bytes": 5000, "colocation": "w"})
    c = Cluster.homogeneous(2, memory_bytes=8000)
    reason, short = capacity_lower_bound_violation(g, c)
    assert "colocation group 'w' alone holds" in reason and short == 2000
    with pytest.raises(InfeasibleError) as err:
        partition(g, c)
    assert err.value.short_bytes == 2000


def test_the_capacity_search_returns_a_scale_that_fits_and_a_smaller_one_does_not():
    g = diamond(b={"persistent_bytes": 2000}, c={"persistent_bytes": 2000}, a={"persistent_bytes": 2000})
    c = Cluster.homogeneous(2, memory_bytes=3500)        # two of the three 2000-byte ops must share a device
    assert not partition(g, c, require_feasible=False)[1].feasible
    scale = smallest_feasible_scale(g, c)
    assert scale is not None and scale > 1.0

    def fits(s: float) -> bool:
        scaled = c.with_memory(int(np.ceil(3500 * s)))
        return partition(g, scaled, require_feasible=False, search_capacity=False)[1].feasible

    assert fits(scale) and not fits(1.0)
    with pytest.raises(InfeasibleError) as err:
        partition(g, c)
    assert err.value.min_capacity_bytes == int(np.ceil(3500 * scale))
    # the message gives the exact flag: a rounded figure may not fit (feasibility is not monotonic in memory)
    assert f"(--memory {err.value.min_capacity_bytes}, " in str(err.value)


def test_the_capacity_search_names_one_memory_per_device_where_they_differ():
    g = diamond(b={"persistent_bytes": 2000}, c={"persistent_bytes": 2000}, a={"persistent_bytes": 2000})
    c = Cluster.homogeneous(2).with_memory([3500, 3000])
    with pytest.raises(InfeasibleError) as err:
        partition(g, c)
    scale = smallest_feasible_scale(g, c)
    assert f"(--memory {int(np.ceil(3500 * scale))},{int(np.ceil(3000 * scale))}, " in str(err.value)


def test_a_placement_made_twice_through_the_api_saves_the_same_bytes(tmp_path):
    from pardnn.placement import save_placement

    g, c = diamond(), Cluster.homogeneous(2)
    paths = []
    for i in range(2):
        timings: list = []
        plan, _ = partition(g, c, timings=timings)
        assert [t.name for t in timings] == plan.meta["passes"]      # the times are the caller's, not the file's
        paths.append(save_placement(plan, g, tmp_path / f"p{i}.json") or tmp_path / f"p{i}.json")
    assert paths[0].read_bytes() == paths[1].read_bytes()


@pytest.mark.parametrize("call", ["partition", "simulate", "evaluate", "smallest_feasible_scale"])
def test_a_path_or_a_count_where_a_graph_or_cluster_goes_is_a_type_error_that_says_what(call):
    """A library trial: ``partition("g.json.gz", c)`` said ``'str' object has no attribute 'pinned'``;
    ``smallest_feasible_scale`` raised a PassError of an AttributeError, and `evaluate` said ``simulate:``."""
    g, c = diamond(), Cluster.homogeneous(2)
    zeros = np.zeros(4, dtype=np.int64)
    fn = {"partition": partition, "smallest_feasible_scale": smallest_feasible_scale,
          "simulate": lambda g, c: simulate(g, c, zeros), "evaluate": lambda g, c: evaluate(g, c, zeros)}[call]
    with pytest.raises(TypeError, match=rf"^{call}: the graph must be an OpGraph \(read the file with "
                                        r"pardnn.load_graph\(path\)\), got str"):
        fn("g.json.gz", c)
    with pytest.raises(TypeError, match=rf"^{call}: the cluster must be a Cluster \(Cluster.homogeneous\(k\)"):
        fn(g, 2)
    with pytest.raises(TypeError, match=rf"^{call}: the graph must be an OpGraph, got NoneType"):
        fn(None, c)


@pytest.mark.parametrize("call", ["single_device_peak", "save_graph", "save_placement", "load_placement",
                                  "save_cluster"])
def test_the_file_and_peak_functions_say_the_same_for_a_path_where_a_graph_or_cluster_goes(tmp_path, call):
    """``pardnn.single_device_peak("g.json")`` (and the savers and `load_placement`) raised AttributeError."""
    g, c = diamond(), Cluster.homogeneous(2)
    plan = Placement(np.zeros(4, dtype=np.int64), c.names, g.name)
    path = save_placement(plan, g, tmp_path / "p.json")
    out = tmp_path / "out.json"
    fn = {"single_device_peak": lambda x: single_device_peak(x), "save_graph": lambda x: save_graph(x, out),
          "save_placement": lambda x: save_placement(plan, x, out), "load_placement": lambda x: load_placement(path, x),
          "save_cluster": lambda x: save_cluster(x, out)}[call]
    if call == "save_cluster":
        with pytest.raises(TypeError, match=r"^save_cluster: the cluster must be a Cluster \(Cluster.homogeneous"):
            fn(2)
        fn(c)
    else:
        with pytest.raises(TypeError, match=rf"^{call}: the graph must be an OpGraph \(read the file with "
                                            r"pardnn.load_graph\(path\)\), got str"):
            fn("g.json")
        fn(g)
