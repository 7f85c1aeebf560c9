"""Which ops must share a device, and which must stay on the host.

**Groups.** TensorFlow's placer puts an op that takes a resource handle or a
reference (a variable read, an assignment, an optimizer update) on the
device of the op that made the handle, whatever device was asked for. It
does this for every data edge whose consumer input is of resource or ref
type, so the rule follows handles through ``Identity``, ``Enter``,
``Switch`` and the like; only function-call ops (``PartitionedCall``,
``StatefulPartitionedCall``) and dataset ops are exempt. We apply the same
rule, except that a call compiled with XLA (``_XlaMustCompile``, which
grappler does not inline: Keras runs a grouped convolution that way) is not
exempt: its compiled kernel reads the variable where it runs, and fails
("Trying to access resource ... from device ...") on another device.
The explicit ``_class: ["loc:@other"]`` attributes join ops too, with a
union-find. Each resulting set of two or more ops is one colocation group,
named after its first variable op (``VarHandleOp``, ``VariableV2``, ...) in
graph order, or its first op when it has none. A ``ResourceApplyAdam``
(which takes the variable and both slots) joins a variable and its slots in
one group; Keras 3 optimizers update each slot with its own ops, so there a
variable and its slots are separate groups, as TensorFlow allows.

**A ``Switch`` runs where its data comes from.** TensorFlow's placer
moves a ``Switch`` to the device of its data input, whatever device it was
given, soft placement off or not (a lowered ``tf.cond``, such as the one
Keras's ``LossScaleOptimizer`` applies its update in, has one per input).
So a ``Switch`` joins the producer of its data input.

**Constants stay with their readers.** TensorFlow evaluates a ``Const``
every step, so a constant placed away from its reader crosses between
devices every step (a tower's weights, 4 MiB each, sent over gRPC each
step), while it costs nothing to run where it is read. A ``Const`` (or
``HostConst``) whose data consumers are one op joins that op's group; one
whose consumers already share a group (after the rules above) joins that
group; one read by ops of different groups, or by ungrouped ops, stays
free and the partitioner places it like any op.

**A while loop is one group.** Every op of a loop frame (its ``Enter``,
``Merge``, ``Switch``, ``NextIteration``, ``LoopCond``, ``Exit`` and the
body between them, `loops.frames`) shares a device: split across devices,
a loop synchronises them every iteration, and TensorFlow re-places some
of its control-flow ops anyway. Nested frames join their outermost
frame's group. A gradient loop is a frame of its own (TensorFlow names it
``..._grad``), so a loop and its gradient may go to different devices.

**Host ops.** pardnn's devices are a cluster's accelerators; the host CPU is
not one of them. Some ops can only run on the host: savers and restorers,
dataset and iterator ops, Python callbacks, printing and summaries, and ops
producing strings. Such an op is **pinned to device 0** and marked
``"host": true``: the host of device 0 runs it (the client process, which
also feeds and fetches), so its tensors reach device 0 over that device's
host link and every other device over the cluster's links, which is what
a pin to device 0 models. The backend places these ops on the CPU of device
0's task, not on device 0 itself. With logical CPU devices, device 0 *is*
that CPU. If a GraphDef requests devices and asks for a CPU for some ops
while asking for accelerators for others, its CPU ops are host ops too. A
group that holds a host op is pinned whole.

**Fed inputs are host ops.** The client sends a ``Placeholder``'s value
with the step: to device 0's task (the master of a cluster), which
forwards it to the device that reads it. So a fed input starts on device
0 and costs a transfer to reach any other device (measured on two pinned
CPU tasks: a 1 MiB feed read on task 1 costs its step 2-4 ms more than one
read on task 0), and a placement that put it elsewhere would hide that
cost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from ._tf import tf
from .loops import SEP, loop_of
from .model import parse_input

HOST_DEVICE = 0
"""The device index host-only ops are pinned to (see the module docstring)."""

HOST_ONLY_OPS = frozenset({
    "SaveV2", "RestoreV2", "MergeV2Checkpoints", "Save", "SaveSlices", "Restore", "RestoreSlice",
    "ShardedFilename", "ShardedFilespec", "PyFunc", "PyFuncStateless", "EagerPyFunc", "Print", "PrintV2",
    "StringFormat", "ReadFile", "WriteFile", "DecodeJpeg", "DecodePng", "DecodeImage", "DecodeRaw",
    "DecodeCSV", "ParseExample", "ParseExampleV2", "ParseSingleExample", "ParseSequenceExample",
    "MakeIterator", "OneShotIterator", "DeleteIterator", "OptionalGetValue", "OptionalHasValue",
    "OptionalFromValue", "OptionalNone",
})
_STRING_OK = frozenset({"Const", "HostConst", "Identity", "IdentityN", "Placeholder", "PlaceholderWithDefault",
                        "NoOp"})
_EXEMPT_CONSUMERS = frozenset({"PartitionedCall", "StatefulPartitionedCall"})
SWITCH_OPS = frozenset({"Switch", "RefSwitch"})
"""Ops TensorFlow places on the device of their data input (module docstring)."""
VARIABLE_OPS = frozenset({"VarHandleOp", "VariableV2", "Variable", "TemporaryVariable", "_VarHandlesOp"})
CONSTANT_OPS = frozenset({"Const", "HostConst"})
"""Sources TensorFlow evaluates every step at no cost: they join their readers (module docstring)."""


def is_host_only(op: "tf.Operation") -> bool:
    """Whether TensorFlow can only run ``op`` on a host CPU (rules in the module docstring)."""
    t = op.type
    if t == "Placeholder":
        return True
    if t in HOST_ONLY_OPS or t.endswith(("Dataset", "DatasetV2", "DatasetV3", "DatasetV4")):
        return True
    if t.startswith(("Iterator", "AnonymousIterator", "AnonymousMultiDeviceIterator")) or "Summary" in t:
        return True
    if t in _STRING_OK:
        return False
    return any(o.dtype.base_dtype == tf.string for o in op.outputs)


def _is_exempt(op: "tf.Operation", node_def) -> bool:
    """Whether ``op`` may read a resource on another device (a call run by the function runtime, a dataset)."""
    if op.type.endswith("Dataset"):
        return True
    xla = "_XlaMustCompile" in node_def.attr and node_def.attr["_XlaMustCompile"].b
    return op.type in _EXEMPT_CONSUMERS and not xla


def _input_types(op) -> Sequence:
    try:
        return op._input_types
    except AttributeError:   # pragma: no cover - older TensorFlow
        return [t.dtype for t in op.inputs]


@dataclass(frozen=True)
class Colocation:
    """Per node (in the order given): its group name or None, and whether it must run on the host."""

    group: tuple[str | None, ...]
    host: tuple[bool, ...]


class _UnionFind:
    def __init__(self, n: int):
        self.parent = list(range(n))

    def find(self, x: int) -> int:
        p = self.parent
        while p[x] != x:
            p[x] = p[p[x]]
            x = p[x]
        return x

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            # the lower id becomes the root: deterministic
            if rb < ra:
                ra, rb = rb, ra
            self.parent[rb] = ra


def colocation(graph: "tf.Graph", names: Sequence[str], node_defs: dict,
               extra_edges: Sequence[tuple[str, str]] = (), frames: Mapping[str, str] | None = None) -> Colocation:
    """Colocation groups and host-only ops of the nodes ``names`` (graph order).

    ``node_defs`` maps names to NodeDefs (for ``_class`` and requested devices).
    ``extra_edges`` are data edges ``graph`` lacks (loop back edges left out
    for shape inference); a handle or reference crossing one joins its ends.
    ``frames`` maps each node to its loop frame path (`loops.frames`; ``""``
    outside loops): a loop's ops join one group.
    """
    index = {n: i for i, n in enumerate(names)}
    uf = _UnionFind(len(names))
    ops = [graph.get_operation_by_name(n) for n in names]
    for i, op in enumerate(ops):
        if _is_exempt(op, node_defs[names[i]]):
            continue
        for t, want in zip(op.inputs, _input_types(op)):
            if want == tf.resource or want._is_ref_dtype or t.dtype == tf.resource:
                j = index.get(t.op.name)
                if j is not None:
                    uf.union(j, i)
    for i, op in enumerate(ops):
        if op.type in SWITCH_OPS and op.inputs:
            j = index.get(op.inputs[0].op.name)
            if j is not None:
                uf.union(j, i)
    for src, dst in extra_edges:
        out = ops[index[src]].outputs
        if out and (out[0].dtype == tf.resource or out[0].dtype._is_ref_dtype):
            uf.union(index[src], index[dst])
    for i, name in enumerate(names):
        nd = node_defs[name]
        if "_class" in nd.attr:
            for spec in nd.attr["_class"].list.s:
                spec = spec.decode()
                if spec.startswith("loc:@") and spec[5:] in index:
                    uf.union(index[spec[5:]], i)
    if frames is not None:
        _join_loops(uf, names, node_defs, frames)
    _join_constants(uf, names, node_defs, index)
    roots = [uf.find(i) for i in range(len(names))]
    members: dict[int, list[int]] = {}
    for i, r in enumerate(roots):
        members.setdefault(r, []).append(i)
    group_name: dict[int, str] = {}
    for r, ms in members.items():
        if len(ms) < 2:
            continue
        var = next((m for m in ms if ops[m].type in VARIABLE_OPS), ms[0])
        group_name[r] = names[var]
    host = [is_host_only(op) for op in ops]
    devices = [node_defs[n].device.upper() for n in names]
    if any(("GPU" in d or "TPU" in d) for d in devices):
        host = [h or ("CPU" in d) for h, d in zip(host, devices)]
    host_roots = {roots[i] for i, h in enumerate(host) if h and roots[i] in group_name}
    host = [h or (roots[i] in host_roots) for i, h in enumerate(host)]
    return Colocation(group=tuple(group_name.get(r) for r in roots), host=tuple(host))


def _join_loops(uf: _UnionFind, names: Sequence[str], node_defs: dict, frames: Mapping[str, str]) -> None:
    """Join every op of a loop frame, nested frames included, into its outermost frame's set."""
    first: dict[str, int] = {}
    for i, name in enumerate(names):
        path = loop_of(name, node_defs, frames)     # an Exit belongs to the loop it leaves
        if not path:
            continue
        outer = path.split(SEP)[0]
        if outer in first:
            uf.union(first[outer], i)
        else:
            first[outer] = i


def _join_constants(uf: _UnionFind, names: Sequence[str], node_defs: dict, index: dict[str, int]) -> None:
    """Join each constant to its readers when they are one op or already share one set."""
    readers: dict[int, set[int]] = {}
    for i, name in enumerate(names):
        for ref in node_defs[name].input:
            src, _, control = parse_input(ref)
            j = index.get(src)
            if not control and j is not None and node_defs[src].op in CONSTANT_OPS:
                readers.setdefault(j, set()).add(i)
    size: dict[int, int] = {}
    for i in range(len(names)):
        r = uf.find(i)
        size[r] = size.get(r, 0) + 1
    joins = []
    for j, rs in readers.items():
        roots = {uf.find(r) for r in rs}
        if len(rs) == 1 or (len(roots) == 1 and size[next(iter(roots))] > 1):
            joins.append((j, min(rs)))
    for j, r in joins:
        uf.union(j, r)
