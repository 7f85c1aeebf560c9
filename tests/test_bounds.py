"""`pardnn.bounds.makespan_lower_bound`: never above any placement's simulated step time, and tighter than
max(critical path, work / K) where a graph's work is not spread evenly along it."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from pardnn.bounds import _ramp_max, how_far_above, makespan_lower_bound
from pardnn.cluster import Cluster, Device, Link
from pardnn.ir import GraphBuilder, load_graph
from pardnn.machine import simulate

from .conftest import SAMPLES


def _random_dag(rng: np.random.Generator, n: int, p_edge: float, *, units: bool = False, pins: int = 0):
    b = GraphBuilder("random")
    for i in range(n):
        t = 0.0 if rng.random() < 0.1 else float(rng.integers(1, 40))
        kw = {}
        if units and rng.random() < 0.3:
            kw["colocation"] = f"u{int(rng.integers(0, 2))}"
        if pins and rng.random() < 0.2:
            kw["pinned"] = int(rng.integers(0, pins))
        b.add_node(f"n{i}", time_us=t, output_bytes=int(rng.integers(0, 5000)), **kw)
    for i, j in itertools.combinations(range(n), 2):
        if rng.random() < p_edge:
            b.add_edge(f"n{i}", f"n{j}")
    return b.build()


def _cluster(rng: np.random.Generator, k: int, *, free_links: bool) -> Cluster:
    speeds = [float(s) for s in rng.choice([0.5, 1.0, 1.0, 2.0], size=k)]
    devs = tuple(Device(f"d{i}", None, s) for i, s in enumerate(speeds))
    if free_links:     # transfers cost (almost) nothing: the bound is then as close to a plan as it gets
        return Cluster(devs, 0.0, 1e12)
    return Cluster(devs, float(rng.integers(0, 30)), float(rng.integers(10, 1000)))


@pytest.mark.parametrize("seed", range(40))
def test_no_placement_beats_the_bound(seed):
    """Every placement of a random graph of 6-7 ops on 1-3 devices (all of them, simulated) takes at least
    the bound: the simulator's best placement is no faster than the best schedule, which the bound is
    under. Free links (latency 0) leave the bound no slack from communication."""
    rng = np.random.default_rng(seed)
    k = int(rng.integers(1, 4))
    g = _random_dag(rng, int(rng.integers(6, 8)), float(rng.choice([0.15, 0.3, 0.6])),
                    units=seed % 3 == 0, pins=k if seed % 4 == 1 else 0)
    cluster = _cluster(rng, k, free_links=seed % 2 == 0)
    lb = makespan_lower_bound(g, cluster)
    best = np.inf
    for dev in itertools.product(range(k), repeat=g.num_nodes):
        s = simulate(g, cluster, np.array(dev, dtype=np.int64))
        if not s.broken_rules:
            best = min(best, s.makespan_us)
    assert np.isfinite(best)
    assert lb.value_us <= best * (1 + 1e-9) + 1e-9, (lb, best)


def test_the_bound_is_reached_where_a_plan_reaches_it():
    """Two chains of 3 and 1 us: 3 us on two devices (the critical path), 4 us on one (the work); a fast
    device halves both."""
    b = GraphBuilder("two")
    for n, t in [("a", 1), ("b", 2), ("c", 1)]:
        b.add_node(n, time_us=t)
    b.add_edge("a", "b")
    g = b.build()
    assert makespan_lower_bound(g, Cluster.homogeneous(2)).value_us == 3.0
    assert makespan_lower_bound(g, Cluster.homogeneous(1)).value_us == 4.0
    fast = Cluster((Device("slow", None, 1.0), Device("fast", None, 2.0)))
    lb = makespan_lower_bound(g, fast)
    assert lb.critical_path_us == 1.5 and lb.work_us == 4.0 / 3.0
    assert simulate(g, fast, np.array([1, 1, 0])).makespan_us >= lb.value_us


def test_the_energy_bound_counts_a_narrow_start():
    """A chain of 10 ops of 10 us, then 20 independent ops of 10 us, on 4 devices: max(critical path 110,
    work / 4 = 75) = 110, but after the chain's 100 us the 20 ops need 50 us more on 4 devices: 150, which
    the simulator reaches."""
    b = GraphBuilder("narrow")
    for i in range(10):
        b.add_node(f"c{i}", time_us=10.0)
        if i:
            b.add_edge(f"c{i - 1}", f"c{i}")
    for j in range(20):
        b.add_node(f"w{j}", time_us=10.0)
        b.add_edge("c9", f"w{j}", bytes=0)
    g = b.build()
    cluster = Cluster.homogeneous(4, latency_us=0.0)
    lb = makespan_lower_bound(g, cluster)
    assert (lb.critical_path_us, lb.work_us) == (110.0, 75.0)
    assert lb.energy_us == pytest.approx(150.0) and lb.binding == "energy"
    dev = np.r_[np.zeros(10, dtype=np.int64), np.arange(20) % 4]
    assert simulate(g, cluster, dev).makespan_us == pytest.approx(150.0)


def test_the_energy_bound_counts_a_narrow_end():
    """Backwards: 20 independent ops of 10 us feed a chain of 10 ops of 10 us, on 4 devices. The chain
    cannot start before the 20 ops are done, which takes 50 us on 4 devices: 150, which the simulator
    reaches (the tails' bound; heads alone give 110)."""
    b = GraphBuilder("narrow-end")
    for j in range(20):
        b.add_node(f"w{j}", time_us=10.0)
    for i in range(10):
        b.add_node(f"c{i}", time_us=10.0)
        b.add_edge(f"c{i - 1}" if i else "w0", f"c{i}", bytes=0)
    for j in range(1, 20):
        b.add_edge(f"w{j}", "c0", bytes=0)
    g = b.build()
    cluster = Cluster.homogeneous(4, latency_us=0.0)
    lb = makespan_lower_bound(g, cluster)
    assert (lb.critical_path_us, lb.work_us) == (110.0, 75.0)
    assert lb.energy_us == pytest.approx(150.0) and lb.binding == "energy"
    dev = np.r_[np.arange(20) % 4, np.zeros(10, dtype=np.int64)]
    assert simulate(g, cluster, dev).makespan_us == pytest.approx(150.0)


@pytest.mark.parametrize("pin, expected", [(0, 11.0), (1, 5.5)])
def test_a_pinned_op_takes_its_group_to_its_device_at_that_speed(pin, expected):
    """A 1 us op pinned to device ``pin`` is grouped with a 10 us op; a free 4 us op beside them; devices of
    speed 1 and 2. The group's 11 us run on the pinned device (11 us at speed 1, 5.5 at speed 2): the
    bound, both as the work pinned there and as the group's own, which the placement with the free op on
    the other device reaches."""
    b = GraphBuilder("pinned")
    b.add_node("a", time_us=1.0, colocation="G", pinned=pin)
    b.add_node("b", time_us=10.0, colocation="G")
    b.add_node("c", time_us=4.0)
    g = b.build()
    cluster = Cluster((Device("slow", None, 1.0), Device("fast", None, 2.0)), 0.0, 1e12)
    lb = makespan_lower_bound(g, cluster)
    assert (lb.pinned_us, lb.unit_us, lb.work_us) == (expected, expected, 5.0)
    assert lb.value_us == expected
    s = simulate(g, cluster, np.array([pin, pin, 1 - pin]))
    assert not s.broken_rules and s.makespan_us == pytest.approx(expected)


@pytest.mark.parametrize("seed", range(20))
def test_the_sweep_finds_the_best_breakpoint(seed):
    """`_ramp_max` against the sum taken term by term at every breakpoint (0, each h, each h + r / smax)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    r = rng.choice([0.0, 1.0, 2.5, 10.0, 40.0], size=n)
    h = np.round(rng.random(n) * rng.choice([1.0, 50.0, 500.0]), int(rng.integers(0, 3)))
    smax, rate = float(rng.choice([0.5, 1.0, 3.0])), float(rng.choice([1.0, 2.5, 8.0]))
    points = np.concatenate(([0.0], h, h + r / smax))
    direct = max(s + np.minimum(np.maximum(r + smax * (h - s), 0.0), r).sum() / rate for s in points)
    assert _ramp_max(r, h, rate, smax) == pytest.approx(direct, rel=1e-12)


def test_a_group_runs_its_ops_one_after_another_between_its_head_and_tail():
    """A 100 us op, then a group of four independent 50 us ops, then a 100 us op, on 4 devices: the
    critical path is 250, but the group runs on one device, so 100 + 4 x 50 + 100 = 400, which the
    simulator reaches. Without the group the bound stays 250."""
    def graph(grouped: bool):
        b = GraphBuilder("group")
        b.add_node("a", time_us=100.0)
        for i in range(4):
            b.add_node(f"g{i}", time_us=50.0, colocation="G" if grouped else None)
            b.add_edge("a", f"g{i}", bytes=0)
        b.add_node("z", time_us=100.0)
        for i in range(4):
            b.add_edge(f"g{i}", "z", bytes=0)
        return b.build()

    cluster = Cluster.homogeneous(4, latency_us=0.0)
    lb = makespan_lower_bound(graph(True), cluster)
    assert lb.critical_path_us == 250.0 and lb.unit_us == 400.0 and lb.binding == "unit"
    assert simulate(graph(True), cluster, np.array([0, 1, 1, 1, 1, 2])).makespan_us == 400.0
    assert makespan_lower_bound(graph(False), cluster).value_us == 250.0


def test_a_group_bound_also_runs_backwards_from_the_tails():
    """A group of A (50 us, 100 us of work after it), B (50 us, 10 us before it, 90 after) and C (10 us,
    100 before it, none after). A and B run one after the other and both still have 90 us or more to go:
    190, which the simulator reaches; from the heads the group gives only 110."""
    b = GraphBuilder("tails")
    for n, t, grp in [("pre10", 10, None), ("pre100", 100, None), ("A", 50, "G"), ("B", 50, "G"), ("C", 10, "G"),
                      ("postA", 100, None), ("postB", 90, None)]:
        b.add_node(n, time_us=float(t), colocation=grp)
    for s_, d_ in [("pre10", "B"), ("pre100", "C"), ("A", "postA"), ("B", "postB")]:
        b.add_edge(s_, d_, bytes=0)
    g = b.build()
    cluster = Cluster.homogeneous(4, latency_us=0.0)
    lb = makespan_lower_bound(g, cluster)
    assert lb.unit_us == 190.0 and lb.value_us == 190.0
    assert simulate(g, cluster, np.array([1, 2, 0, 0, 0, 1, 2])).makespan_us == 190.0


def test_a_chain_of_groups_costs_the_sum_of_their_work():
    """Two loops in a row, as stacked recurrent layers: a group of four independent 50 us ops, then a join,
    then a second such group, then the end, on 4 devices. The critical path is 50 + 10 + 50 + 10 = 120 and
    the larger group bound B's head 60, its work 200 and its tail 10; each group runs on one device, one op
    at a time, so B cannot start before 200 + 10: 200 + 10 + 200 + 10 = 420, which the simulator reaches."""
    b = GraphBuilder("loops")
    for loop in ("A", "B"):
        for i in range(4):
            b.add_node(f"{loop}{i}", time_us=50.0, colocation=loop)
        b.add_node(f"{loop}_exit", time_us=10.0)
        for i in range(4):
            b.add_edge(f"{loop}{i}", f"{loop}_exit", bytes=0)
    for i in range(4):
        b.add_edge("A_exit", f"B{i}", bytes=0)
    g = b.build()
    cluster = Cluster.homogeneous(4, latency_us=0.0)
    lb = makespan_lower_bound(g, cluster)
    assert lb.critical_path_us == 120.0 and lb.unit_us == 270.0
    assert lb.chain_us == 420.0 and lb.binding == "unit chain"
    assert simulate(g, cluster, np.array([0, 0, 0, 0, 1, 2, 2, 2, 2, 3])).makespan_us == 420.0


def _group_then_join():
    """Three independent 10 us ops in one group, then a 10 us op after them all: a chain of 40 us."""
    b = GraphBuilder("group-then-join")
    b.add_node("z", time_us=10.0)
    for i in range(3):
        b.add_node(f"n{i}", time_us=10.0, colocation="G")
        b.add_edge(f"n{i}", "z", bytes=0)
    return b.build()


def test_the_chain_bound_follows_no_op_when_told_none(monkeypatch):
    """``CHAIN_BITS = 0`` (how a benchmark takes the bound as it was before) gives 0, not an error."""
    import pardnn.bounds as bounds

    g = _group_then_join()
    assert bounds._lower_bound(g, Cluster.homogeneous(2)).chain_us == 40.0
    monkeypatch.setattr(bounds, "CHAIN_BITS", 0)
    assert bounds._lower_bound(g, Cluster.homogeneous(2)).chain_us == 0.0


@pytest.mark.parametrize("seed", range(40))
def test_no_placement_beats_the_bound_of_many_groups(seed):
    """As `test_no_placement_beats_the_bound`, every op in one of three groups or none, denser graphs, on 2
    devices: the unit-chain bound's sums over each group's ancestors must stay under every placement."""
    rng = np.random.default_rng(1000 + seed)
    b = GraphBuilder("groups")
    n = int(rng.integers(6, 9))
    for i in range(n):
        grp = rng.choice(["a", "b", "c", ""], p=[0.3, 0.3, 0.2, 0.2])
        b.add_node(f"n{i}", time_us=float(rng.integers(0, 30)), output_bytes=int(rng.integers(0, 3000)),
                   colocation=str(grp) or None)
    for i, j in itertools.combinations(range(n), 2):
        if rng.random() < 0.35:
            b.add_edge(f"n{i}", f"n{j}")
    g = b.build()
    k = 2
    cluster = _cluster(rng, k, free_links=seed % 2 == 0)
    lb = makespan_lower_bound(g, cluster)
    best = min((s.makespan_us for dev in itertools.product(range(k), repeat=n)
                for s in [simulate(g, cluster, np.array(dev, dtype=np.int64), memory=False)] if not s.broken_rules))
    assert lb.value_us <= best * (1 + 1e-9) + 1e-9, (lb, best)


def test_no_placement_beats_a_chain_of_groups_bound_with_pins_and_speeds():
    """The review: in the random graphs above the chain bound is never the largest alone. Here each case is
    a chain of two groups of 2-3 parallel ops joined by single ops (as stacked loops), with random times,
    devices of random speeds and, in some, the second group pinned: every placement on 2 devices simulated,
    none below the bound, and the chain bound the largest in most cases."""
    binding = 0
    for seed in range(30):
        rng = np.random.default_rng(5000 + seed)
        b = GraphBuilder("chain")
        pin = int(rng.integers(0, 2)) if seed % 3 == 0 else None
        b.add_node("start", time_us=float(rng.integers(0, 10)))
        prev = "start"
        for grp in ("A", "B"):
            width = int(rng.integers(2, 4))
            for i in range(width):
                b.add_node(f"{grp}{i}", time_us=float(rng.integers(1, 40)), colocation=grp,
                           pinned=pin if grp == "B" else None)
                b.add_edge(prev, f"{grp}{i}", bytes=int(rng.integers(0, 2000)))
            b.add_node(f"{grp}_join", time_us=float(rng.integers(0, 10)))
            for i in range(width):
                b.add_edge(f"{grp}{i}", f"{grp}_join", bytes=int(rng.integers(0, 2000)))
            prev = f"{grp}_join"
        g = b.build()
        cluster = _cluster(rng, 2, free_links=seed % 2 == 0)
        lb = makespan_lower_bound(g, cluster)
        best = min((s.makespan_us for dev in itertools.product(range(2), repeat=g.num_nodes)
                    for s in [simulate(g, cluster, np.array(dev, dtype=np.int64), memory=False)]
                    if not s.broken_rules))
        assert lb.value_us <= best * (1 + 1e-9) + 1e-9, (seed, lb, best)
        binding += lb.chain_us > max(lb.critical_path_us, lb.work_us, lb.unit_us, lb.pinned_us, lb.energy_us)
    assert binding >= 15, binding


def test_the_chain_bound_is_computed_once_for_equal_op_times(monkeypatch):
    """`pardnn plan` asks for the bound at every device count: on equal devices the chain is the same, and
    is kept on the graph; other speeds compute it again (the review: 0.7 s per count at 200k ops)."""
    import pardnn.bounds as bounds

    g = _group_then_join()
    calls = []
    real = bounds._chain_bound
    monkeypatch.setattr(bounds, "_chain_bound", lambda *a: calls.append(1) or real(*a))
    assert [makespan_lower_bound(g, Cluster.homogeneous(k)).chain_us for k in (1, 2, 4, 8)] == [40.0] * 4
    assert len(calls) == 1
    fast = Cluster.homogeneous(2, speed=2.0)
    assert makespan_lower_bound(g, fast).chain_us == 20.0 and len(calls) == 2


def _fan_and_group():
    """r (1 us) feeds a and b (1 us each, no bytes); x and y (0.1 us) form a group apart from them."""
    b = GraphBuilder("fan-and-group")
    for n, t in [("r", 1.0), ("a", 1.0), ("b", 1.0), ("x", 0.1), ("y", 0.1)]:
        b.add_node(n, time_us=t, colocation="G" if n in "xy" else None)
    b.add_edge("r", "a", bytes=0)
    b.add_edge("r", "b", bytes=0)
    return b.build()


@pytest.mark.parametrize("order", [(1, 2), (2, 1), (1, 2, 4, 1), (4, 1, 2)])
def test_the_kept_chain_bound_is_that_of_the_cluster_asked(order):
    """The chain kept on the graph is used again only for the same heads and tails: one device prices no
    transfer, so its tails differ from two devices' (the review: bounded on one device first, the same graph
    on two devices said 3.0 us where a plan of 2.0 us exists). Every order gives what a fresh graph gives."""
    g = _fan_and_group()
    for k in order:
        c = Cluster.homogeneous(k, latency_us=0.0)
        assert makespan_lower_bound(g, c) == makespan_lower_bound(_fan_and_group(), c), k
    two = Cluster.homogeneous(2, latency_us=0.0)
    assert makespan_lower_bound(g, two).value_us <= 2.0 + 1e-9
    plan = {"r": 0, "a": 0, "b": 1, "x": 1, "y": 1}
    assert simulate(g, two, np.array([plan[n] for n in g.names])).makespan_us <= 2.0 + 1e-9


def test_how_far_a_step_is_from_the_bound():
    assert how_far_above(100.0, 100.0) == "reaches it"
    assert how_far_above(103.2, 100.0) == "is 3.2% above it"
    assert how_far_above(50.0, 100.0) == "is below it: it breaks a pin or a colocation group"


@pytest.mark.parametrize("name", ["tf_resnet14", "tf_lstm_4l", "pardnn_vgg16"])
def test_a_sample_graph_bound_is_under_its_plans(name):
    """On shipped samples the bound is at least max(critical path, work / K) and at most the step time of
    every device's own order of the ops and of random placements."""
    g = load_graph(SAMPLES / f"{name}.json.gz")
    rng = np.random.default_rng(1)
    for k in (1, 2, 4):
        cluster = Cluster.homogeneous(k)
        lb = makespan_lower_bound(g, cluster)
        assert lb.value_us >= max(lb.critical_path_us, g.time_us.sum() / k) * (1 - 1e-12)
        for _ in range(3):
            assert simulate(g, cluster, rng.integers(0, k, g.num_nodes)).makespan_us >= lb.value_us * (1 - 1e-12)


def test_an_empty_graph_has_bound_zero():
    g = GraphBuilder("empty").build()
    assert makespan_lower_bound(g, Cluster.homogeneous(2)).value_us == 0.0


def test_partition_simulate_and_report_show_the_bound(tmp_path):
    """The commands print the bound and how far the plan is above it; on the GNMT sample at K=4 the plan
    reaches it (its critical path), on ResNet it is above it; `--json` and the report carry the number."""
    import json

    from click.testing import CliRunner

    from pardnn.cli import cli

    def run(*args):
        return CliRunner().invoke(cli, [str(a) for a in args])

    gnmt, resnet = SAMPLES / "pipedream_gnmt.json.gz", SAMPLES / "tf_resnet14.json.gz"
    r = run("partition", gnmt, "--devices", 4, "-o", tmp_path / "g.json")
    assert r.exit_code == 0, r.output
    assert "no placement on these devices is faster; this one reaches it" in r.output
    r = run("partition", resnet, "--devices", 2, "--refine-evals", 0, "-o", tmp_path / "r.json", "--json",
            "--report", tmp_path / "r.html")
    out = json.loads(r.stdout)
    lb = makespan_lower_bound(load_graph(resnet), Cluster.homogeneous(2))
    assert out["lower_bound_us"] == lb.value_us < out["makespan_us"]
    assert f'data-key="lower_bound_us" data-value="{lb.value_us!r}"' in (tmp_path / "r.html").read_text()
    r = run("simulate", resnet, tmp_path / "r.json")
    pct = 100 * (out["makespan_us"] / lb.value_us - 1)
    assert f"this one is {pct:.1f}% above it" in r.output
    # a placement that splits a colocation group can beat the bound, and the line says why
    b = GraphBuilder("split")
    b.add_node("a", time_us=10.0, colocation="G")
    b.add_node("b", time_us=10.0, colocation="G")
    from pardnn.ir import save_graph
    save_graph(b.build(), tmp_path / "split.json")
    (tmp_path / "split.place").write_text("a 0\nb 1\n")
    r = run("simulate", tmp_path / "split.json", tmp_path / "split.place", "--devices", 2)
    assert r.exit_code == 4 and "this one is below it: it breaks a pin or a colocation group" in r.output


def test_the_last_bound_is_kept_for_the_same_cluster():
    """A second call with the same cluster object hands out the same bound without working it out again; a
    new cluster gets its own."""
    g = load_graph(SAMPLES / "tf_lstm_4l.json.gz")
    c = Cluster.homogeneous(2)
    first = makespan_lower_bound(g, c)
    assert makespan_lower_bound(g, c) is first
    assert makespan_lower_bound(g, Cluster.homogeneous(4)).value_us < first.value_us
    again = makespan_lower_bound(g, c)
    assert again == first and again is not first
    assert makespan_lower_bound(g, Cluster.homogeneous(2, speed=2.0)).value_us == first.value_us / 2


def _fork_join(branch_us: float = 10.0, bytes_: int = 0):
    """a (1 us) feeds two parallel ops of ``branch_us`` that join at d (1 us)."""
    b = GraphBuilder("fork-join")
    for n, t in [("a", 1.0), ("b", branch_us), ("c", branch_us), ("d", 1.0)]:
        b.add_node(n, time_us=t)
    for s, d in [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")]:
        b.add_edge(s, d, bytes=bytes_)
    return b.build()


def test_a_join_costs_a_transfer_or_the_work_of_its_inputs_on_one_device():
    """The two branches of 10 us can run at once only on two devices, and then one branch's output crosses
    to the join: 25 us at least. So the join starts no earlier than 1 + 10 + 10 (both on its device, one
    after the other): 22 us, which one device reaches. With free transfers the critical path, 12 us."""
    g = _fork_join()
    priced, free = Cluster.homogeneous(2), Cluster.homogeneous(2, latency_us=0.0, bandwidth_bytes_per_us=1e12)
    lb = makespan_lower_bound(g, priced)
    assert lb.critical_path_us == 22.0 and lb.binding == "critical path"
    best = min(simulate(g, priced, np.array(dev, dtype=np.int64)).makespan_us
               for dev in itertools.product(range(2), repeat=4))
    assert best == 22.0
    assert makespan_lower_bound(g, free).value_us == 12.0
    # a transfer cheaper than the branch: 1 + 10 + 3 (latency) + 1 = 15, which two devices reach (a and c on
    # one, b and d on the other: b waits 3 us for a's output, c's crosses while b runs)
    cheap = Cluster.homogeneous(2, latency_us=3.0)
    assert makespan_lower_bound(g, cheap).value_us == 15.0
    assert simulate(g, cheap, np.array([1, 0, 1, 0])).makespan_us == 15.0
    # the bytes of the edge count: 1200 bytes at 120 bytes/us add 10 us to each crossing
    slow = Cluster.homogeneous(2, latency_us=3.0, bandwidth_bytes_per_us=120.0)
    assert makespan_lower_bound(_fork_join(bytes_=1200), slow).value_us == 22.0


def test_a_join_prices_the_group_and_the_pins_of_its_inputs():
    """A branch in the join's group is always on its device; a branch pinned to another device than the
    join always crosses; on one device nothing crosses."""
    b = GraphBuilder("pinned-join")
    b.add_node("a", time_us=1.0)
    b.add_node("b", time_us=10.0, pinned=0)
    b.add_node("c", time_us=10.0, pinned=1)
    b.add_node("d", time_us=1.0, pinned=0)
    for s, d in [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")]:
        b.add_edge(s, d, bytes=0)
    g = b.build()
    cluster = Cluster.homogeneous(2)
    lb = makespan_lower_bound(g, cluster)
    assert lb.critical_path_us == 1.0 + 10.0 + 25.0 + 1.0    # c crosses to d
    best = min(s.makespan_us for dev in itertools.product(range(2), repeat=4)
               for s in [simulate(g, cluster, np.array(dev, dtype=np.int64))] if not s.broken_rules)
    assert best == 52.0     # one link carries a's output and then c's: the bound prices no link's queue
    assert makespan_lower_bound(_fork_join(), cluster).critical_path_us == 22.0      # the same without pins
    assert makespan_lower_bound(_fork_join(), Cluster.homogeneous(1)).value_us == 22.0


def _link_cluster(rng: np.random.Generator, k: int, kind: int) -> Cluster:
    """Devices of random speeds, and links alike (kind 0), each pair its own (1), or transfers that also run
    on their devices (2, the endpoint extension)."""
    speeds = [float(s) for s in rng.choice([0.5, 1.0, 1.0, 2.0], size=k)]
    devs = tuple(Device(f"d{i}", None, s) for i, s in enumerate(speeds))
    lat, bw = float(rng.integers(0, 30)), float(rng.integers(10, 1000))
    if kind == 1:
        links = tuple(tuple(None if a == c else Link(float(rng.integers(0, 40)), float(rng.integers(10, 2000)))
                            for c in range(k)) for a in range(k))
        return Cluster(devs, lat, bw, links=links)
    if kind == 2:
        return Cluster(devs, lat, bw, transfer_cpu_us=float(rng.integers(0, 10)),
                       transfer_cpu_bytes_per_us=float(rng.integers(50, 500)))
    return Cluster(devs, lat, bw)


def test_no_placement_beats_the_priced_bound():
    """Random graphs of 4-7 ops with data edges of random bytes and control edges, some in groups or
    pinned, on 1-3 devices of random speeds, links alike, per pair, or with the endpoint extension: every
    placement simulated, none below the bound; and in many of them the bound is above the one with free
    transfers (so this checks the priced part, not only the others)."""
    priced = 0
    cases = 0
    for seed in range(150):
        rng = np.random.default_rng(7000 + seed)
        k = int(rng.integers(1, 4))
        b = GraphBuilder("priced")
        n = int(rng.integers(4, 8))
        for i in range(n):
            kw = {}
            if seed % 3 == 0 and rng.random() < 0.3:
                kw["colocation"] = f"u{int(rng.integers(0, 2))}"
            elif seed % 4 == 1 and rng.random() < 0.2:
                kw["pinned"] = int(rng.integers(0, k))
            b.add_node(f"n{i}", time_us=0.0 if rng.random() < 0.1 else float(rng.integers(1, 40)),
                       output_bytes=int(rng.integers(0, 5000)), **kw)
        for i, j in itertools.combinations(range(n), 2):
            if rng.random() < float(rng.choice([0.2, 0.4, 0.6])):
                if rng.random() < 0.25:
                    b.add_edge(f"n{i}", f"n{j}", control=True)
                else:
                    b.add_edge(f"n{i}", f"n{j}", bytes=int(rng.integers(0, 20000)))
        g = b.build()
        cluster = _link_cluster(rng, k, seed % 3)
        lb = makespan_lower_bound(g, cluster).value_us
        best = min(s.makespan_us for dev in itertools.product(range(k), repeat=n)
                   for s in [simulate(g, cluster, np.array(dev, dtype=np.int64), memory=False)]
                   if not s.broken_rules)
        assert lb <= best * (1 + 1e-9) + 1e-9, (seed, lb, best)
        cases += 1
        priced += lb > makespan_lower_bound(g, Cluster(cluster.devices, 0.0, 1e15)).value_us * (1 + 1e-9)
    assert cases == 150 and priced >= 30, priced


def test_a_join_of_many_inputs_is_scheduled_exactly_up_to_a_limit(monkeypatch):
    """An op of 50 inputs of 1 us each (their heads 0): all on its device take 50 us, any one elsewhere
    costs 25; past `JOIN_EXACT` inputs the first ones' schedule stands for the rest (smaller, still sound)."""
    import pardnn.bounds as bounds

    b = GraphBuilder("wide-join")
    b.add_node("z", time_us=1.0)
    for i in range(50):
        b.add_node(f"x{i}", time_us=1.0)
        b.add_edge(f"x{i}", "z", bytes=0)
    g = b.build()
    assert bounds._lower_bound(g, Cluster.homogeneous(4)).critical_path_us == 1.0 + 25.0 + 1.0
    big = Cluster.homogeneous(4, latency_us=500.0)
    assert bounds._lower_bound(g, big).critical_path_us == 50.0 + 1.0
    monkeypatch.setattr(bounds, "JOIN_EXACT", 10)
    assert bounds._lower_bound(g, big).critical_path_us == 10.0 + 1.0
