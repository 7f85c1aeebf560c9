"""Synthetic training graphs with wide op-level parallelism (the held-out family of issue 14).

`wide_training_graph` builds one training step of a *multi-tower* model: several
towers of different widths read their own inputs and run side by side, each a
stack of blocks that alternate

* **inception-like blocks**: four parallel branches (a 1-tap projection, a
  1-tap then 3-tap convolution, a 1-tap then two 3-tap convolutions, a pool
  then a 1-tap projection), concatenated and projected back, around a
  residual;
* **mixture-of-experts blocks**: a router (projection, softmax, top-k), then
  ``experts`` expert MLPs in parallel, each on the tokens dispatched to it
  (gather, up-projection, GELU, down-projection, gate), combined by a scatter
  and added to the residual;

with a *long skip* every few blocks (block i's output is added into block
i + skip's), and the towers joined late: each tower's last output, and its
first block's output (a tower-spanning skip), pooled and concatenated into a
joint head (two dense layers and the loss).

The training step is the forward pass, a backward pass derived from it op by
op (every forward op's gradient ops, gradients summed by ``AddN`` where a
tensor fans out, activations read back from the forward pass), and an Adam
update per variable, colocated with the variable as TensorFlow does. Costs
follow the roofline of `pardnn.synthetic` (matrix products at a device's
FLOP rate, element-wise ops at its memory bandwidth, plus a launch overhead),
jittered by a few percent by the seed.

The generator is deterministic: the same arguments give the same graph.

>>> g = wide_training_graph(3000, seed=1)
>>> 2700 < g.num_nodes < 3300
True
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from pardnn.ir import GraphBuilder, OpGraph

from .synthetic import _BYTES_PER_US, _F32, _FLOP_PER_US, _LAUNCH_US   # one device cost model for both families

__all__ = ["wide_training_graph", "WideConfig", "wide_config"]


class _Tape:
    """Builds the forward pass, records each op's gradient rule, then emits backward and optimizer."""

    def __init__(self, name: str, seed: int):
        self.b = GraphBuilder(name)
        self.rng = np.random.default_rng(seed)
        self.nbytes: dict[str, int] = {}
        self.tape: list[tuple] = []              # (rule, out, inputs, info) in forward order
        self.var_bytes: dict[str, int] = {}
        self.var_grads: dict[str, list[str]] = {}

    # ---- raw ops ---------------------------------------------------------------
    def op(self, name: str, op: str, inputs: list[str], *, out: int, time_us: float, phase: str, temp: int = 0,
           group: str | None = None, persistent: int = 0) -> str:
        t = float(time_us * self.rng.uniform(0.95, 1.05))
        self.b.add_node(name, op, time_us=round(t, 3), output_bytes=[int(out)], temp_bytes=int(temp),
                        persistent_bytes=int(persistent), colocation=group, phase=phase)
        for src in dict.fromkeys(inputs):     # one edge per distinct producer
            self.b.add_edge(src, name)
        self.nbytes[name] = int(out)
        return name

    def elt(self, name: str, op: str, inputs: list[str], out: int, phase: str) -> str:
        moved = out + sum(self.nbytes[i] for i in inputs)
        return self.op(name, op, inputs, out=out, time_us=_LAUNCH_US + moved / _BYTES_PER_US, phase=phase)

    def mm(self, name: str, op: str, inputs: list[str], m: int, k: int, n: int, phase: str) -> str:
        flops = 2.0 * m * k * n
        moved = (m * k + k * n + m * n) * _F32
        return self.op(name, op, inputs, out=m * n * _F32,
                       time_us=_LAUNCH_US + max(flops / _FLOP_PER_US, moved / _BYTES_PER_US), phase=phase,
                       temp=min(m * n * _F32 // 4, 64 << 20))

    # ---- forward layers (each records its gradient rule) ------------------------
    def variable(self, name: str, elems: int) -> str:
        nbytes = elems * _F32
        self.var_bytes[name] = nbytes
        self.op(name, "VarHandleOp", [], out=8, time_us=1.0, phase="forward", group=name, persistent=3 * nbytes)
        return self.op(f"{name}/Read", "ReadVariableOp", [name], out=nbytes, time_us=1.0 + nbytes / _BYTES_PER_US,
                       phase="forward", group=name)

    def linear(self, name: str, x: str, m: int, k: int, n: int, op: str = "MatMul") -> str:
        """``x`` [m, k] times a new variable [k, n] (a 1-tap projection, or a k-tap convolution as im2col)."""
        w = self.variable(f"{name}/kernel", k * n)
        y = self.mm(f"{name}/{op}", op, [x, w], m, k, n, "forward")
        self.tape.append(("linear", y, [x], (f"{name}/kernel", m, k, n, op)))
        return y

    def unary(self, name: str, op: str, x: str, out: int | None = None, *, saves: str = "input") -> str:
        y = self.elt(name, op, [x], self.nbytes[x] if out is None else out, "forward")
        self.tape.append(("unary", y, [x], (op, saves)))
        return y

    def add(self, name: str, inputs: list[str]) -> str:
        y = self.elt(name, "AddV2" if len(inputs) == 2 else "AddN", inputs, self.nbytes[inputs[0]], "forward")
        self.tape.append(("add", y, list(inputs), None))
        return y

    def mul(self, name: str, a: str, b: str) -> str:
        """``a * b`` with ``b`` broadcast (a gate or a scale)."""
        y = self.elt(name, "Mul", [a, b], self.nbytes[a], "forward")
        self.tape.append(("mul", y, [a, b], None))
        return y

    def scale_shift(self, name: str, x: str, width: int) -> str:
        """``x * gamma + beta`` with two new [width] variables."""
        g = self.variable(f"{name}/gamma", width)
        b = self.variable(f"{name}/beta", width)
        y = self.elt(f"{name}/mul", "Mul", [x, g], self.nbytes[x], "forward")
        y = self.elt(f"{name}/add", "AddV2", [y, b], self.nbytes[x], "forward")
        self.tape.append(("scale_shift", y, [x], (f"{name}/gamma", f"{name}/beta", width)))
        return y

    def norm(self, name: str, x: str, rows: int, width: int) -> str:
        """Layer norm: moments, normalise, scale and shift."""
        mean = self.unary(f"{name}/Mean", "Mean", x, rows * _F32)
        c = self.elt(f"{name}/Sub", "Sub", [x, mean], self.nbytes[x], "forward")
        self.tape.append(("add", c, [x, mean], None))          # d/dx and d/dmean pass the gradient on
        var = self.unary(f"{name}/Variance", "Mean", self.unary(f"{name}/Square", "Square", c), rows * _F32)
        r = self.unary(f"{name}/Rsqrt", "Rsqrt", var, saves="output")
        y = self.mul(f"{name}/normalize", c, r)
        return self.scale_shift(name, y, width)

    def concat(self, name: str, inputs: list[str]) -> str:
        out = sum(self.nbytes[i] for i in inputs)
        y = self.op(name, "ConcatV2", inputs, out=out, time_us=_LAUNCH_US + 2 * out / _BYTES_PER_US, phase="forward")
        self.tape.append(("concat", y, list(inputs), None))
        return y

    def gather(self, name: str, x: str, idx: str, out: int) -> str:
        """Rows of ``x`` picked by ``idx`` (no gradient to ``idx``)."""
        y = self.elt(name, "GatherV2", [x, idx], out, "forward")
        self.tape.append(("gather", y, [x], (idx,)))
        return y

    def combine(self, name: str, parts: list[str], idx: str, out: int) -> str:
        """Scatter-add of the expert outputs back to token order."""
        y = self.op(name, "UnsortedSegmentSum", [*parts, idx], out=out,
                    time_us=_LAUNCH_US + 2 * (out + sum(self.nbytes[p] for p in parts)) / _BYTES_PER_US,
                    phase="forward")
        self.tape.append(("combine", y, list(parts), (idx,)))
        return y

    def nograd(self, name: str, op: str, inputs: list[str], out: int) -> str:
        """An op without a gradient (indices, shapes)."""
        return self.elt(name, op, inputs, out, "forward")

    # ---- backward ---------------------------------------------------------------
    def backward(self, loss: str, dloss: str) -> None:
        grads: dict[str, list[str]] = {loss: [dloss]}

        def give(t: str, g: str) -> None:
            grads.setdefault(t, []).append(g)

        for rule, y, inputs, info in reversed(self.tape):
            contrib = grads.pop(y, None)
            if not contrib:
                continue
            gp = f"gradients/{y}"
            dy = contrib[0] if len(contrib) == 1 else self.elt(f"{gp}/AddN", "AddN", contrib, self.nbytes[y],
                                                               "backward")
            if rule == "linear":
                var, m, k, n, op = info
                (x,) = inputs
                gop = "Conv2DBackprop" if op.startswith("Conv") else "MatMul"
                self.var_grads.setdefault(var, []).append(
                    self.mm(f"{gp}/grad_kernel", gop + ("Filter" if gop != "MatMul" else ""), [x, dy], k, m, n,
                            "backward"))
                give(x, self.mm(f"{gp}/grad_input", gop + ("Input" if gop != "MatMul" else ""),
                                [dy, f"{var}/Read"], m, n, k, "backward"))
            elif rule == "unary":
                op, saves = info
                (x,) = inputs
                keep = y if saves == "output" else x
                give(x, self.elt(f"{gp}/{op}Grad", f"{op}Grad", [dy, keep], self.nbytes[x], "backward"))
            elif rule == "add":
                for i, x in enumerate(inputs):
                    if self.nbytes[x] == self.nbytes[y]:
                        give(x, dy)
                    else:   # a broadcast operand: reduce the gradient to its shape
                        give(x, self.elt(f"{gp}/Sum_{i}", "Sum", [dy], self.nbytes[x], "backward"))
            elif rule == "mul":
                a, b = inputs
                give(a, self.elt(f"{gp}/Mul_0", "Mul", [dy, b], self.nbytes[a], "backward"))
                gb = self.elt(f"{gp}/Mul_1", "Mul", [dy, a], self.nbytes[a], "backward")
                give(b, self.elt(f"{gp}/Sum_1", "Sum", [gb], self.nbytes[b], "backward")
                     if self.nbytes[b] != self.nbytes[a] else gb)
            elif rule == "scale_shift":
                gvar, bvar, width = info
                (x,) = inputs
                self.var_grads.setdefault(gvar, []).append(
                    self.elt(f"{gp}/grad_gamma", "Sum", [dy, x], width * _F32, "backward"))
                self.var_grads.setdefault(bvar, []).append(
                    self.elt(f"{gp}/grad_beta", "Sum", [dy], width * _F32, "backward"))
                give(x, self.elt(f"{gp}/grad_input", "Mul", [dy, f"{gvar}/Read"], self.nbytes[x], "backward"))
            elif rule == "concat":
                for i, x in enumerate(inputs):
                    give(x, self.op(f"{gp}/Slice_{i}", "Slice", [dy], out=self.nbytes[x],
                                    time_us=_LAUNCH_US + 2 * self.nbytes[x] / _BYTES_PER_US, phase="backward"))
            elif rule == "gather":
                (x,) = inputs
                (idx,) = info
                give(x, self.elt(f"{gp}/UnsortedSegmentSum", "UnsortedSegmentSum", [dy, idx], self.nbytes[x],
                                 "backward"))
            elif rule == "combine":
                (idx,) = info
                for i, x in enumerate(inputs):
                    give(x, self.elt(f"{gp}/GatherV2_{i}", "GatherV2", [dy, idx], self.nbytes[x], "backward"))
            else:  # pragma: no cover
                raise AssertionError(rule)

    def optimizer(self) -> None:
        for var in self.var_bytes:
            srcs = self.var_grads.get(var)
            if not srcs:
                continue
            nbytes = self.var_bytes[var]
            gsum = srcs[0] if len(srcs) == 1 else self.elt(f"{var}/grad/AddN", "AddN", srcs, nbytes, "backward")
            t = self.op(f"{var}/Adam/update_m", "Mul", [gsum, var], out=nbytes,
                        time_us=_LAUNCH_US + 3 * nbytes / _BYTES_PER_US, phase="optimizer", group=var)
            t = self.op(f"{var}/Adam/update_v", "Mul", [gsum, t], out=nbytes,
                        time_us=_LAUNCH_US + 3 * nbytes / _BYTES_PER_US, phase="optimizer", group=var)
            self.op(f"{var}/Adam/ResourceApplyAdam", "ResourceApplyAdam", [var, t], out=0,
                    time_us=_LAUNCH_US + 4 * nbytes / _BYTES_PER_US, phase="optimizer", group=var)


# ---------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------

class WideConfig:
    """Shape of a wide model: towers (tokens, width each), blocks per tower, experts, top-k, skip stride."""

    def __init__(self, towers: list[tuple[int, int]], blocks: int, experts: int, top_k: int = 2, skip: int = 4,
                 batch: int = 8):
        self.towers, self.blocks, self.experts, self.top_k, self.skip, self.batch = (
            towers, blocks, experts, top_k, skip, batch)

    def __repr__(self) -> str:
        return (f"WideConfig(towers={self.towers}, blocks={self.blocks}, experts={self.experts}, "
                f"top_k={self.top_k}, skip={self.skip}, batch={self.batch})")


def _inception(G: _Tape, p: str, x: str, T: int, D: int) -> str:
    h = G.norm(f"{p}/norm", x, T, D)
    b = D // 4
    br0 = G.unary(f"{p}/b0/relu", "Relu", G.linear(f"{p}/b0/conv1", h, T, D, b, "Conv2D"), saves="output")
    br1 = G.unary(f"{p}/b1/relu1", "Relu", G.linear(f"{p}/b1/conv1", h, T, D, b, "Conv2D"), saves="output")
    br1 = G.unary(f"{p}/b1/relu3", "Relu", G.linear(f"{p}/b1/conv3", br1, T, 3 * b, b, "Conv2D"), saves="output")
    br2 = G.unary(f"{p}/b2/relu1", "Relu", G.linear(f"{p}/b2/conv1", h, T, D, b // 2, "Conv2D"), saves="output")
    br2 = G.unary(f"{p}/b2/relu3a", "Relu", G.linear(f"{p}/b2/conv3a", br2, T, 3 * (b // 2), b, "Conv2D"),
                  saves="output")
    br2 = G.unary(f"{p}/b2/relu3b", "Relu", G.linear(f"{p}/b2/conv3b", br2, T, 3 * b, b, "Conv2D"), saves="output")
    pool = G.unary(f"{p}/b3/MaxPool", "MaxPool", h, saves="output")
    br3 = G.unary(f"{p}/b3/relu", "Relu", G.linear(f"{p}/b3/conv1", pool, T, D, b, "Conv2D"), saves="output")
    cat = G.concat(f"{p}/concat", [br0, br1, br2, br3])
    out = G.linear(f"{p}/proj", cat, T, 4 * b, D)
    return G.add(f"{p}/residual", [x, out])


def _moe(G: _Tape, p: str, x: str, T: int, D: int, E: int, top_k: int) -> str:
    h = G.norm(f"{p}/norm", x, T, D)
    logits = G.linear(f"{p}/router", h, T, D, E)
    probs = G.unary(f"{p}/router/Softmax", "Softmax", logits, saves="output")
    gates = G.unary(f"{p}/router/TopKV2", "TopKV2", probs, T * top_k * _F32)
    idx = G.nograd(f"{p}/router/indices", "TopKV2", [probs], T * top_k * 4)
    cap = max(1, int(math.ceil(T * top_k / E * 1.25)))       # capacity factor 1.25
    parts = []
    for e in range(E):
        ep = f"{p}/expert_{e}"
        pos = G.nograd(f"{ep}/dispatch/Where", "Where", [idx], cap * 8)
        xe = G.gather(f"{ep}/dispatch/GatherV2", h, pos, cap * D * _F32)
        ge = G.gather(f"{ep}/gate/GatherV2", gates, pos, cap * _F32)
        u = G.linear(f"{ep}/up", xe, cap, D, 2 * D)
        u = G.unary(f"{ep}/gelu/Tanh", "Tanh", G.unary(f"{ep}/gelu/Pow", "Pow", u))
        u = G.linear(f"{ep}/down", u, cap, 2 * D, D)
        parts.append(G.mul(f"{ep}/gate/Mul", u, ge))
    y = G.combine(f"{p}/combine", parts, idx, T * D * _F32)
    return G.add(f"{p}/residual", [x, y])


def _build(cfg: WideConfig, name: str, seed: int) -> OpGraph:
    G = _Tape(name, seed)
    B = cfg.batch
    pooled = []
    for t, (T, D) in enumerate(cfg.towers):
        tp = f"tower_{t}"
        x = G.op(f"{tp}/input/IteratorGetNext", "IteratorGetNext", [], out=T * D * _F32, time_us=20.0,
                 phase="forward")
        x = G.linear(f"{tp}/stem", x, T, D, D, "Conv2D")
        outs = [x]
        first = None
        for i in range(cfg.blocks):
            bp = f"{tp}/block_{i}"
            x = _inception(G, bp, x, T, D) if i % 2 == 0 else _moe(G, bp, x, T, D, cfg.experts, cfg.top_k)
            if i >= cfg.skip and i % cfg.skip == 0:          # long skip from `skip` blocks back
                x = G.add(f"{bp}/long_skip", [x, outs[i + 1 - cfg.skip]])
            outs.append(x)
            first = x if first is None else first
        for label, src in (("last", x), ("first", first)):
            pooled.append(G.unary(f"{tp}/pool_{label}/Mean", "Mean", src, B * D * _F32))
    cat = G.concat("head/concat", pooled)
    width = sum(G.nbytes[p] for p in pooled) // (B * _F32)
    h = G.unary("head/fc1/relu", "Relu", G.linear("head/fc1", cat, B, width, 1024), saves="output")
    logits = G.linear("head/fc2", h, B, 1024, 16)
    labels = G.op("head/labels/IteratorGetNext", "IteratorGetNext", [], out=B * _F32, time_us=5.0, phase="forward")
    loss = G.op("loss/SparseSoftmaxCrossEntropy", "SparseSoftmaxCrossEntropyWithLogits", [logits, labels],
                out=_F32, time_us=10.0, phase="forward", temp=B * 16 * _F32)
    G.tape.append(("unary", loss, [logits], ("SoftmaxCrossEntropy", "input")))
    dloss = G.op("gradients/loss/Fill", "Fill", [loss], out=_F32, time_us=2.0, phase="backward")
    G.backward(loss, dloss)
    G.optimizer()
    return G.b.build()


def wide_config(n_nodes: int, seed: int = 0) -> WideConfig:
    """A model of about ``n_nodes`` ops: more towers and experts as graphs grow, then blocks to fill."""
    towers_n = max(2, min(8, int(round(math.log2(max(n_nodes, 1000) / 1000) + 2))))
    experts = max(4, min(16, int(round(math.sqrt(n_nodes) / 16))))
    rng = np.random.default_rng(seed + 7919)
    towers = []
    for t in range(towers_n):
        D = int(rng.choice([256, 384, 512, 768, 1024]))
        T = int(rng.choice([512, 1024, 2048, 4096]))
        towers.append((T, D))
    probe = [_count(WideConfig(towers, b, experts)) for b in (2, 4)]
    per_pair = probe[1] - probe[0]           # one inception and one mixture-of-experts block
    blocks = max(2, 2 + int(round(2 * (n_nodes - probe[0]) / per_pair)))
    return WideConfig(towers, blocks, experts)


def _count(cfg: WideConfig) -> int:
    return _build(cfg, "probe", 0).num_nodes


def wide_training_graph(n_nodes: int = 10_000, *, seed: int = 0, name: str | None = None) -> OpGraph:
    """A multi-tower inception + mixture-of-experts training step with about ``n_nodes`` ops."""
    cfg = wide_config(n_nodes, seed)
    g = _build(cfg, name or f"synthetic-wide-{n_nodes}", seed)
    return dataclasses.replace(g, meta={**g.meta, "config": repr(cfg),
                                        "generator": f"frontends.synthetic_wide.wide_training_graph({n_nodes}, seed={seed})"})
