"""While loops in a lowered graph: which frame each op runs in, and how often.

A lowered loop is the ops between its ``Enter`` and ``Exit`` nodes; they
run once per iteration. Without a profile, their estimated time must be
multiplied by the trip count, which the graph rarely states outright. The
loops TensorFlow and Keras build iterate over a TensorList made from a
tensor (``TensorListFromTensor``: a recurrent layer unstacks its input
sequence, its gradient unstacks the output gradients) or filled into a
list of fixed size (``TensorListReserve``), so a frame's trip count is the
largest such length entering it; a gradient loop runs as often as its
forward loop (TensorFlow names its frame after the forward one's, plus
``_grad``). A frame with no such list counts once,
and is listed as such in the graph's ``loops`` field. Nested frames
multiply.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from .model import parse_input
from .shapes import TensorInfo

ROOT = ""
SEP = " > "
"""Separates nested frames in a frame path (frame names themselves contain ``/``)."""
ENTER_OPS = frozenset({"Enter", "RefEnter"})
MERGE_OPS = frozenset({"Merge", "RefMerge"})
NEXT_OPS = frozenset({"NextIteration", "RefNextIteration"})
"""The sources of a loop's back edges."""
EXIT_OPS = frozenset({"Exit", "RefExit"})


def frames(order: Sequence[str], node_defs: Mapping, back_edge_sources: frozenset[str]) -> dict[str, str]:
    """Each node's frame path (``""`` outside loops; ``outer > inner`` for nested loops).

    ``order`` must be topological once the loop back edges are left out.
    """
    frame: dict[str, str] = {}
    for name in order:
        nd = node_defs[name]
        first = next((parse_input(r)[0] for r in nd.input
                      if node_defs[parse_input(r)[0]].op not in back_edge_sources), None)
        outer = frame.get(first, ROOT) if first is not None else ROOT
        if nd.op in ENTER_OPS:
            inner = nd.attr["frame_name"].s.decode()
            frame[name] = f"{outer}{SEP}{inner}" if outer else inner
        elif nd.op in EXIT_OPS:
            frame[name] = outer.rpartition(SEP)[0] if SEP in outer else ROOT
        else:
            frame[name] = outer
    return frame


def trip_counts(frame: Mapping[str, str], node_defs: Mapping, info: Mapping[str, list[TensorInfo]],
                constant_value) -> dict[str, int | None]:
    """Each frame's estimated iterations (None: unknown, counted once).

    ``constant_value(name, port)`` returns a static integer value or None.
    """
    trips: dict[str, int | None] = {f: None for f in set(frame.values()) if f != ROOT}
    for name, f in frame.items():
        nd = node_defs[name]
        if nd.op not in ENTER_OPS or not nd.input:
            continue
        src, port, _ = parse_input(nd.input[0])
        op = node_defs[src].op
        n = None
        if op == "TensorListFromTensor":
            src_in, src_port, _ = parse_input(node_defs[src].input[0])
            shape = info.get(src_in, [None] * (src_port + 1))[src_port]
            if shape is not None and shape.shape and shape.shape[0] is not None:
                n = int(shape.shape[0])
        elif op == "TensorListReserve" and len(node_defs[src].input) > 1:
            ref = parse_input(node_defs[src].input[1])
            n = constant_value(ref[0], ref[1])
        if n is not None and n > 0 and (trips.get(f) is None or n > trips[f]):
            trips[f] = n
    # A gradient loop (TensorFlow names its frame after the forward loop's, plus
    # ``_grad``) runs as many iterations as its forward loop.
    for f in list(trips):
        if not f.endswith("_grad"):
            continue
        base = f[:-len("_grad")]
        forward = max((k for k in trips if k != f and not k.endswith("_grad") and base.endswith(k)),
                      key=len, default=None)
        if forward is not None and trips[forward] is not None and (trips[f] is None or trips[forward] > trips[f]):
            trips[f] = trips[forward]
    return trips


def multiplier(frame_path: str, trips: Mapping[str, int | None]) -> int:
    """Iterations per step of an op in ``frame_path``: the product over its enclosing loops.

    >>> multiplier("a > b", {"a": 3, "a > b": 5, "c": None}), multiplier("", {})
    (15, 1)
    """
    if not frame_path:
        return 1
    m = 1
    parts = frame_path.split(SEP)
    for i in range(1, len(parts) + 1):
        m *= trips.get(SEP.join(parts[:i])) or 1
    return m



def loop_of(name: str, node_defs: Mapping, frame: Mapping[str, str]) -> str:
    """The frame path of the loop ``name`` belongs to: its own, or for an ``Exit`` (which `frames` puts
    outside) the loop it leaves, that of its data input."""
    if node_defs[name].op in EXIT_OPS:
        src = next((parse_input(r)[0] for r in node_defs[name].input if not parse_input(r)[2]), None)
        return frame.get(src, ROOT) if src is not None else frame.get(name, ROOT)
    return frame.get(name, ROOT)


def order_edges(names: Sequence[str], node_defs: Mapping, frame: Mapping[str, str]) -> list[tuple[str, str]]:
    """Control edges that keep each collapsed loop between its inputs and its outputs.

    With the back edges cut, a loop body appears once, its time that of every iteration. Its data edges
    alone would then let ops that do not read a loop-invariant input start before the loop's inputs are
    ready (an LSTM's ``h @ U``), and let an ``Exit`` leave right after its ``Enter``: the ``Exit`` reads
    the ``Switch`` of the first iteration, since the value the last iteration produced came through the
    cut ``NextIteration``. The consumers of a recurrent layer would then overlap with it, which no
    executor can do. So, per frame: every ``Enter`` precedes the frame's first ``Merge``, which precedes
    its other ``Merge`` ops (no iteration starts before every input entered), and every ``NextIteration``
    precedes the frame's first ``Exit``, which precedes its other ``Exit`` ops (no output leaves before
    the last iteration). Linear in the loop's size; nested frames are handled each on its own.
    """
    enters: dict[str, list[str]] = {}
    merges: dict[str, list[str]] = {}
    nexts: dict[str, list[str]] = {}
    exits: dict[str, list[str]] = {}
    kinds = ((ENTER_OPS, enters), (MERGE_OPS, merges), (NEXT_OPS, nexts), (EXIT_OPS, exits))
    for name in names:
        op = node_defs[name].op
        for ops, by_frame in kinds:
            if op in ops:
                by_frame.setdefault(loop_of(name, node_defs, frame), []).append(name)
                break
    edges: list[tuple[str, str]] = []
    for f in sorted(set(merges) | set(exits)):
        if f == ROOT:
            continue
        ms, xs = merges.get(f, []), exits.get(f, [])
        if ms:
            edges += [(e, ms[0]) for e in enters.get(f, [])] + [(ms[0], m) for m in ms[1:]]
        if xs:
            edges += [(n, xs[0]) for n in nexts.get(f, [])] + [(xs[0], x) for x in xs[1:]]
    return edges
