"""The graph IR: building, invariants, file round trips, networkx."""

from __future__ import annotations

import gzip
import json
import re

import networkx as nx
import numpy as np
import pytest

from pardnn.errors import GraphError, InputError
from pardnn.ir import GraphBuilder, graph_from_dict, graph_from_networkx, load_graph, save_graph

from .helpers import tiny

SPEC_EXAMPLE = {
    "format": "pardnn.graph", "version": 1, "name": "transformer-2l",
    "nodes": [
        {"name": "dense/kernel", "op": "VarHandleOp", "time_us": 1.0, "output_bytes": [1048576],
         "persistent_bytes": 1048576, "colocation": "dense/kernel", "phase": "forward"},
        {"name": "init", "op": "NoOp", "time_us": 0},
        {"name": "dense/MatMul", "op": "MatMul", "time_us": 12.5, "output_bytes": 4096, "temp_bytes": 0,
         "persistent_bytes": 0, "colocation": None, "pinned": None},
    ],
    "edges": [
        {"src": "dense/kernel", "dst": "dense/MatMul", "port": 0, "bytes": 1048576},
        {"src": "init", "dst": "dense/MatMul", "control": True},
    ],
    "producer": "a test",
}


def test_spec_example_reads_with_defaults_and_extras():
    g = graph_from_dict(SPEC_EXAMPLE)
    assert (g.num_nodes, g.num_edges) == (3, 2)
    assert g.output_bytes_of(2) == [4096]          # a bare number is one port
    assert g.edge_control.tolist() == [False, True]
    assert g.edge_bytes.tolist() == [1048576, 0]   # a control edge has no bytes
    assert g.group_names == ("dense/kernel",)
    assert g.pinned.tolist() == [-1, -1, -1]
    assert g.node_extra[0] == {"phase": "forward"}
    assert g.meta == {"producer": "a test"}


def test_edge_bytes_default_to_the_port_size():
    g = tiny([("a", 1, [10, 20]), ("b", 1)], [("a", "b", {"port": 1})])
    assert g.edge_bytes.tolist() == [20]


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_round_trip_through_files(tmp_path, suffix):
    g = graph_from_dict(SPEC_EXAMPLE)
    path = save_graph(g, tmp_path / f"g{suffix}")
    if suffix.endswith(".gz"):
        assert gzip.decompress(path.read_bytes()).startswith(b"{")
    h = load_graph(path)
    assert h.names == g.names and h.ops == g.ops
    for field in ("time_us", "temp_bytes", "persistent_bytes", "port_ptr", "port_bytes", "edge_src", "edge_dst",
                  "edge_port", "edge_bytes", "edge_control", "colocation", "pinned"):
        assert np.array_equal(getattr(h, field), getattr(g, field)), field
    assert h.node_extra == g.node_extra and h.meta == g.meta
    assert save_graph(h, tmp_path / f"h{suffix}").read_bytes() == path.read_bytes()   # deterministic bytes


def test_networkx_round_trip():
    g = graph_from_dict(SPEC_EXAMPLE)
    G = g.to_networkx()
    assert isinstance(G, nx.MultiDiGraph)
    assert G.nodes["dense/MatMul"]["time_us"] == 12.5
    assert G.edges["init", "dense/MatMul", 0]["control"] is True
    h = graph_from_networkx(G)
    assert h.names == g.names
    assert np.array_equal(h.edge_bytes, g.edge_bytes)
    assert h.group_names == g.group_names
    # a plain DiGraph with no attributes works too
    D = nx.DiGraph([("x", "y"), ("y", "z")])
    k = graph_from_networkx(D, name="plain")
    assert k.names == ("x", "y", "z") and k.time_us.tolist() == [0, 0, 0]


def test_names_that_are_not_strings(tmp_path):
    """A review: a refused node name of bytes or a path raised JSON's own TypeError ("Object of type bytes is
    not JSON serializable"), not the GraphError; a networkx graph named 2024 saved a file that `load_graph`
    refused ("name" must be a string). Its name is now str()'d, as its nodes' names are."""
    from pathlib import Path
    for bad, shown in ((b"a", "b'a'"), (Path("a"), "PosixPath('a')"), (3, "3")):
        with pytest.raises(GraphError, match=re.escape(f"node names must be non-empty strings, got {shown}")):
            GraphBuilder("g").add_node(bad)
    with pytest.raises(GraphError, match=re.escape("the graph's name must be a string, got b'g'")):
        GraphBuilder(b"g")
    d = {"format": "pardnn.graph", "version": 1, "name": Path("x"), "nodes": [], "edges": []}
    with pytest.raises(GraphError, match=re.escape('"name" must be a string or null, got PosixPath(\'x\')')):
        graph_from_dict(d, source="g.json")
    G = nx.DiGraph(name=2024)
    G.add_node("a")
    g = graph_from_networkx(G)
    assert g.name == "2024" and load_graph(save_graph(g, tmp_path / "nx.json")).name == "2024"


def test_cycle_is_rejected_naming_a_node_on_it():
    """
        a -> b -> c -> d
             ^         |
             +---------+        the cycle is b, c, d; e hangs off it
                  d -> e
    """
    with pytest.raises(GraphError, match=r"cycle through node '[bcd]'"):
        tiny([("a", 1), ("b", 1), ("c", 1), ("d", 1), ("e", 1)],
             [("a", "b"), ("b", "c"), ("c", "d"), ("d", "b"), ("d", "e")])


def test_self_loop_is_a_cycle():
    with pytest.raises(GraphError, match="cycle through node 'a'"):
        tiny([("a", 1)], [("a", "a")])


@pytest.mark.parametrize("node, message", [
    ({"name": "x", "time_us": -1}, "node 'x': time_us must be a non-negative number"),
    ({"name": "x", "time_us": "fast"}, "node 'x': time_us must be a number"),
    ({"name": "x", "output_bytes": [4, -2]}, "node 'x': output_bytes must be a non-negative"),
    ({"name": "x", "temp_bytes": float("nan")}, "node 'x': temp_bytes must be a non-negative"),
    ({"name": "x", "pinned": -1}, "node 'x': pinned must be a device index"),
    ({"name": "x", "colocation": 3}, "node 'x': colocation must be a group name"),
])
def test_bad_costs_name_the_node(node, message):
    with pytest.raises(GraphError, match=message):
        graph_from_dict({"format": "pardnn.graph", "version": 1, "nodes": [node], "edges": []}, source="g.json")


def test_a_refused_node_leaves_the_builder_as_it_was():
    """A library trial: after ``add_node("z", time_us=-1)`` raised, "z" was registered without a time, so
    adding it again was a "duplicate node name" and `build` failed with numpy's "out is the wrong size"."""
    b = GraphBuilder("g")
    b.add_node("a", time_us=1.0)
    for bad in ({"time_us": -1}, {"temp_bytes": "big"}, {"persistent_bytes": float("nan")}):
        with pytest.raises(GraphError, match="node 'z'"):
            b.add_node("z", **bad)
    assert "z" not in b and len(b) == 1
    b.add_node("z", time_us=2.0)
    b.add_edge("a", "z")
    g = b.build()
    assert g.names == ("a", "z") and g.time_us.tolist() == [1.0, 2.0]


def test_numpy_numbers_are_numbers_to_the_builder():
    """A library trial: a graph built from numpy arrays was refused, ``time_us must be a number, got
    np.float32(1.0)`` (likewise ``np.int64`` bytes, pins and ports, and an array of output sizes)."""
    b = GraphBuilder("np")
    b.add_node("x", time_us=np.float32(1.5), output_bytes=np.array([8, 16]), pinned=np.int64(1))
    b.add_node("y", time_us=np.float64(2.0), output_bytes=np.int64(4), temp_bytes=np.int32(3))
    b.add_edge("x", "y", port=np.int64(1), bytes=np.uint8(16))
    g = b.build()
    assert g.time_us.tolist() == [1.5, 2.0] and g.port_bytes.tolist() == [8, 16, 4] and g.pinned.tolist() == [1, -1]
    assert g.edge_port.tolist() == [1] and g.edge_bytes.tolist() == [16] and g.temp_bytes.tolist() == [0, 3]
    with pytest.raises(GraphError, match="node 'z': time_us must be a non-negative number, got np.float32"):
        b.add_node("z", time_us=np.float32("nan"))
    with pytest.raises(GraphError, match="node 'z': output_bytes must be a number, got np.True_"):
        b.add_node("z", output_bytes=np.bool_(True))


def test_dangling_edge_names_the_unknown_node():
    d = {"format": "pardnn.graph", "nodes": [{"name": "a"}], "edges": [{"src": "a", "dst": "ghost"}]}
    with pytest.raises(GraphError, match="g.json: edge 'a' -> 'ghost': unknown destination node 'ghost'"):
        graph_from_dict(d, source="g.json")


def test_duplicate_names_are_rejected():
    d = {"format": "pardnn.graph", "nodes": [{"name": "a"}, {"name": "a"}], "edges": []}
    with pytest.raises(GraphError, match="duplicate node name 'a'"):
        graph_from_dict(d)


def test_wrong_format_or_version():
    with pytest.raises(GraphError, match="expected 'pardnn.graph'"):
        graph_from_dict({"format": "something", "nodes": []})
    with pytest.raises(GraphError, match="unsupported pardnn.graph version 7"):
        graph_from_dict({"format": "pardnn.graph", "version": 7, "nodes": []})
    with pytest.raises(GraphError, match="unsupported pardnn.graph version True"):    # (True == 1; a trial)
        graph_from_dict({"format": "pardnn.graph", "version": True, "nodes": []})


@pytest.mark.parametrize("name, shown", [(5, "5"), (True, "true"), ({"a": 1}, '{"a": 1}'), (["x"], '["x"]')])
def test_a_graph_name_that_is_no_string_is_refused(name, shown):
    """A bad-input trial: ``"name": 5`` was read as the name "5", and ``{"a": 1}`` as "{'a': 1}"."""
    with pytest.raises(GraphError, match=f'the graph\'s "name" must be a string or null, got {re.escape(shown)}$'):
        graph_from_dict({"format": "pardnn.graph", "name": name, "nodes": [{"name": "a"}]})
    assert graph_from_dict({"format": "pardnn.graph", "name": None, "nodes": [{"name": "a"}]}).name == "graph"


def test_unreadable_files_give_input_errors(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        load_graph(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "pardnn.graph", "nodes": [}')
    with pytest.raises(InputError, match=r"bad.json: invalid JSON at line 1 column \d+"):
        load_graph(bad)
    gz = tmp_path / "bad.json.gz"
    gz.write_bytes(b"\x1f\x8bnot really gzip")
    with pytest.raises(InputError, match="not a valid gzip file"):
        load_graph(gz)


def test_csr_and_units():
    """
    a --> c <-- b       a, b in group "g"; c alone
    """
    g = tiny([("a", 1, 0, {"colocation": "g"}), ("b", 1, 0, {"colocation": "g"}), ("c", 1)],
             [("a", "c"), ("b", "c")])
    assert g.successors(0).tolist() == [2]
    assert g.predecessors(2).tolist() == [0, 1]
    assert g.unit.tolist() == [0, 0, 1]
    assert [m.tolist() for m in g.groups] == [[0, 1]]


def test_permuted_keeps_structure():
    b = GraphBuilder("p")
    b.add_node("c", time_us=3, output_bytes=[1, 2])
    b.add_node("a", time_us=1, output_bytes=[5])
    b.add_edge("a", "c", bytes=5)
    g = b.build()
    h = g.permuted(np.array([1, 0]))
    assert h.names == ("a", "c")
    assert h.time_us.tolist() == [1, 3]
    assert h.output_bytes_of(0) == [5] and h.output_bytes_of(1) == [1, 2]
    assert (h.edge_src.tolist(), h.edge_dst.tolist()) == ([0], [1])


def test_file_is_json_with_spec_fields(tmp_path):
    g = tiny([("a", 1, 8)], [])
    d = json.loads(save_graph(g, tmp_path / "g.json").read_text())
    assert d["format"] == "pardnn.graph" and d["version"] == 1
    assert d["nodes"] == [{"name": "a", "op": "Op", "time_us": 1.0, "output_bytes": [8]}]


def test_control_edge_from_a_portless_last_node():
    """A control edge out of the last node, which has no output ports, builds (regression)."""
    from pardnn.ir import GraphBuilder

    b = GraphBuilder("ctrl")
    b.add_node("a", "Op", output_bytes=[4])
    b.add_node("init", "NoOp")
    b.add_node("c", "Op")
    b.add_edge("init", "c", control=True)
    b.add_edge("a", "c")
    g = b.build()
    assert g.num_edges == 2 and g.edge_control.tolist() == [True, False]
    b2 = GraphBuilder("ctrl-last")
    b2.add_node("c", "Op")
    b2.add_node("init", "NoOp")
    b2.add_edge("init", "c", control=True)
    assert b2.build(verify=False).num_edges == 1


def test_fractional_byte_counts_round_to_the_nearest_byte_half_to_even():
    """docs/formats.md: byte counts with a fraction are rounded (half to even); times keep their fractions.
    Both readers agree: the columnar one (every value a plain number) and the node-by-node one."""
    from pardnn.ir import graph_from_dict

    nodes = [{"name": "a", "time_us": 1.5, "output_bytes": [2.5], "temp_bytes": 3.5, "persistent_bytes": 1e3},
             {"name": "b", "time_us": 0.25, "output_bytes": 7.49}]
    for extra in ({}, {"colocation": "x"}):     # a string field sends the reader node by node
        doc = {"format": "pardnn.graph", "version": 1, "nodes": [{**nodes[0], **extra}, nodes[1]],
               "edges": [{"src": "a", "dst": "b", "bytes": 10.5}]}
        g = graph_from_dict(doc)
        assert g.temp_bytes.tolist() == [4, 0] and g.persistent_bytes.tolist() == [1000, 0]
        assert g.port_bytes.tolist() == [2, 7] and g.edge_bytes.tolist() == [10]
        assert g.time_us.tolist() == [1.5, 0.25]


def test_networkx_input_that_is_no_directed_graph_is_a_type_error():
    """graph_from_networkx(None) raised AttributeError ('NoneType' object has no attribute 'graph'); an
    undirected graph was read with its edges in whatever order networkx keeps their ends."""
    with pytest.raises(TypeError, match="G must be a networkx DiGraph or MultiDiGraph, got NoneType"):
        graph_from_networkx(None)
    with pytest.raises(TypeError, match="G must be directed"):
        graph_from_networkx(nx.Graph([("x", "y")]))
