"""The pardnn.graph reader's column-at-a-time path gives exactly what building node by node gives.

`graph_from_dict` reads whole columns when every field is ordinary and falls back to `GraphBuilder`,
node by node, otherwise. These tests pin that the two agree: the same graph for good input, and for
bad input the same error (the fallback's, which names the first bad field).
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

import pardnn.ir as ir
from pardnn.errors import GraphError
from pardnn.fileio import read_json
from pardnn.frontends.synthetic import transformer_training_graph
from pardnn.ir import graph_from_dict

SAMPLES = sorted(Path(__file__).resolve().parent.parent.joinpath("sample_graphs").glob("*.json.gz"))
FIELDS = ("names", "ops", "time_us", "temp_bytes", "persistent_bytes", "port_ptr", "port_bytes", "edge_src",
          "edge_dst", "edge_port", "edge_bytes", "edge_control", "colocation", "group_names", "pinned",
          "node_extra", "edge_extra", "meta", "name")


def slow(d, monkeypatch, **kw):
    """`graph_from_dict` forced onto the node-by-node path."""
    with monkeypatch.context() as m:
        m.setattr(ir, "_read_columns", lambda nodes, edges: None)
        return graph_from_dict(d, **kw)


def assert_same(g, h):
    for f in FIELDS:
        a, b = getattr(g, f), getattr(h, f)
        if isinstance(a, np.ndarray):
            assert a.dtype == b.dtype and np.array_equal(a, b), f
        else:
            assert a == b, f


def mixed_graph() -> dict:
    """Every field kind: ports, control edges, edges without bytes, pins, groups, extras, bare numbers."""
    return {
        "format": "pardnn.graph", "version": 1, "name": "mixed", "producer": "test",
        "nodes": [
            {"name": "a", "op": "A", "time_us": 1, "output_bytes": [10, 20.5, 21.5], "temp_bytes": 3.5,
             "colocation": "g", "pinned": 1, "phase": "forward", "shape": [2, 3]},
            {"name": "b", "op": None, "time_us": 2.25, "output_bytes": 7, "persistent_bytes": 100},
            {"name": "c", "op": 5, "output_bytes": None, "colocation": "g", "colocation_note": None},
            {"name": "d", "time_us": 0.0, "output_bytes": [], "pinned": None, "colocation": None},
            {"name": "e"},
        ],
        "edges": [
            {"src": "a", "dst": "b", "port": 2},
            {"src": "a", "dst": "c", "port": 4, "bytes": 55.5},
            {"src": "b", "dst": "d", "bytes": 9, "note": "x"},
            {"src": "c", "dst": "d", "control": True, "bytes": "ignored", "port": 3},
            {"src": "d", "dst": "e", "control": False, "bytes": None},
            {"src": "a", "dst": "e", "port": 6},
        ],
    }


def test_the_column_path_is_taken_for_ordinary_input():
    d = mixed_graph()
    assert ir._read_columns(d["nodes"], d["edges"]) is not None


def test_mixed_fields_read_the_same_both_ways(monkeypatch):
    d = mixed_graph()
    assert_same(graph_from_dict(d), slow(d, monkeypatch))


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_sample_graphs_read_the_same_both_ways(path, monkeypatch):
    d = read_json(path)
    assert_same(graph_from_dict(d, source=str(path)), slow(d, monkeypatch, source=str(path)))


def test_a_synthetic_training_graph_reads_the_same_both_ways(monkeypatch):
    d = transformer_training_graph(3000, seed=1).to_dict()
    assert_same(graph_from_dict(d), slow(d, monkeypatch))


def test_empty_graph():
    g = graph_from_dict({"format": "pardnn.graph", "nodes": [], "edges": []})
    assert (g.num_nodes, g.num_edges, g.num_ports) == (0, 0, 0)


# (node or edge, index, field, value): one field changed; None as a field deletes the object's name
CHANGES = [
    ("nodes", 1, "time_us", True), ("nodes", 1, "time_us", "1"), ("nodes", 1, "time_us", -1),
    ("nodes", 1, "time_us", float("nan")), ("nodes", 1, "time_us", float("inf")), ("nodes", 1, "time_us", 1e16),
    ("nodes", 1, "time_us", None), ("nodes", 1, "time_us", 10 ** 400), ("nodes", 1, "time_us", 1e15),
    ("nodes", 0, "output_bytes", "x"), ("nodes", 0, "output_bytes", [1, -2]), ("nodes", 0, "output_bytes", [True]),
    ("nodes", 0, "output_bytes", [2 ** 53 + 1]), ("nodes", 0, "output_bytes", [2 ** 53]),
    ("nodes", 0, "output_bytes", [2.0 ** 53]), ("nodes", 0, "output_bytes", {"a": 1}),
    ("nodes", 0, "output_bytes", [0.5, 1.5, 2.5]), ("nodes", 0, "output_bytes", [2 ** 70]),
    ("nodes", 1, "temp_bytes", -0.5), ("nodes", 1, "temp_bytes", -0.0), ("nodes", 1, "persistent_bytes", 2 ** 60),
    ("nodes", 1, "persistent_bytes", False),
    ("nodes", 1, "pinned", -1), ("nodes", 1, "pinned", True), ("nodes", 1, "pinned", 2 ** 31),
    ("nodes", 1, "pinned", 2 ** 31 - 1), ("nodes", 1, "pinned", 1.0), ("nodes", 1, "pinned", 2 ** 80),
    ("nodes", 1, "pinned", 0),
    ("nodes", 1, "colocation", 5), ("nodes", 1, "colocation", ""), ("nodes", 1, "colocation", "g"),
    ("nodes", 1, "name", ""), ("nodes", 1, "name", 5), ("nodes", 1, "name", "a"), ("nodes", 1, None, None),
    ("nodes", 1, "op", ["x"]),
    ("edges", 0, "src", "zz"), ("edges", 0, "src", 0), ("edges", 0, "dst", ["a"]), ("edges", 0, "src", "e"),
    ("edges", 0, "port", True), ("edges", 0, "port", -1), ("edges", 0, "port", 2 ** 21), ("edges", 0, "port", 1.0),
    ("edges", 0, "port", 2 ** 70), ("edges", 3, "port", -1),
    ("edges", 0, "control", "yes"), ("edges", 0, "control", 1), ("edges", 0, "control", True),
    ("edges", 0, "bytes", -1), ("edges", 0, "bytes", True), ("edges", 0, "bytes", 2 ** 62), ("edges", 3, "bytes", -5),
    ("edges", 1, None, None),
]


@pytest.mark.parametrize("where,i,field,value", CHANGES, ids=lambda x: repr(x)[:20])
def test_changed_fields_read_or_fail_the_same_both_ways(where, i, field, value, monkeypatch):
    d = copy.deepcopy(mixed_graph())
    obj = d[where][i]
    if field is None:
        obj.pop("name" if where == "nodes" else "src")
    else:
        obj[field] = value
    try:
        want = slow(d, monkeypatch, source="f.json")
    except GraphError as exc:
        with pytest.raises(GraphError) as got:
            graph_from_dict(d, source="f.json")
        assert str(got.value) == str(exc)
    else:
        assert_same(graph_from_dict(d, source="f.json"), want)


@pytest.mark.parametrize("bad", [[1, 2], "x", None], ids=repr)
def test_an_object_that_is_not_one_fails_the_same_both_ways(bad, monkeypatch):
    for where in ("nodes", "edges"):
        d = mixed_graph()
        d[where].append(bad)
        with pytest.raises(GraphError) as want:
            slow(d, monkeypatch)
        with pytest.raises(GraphError) as got:
            graph_from_dict(d)
        assert str(got.value) == str(want.value)
