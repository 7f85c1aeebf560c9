import numpy as np

from pardnn.frontends.synthetic import transformer_training_graph


def test_size_is_near_the_target_and_deterministic():
    for n in (2000, 10000):
        g = transformer_training_graph(n, seed=3)
        assert 0.8 * n <= g.num_nodes <= 1.2 * n
    a, b = transformer_training_graph(3000, seed=1), transformer_training_graph(3000, seed=1)
    assert a.names == b.names and np.array_equal(a.time_us, b.time_us)
    c = transformer_training_graph(3000, seed=2)
    assert not np.array_equal(a.time_us, c.time_us)


def test_looks_like_a_training_step():
    g = transformer_training_graph(4000)
    phases = [x["phase"] for x in g.node_extra]
    assert {"forward", "backward", "optimizer"} == set(phases)
    assert np.all(g.edge_src < g.edge_dst)             # written in topological order
    # every variable's group holds its read and its optimizer update
    for gid, members in enumerate(g.groups):
        ops = {g.ops[v] for v in members}
        assert {"VarHandleOp", "ReadVariableOp", "ResourceApplyAdam"} <= ops, g.group_names[gid]
    # backward ops read activations stashed by the forward pass
    fwd = np.array([p == "forward" for p in phases])
    stash = fwd[g.edge_src] & ~fwd[g.edge_dst] & (g.edge_bytes > 0)
    assert stash.sum() > 100
