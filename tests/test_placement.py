import json

import numpy as np
import pytest

from pardnn.cluster import Cluster
from pardnn.errors import PlacementError
from pardnn.machine import simulate
from pardnn.placement import Placement, load_placement, save_placement

from .helpers import tiny


@pytest.fixture
def g():
    return tiny([("a", 1), ("b", 1), ("c/d e", 1)], [("a", "b")])


def test_json_round_trip_matches_spec(tmp_path, g):
    p = Placement(np.array([0, 1, 1]), ("/device:GPU:0", "/device:GPU:1"), g.name,
                  {"makespan_us": 3.0, "peak_bytes": [0, 0], "feasible": True})
    path = save_placement(p, g, tmp_path / "p.json")
    d = json.loads(path.read_text())
    assert d == {"format": "pardnn.placement", "version": 1, "graph": "tiny",
                 "devices": ["/device:GPU:0", "/device:GPU:1"],
                 "assignment": {"a": 0, "b": 1, "c/d e": 1},
                 "predicted": {"makespan_us": 3.0, "peak_bytes": [0, 0], "feasible": True}}
    q = load_placement(path, g)
    assert q.same_as(p) and q.predicted == p.predicted


def test_place_text_round_trip_splits_at_the_last_space(tmp_path, g):
    p = Placement(np.array([2, 0, 1]), ("d0", "d1", "d2"), g.name)
    path = save_placement(p, g, tmp_path / "p.place")
    assert path.read_text().splitlines() == ["a 2", "b 0", "c/d e 1"]
    q = load_placement(path, g, num_devices=3)
    assert q.assignment.tolist() == [2, 0, 1]


@pytest.mark.parametrize("name", ["b\nc 1", "b\r", "b\u2028c", "b 1 ", " b", "#b"])
def test_names_a_place_line_cannot_carry_are_refused_not_written(tmp_path, name):
    """Found by a bad-input trial: partition --place wrote such names, and simulate then read the file as
    another placement or refused it ('expected name device', 'node 'b 1' is not in graph')."""
    g = tiny([("a", 1), (name, 1)], [("a", name)])
    p = Placement(np.array([0, 1]), ("d0", "d1"), g.name)
    with pytest.raises(PlacementError, match="p.place: node .* cannot be written in the .place text form"):
        save_placement(p, g, tmp_path / "p.place")
    assert not (tmp_path / "p.place").exists()
    assert load_placement(save_placement(p, g, tmp_path / "p.json"), g).same_as(p)     # JSON carries any name


def _write(tmp_path, assignment, devices=("x", "y")):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"format": "pardnn.placement", "version": 1, "graph": "other",
                                "devices": list(devices), "assignment": assignment}))
    return path


def test_missing_nodes(tmp_path, g):
    with pytest.raises(PlacementError, match="1 node\\(s\\) of graph 'tiny' have no device, for example 'c/d e'"):
        load_placement(_write(tmp_path, {"a": 0, "b": 1}), g)


def test_unknown_node_mentions_the_other_graph(tmp_path, g):
    with pytest.raises(PlacementError, match="node 'zzz' is not in graph 'tiny'.*made for graph 'other'"):
        load_placement(_write(tmp_path, {"a": 0, "b": 1, "c/d e": 0, "zzz": 1}), g)


def test_device_out_of_range(tmp_path, g):
    with pytest.raises(PlacementError, match="node 'b' is on device 5, but the placement lists 2 devices"):
        load_placement(_write(tmp_path, {"a": 0, "b": 5, "c/d e": 0}), g)


def test_a_version_of_true(tmp_path, g):
    """True == 1 in Python: a bad-input trial found it read as version 1."""
    path = _write(tmp_path, {"a": 0, "b": 1, "c/d e": 0})
    path.write_text(path.read_text().replace('"version": 1', '"version": true'))
    with pytest.raises(PlacementError, match="unsupported pardnn.placement version True"):
        load_placement(path, g)


def test_a_device_named_twice(tmp_path, g):
    """Found by a bad-input trial: simulate took it, and report failed with a line that named no file."""
    with pytest.raises(PlacementError, match=r"p.json: device name 'x' appears twice in \"devices\""):
        load_placement(_write(tmp_path, {"a": 0, "b": 1, "c/d e": 0}, devices=("x", "x")), g)


def test_more_devices_than_a_cluster_may_have(tmp_path, g):
    """A placement of 5,000 devices was taken, and simulating it (no cluster given) failed with "a cluster may
    have at most 4096 devices", naming no file."""
    with pytest.raises(PlacementError, match="a placement may list at most 4096 devices, got 5000"):
        Placement(np.zeros(3, dtype=np.int64), tuple(f"d{i}" for i in range(5000)))
    Placement(np.zeros(3, dtype=np.int64), tuple(f"d{i}" for i in range(4096)))      # the edge is valid
    path = _write(tmp_path, {"a": 0, "b": 1, "c/d e": 0}, devices=tuple(f"d{i}" for i in range(5000)))
    with pytest.raises(PlacementError, match=r"p.json: \"devices\" may list at most 4096 devices, got 5000"):
        load_placement(path, g)


def test_place_text_errors(tmp_path, g):
    path = tmp_path / "bad.place"
    path.write_text("a 0\nb x\n")
    with pytest.raises(PlacementError, match="bad.place:2: device of 'b' must be an integer"):
        load_placement(path, g)
    path.write_text("a 0\na 1\n")
    with pytest.raises(PlacementError, match="placed twice"):
        load_placement(path, g)
    # what int() reads but is no device index (a bad-input trial: 'b 1_0' put b on device 10 of 11)
    for dev in ("1_0", "+1", "\u0661"):
        path.write_text(f"a 0\nb {dev}\nc/d e 0\n")
        with pytest.raises(PlacementError, match="bad.place:2: device of 'b' must be an integer"):
            load_placement(path, g)


@pytest.mark.parametrize("values, match", [
    (np.array([0.0, 1.9, 0.0]), "node id 1 is placed on device 1.9; a device is a whole number"),
    (np.array([0.0, np.nan, 0.0]), "node id 1 is placed on device nan"),
    (np.array([True, False, True]), "whole numbers, got an array of bool"),
    (np.zeros((3, 1), dtype=np.int64), r"1-D array\), got shape \(3, 1\)"),
])
def test_a_device_that_is_not_one_whole_number_per_node_is_refused_not_truncated(g, values, match):
    with pytest.raises(PlacementError, match=match):
        Placement(values, ("/device:GPU:0", "/device:GPU:1"), g.name)
    with pytest.raises(PlacementError, match=match):
        simulate(g, Cluster.homogeneous(2), values)
    assert Placement(np.array([0.0, 1.0, 1.0]), ("x", "y")).assignment.tolist() == [0, 1, 1]


def test_saving_what_is_no_placement_is_a_type_error(tmp_path, g):
    """save_placement(None, g, path) raised AttributeError ('NoneType' object has no attribute 'to_dict');
    now a TypeError, before anything is written."""
    for bad in (None, np.zeros(g.num_nodes, dtype=np.int64)):
        for name in ("p.json", "p.place"):
            with pytest.raises(TypeError, match="save_placement: the placement must be a Placement, got "):
                save_placement(bad, g, tmp_path / name)
    assert list(tmp_path.iterdir()) == []
