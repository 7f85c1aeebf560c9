"""What a traced TensorFlow step says about a placement: where each op ran, and what crossed devices.

Pure functions over the protos in a ``RunMetadata`` (no TensorFlow import):

* `check_step_stats` reads ``step_stats``: every op of the graph that ran is
  compared with the device it was placed on. Pseudo-devices of the trace
  (``.../stream:N``, ``.../memcpy``) are skipped; their kernels are also
  reported under the device itself.
* `count_send_recv` reads ``partition_graphs`` (``RunOptions.output_partition_graphs``):
  TensorFlow inserts one ``_Send``/``_Recv`` pair per tensor and receiving
  device (the machine model's "once per (producer, port, destination)"). Each
  pair is classed as

  - **data**: a tensor of the graph sent to another device, the pairs the
    machine model counts as transfers;
  - **feed**: an input fed by the client, which TensorFlow delivers on the
    client's device (the CPU of task 0) and sends on from there;
  - **fetch**: a result sent back to the client's device;
  - **control**: a control edge across devices (TensorFlow sends a dummy
    tensor; the machine model charges latency only);
  - **forward**: in a distributed session, a hop that carries a tensor from
    the task that received it on to the device that uses it (see
    `count_send_recv`);

  client-terminated pairs (feeds and fetches of a distributed session) are not
  device-to-device pairs and are not counted.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import AbstractSet as Set, Iterable, Mapping, Sequence

from .tf_devices import parse_device, same_device

SEND_OPS = frozenset({"_Send", "_HostSend"})
RECV_OPS = frozenset({"_Recv", "_HostRecv"})


@dataclass(frozen=True)
class PlacementCheck:
    """Where the traced ops ran, against where they were placed."""

    checked: int
    """Graph ops seen in the trace and compared."""
    moved: tuple[tuple[str, str, str], ...]
    """``(node, placed on, ran on)`` for every op that ran elsewhere."""
    untraced: int
    """Graph ops the trace never shows (feeds, which TensorFlow replaces by its own argument ops; pruned ops)."""

    @property
    def ok(self) -> bool:
        return not self.moved and self.checked > 0


def is_real_device(name: str) -> bool:
    return "/stream:" not in name and not name.endswith("/memcpy") and "/memcpy" not in name


def check_step_stats(step_stats, expected: Mapping[str, str]) -> PlacementCheck:
    """Compare each traced op's device with ``expected`` (device by node name)."""
    ran: dict[str, set[str]] = defaultdict(set)
    for dev in step_stats.dev_stats:
        if not is_real_device(dev.device):
            continue
        for ns in dev.node_stats:
            if ns.node_name in expected:
                ran[ns.node_name].add(dev.device)
    moved = []
    for name in sorted(ran):
        want = expected[name]
        for got in sorted(ran[name]):
            if not same_device(want, got):
                moved.append((name, want, got))
    return PlacementCheck(checked=len(ran), moved=tuple(moved), untraced=len(expected) - len(ran))


@dataclass(frozen=True)
class SendRecvCount:
    """TensorFlow's ``_Send``/``_Recv`` pairs of one step, by kind (see the module docstring)."""

    data: int
    feed: int
    fetch: int
    control: int
    forward: int
    other: int
    data_tensors: tuple[tuple[str, int, str], ...]
    """``(producer, port, receiving device)`` of every data pair."""

    @property
    def pairs(self) -> int:
        return self.data + self.feed + self.fetch + self.control + self.forward + self.other

    def to_dict(self) -> dict[str, int]:
        return {"pairs": self.pairs, "data": self.data, "feed": self.feed, "fetch": self.fetch,
                "control": self.control, "forward": self.forward, "other": self.other}


def _ref(text: str) -> tuple[str, int]:
    name = text[1:] if text.startswith("^") else text
    node, sep, port = name.rpartition(":")
    if sep and port.isdigit():
        return node, int(port)
    return name, 0


def _client_terminated(node) -> bool:
    return "client_terminated" in node.attr and bool(node.attr["client_terminated"].b)


def _key(node) -> tuple[str, str, str]:
    a = node.attr
    return (a["tensor_name"].s.decode(), a["send_device"].s.decode(), a["recv_device"].s.decode())


def count_send_recv(partition_graphs, graph_names: set[str] | frozenset[str]) -> SendRecvCount:
    """Class every device-to-device ``_Send``/``_Recv`` pair of the partition graphs.

    A distributed session partitions twice, by task and then by device, so a
    tensor may reach its consumer's device in two hops: to the receiving
    task, then on to the device. A hop whose receiver only passes the tensor
    on is a **forward**; the data pair counted is the one that delivers it,
    keyed by the original producer.
    """
    sends: dict[tuple[str, str, str], tuple] = {}
    recvs: dict[str, tuple] = {}          # recv node name -> (key, consumers)
    recv_of_key: dict[tuple[str, str, str], tuple] = {}
    for pg in partition_graphs:
        by_name = {n.name: n for n in pg.node}
        consumers: dict[str, list] = defaultdict(list)
        for n in pg.node:
            for ref in n.input:
                consumers[_ref(ref)[0]].append(n)
        for n in pg.node:
            if _client_terminated(n):
                continue
            if n.op in SEND_OPS and n.input:
                src, port = _ref(n.input[0])
                sends[_key(n)] = (by_name.get(src), src, port)
            elif n.op in RECV_OPS:
                recvs[n.name] = (_key(n), consumers.get(n.name, []))
                recv_of_key[_key(n)] = recvs[n.name]

    def origin(key, depth=0):
        """``("feed", name)``, ``("tensor", node, port)`` or ``("other", node)`` for what a pair carries."""
        src_node, src, port = sends[key]
        if src_node is not None and (src_node.op == "_Arg" or (src_node.op in RECV_OPS and
                                                                _client_terminated(src_node))):
            return ("feed", src)
        if src_node is not None and src_node.op in RECV_OPS and src in recvs and depth < 16:
            upstream = recvs[src][0]
            if upstream in sends:
                return origin(upstream, depth + 1)
        if src in graph_names:
            return ("tensor", src, port)
        if src_node is not None and src_node.op == "Const":   # the dummy tensor of a control edge
            return ("control", src)
        return ("other", src)

    counts = dict(data=0, feed=0, fetch=0, control=0, forward=0, other=0)
    tensors = set()
    for key in sends:
        users = recv_of_key.get(key, (None, []))[1]
        what = origin(key)
        if users and all(u.op in SEND_OPS and not _client_terminated(u) for u in users):
            counts["forward"] += 1
        elif what[0] == "feed":
            counts["feed"] += 1
        elif what[0] == "tensor":
            if users and all(u.op == "_Retval" or (u.op in SEND_OPS and _client_terminated(u)) for u in users):
                counts["fetch"] += 1
            else:
                counts["data"] += 1
                tensors.add((what[1], what[2], key[2]))
        elif what[0] == "control":
            counts["control"] += 1
        else:
            counts["other"] += 1
    return SendRecvCount(**counts, data_tensors=tuple(sorted(tensors)))


def compare_transfers(tf_tensors: Iterable[tuple[str, int, str]], sim_tensors: Iterable[tuple[str, int, str]]
                      ) -> tuple[tuple, tuple]:
    """``(only TensorFlow, only the simulator)`` among ``(producer, port, device)`` transfers.

    Device names are compared as devices (``/device:CPU:1`` equals
    ``/job:localhost/replica:0/task:0/device:CPU:1``).
    """
    def canon(items):
        out = set()
        for node, port, dev in items:
            p = parse_device(dev)
            out.add((node, int(port), p.task or 0, p.kind, p.index or 0))
        return out

    a, b = canon(tf_tensors), canon(sim_tensors)
    return tuple(sorted(a - b)), tuple(sorted(b - a))


def traced_names(step_stats) -> frozenset[str]:
    """The names of the nodes a traced step ran, on real devices."""
    return frozenset(ns.node_name for dev in step_stats.dev_stats if is_real_device(dev.device)
                     for ns in dev.node_stats)


def reconcile_fused(only_tf: Sequence[tuple], only_sim: Sequence[tuple], outputs: Mapping[str, int],
                    traced: Set[str]) -> tuple[tuple, tuple, int]:
    """Take out of both lists the transfers TensorFlow's runtime fusion renamed.

    oneDNN's graph rewrite fuses some ops at run time (a ``Conv2DBackpropFilter``
    and the ``BiasAddGrad`` beside it become one op, under the first's name, whose
    output 1 is the bias gradient). A tensor TensorFlow sent from an output port
    the graph's op does not have (``outputs``: node -> its number of outputs) is
    such a fused output; a tensor the simulator sent from an op the traced step
    never ran (``traced``) was fused away. Returns both lists without them and how
    many TensorFlow transfers were fused outputs.
    """
    fused_tf = [t for t in only_tf if t[0] in outputs and int(t[1]) >= outputs[t[0]]]
    gone_sim = [t for t in only_sim if t[0] not in traced]
    if not fused_tf:
        return tuple(only_tf), tuple(only_sim), 0
    keep_tf = tuple(t for t in only_tf if t not in fused_tf)
    keep_sim = tuple(t for t in only_sim if t not in gone_sim)
    return keep_tf, keep_sim, len(fused_tf)

