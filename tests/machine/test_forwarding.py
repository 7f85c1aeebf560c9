"""Forwarded outputs (edge field ``forwarded_as``): an op that reuses an input's buffer allocates nothing.

Links of 10 us latency and 100 bytes/us, as in test_schedule.py: a transfer of B bytes takes 10 + B/100 us.
"""

from __future__ import annotations

import pytest

from pardnn.errors import GraphError
from pardnn.ir import graph_from_dict, load_graph, save_graph
from pardnn.machine import simulate, single_device_peak

from ..helpers import tiny
from .test_schedule import cluster

FWD = {"forwarded_as": 0}


def identity_chain(forward: bool):
    """a(1 us, 1000 B) -> Reshape(1 us) -> IdentityN(1 us, two ports) -> c(1 us, 10 B), and d reads IdentityN:1.

    IdentityN forwards a second input too: b (1 us, 400 B), read by d.
    """
    f = FWD if forward else {}
    f1 = {"forwarded_as": 1} if forward else {}
    return tiny([("a", 1, 1000), ("b", 1, 400), ("r", 1, 1000, {"op": "Reshape"}),
                 ("n", 1, [1000, 400], {"op": "IdentityN"}), ("c", 1, 10), ("d", 1, 10)],
                [("a", "r", f), ("r", "n", f), ("b", "n", f1), ("n", "c"), ("n", "d", {"port": 1})])


def test_a_reshape_identityn_chain_costs_only_the_buffer_it_forwards():
    """One device; a (t=0), b (t=1), r (t=2), n (t=3), c (t=4), d (t=5).

    Without forwarding every output is a new buffer: at n's start (t=3) a is freed and b, r and n's two
    outputs are alive: 400 + 1000 + 1400 = 2800 B. With forwarding the chain is a's buffer and b's (1400 B),
    held until their last readers: c's 10-byte output comes on top (1410 B at t=4), and a's buffer is freed
    when c, the last reader of n:0, finishes (t=5)."""
    plain, fwd = identity_chain(False), identity_chain(True)
    assert single_device_peak(plain) == 2800
    assert single_device_peak(fwd) == 1410
    s = simulate(fwd, cluster(1), [0] * fwd.num_nodes)
    times, level = s.timeline(0)
    # a's buffer lives from a's start (t=0) until c, the last reader of the chain, finishes (t=6)
    m = s.memory
    a_item = [i for i in range(len(m.bytes)) if m.ref[i] == fwd.id("a") and m.bytes[i] == 1000]
    assert len(a_item) == 1 and m.alloc_us[a_item[0]] == 0 and m.free_us[a_item[0]] == 5.0
    assert int(level.max()) == 1410
    assert sorted(m.bytes.tolist()) == [10, 10, 400, 1000]   # no item for r's or n's outputs


def test_across_devices_the_received_copy_is_the_buffer_forwarded():
    """a (device 0, 1000 B) -> r (device 1, forwards) -> c (device 1). The transfer is real: 10 + 10 us.
    Device 1 holds the received copy (1000 B) from t=1 until c finishes (t=23); r allocates nothing. Device 0
    frees a's buffer when the transfer arrives (t=21)."""
    g = tiny([("a", 1, 1000), ("r", 1, 1000, {"op": "Identity"}), ("c", 1, 0)],
             [("a", "r", FWD), ("r", "c")])
    s = simulate(g, cluster(2), [0, 1, 1])
    assert s.makespan_us == 23
    assert s.peak_bytes.tolist() == [1000, 1000]
    assert s.timeline(1)[1].tolist() == [0, 1000, 0]
    assert s.timeline(1)[0].tolist() == [0, 1, 23]
    assert s.timeline(0)[0].tolist() == [0, 0, 21]


def test_a_forwarded_output_sent_away_holds_its_source_until_the_transfer_ends():
    """a (device 0, 1000 B) -> r (device 0, forwards) -> c (device 1): r's output crosses with its full 1000 B
    (10 + 10 us), and a's buffer, which it is, stays on device 0 until the transfer arrives (t=22)."""
    g = tiny([("a", 1, 1000), ("r", 1, 1000, {"op": "Identity"}), ("c", 1, 0)],
             [("a", "r", FWD), ("r", "c")])
    s = simulate(g, cluster(2), [0, 0, 1])
    assert s.transfers.bytes.tolist() == [1000]
    assert s.peak_bytes.tolist() == [1000, 1000]
    assert s.timeline(0)[0].tolist() == [0, 0, 22] and s.timeline(0)[1].tolist() == [0, 1000, 0]


def test_forwarded_as_survives_a_file_round_trip(tmp_path):
    g = identity_chain(True)
    back = load_graph(save_graph(g, tmp_path / "g.json.gz"))
    assert back.port_forward.tolist() == g.port_forward.tolist()
    assert (back.port_forward >= 0).sum() == 3
    assert single_device_peak(back) == 1410


@pytest.mark.parametrize("edge, message", [
    ({"src": "a", "dst": "r", "control": True, "forwarded_as": 0}, "control edge carries no tensor"),
    ({"src": "a", "dst": "r", "forwarded_as": 3}, "'r' has 1 output port"),
    ({"src": "a", "dst": "r", "forwarded_as": -1}, "must be an output port number"),
    ({"src": "a", "dst": "r", "forwarded_as": "0"}, "must be an output port number"),
])
def test_bad_forwarded_as_is_named(edge, message):
    d = {"format": "pardnn.graph", "version": 1, "name": "bad",
         "nodes": [{"name": "a", "output_bytes": [8]}, {"name": "r", "output_bytes": [8]}], "edges": [edge]}
    with pytest.raises(GraphError, match=message) as exc:
        graph_from_dict(d, source="bad.json")
    assert "'a' -> 'r'" in str(exc.value)


def test_two_inputs_cannot_share_one_forwarded_port():
    d = {"format": "pardnn.graph", "version": 1, "name": "bad",
         "nodes": [{"name": "a", "output_bytes": [8]}, {"name": "b", "output_bytes": [8]},
                   {"name": "r", "output_bytes": [8]}],
         "edges": [{"src": "a", "dst": "r", "forwarded_as": 0}, {"src": "b", "dst": "r", "forwarded_as": 0}]}
    with pytest.raises(GraphError, match="already forwards the input from 'a'"):
        graph_from_dict(d, source="bad.json")
