import numpy as np

from pardnn.analysis import (bottom_levels, critical_path, top_levels, topological_levels, topological_order,
                             topologically_sorted)

from .helpers import tiny


def diamond():
    """
        a(1)
       /    \\
     b(2)   c(5)
       \\    /
        d(1)
    """
    return tiny([("a", 1), ("b", 2), ("c", 5), ("d", 1)], [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")])


def test_levels_and_paths():
    g = diamond()
    assert topological_levels(g).tolist() == [0, 1, 1, 2]
    assert top_levels(g, g.time_us).tolist() == [0, 1, 1, 6]
    assert bottom_levels(g, g.time_us).tolist() == [7, 3, 6, 1]
    length, path = critical_path(g)
    assert length == 7 and [g.names[v] for v in path] == ["a", "c", "d"]


def test_edge_weights_count_in_paths():
    g = diamond()
    ew = np.array([0, 0, 10, 0], dtype=float)   # a->b, a->c, b->d, c->d
    length, path = critical_path(g, edge_w=ew)
    assert length == 14 and [g.names[v] for v in path] == ["a", "b", "d"]


def test_topological_order_keeps_file_order_when_it_can():
    g = tiny([("x", 1), ("a", 1), ("y", 1)], [("y", "x")])
    assert [g.names[v] for v in topological_order(g)] == ["a", "y", "x"]
    h = topologically_sorted(g)
    assert h.names == ("a", "y", "x")
    assert topologically_sorted(h) is h
