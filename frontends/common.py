"""Helpers shared by the importers: robust averaging of profiled samples, an error's text on one line, the
range an integer input's values may take."""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Iterable, Sequence

import numpy as np


def robust_average(samples: Sequence[float]) -> float:
    """ParDNN's robust average of profiled durations.

    With five or more samples, drop the two lowest and two highest, then
    take (mean + median) / 2 of the rest. With fewer, the median.

    >>> round(robust_average([10, 11, 12, 13, 100, 1, 12]), 4)   # keeps 11, 12, 12
    11.8333
    >>> robust_average([4.0, 6.0])
    5.0
    """
    x = np.sort(np.asarray(samples, dtype=np.float64))
    if x.size == 0:
        raise ValueError("no samples")
    if x.size >= 5:
        x = x[2:-2]
        return float((x.mean() + np.median(x)) / 2)
    return float(np.median(x))


# TensorFlow's run-time errors (TF 2.x) open with a header and, per failed node, where the node was defined:
#
#     Graph execution error:
#
#     Detected at node 'CheckNumerics' defined at (most recent call last):
#         File "train.py", line 10, in <module>
#     Node: 'CheckNumerics'
#     log neg : Tensor had NaN values
#     \t [[{{node CheckNumerics}}]]
#
# and, with several root errors, "2 root error(s) found." and "(0) INVALID_ARGUMENT: ..." lines.
_HEADERS = ("Graph execution error:",)
_NOISE = re.compile(r"^(\d+ root error\(s\) found\.|\d+ successful operations?\.|\d+ derived errors? ignored\.|\[\[)")
_CODE = re.compile(r"^\(\d+\)\s+[A-Z_]+:\s*")
_RULE = re.compile(r"^=+$")
_NODE = re.compile(r"\{\{node ([^}]+)\}\}|^Node: '([^']+)'|^Detected at node '([^']+)'", re.M)


def first_line(exc: BaseException) -> str:
    """The line of ``exc``'s message that says what went wrong; its type's name when it has none.

    Most messages say it first and run on with context and stack lines (TensorFlow's shape errors, Keras's);
    TensorFlow's run-time errors put a header and the failed nodes' stack traces first, which are skipped,
    as are the "N root error(s) found." counts and the "(0) INVALID_ARGUMENT:" prefixes.

    >>> first_line(ValueError("Shapes (2, 3) and (4,) are incompatible\\n  In call to ..."))
    'Shapes (2, 3) and (4,) are incompatible'
    >>> first_line(ValueError("Graph execution error:\\n\\nDetected at node 'Log' defined at (most recent call "
    ...                       "last):\\n    File \\"t.py\\", line 3\\nNode: 'Log'\\nlog : Tensor had NaN values\\n"
    ...                       "\\t [[{{node Log}}]]"))
    'log : Tensor had NaN values'
    >>> first_line(ValueError("Graph execution error:\\n\\n2 root error(s) found.\\n  (0) INVALID_ARGUMENT: "
    ...                       "Input to reshape is a tensor with 6 values\\n\\t [[{{node R}}]]\\n  (1) ..."))
    'Input to reshape is a tensor with 6 values'
    >>> first_line(KeyError())
    'KeyError'

    A distributed run's error sits between rules of ``=`` and names the task on a line of its own, its cause on
    the next: the two are one line.

    >>> first_line(ValueError("Graph execution error:\\n\\n=====\\nUNAVAILABLE: From /job:worker/replica:0/task:1:"
    ...                       "\\nSocket closed\\nAdditional GRPC error information ...\\n====="))
    'UNAVAILABLE: From /job:worker/replica:0/task:1: Socket closed'
    >>> first_line(ValueError("Invalid argument: Expected shape:\\n\\t [[{{node x}}]]"))
    'Invalid argument: Expected shape:'
    """
    text = getattr(exc, "message", None) or str(exc)
    lines = [raw for raw in text.splitlines() if not _RULE.match(raw.strip())]
    trace = False
    for i, raw in enumerate(lines):
        line = raw.strip()
        if raw.startswith("Detected at node") or raw.startswith("Detected in the following"):
            trace = True
            continue
        if trace:
            if not line or (raw[:1].isspace() and not _CODE.match(line)):
                continue
            trace = False
            if line.startswith("Node: "):
                continue
        if not line or line in _HEADERS or _NOISE.match(line):
            continue
        line = _CODE.sub("", line)
        nxt = lines[i + 1].strip() if i + 1 < len(lines) else ""
        if line.endswith(":") and nxt and nxt not in _HEADERS and not _NOISE.match(nxt):   # not "[[{{node x}}]]"
            line = f"{line} {_CODE.sub('', nxt)}"
        if line:
            return line
    first = text.strip().splitlines()
    return first[0].strip() if first else type(exc).__name__


def error_node(exc: BaseException) -> str | None:
    """The node a TensorFlow error names: its ``op``, else the first ``{{node X}}`` or ``Node: 'X'`` in its
    message; None when it names none.

    >>> error_node(ValueError("log : Tensor had NaN values\\n\\t [[{{node Log}}]]"))
    'Log'
    >>> error_node(ValueError("no node here")) is None
    True
    """
    op = getattr(exc, "op", None)
    if op is not None and getattr(op, "name", None):
        return str(op.name)
    m = _NODE.search(getattr(exc, "message", None) or str(exc))
    return next((x for x in m.groups() if x), None) if m else None


def one_line(exc: BaseException, limit: int = 300) -> str:
    """``exc``'s whole message on one line: its lines joined (onnx's checker breaks a sentence over three, the
    node's name on the second), cut at ``limit`` characters; its type's name when it has none.

    >>> one_line(ValueError("Field 'type' of 'attribute' is required but missing\\n  of node:\\n  n3"))
    "Field 'type' of 'attribute' is required but missing of node: n3"
    """
    text = " ".join(str(exc).split())
    if len(text) > limit:
        text = text[:limit - 3].rstrip() + "..."
    return text or type(exc).__name__


@dataclass(frozen=True)
class IndexRange:
    """An integer input's values are drawn in ``[0, high)``; ``why`` says which op limits them."""

    high: int
    why: str


def smallest_limit(start: Any, uses: Callable[[Any], Iterable[tuple[Any, int]]],
                   limit: Callable[[Any, int], tuple[int | None, str] | None],
                   moved: Callable[[Any, int], Iterable[Any]], key: Callable[[Any], Hashable] = lambda v: v
                   ) -> IndexRange | None:
    """The smallest limit an op puts on the values of ``start`` or of values that hold them, breadth first.

    ``uses(value)``: its ``(op, input position)`` uses; ``limit(op, i)``: the exclusive upper limit the op puts
    on that input and what it is, else None; ``moved(op, i)``: the op's outputs that hold that input's values
    unchanged (none where it computes with them); ``key``: a value's identity.

    >>> edges = {"ids": [("cast", 0)], "c": [("gather", 1), ("onehot", 0)]}
    >>> smallest_limit("ids", lambda v: edges.get(v, ()),
    ...                lambda op, i: {"gather": (30, "30 rows"), "onehot": (8, "depth 8")}.get(op),
    ...                lambda op, i: ["c"] if op == "cast" else [])
    IndexRange(high=8, why='depth 8')
    """
    best: IndexRange | None = None
    seen = {key(start)}
    queue = deque([start])
    while queue:
        value = queue.popleft()
        for op, i in uses(value):
            found = limit(op, i)
            if found is not None and found[0] is not None and found[0] > 0 and (best is None or found[0] < best.high):
                best = IndexRange(int(found[0]), found[1])
            for y in moved(op, i):
                if key(y) not in seen:
                    seen.add(key(y))
                    queue.append(y)
    return best
