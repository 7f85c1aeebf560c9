"""The graph IR: one training (or inference) step as a weighted DAG.

`OpGraph` is an immutable value. Node names map to dense integer ids (their
position in the graph file, which is also the simulator's tie-break order);
costs live in numpy arrays indexed by id; edges are parallel arrays with CSR
indexes in both directions, built on first use. Output ports are a second
CSR level: the ports of node ``v`` are ``port_ptr[v] .. port_ptr[v+1]`` in
``port_bytes``. Results (placements, schedules) are separate values and never
written onto the graph.

Frontends build graphs through `GraphBuilder`, which is also what the
``pardnn.graph`` reader uses, so every graph passes the same checks.

>>> b = GraphBuilder("tiny")
>>> b.add_node("x", "Placeholder", time_us=1.0, output_bytes=[8])
0
>>> b.add_node("y", "Relu", time_us=2.0, output_bytes=[8])
1
>>> b.add_edge("x", "y")
>>> g = b.build()
>>> g.num_nodes, g.num_edges, int(g.edge_bytes[0])
(2, 1, 8)
"""

from __future__ import annotations

import itertools
import json
import math
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from .analysis import topological_order
from .errors import GraphError
from .fileio import paused_gc, read_json, write_json
from .units import is_number, is_whole

GRAPH_FORMAT = "pardnn.graph"
GRAPH_VERSION = 1
_NODE_KEYS = frozenset({"name", "op", "time_us", "output_bytes", "temp_bytes",
                        "persistent_bytes", "colocation", "pinned"})
_EDGE_KEYS = frozenset({"src", "dst", "port", "bytes", "control"})

MAX_BYTES = 2 ** 53
"""The largest byte count a field may hold (8 PiB; every integer up to it is exact in a JSON float)."""
MAX_TOTAL_BYTES = 2 ** 62
"""The largest sum of a graph's byte counts: the simulator's int64 arithmetic stays far from overflow."""
MAX_TIME_US = 1e15
"""The largest op time (about 31 years)."""
MAX_PORT = 2 ** 20
"""The largest output port number."""
MAX_PIN = 2 ** 31 - 1
"""The largest device index a node may be pinned to."""
FORWARDED_AS = "forwarded_as"
"""The optional edge field naming the consumer's output port that reuses this input's buffer (an op that
forwards its input, such as TensorFlow's ``Identity``/``IdentityN``/``Reshape`` or ONNX's ``Reshape``:
docs/formats.md). Kept with the edge's other fields in ``edge_extra``; read through `OpGraph.port_forward`."""


def _csr(keys: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Row pointers and a stable order grouping ``keys`` (ids in ``[0, n)``)."""
    order = np.argsort(keys, kind="stable")
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys, minlength=n), out=ptr[1:])
    return ptr, order.astype(np.int64)


@dataclass(frozen=True, eq=False)
class OpGraph:
    """An immutable DAG of ops with compute, memory and communication costs.

    Attributes are numpy arrays indexed by node id (``[V]``), port id (``[P]``)
    or edge id (``[E]``). See the module docstring and SPEC §2 for meanings.
    """

    name: str
    names: tuple[str, ...]
    ops: tuple[str, ...]
    time_us: np.ndarray            # float64 [V]
    temp_bytes: np.ndarray         # int64 [V]
    persistent_bytes: np.ndarray   # int64 [V]
    port_ptr: np.ndarray           # int64 [V+1]
    port_bytes: np.ndarray         # int64 [P]
    edge_src: np.ndarray           # int64 [E]
    edge_dst: np.ndarray           # int64 [E]
    edge_port: np.ndarray          # int64 [E] (0 for control edges)
    edge_bytes: np.ndarray         # int64 [E] (0 for control edges)
    edge_control: np.ndarray       # bool  [E]
    colocation: np.ndarray         # int64 [V], group id or -1
    group_names: tuple[str, ...]
    pinned: np.ndarray             # int64 [V], device index or -1
    node_extra: tuple[dict | None, ...] = ()
    edge_extra: tuple[dict | None, ...] = ()
    meta: dict = field(default_factory=dict)

    # ---- sizes and lookups -------------------------------------------------
    @property
    def num_nodes(self) -> int:
        return len(self.names)

    @property
    def num_edges(self) -> int:
        return int(self.edge_src.shape[0])

    @property
    def num_ports(self) -> int:
        return int(self.port_bytes.shape[0])

    @cached_property
    def index(self) -> dict[str, int]:
        """Name to id."""
        return {n: i for i, n in enumerate(self.names)}

    def id(self, name: str) -> int:
        try:
            return self.index[name]
        except KeyError:
            raise GraphError(f"graph {self.name!r} has no node named {name!r}") from None

    @cached_property
    def edge_port_id(self) -> np.ndarray:
        """Global port id of each edge's source tensor (``port_ptr[src] + port``)."""
        return self.port_ptr[self.edge_src] + self.edge_port

    @cached_property
    def port_owner(self) -> np.ndarray:
        """Node id owning each global port id."""
        return np.repeat(np.arange(self.num_nodes, dtype=np.int64), np.diff(self.port_ptr))

    @cached_property
    def output_bytes_total(self) -> np.ndarray:
        """Sum of a node's output port sizes."""
        return np.add.reduceat(np.append(self.port_bytes, 0), self.port_ptr[:-1]) * (np.diff(self.port_ptr) > 0)

    @cached_property
    def port_forward(self) -> np.ndarray:
        """For each global output port, the data edge whose input buffer the port forwards, or -1.

        A forwarded output (edge field ``forwarded_as``, docs/formats.md) allocates nothing on its own
        device: it is the buffer that arrived on that edge, which then stays alive as long as the output
        is needed there (SPEC §1 extension, docs/machine-model.md). Raises `GraphError` naming the edge
        when a ``forwarded_as`` is not a port of the consumer, sits on a control edge, or two inputs
        claim one port.
        """
        fwd = np.full(self.num_ports, -1, dtype=np.int64)
        if not self.edge_extra:
            return fwd
        names, ptr = self.names, self.port_ptr
        for e, extra in enumerate(self.edge_extra):
            if not extra or FORWARDED_AS not in extra:
                continue
            p = extra[FORWARDED_AS]
            src, dst = int(self.edge_src[e]), int(self.edge_dst[e])
            where = f"edge {names[src]!r} -> {names[dst]!r}"
            if p is None:
                continue
            if not is_whole(p) or p < 0:
                raise GraphError(f"{where}: {FORWARDED_AS} must be an output port number of {names[dst]!r}, "
                                 f"got {p!r}")
            if self.edge_control[e]:
                raise GraphError(f"{where}: a control edge carries no tensor, so it cannot be {FORWARDED_AS}")
            if p >= ptr[dst + 1] - ptr[dst]:
                raise GraphError(f"{where}: {FORWARDED_AS} {p}, but {names[dst]!r} has "
                                 f"{int(ptr[dst + 1] - ptr[dst])} output port(s)")
            gp = int(ptr[dst] + p)
            if fwd[gp] >= 0:
                raise GraphError(f"{where}: output port {p} of {names[dst]!r} already forwards the input from "
                                 f"{names[int(self.edge_src[fwd[gp]])]!r}")
            fwd[gp] = e
        return fwd

    @cached_property
    def port_alloc_bytes(self) -> np.ndarray:
        """Bytes each output port allocates on its producer's device: `port_bytes`, 0 where forwarded."""
        return np.where(self.port_forward >= 0, 0, self.port_bytes)

    @cached_property
    def alloc_bytes_total(self) -> np.ndarray:
        """Sum of a node's `port_alloc_bytes`: what its outputs allocate when it starts."""
        return np.add.reduceat(np.append(self.port_alloc_bytes, 0), self.port_ptr[:-1]) * (np.diff(self.port_ptr) > 0)

    # ---- adjacency ---------------------------------------------------------
    @cached_property
    def out_csr(self) -> tuple[np.ndarray, np.ndarray]:
        """(ptr, edge ids): out-edges of ``v`` are ``edges[ptr[v]:ptr[v+1]]``, in file order."""
        return _csr(self.edge_src, self.num_nodes)

    @cached_property
    def in_csr(self) -> tuple[np.ndarray, np.ndarray]:
        """(ptr, edge ids) of in-edges, grouped by destination, in file order."""
        return _csr(self.edge_dst, self.num_nodes)

    def successors(self, v: int) -> np.ndarray:
        ptr, eids = self.out_csr
        return self.edge_dst[eids[ptr[v]:ptr[v + 1]]]

    def predecessors(self, v: int) -> np.ndarray:
        ptr, eids = self.in_csr
        return self.edge_src[eids[ptr[v]:ptr[v + 1]]]

    # ---- groups ------------------------------------------------------------
    @cached_property
    def groups(self) -> list[np.ndarray]:
        """Member ids of each colocation group, indexed by group id."""
        members = np.flatnonzero(self.colocation >= 0)
        if members.size == 0:
            return [np.empty(0, dtype=np.int64) for _ in self.group_names]
        order = members[np.argsort(self.colocation[members], kind="stable")]
        counts = np.bincount(self.colocation[members], minlength=len(self.group_names))
        return np.split(order, np.cumsum(counts)[:-1])

    @cached_property
    def unit(self) -> np.ndarray:
        """A 'placement unit' id per node: colocation groups contracted.

        Units ``0 .. len(group_names)-1`` are the groups; every ungrouped node
        gets a unit of its own after those. Placers move units, never halves of
        a group.
        """
        u = self.colocation.copy()
        loose = np.flatnonzero(u < 0)
        u[loose] = len(self.group_names) + np.arange(loose.size)
        return u

    @cached_property
    def num_units(self) -> int:
        """How many placement units there are (`unit` ids are ``0 .. num_units - 1``)."""
        return int(self.unit.max()) + 1 if self.num_nodes else 0

    @cached_property
    def unit_pin(self) -> np.ndarray:
        """The device each unit is pinned to, or -1: the pin of its pinned members (who agree, `verify`)."""
        pins = np.full(self.num_units, -1, dtype=np.int64)
        pinned = np.flatnonzero(self.pinned >= 0)
        pins[self.unit[pinned]] = self.pinned[pinned]
        return pins

    @cached_property
    def pinned_nodes(self) -> np.ndarray:
        """The ids of the pinned nodes, ascending."""
        return np.flatnonzero(self.pinned >= 0)

    @cached_property
    def grouped_nodes(self) -> np.ndarray:
        """The ids of the nodes in a colocation group, ascending."""
        return np.flatnonzero(self.colocation >= 0)

    @cached_property
    def unit_first(self) -> np.ndarray:
        """Per node, the lowest-numbered node of its unit (itself when ungrouped)."""
        ptr, members = self.unit_members
        return members[ptr[self.unit]]

    @cached_property
    def unit_members(self) -> tuple[np.ndarray, np.ndarray]:
        """``(ptr, members)``: the nodes of unit ``u`` are ``members[ptr[u]:ptr[u + 1]]``, in id order."""
        members = np.argsort(self.unit, kind="stable")
        ptr = np.zeros(self.num_units + 1, dtype=np.int64)
        np.cumsum(np.bincount(self.unit, minlength=self.num_units), out=ptr[1:])
        return ptr, members

    # ---- checks -------------------------------------------------------------
    def verify(self) -> "OpGraph":
        """Check the invariants and return ``self``; raise `GraphError` naming the node.

        Rejects cycles (naming a node on one), negative or non-finite costs,
        edges to unknown nodes and negative pins. Duplicate names are rejected
        when the graph is built.
        """
        V = self.num_nodes
        if self.num_edges and (self.edge_src.min() < 0 or self.edge_dst.min() < 0
                               or self.edge_src.max() >= V or self.edge_dst.max() >= V):
            bad = int(np.flatnonzero((self.edge_src < 0) | (self.edge_src >= V)
                                     | (self.edge_dst < 0) | (self.edge_dst >= V))[0])
            raise GraphError(f"graph {self.name!r}: edge {bad} points to a node that does not exist")
        for label, arr in (("time_us", self.time_us), ("temp_bytes", self.temp_bytes),
                           ("persistent_bytes", self.persistent_bytes)):
            bad = np.flatnonzero(~np.isfinite(arr) | (arr < 0)) if arr.dtype.kind == "f" else np.flatnonzero(arr < 0)
            if bad.size:
                v = int(bad[0])
                raise GraphError(f"node {self.names[v]!r}: {label} must be a non-negative number, got {arr[v]}")
        bad = np.flatnonzero(self.port_bytes < 0)
        if bad.size:
            v = int(self.port_owner[bad[0]])
            raise GraphError(f"node {self.names[v]!r}: output_bytes must be non-negative")
        bad = np.flatnonzero(self.edge_bytes < 0)
        if bad.size:
            e = int(bad[0])
            raise GraphError(f"edge {self.names[self.edge_src[e]]!r} -> {self.names[self.edge_dst[e]]!r}: "
                             "bytes must be non-negative")
        total = sum(float(a.sum(dtype=np.float64)) for a in (self.port_bytes, self.temp_bytes,
                                                               self.persistent_bytes))
        if total > MAX_TOTAL_BYTES:
            raise GraphError(f"graph {self.name!r}: its byte counts add up to {total:.4g}, more than "
                             f"{MAX_TOTAL_BYTES:.4g}; check the sizes")
        self._check_pinned_groups()
        _ = self.port_forward     # checks every forwarded_as
        topological_order(self)   # the cycle check (cached on the graph)
        return self

    def _check_pinned_groups(self) -> None:
        """A colocation group runs on one device, so its members may not be pinned to different ones."""
        both = np.flatnonzero((self.colocation >= 0) & (self.pinned >= 0))
        if both.size == 0:
            return
        order = both[np.lexsort((both, self.colocation[both]))]
        grp, pin = self.colocation[order], self.pinned[order]
        first = np.ones(order.size, dtype=bool)
        first[1:] = grp[1:] != grp[:-1]
        head = order[np.maximum.accumulate(np.where(first, np.arange(order.size), 0))]
        clash = np.flatnonzero(pin != self.pinned[head])
        if clash.size:
            v, u = int(order[clash[0]]), int(head[clash[0]])
            raise GraphError(f"colocation group {self.group_names[int(self.colocation[v])]!r}: node "
                             f"{self.names[u]!r} is pinned to device {int(self.pinned[u])} and node "
                             f"{self.names[v]!r} to device {int(self.pinned[v])}; a group runs on one device")

    # ---- conversions ---------------------------------------------------------
    def output_bytes_of(self, v: int) -> list[int]:
        return self.port_bytes[self.port_ptr[v]:self.port_ptr[v + 1]].tolist()

    def to_dict(self) -> dict[str, Any]:
        """The ``pardnn.graph`` JSON object (SPEC §2)."""
        nodes = []
        tl, tb, pb = self.time_us.tolist(), self.temp_bytes.tolist(), self.persistent_bytes.tolist()
        pp, pbytes = self.port_ptr.tolist(), self.port_bytes.tolist()
        col, pin = self.colocation.tolist(), self.pinned.tolist()
        for v, name in enumerate(self.names):
            node: dict[str, Any] = {"name": name, "op": self.ops[v], "time_us": tl[v],
                                    "output_bytes": pbytes[pp[v]:pp[v + 1]]}
            if tb[v]:
                node["temp_bytes"] = tb[v]
            if pb[v]:
                node["persistent_bytes"] = pb[v]
            if col[v] >= 0:
                node["colocation"] = self.group_names[col[v]]
            if pin[v] >= 0:
                node["pinned"] = pin[v]
            extra = self.node_extra[v] if self.node_extra else None
            if extra:
                node.update(extra)
            nodes.append(node)
        edges = []
        names = self.names
        src, dst, port = self.edge_src.tolist(), self.edge_dst.tolist(), self.edge_port.tolist()
        nbytes, ctrl = self.edge_bytes.tolist(), self.edge_control.tolist()
        for e in range(self.num_edges):
            edge: dict[str, Any] = {"src": names[src[e]], "dst": names[dst[e]]}
            if ctrl[e]:
                edge["control"] = True
            else:
                if port[e]:
                    edge["port"] = port[e]
                edge["bytes"] = nbytes[e]
            extra = self.edge_extra[e] if self.edge_extra else None
            if extra:
                edge.update(extra)
            edges.append(edge)
        out = {"format": GRAPH_FORMAT, "version": GRAPH_VERSION, "name": self.name}
        out.update({k: v for k, v in self.meta.items() if k not in ("format", "version", "name", "nodes", "edges")})
        out["nodes"] = nodes
        out["edges"] = edges
        return out

    def to_networkx(self):
        """A `networkx.MultiDiGraph` keyed by node name, with every cost as an attribute."""
        import networkx as nx

        G = nx.MultiDiGraph(name=self.name)
        d = self.to_dict()
        for node in d["nodes"]:
            attrs = {k: v for k, v in node.items() if k != "name"}
            G.add_node(node["name"], **attrs)
        for edge in d["edges"]:
            attrs = {k: v for k, v in edge.items() if k not in ("src", "dst")}
            attrs.setdefault("port", 0)
            attrs.setdefault("control", False)
            attrs.setdefault("bytes", 0)
            G.add_edge(edge["src"], edge["dst"], **attrs)
        return G

    def permuted(self, order: np.ndarray) -> "OpGraph":
        """The same graph with nodes renumbered: new id ``i`` is old node ``order[i]``.

        Edges keep their order. Used to write nodes in a topological order,
        which the simulator's tie-break (file order) relies on.
        """
        import dataclasses

        order = np.asarray(order, dtype=np.int64)
        V = self.num_nodes
        if order.shape != (V,) or not np.array_equal(np.sort(order), np.arange(V)):
            raise ValueError("order must be a permutation of the node ids")
        new_id = np.empty(V, dtype=np.int64)
        new_id[order] = np.arange(V)
        counts = np.diff(self.port_ptr)[order]
        port_ptr = np.zeros(V + 1, dtype=np.int64)
        np.cumsum(counts, out=port_ptr[1:])
        old_port_index = np.concatenate([np.arange(self.port_ptr[v], self.port_ptr[v + 1]) for v in order]) \
            if self.num_ports else np.empty(0, dtype=np.int64)
        take = order.tolist()
        return dataclasses.replace(
            self,
            names=tuple(self.names[v] for v in take),
            ops=tuple(self.ops[v] for v in take),
            time_us=self.time_us[order], temp_bytes=self.temp_bytes[order],
            persistent_bytes=self.persistent_bytes[order],
            port_ptr=port_ptr, port_bytes=self.port_bytes[old_port_index.astype(np.int64)],
            edge_src=new_id[self.edge_src], edge_dst=new_id[self.edge_dst],
            colocation=self.colocation[order], pinned=self.pinned[order],
            node_extra=tuple(self.node_extra[v] for v in take) if self.node_extra else (),
        )

    def with_costs(self, *, time_us: np.ndarray | None = None, temp_bytes: np.ndarray | None = None,
                   persistent_bytes: np.ndarray | None = None, port_bytes: np.ndarray | None = None,
                   edge_bytes: np.ndarray | None = None, name: str | None = None) -> "OpGraph":
        """A copy with some cost arrays replaced (structure unchanged)."""
        import dataclasses

        def pick(new, old, dtype):
            return old if new is None else np.asarray(new, dtype=dtype)

        return dataclasses.replace(
            self,
            name=self.name if name is None else name,
            time_us=pick(time_us, self.time_us, np.float64),
            temp_bytes=pick(temp_bytes, self.temp_bytes, np.int64),
            persistent_bytes=pick(persistent_bytes, self.persistent_bytes, np.int64),
            port_bytes=pick(port_bytes, self.port_bytes, np.int64),
            edge_bytes=pick(edge_bytes, self.edge_bytes, np.int64),
        )


# ---------------------------------------------------------------------------
# Building graphs
# ---------------------------------------------------------------------------

def _check_number(value: Any, what: str, where: str, *, integer: bool) -> float | int:
    """A non-negative finite number within its field's limit (`MAX_BYTES` for bytes, `MAX_TIME_US` for times);
    numpy's numbers too (``np.float32(1.5)``, ``np.int64(8)``: what a graph built from arrays holds)."""
    if not is_number(value):
        raise GraphError(f"{where}: {what} must be a number, got {value!r}")
    if isinstance(value, (float, np.floating)) and not math.isfinite(value) or value < 0:
        raise GraphError(f"{where}: {what} must be a non-negative number, got {value!r}")
    limit = MAX_BYTES if integer else MAX_TIME_US
    if value > limit:
        raise GraphError(f"{where}: {what} is {value!r}, more than the largest allowed ({limit:.4g})")
    if integer:
        return int(round(value))
    return float(value)


def _shown(value: object) -> str:
    """``value`` as a message shows it: as JSON writes it, else (bytes, a path, an object) its repr."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


class GraphBuilder:
    """Accumulates nodes and edges, then builds a checked `OpGraph`.

    Node ids are given in insertion order, which is the graph's file order.
    ``output_bytes`` may be a number (one port) or a list (one per port).
    Extra keyword arguments to `add_node` are kept as the node's extra fields
    (``phase``, ``shape``, ...) and written back to the graph file.
    """

    def __init__(self, name: str, *, source: str | None = None):
        self.name = name
        self.source = source
        if not isinstance(name, str):       # as a graph file's "name": a graph saved with it must load
            raise GraphError(self._where(f"the graph's name must be a string, got {_shown(name)}"))
        self._index: dict[str, int] = {}
        self._names: list[str] = []
        self._ops: list[str] = []
        self._time: list[float] = []
        self._temp: list[int] = []
        self._pers: list[int] = []
        self._outputs: list[list[int]] = []
        self._coloc: list[str | None] = []
        self._pinned: list[int] = []
        self._node_extra: list[dict | None] = []
        self._src: list[int] = []
        self._dst: list[int] = []
        self._port: list[int] = []
        self._bytes: list[int] = []   # -1 = take the port's size
        self._ctrl: list[bool] = []
        self._edge_extra: list[dict | None] = []
        self.meta: dict = {}

    def _where(self, what: str) -> str:
        return f"{self.source}: {what}" if self.source else what

    def __contains__(self, name: str) -> bool:
        return name in self._index

    def __len__(self) -> int:
        return len(self._names)

    def add_node(self, name: str, op: str = "", *, time_us: float = 0.0,
                 output_bytes: int | float | Sequence[int | float] | None = None,
                 temp_bytes: int | float = 0, persistent_bytes: int | float = 0,
                 colocation: str | None = None, pinned: int | None = None, **extra: Any) -> int:
        if not isinstance(name, str) or not name:
            raise GraphError(self._where(f"node names must be non-empty strings, got {_shown(name)}"))
        if name in self._index:
            raise GraphError(self._where(f"duplicate node name {name!r}"))
        where = self._where(f"node {name!r}")
        if output_bytes is None:
            outs: list[int] = []
        elif isinstance(output_bytes, (list, tuple)) or isinstance(output_bytes, np.ndarray) and output_bytes.ndim:
            outs = [_check_number(b, "output_bytes", where, integer=True) for b in output_bytes]
        else:
            outs = [_check_number(output_bytes, "output_bytes", where, integer=True)]
        if colocation is not None and not isinstance(colocation, str):
            raise GraphError(f"{where}: colocation must be a group name or null, got {colocation!r}")
        if pinned is not None and (not is_whole(pinned) or pinned < 0 or pinned > MAX_PIN):
            raise GraphError(f"{where}: pinned must be a device index (0 .. {MAX_PIN}) or null, got {pinned!r}")
        # every check before the first append: a refused node leaves the builder as it was
        time = _check_number(time_us, "time_us", where, integer=False)
        temp = _check_number(temp_bytes, "temp_bytes", where, integer=True)
        pers = _check_number(persistent_bytes, "persistent_bytes", where, integer=True)
        vid = len(self._names)
        self._index[name] = vid
        self._names.append(name)
        self._ops.append(str(op) if op is not None else "")
        self._time.append(time)
        self._temp.append(temp)
        self._pers.append(pers)
        self._outputs.append(outs)
        self._coloc.append(colocation)
        self._pinned.append(-1 if pinned is None else int(pinned))
        self._node_extra.append(extra or None)
        return vid

    def add_edge(self, src: str | int, dst: str | int, port: int = 0, bytes: int | float | None = None,
                 control: bool = False, **extra: Any) -> None:
        s = self._resolve(src, "source", src, dst)
        d = self._resolve(dst, "destination", src, dst)
        where = self._where(f"edge {self._names[s]!r} -> {self._names[d]!r}")
        if not is_whole(port) or port < 0 or port > MAX_PORT:
            raise GraphError(f"{where}: port must be an integer from 0 to {MAX_PORT}, got {port!r}")
        if not isinstance(control, bool):
            raise GraphError(f"{where}: control must be true or false, got {control!r}")
        nbytes = -1 if bytes is None or control else _check_number(bytes, "bytes", where, integer=True)
        self._src.append(s)
        self._dst.append(d)
        self._port.append(0 if control else int(port))
        self._bytes.append(0 if control else nbytes)
        self._ctrl.append(control)
        self._edge_extra.append(extra or None)

    def _resolve(self, ref: str | int, role: str, src: Any, dst: Any) -> int:
        if isinstance(ref, str):
            vid = self._index.get(ref)
            if vid is None:
                raise GraphError(self._where(f"edge {src!r} -> {dst!r}: unknown {role} node {ref!r}"))
            return vid
        if isinstance(ref, (int, np.integer)) and 0 <= ref < len(self._names):
            return int(ref)
        raise GraphError(self._where(f"edge {src!r} -> {dst!r}: unknown {role} node {ref!r}"))

    def _known(self, name: str) -> int:
        vid = self._index.get(name) if isinstance(name, str) else None
        if vid is None:     # (a bare KeyError)
            raise GraphError(self._where(f"unknown node {name!r}"))
        return vid

    def set_colocation(self, name: str, group: str | None) -> None:
        """As `add_node`'s ``colocation``, checked alike (a group of 5 saved a graph that did not load)."""
        vid = self._known(name)
        if group is not None and not isinstance(group, str):
            raise GraphError(self._where(f"node {name!r}: colocation must be a group name or null, got {group!r}"))
        self._coloc[vid] = group

    def set_pinned(self, name: str, device: int | None) -> None:
        """As `add_node`'s ``pinned``, checked alike (-7 was kept as a pin)."""
        vid = self._known(name)
        if device is not None and (not is_whole(device) or device < 0 or device > MAX_PIN):
            raise GraphError(self._where(f"node {name!r}: pinned must be a device index (0 .. {MAX_PIN}) or null, "
                                         f"got {device!r}"))
        self._pinned[vid] = -1 if device is None else int(device)

    def build(self, *, verify: bool = True) -> OpGraph:
        n_listed = np.fromiter(map(len, self._outputs), dtype=np.int64, count=len(self._outputs))
        listed = np.fromiter(itertools.chain.from_iterable(self._outputs), dtype=np.int64,
                             count=int(n_listed.sum()))
        return _assemble(
            self.name, self._names, self._ops, np.asarray(self._time, dtype=np.float64),
            np.asarray(self._temp, dtype=np.int64), np.asarray(self._pers, dtype=np.int64), n_listed, listed,
            self._coloc, np.asarray(self._pinned, dtype=np.int64), self._node_extra,
            np.asarray(self._src, dtype=np.int64), np.asarray(self._dst, dtype=np.int64),
            np.asarray(self._port, dtype=np.int64), np.asarray(self._bytes, dtype=np.int64),
            np.asarray(self._ctrl, dtype=bool), self._edge_extra, self.meta, source=self.source, verify=verify)


def _assemble(name: str, names: Sequence[str], ops: Sequence[str], time_us: np.ndarray, temp: np.ndarray,
              pers: np.ndarray, n_listed: np.ndarray, listed: np.ndarray, coloc: Sequence[str | None],
              pinned: np.ndarray, node_extra: Sequence[dict | None], src: np.ndarray, dst: np.ndarray,
              port: np.ndarray, nbytes: np.ndarray, ctrl: np.ndarray, edge_extra: Sequence[dict | None],
              meta: dict, *, source: str | None, verify: bool) -> OpGraph:
    """The `OpGraph` of checked columns (what `GraphBuilder.build` and the fast file reader share).

    ``n_listed[v]`` output sizes of node ``v`` are listed, in ``listed`` node after node; an edge's
    ``nbytes`` is -1 when it takes its port's size. ``nbytes`` is updated in place.
    """
    V = len(names)
    # Ports: the listed ones, extended to cover every data edge's port.
    n_ports = n_listed.copy()
    data = ~ctrl
    if data.any():
        np.maximum.at(n_ports, src[data], port[data] + 1)
    port_ptr = np.zeros(V + 1, dtype=np.int64)
    np.cumsum(n_ports, out=port_ptr[1:])
    port_bytes = np.zeros(int(port_ptr[-1]), dtype=np.int64)
    listed_pos = np.repeat(port_ptr[:-1], n_listed) + (np.arange(listed.size) - np.repeat(
        np.cumsum(n_listed) - n_listed, n_listed))
    port_bytes[listed_pos] = listed
    # An unlisted port takes the largest explicit bytes of its edges (SPEC §1.1 rule 4).
    pid = port_ptr[src] + port
    is_listed = np.zeros(port_bytes.size, dtype=bool)
    is_listed[listed_pos] = True
    fill = data & (nbytes >= 0)
    fill[data] &= ~is_listed[pid[data]]   # control edges have no port: never index with theirs
    if fill.any():
        np.maximum.at(port_bytes, pid[fill], nbytes[fill])
    # An edge without bytes takes its port's size.
    missing = data & (nbytes < 0)
    nbytes[missing] = port_bytes[pid[missing]]
    nbytes[ctrl] = 0

    group_names: list[str] = []
    group_index: dict[str, int] = {}
    col = [-1] * V
    for v, gname in enumerate(coloc):
        if gname is None:
            continue
        gid = group_index.get(gname)
        if gid is None:
            gid = group_index[gname] = len(group_names)
            group_names.append(gname)
        col[v] = gid

    g = OpGraph(
        name=name,
        names=tuple(names),
        ops=tuple(ops),
        time_us=time_us,
        temp_bytes=temp,
        persistent_bytes=pers,
        port_ptr=port_ptr,
        port_bytes=port_bytes,
        edge_src=src,
        edge_dst=dst,
        edge_port=port,
        edge_bytes=nbytes,
        edge_control=ctrl,
        colocation=np.asarray(col, dtype=np.int64),
        group_names=tuple(group_names),
        pinned=pinned,
        node_extra=tuple(node_extra) if any(node_extra) else (),
        edge_extra=tuple(edge_extra) if any(edge_extra) else (),
        meta=dict(meta),
    )
    if verify:
        try:
            g.verify()
        except GraphError as exc:
            if source and not str(exc).startswith(source):
                raise GraphError(f"{source}: {exc}") from None
            raise
    return g


# ---------------------------------------------------------------------------
# pardnn.graph files
# ---------------------------------------------------------------------------

_NUMBER = {int, float}


def _numbers(values: list, *, integer: bool) -> np.ndarray | None:
    """``values`` as a float64 (time) or int64 (bytes) array, or None unless every one is a number that
    `_check_number` would take unchanged. Conservative: a byte count of 2**53 or more is left to it."""
    if not set(map(type, values)) <= _NUMBER:
        return None
    try:
        arr = np.array(values, dtype=np.float64)
    except OverflowError:
        return None
    if arr.size and not (np.isfinite(arr).all() and arr.min() >= 0
                         and arr.max() < (MAX_BYTES if integer else MAX_TIME_US)):
        return None
    # int(round(x)) of a float below 2**53 is np.rint's (both round half to even); an int below 2**53 is exact
    return np.rint(arr).astype(np.int64) if integer else arr


def _read_columns(nodes: list, edges: list) -> tuple | None:
    """The columns `_assemble` takes, read from a ``pardnn.graph``'s node and edge objects a field at
    a time, or None when any field is not what `GraphBuilder` would take unchanged (the caller then
    builds node by node, which names the first bad field).

    The result is exactly `GraphBuilder`'s for the same objects; this is only faster (a 200k-op graph
    in well under a second instead of several), since the checks run over whole columns.
    """
    try:
        if not all(type(x) is dict for x in nodes) or not all(type(x) is dict for x in edges):
            return None
        names = [x["name"] for x in nodes]
        if not set(map(type, names)) <= {str}:
            return None
        index = {n: i for i, n in enumerate(names)}
        if len(index) != len(names) or "" in index:
            return None
        ops = [x.get("op", "") for x in nodes]
        if not set(map(type, ops)) <= {str}:
            ops = [str(op) if op is not None else "" for op in ops]
        time_us = _numbers([x.get("time_us", 0.0) for x in nodes], integer=False)
        temp = _numbers([x.get("temp_bytes", 0) for x in nodes], integer=True)
        pers = _numbers([x.get("persistent_bytes", 0) for x in nodes], integer=True)
        outs = [x.get("output_bytes") for x in nodes]
        if not set(map(type, outs)) <= {list}:
            outs = [o if type(o) is list else [] if o is None else [o] for o in outs]
        n_listed = np.fromiter(map(len, outs), dtype=np.int64, count=len(outs))
        listed = _numbers(list(itertools.chain.from_iterable(outs)), integer=True)
        coloc = [x.get("colocation") for x in nodes]
        pins = [x.get("pinned") for x in nodes]
        if (time_us is None or temp is None or pers is None or listed is None
                or not set(map(type, coloc)) <= {str, type(None)} or not set(map(type, pins)) <= {int, type(None)}):
            return None
        given_pins = [p for p in pins if p is not None]
        if given_pins and (min(given_pins) < 0 or max(given_pins) > MAX_PIN):
            return None
        pinned = np.array([-1 if p is None else p for p in pins], dtype=np.int64)
        node_extra = _extras(nodes, _NODE_KEYS)

        src = np.fromiter(map(index.__getitem__, [x["src"] for x in edges]), dtype=np.int64, count=len(edges))
        dst = np.fromiter(map(index.__getitem__, [x["dst"] for x in edges]), dtype=np.int64, count=len(edges))
        ctrl_list = [x.get("control", False) for x in edges]
        port_list = [x.get("port", 0) for x in edges]
        if not set(map(type, ctrl_list)) <= {bool} or not set(map(type, port_list)) <= {int}:
            return None
        ctrl = np.array(ctrl_list, dtype=bool)
        port = np.array(port_list, dtype=np.int64)
        if port.size and (port.min() < 0 or port.max() > MAX_PORT):
            return None
        port[ctrl] = 0
        given = [x.get("bytes") for x in edges]
        takes_port = [b is None or c for b, c in zip(given, ctrl_list)]   # -1: the port's size
        nbytes = _numbers([0 if t else b for b, t in zip(given, takes_port)], integer=True)
        if nbytes is None:
            return None
        nbytes[np.array(takes_port, dtype=bool)] = -1
        nbytes[ctrl] = 0
        edge_extra = _extras(edges, _EDGE_KEYS)
    except (KeyError, TypeError, OverflowError):   # no name, an unknown src or dst, a huge port
        return None
    return (names, ops, time_us, temp, pers, n_listed, listed, coloc, pinned, node_extra,
            src, dst, port, nbytes, ctrl, edge_extra)


def _extras(objects: list[dict], known: frozenset) -> list[dict | None]:
    """Each object's fields other than ``known`` (in its own order), or None where it has none."""
    extra_keys = set().union(*objects) - known
    if not extra_keys:
        return [None] * len(objects)
    if len(extra_keys) == 1:
        (k,) = extra_keys
        return [{k: x[k]} if k in x else None for x in objects]
    return [{k: v for k, v in x.items() if k not in known} or None for x in objects]


def graph_from_dict(d: Any, *, source: str | None = None) -> OpGraph:
    """Build an `OpGraph` from a parsed ``pardnn.graph`` object, checking every field."""
    where = source or "graph"
    if not isinstance(d, dict):
        raise GraphError(f"{where}: expected a JSON object with \"format\": \"{GRAPH_FORMAT}\"")
    fmt = d.get("format")
    if fmt != GRAPH_FORMAT:
        raise GraphError(f"{where}: \"format\" is {fmt!r}, expected {GRAPH_FORMAT!r}")
    version = d.get("version", GRAPH_VERSION)
    if isinstance(version, bool) or version != GRAPH_VERSION:     # (True == 1)
        raise GraphError(f"{where}: unsupported {GRAPH_FORMAT} version {version!r} (this pardnn reads {GRAPH_VERSION})")
    nodes, edges = d.get("nodes"), d.get("edges", [])
    if not isinstance(nodes, list):
        raise GraphError(f"{where}: \"nodes\" must be a list")
    if not isinstance(edges, list):
        raise GraphError(f"{where}: \"edges\" must be a list")
    name = d.get("name")
    if name is not None and not isinstance(name, str):      # a node's name must be a string too
        raise GraphError(f"{where}: the graph's \"name\" must be a string or null, got {_shown(name)}")
    name = name or (Path(source).name.split(".")[0] if source else "graph")
    meta = {k: v for k, v in d.items() if k not in ("format", "version", "name", "nodes", "edges")}
    with paused_gc():
        columns = _read_columns(nodes, edges)
    if columns is not None:
        return _assemble(str(name), *columns, meta, source=source, verify=True)
    # something is out of the ordinary: build node by node, which names the first bad field
    b = GraphBuilder(str(name), source=source)
    b.meta = meta
    for i, node in enumerate(nodes):
        if not isinstance(node, dict) or "name" not in node:
            raise GraphError(f"{where}: nodes[{i}] must be an object with a \"name\"")
        extra = {k: v for k, v in node.items() if k not in _NODE_KEYS}
        b.add_node(node["name"], node.get("op", ""),
                   time_us=node.get("time_us", 0.0),
                   output_bytes=node.get("output_bytes"),
                   temp_bytes=node.get("temp_bytes", 0),
                   persistent_bytes=node.get("persistent_bytes", 0),
                   colocation=node.get("colocation"),
                   pinned=node.get("pinned"), **extra)
    for i, edge in enumerate(edges):
        if not isinstance(edge, dict) or "src" not in edge or "dst" not in edge:
            raise GraphError(f"{where}: edges[{i}] must be an object with \"src\" and \"dst\"")
        if not isinstance(edge["src"], str) or not isinstance(edge["dst"], str):
            raise GraphError(f"{where}: edges[{i}]: \"src\" and \"dst\" must be node names")
        extra = {k: v for k, v in edge.items() if k not in _EDGE_KEYS}
        b.add_edge(edge["src"], edge["dst"], port=edge.get("port", 0), bytes=edge.get("bytes"),
                   control=edge.get("control", False), **extra)
    return b.build()


def check_graph(g: object, fn: str) -> None:
    """A `TypeError` naming ``fn``'s argument where ``g`` is no `OpGraph` (a path given for the graph came out
    as ``'str' object has no attribute 'pinned'``)."""
    if not isinstance(g, OpGraph):
        hint = " (read the file with pardnn.load_graph(path))" if isinstance(g, (str, bytes, os.PathLike)) else ""
        raise TypeError(f"{fn}: the graph must be an OpGraph{hint}, got {type(g).__name__}")


def load_graph(path: str | Path) -> OpGraph:
    """Read a ``pardnn.graph`` file (``.json`` or ``.json.gz``)."""
    return graph_from_dict(read_json(path), source=str(path))


def save_graph(g: OpGraph, path: str | Path) -> Path:
    """Write ``g`` atomically; a ``.gz`` name is compressed."""
    check_graph(g, "save_graph")
    return write_json(path, g.to_dict())


def graph_from_networkx(G, name: str | None = None) -> OpGraph:
    """Build an `OpGraph` from a networkx (Multi)DiGraph.

    Node and edge attributes use the ``pardnn.graph`` field names; missing
    ones take their defaults. Node order is ``G``'s iteration order.
    """
    if not all(hasattr(G, a) for a in ("graph", "nodes", "edges", "is_directed")):
        raise TypeError(f"graph_from_networkx: G must be a networkx DiGraph or MultiDiGraph, got {type(G).__name__}")
    if not G.is_directed():
        raise TypeError("graph_from_networkx: G must be directed (a networkx DiGraph or MultiDiGraph): an edge's "
                        "direction is which op runs first")
    b = GraphBuilder(str(name or G.graph.get("name") or "graph"))    # str(), as the nodes' names
    for n, attrs in G.nodes(data=True):
        extra = {k: v for k, v in attrs.items() if k not in _NODE_KEYS}
        b.add_node(str(n), attrs.get("op", ""), time_us=attrs.get("time_us", 0.0),
                   output_bytes=attrs.get("output_bytes"), temp_bytes=attrs.get("temp_bytes", 0),
                   persistent_bytes=attrs.get("persistent_bytes", 0), colocation=attrs.get("colocation"),
                   pinned=attrs.get("pinned"), **extra)
    for u, v, attrs in G.edges(data=True):
        extra = {k: val for k, val in attrs.items() if k not in _EDGE_KEYS}
        b.add_edge(str(u), str(v), port=attrs.get("port", 0), bytes=attrs.get("bytes"),
                   control=bool(attrs.get("control", False)), **extra)
    return b.build()


def iter_phase(g: OpGraph) -> Iterable[str | None]:
    """The ``phase`` extra field of each node (``forward``, ``backward``, ``optimizer``) or None."""
    if not g.node_extra:
        return [None] * g.num_nodes
    return [(x or {}).get("phase") for x in g.node_extra]
