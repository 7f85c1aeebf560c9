import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pardnn.api import partition
from pardnn.baselines import mtopo
from pardnn.cluster import Cluster
from pardnn.errors import InfeasibleError, InputError
from pardnn.ir import GraphBuilder
from pardnn.machine import simulate

from ..helpers import consistent_pin, tiny


def chain(n=8, size=100):
    return tiny([(f"n{i}", 1, size) for i in range(n)], [(f"n{i}", f"n{i + 1}") for i in range(n - 1)])


def test_fills_devices_in_order_up_to_their_share():
    """A chain of 8 equal ops on 2 devices: the first half on 0, the second on 1."""
    g = chain()
    p = mtopo.place(g, Cluster.homogeneous(2))
    assert p.assignment.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]


def test_keeps_groups_whole_and_honours_pins():
    """
    v (group g, 500 B persistent) --> r (group g) --> x --> y (pinned to 0)
    """
    g = tiny([("v", 1, 0, {"persistent_bytes": 500, "colocation": "g"}), ("r", 1, 100, {"colocation": "g"}),
              ("x", 1, 100), ("y", 1, 100, {"pinned": 0})], [("v", "r"), ("r", "x"), ("x", "y")])
    p = mtopo.place(g, Cluster.homogeneous(2, memory_bytes=1000))
    a = dict(zip(g.names, p.assignment.tolist()))
    assert a["v"] == a["r"]
    assert a["y"] == 0
    assert simulate(g, Cluster.homogeneous(2, memory_bytes=1000), p).feasible


def test_partition_reports_a_provably_impossible_capacity():
    g = tiny([("v", 1, 0, {"persistent_bytes": 900})], [])
    with pytest.raises(InfeasibleError, match="node 'v' alone holds 900 B .* 400 bytes short") as info:
        partition(g, Cluster.homogeneous(2, memory_bytes=500))
    assert info.value.short_bytes == 400


def test_partition_rejects_pins_beyond_the_cluster():
    g = tiny([("v", 1, 0, {"pinned": 5})], [])
    with pytest.raises(InputError, match="pinned to device 5, but the cluster has 2 devices"):
        partition(g, Cluster.homogeneous(2))


@st.composite
def grouped_graphs(draw):
    n = draw(st.integers(2, 30))
    b = GraphBuilder("r")
    group_pin: dict = {}
    for i in range(n):
        grp = draw(st.sampled_from([None, None, "g1", "g2"]))
        b.add_node(f"n{i}", time_us=draw(st.integers(0, 9)), output_bytes=draw(st.integers(0, 300)),
                   persistent_bytes=draw(st.sampled_from([0, 0, 200])), colocation=grp,
                   pinned=consistent_pin(group_pin, grp, draw(st.sampled_from([None] * 6 + [0, 1]))))
    for j in range(1, n):
        for i in draw(st.lists(st.integers(0, j - 1), max_size=2, unique=True)):
            b.add_edge(f"n{i}", f"n{j}")
    return b.build()


@settings(max_examples=150, deadline=None)
@given(grouped_graphs(), st.integers(2, 4))
def test_every_node_placed_and_groups_together(g, k):
    p = mtopo.place(g, Cluster.homogeneous(k))
    assert p.assignment.shape == (g.num_nodes,)
    assert ((p.assignment >= 0) & (p.assignment < k)).all()
    for members in g.groups:
        assert len(set(p.assignment[members].tolist())) <= 1
    pinned = np.flatnonzero(g.pinned >= 0)
    assert (p.assignment[pinned] == g.pinned[pinned]).all()
    assert mtopo.place(g, Cluster.homogeneous(k)).same_as(p)   # deterministic
