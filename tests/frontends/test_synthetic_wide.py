"""The wide generator's invariants: the held-out sets freeze its output by checksum, so it must stay deterministic."""

import numpy as np

from pardnn.frontends.synthetic_wide import wide_config, wide_training_graph


def test_size_is_near_the_target_and_deterministic():
    for n in (3000, 10000):
        g = wide_training_graph(n, seed=1)
        assert 0.8 * n <= g.num_nodes <= 1.2 * n
    a, b = wide_training_graph(3000, seed=1), wide_training_graph(3000, seed=1)
    assert a.names == b.names and np.array_equal(a.time_us, b.time_us)
    assert np.array_equal(a.edge_src, b.edge_src) and np.array_equal(a.edge_dst, b.edge_dst)
    assert wide_config(3000, 0).towers != wide_config(3000, 1).towers     # the seed draws other towers


def test_looks_like_a_wide_training_step():
    g = wide_training_graph(4000, seed=1)
    phases = [x["phase"] for x in g.node_extra]
    assert {"forward", "backward", "optimizer"} == set(phases)
    assert np.all(g.edge_src < g.edge_dst)             # written in topological order: a DAG
    assert np.all(g.time_us > 0)
    for gid, members in enumerate(g.groups):           # a variable's group holds its read and its Adam update
        ops = {g.ops[v] for v in members}
        assert {"VarHandleOp", "ReadVariableOp", "ResourceApplyAdam"} <= ops, g.group_names[gid]
    experts = {n.split("/expert_")[1].split("/")[0] for n in g.names if "/expert_" in n}
    assert len(experts) >= 4                           # mixture-of-experts layers with experts side by side
    assert any(n.endswith("/concat") for n in g.names)          # inception-like branches, concatenated
    assert sum(n.endswith("/input/IteratorGetNext") for n in g.names) >= 2   # several towers
