"""Synthetic DNN-like training graphs for benchmarks and scaling tests.

`transformer_training_graph` builds one training step of a Transformer
encoder stack the way a framework lays it out: a forward pass of many small
ops around a few large matrix products per head, a backward pass that mirrors
it and reads the activations stashed by the forward pass (the long-lived
tensors that make memory binding), and an optimizer update per variable,
colocated with the variable as TensorFlow does. Costs follow a roofline:
matrix products at a device's peak FLOP rate, element-wise ops at its memory
bandwidth, plus a launch overhead. A seed perturbs costs by a few percent so
that ties are rare, as in real profiles.

The generator is deterministic: the same arguments give the same graph.

>>> g = transformer_training_graph(2000, seed=1)
>>> 1500 < g.num_nodes < 2600
True
"""

from __future__ import annotations

import math

import numpy as np

from pardnn.ir import GraphBuilder, OpGraph

_FLOP_PER_US = 60e6        # 60 TFLOP/s sustained on large matrix products
_BYTES_PER_US = 1.5e6      # 1.5 TB/s device memory bandwidth
_LAUNCH_US = 4.0
_F32 = 4


class _Gen:
    def __init__(self, name: str, seed: int, tokens: int, d_model: int, heads: int):
        self.b = GraphBuilder(name)
        self.rng = np.random.default_rng(seed)
        self.tokens, self.d, self.heads = tokens, d_model, heads
        self.dh = max(8, d_model // heads)
        self.grads: dict[str, list[tuple[str, int]]] = {}   # variable -> gradient contributions
        self.var_bytes: dict[str, int] = {}
        self.n = 0

    def _jitter(self, t: float) -> float:
        return float(t * self.rng.uniform(0.95, 1.05))

    def op(self, name: str, op: str, inputs: list[str], *, out: int, time_us: float, phase: str,
           temp: int = 0, group: str | None = None, persistent: int = 0) -> str:
        self.b.add_node(name, op, time_us=round(self._jitter(time_us), 3), output_bytes=[int(out)],
                        temp_bytes=int(temp), persistent_bytes=int(persistent), colocation=group, phase=phase)
        for src in inputs:
            self.b.add_edge(src, name)
        return name

    def eltwise(self, name: str, op: str, inputs: list[str], nbytes: int, phase: str) -> str:
        moved = nbytes * (len(inputs) + 1)
        return self.op(name, op, inputs, out=nbytes, time_us=_LAUNCH_US + moved / _BYTES_PER_US, phase=phase)

    def matmul(self, name: str, a: str, b: str, m: int, k: int, n: int, phase: str) -> str:
        flops = 2.0 * m * k * n
        moved = (m * k + k * n + m * n) * _F32
        t = _LAUNCH_US + max(flops / _FLOP_PER_US, moved / _BYTES_PER_US)
        return self.op(name, "MatMul", [a, b], out=m * n * _F32, time_us=t, phase=phase,
                       temp=min(m * n * _F32 // 4, 64 << 20))

    def variable(self, name: str, shape_elems: int) -> str:
        """A resource variable, its read, and (later) its optimizer update, in one group."""
        nbytes = shape_elems * _F32
        self.var_bytes[name] = nbytes
        self.op(name, "VarHandleOp", [], out=8, time_us=1.0, phase="forward", group=name,
                persistent=3 * nbytes)   # the weights and two Adam slots
        return self.op(f"{name}/Read", "ReadVariableOp", [name], out=nbytes, time_us=1.0 + nbytes / _BYTES_PER_US,
                       phase="forward", group=name)

    def grad(self, var: str, src: str, phase: str = "backward") -> None:
        self.grads.setdefault(var, []).append((src, self.var_bytes[var]))


def _sizes(n_nodes: int) -> tuple[int, int]:
    """(layers, heads) giving about ``n_nodes`` nodes; deeper and wider as graphs grow."""
    layers = max(1, int(round(math.sqrt(n_nodes) / 6)))
    per_layer = n_nodes / layers
    # nodes per layer ~ 61 + 46 * heads (measured on the builder below)
    heads = max(1, int(round((per_layer - 61) / 46)))
    return layers, heads


def transformer_training_graph(n_nodes: int = 10_000, *, seed: int = 0, tokens: int = 4096,
                               d_model: int = 1024, name: str | None = None) -> OpGraph:
    """A Transformer-encoder training step with about ``n_nodes`` ops.

    Layers and heads scale with ``n_nodes`` (deeper and wider together);
    ``tokens`` (batch x sequence) and ``d_model`` set the tensor sizes.
    """
    layers, heads = _sizes(n_nodes)
    G = _Gen(name or f"synthetic-transformer-{n_nodes}", seed, tokens, d_model, heads)
    T, D, H, Dh = tokens, d_model, heads, G.dh
    act = T * D * _F32
    head_act = T * Dh * _F32
    attn = T * min(T, 512) * _F32 // max(1, H // 4)   # score matrix per head (sequence-blocked)
    fwd_log: list[tuple] = []   # (kind, args) for the backward pass, in forward order

    x = G.op("input/IteratorGetNext", "IteratorGetNext", [], out=act, time_us=20.0, phase="forward")
    labels = G.op("input/labels", "IteratorGetNext", [], out=T * _F32, time_us=5.0, phase="forward")
    for layer in range(layers):
        p = f"layer_{layer}"
        # Pre-norm: mean, centre, variance, rsqrt, scale, shift.
        ln_in = x
        for i, op in enumerate(("Mean", "Sub", "Square", "Mean", "Rsqrt", "Mul")):
            inputs = [x] if i == 0 else ([ln_in, x] if op == "Sub" else [x])
            x = G.eltwise(f"{p}/ln1/{op}_{i}", op, inputs, act if op not in ("Mean", "Rsqrt") else T * _F32,
                          "forward")
        gamma = G.variable(f"{p}/ln1/gamma", D)
        x = G.eltwise(f"{p}/ln1/scale", "Mul", [x, gamma], act, "forward")
        fwd_log.append(("ln", f"{p}/ln1", ln_in, x, gamma.rsplit("/Read", 1)[0]))
        ln_out = x
        heads_out = []
        for h in range(H):
            hp = f"{p}/attn/head_{h}"
            proj = {}
            for qkv in ("q", "k", "v"):
                w = G.variable(f"{hp}/w{qkv}", D * Dh)
                y = G.matmul(f"{hp}/{qkv}/MatMul", ln_out, w, T, D, Dh, "forward")
                y = G.op(f"{hp}/{qkv}/Reshape", "Reshape", [y], out=head_act, time_us=1.5, phase="forward")
                proj[qkv] = y
            s = G.matmul(f"{hp}/scores/MatMul", proj["q"], proj["k"], T, Dh, min(T, 512), "forward")
            s = G.eltwise(f"{hp}/scores/scale", "Mul", [s], attn, "forward")
            m = G.eltwise(f"{hp}/softmax/Max", "Max", [s], T * _F32, "forward")
            e = G.eltwise(f"{hp}/softmax/Exp", "Exp", [G.eltwise(f"{hp}/softmax/Sub", "Sub", [s, m], attn,
                                                                 "forward")], attn, "forward")
            z = G.eltwise(f"{hp}/softmax/Sum", "Sum", [e], T * _F32, "forward")
            prob = G.eltwise(f"{hp}/softmax/RealDiv", "RealDiv", [e, z], attn, "forward")
            ctx = G.matmul(f"{hp}/context/MatMul", prob, proj["v"], T, min(T, 512), Dh, "forward")
            heads_out.append(ctx)
            fwd_log.append(("attention", hp, proj["q"], proj["k"], proj["v"], prob, s))
        cat = G.op(f"{p}/attn/concat", "ConcatV2", heads_out, out=act, time_us=_LAUNCH_US + 2 * act / _BYTES_PER_US,
                   phase="forward")
        wo = G.variable(f"{p}/attn/wo", D * D)
        o = G.matmul(f"{p}/attn/out/MatMul", cat, wo, T, D, D, "forward")
        fwd_log.append(("concat", f"{p}/attn", heads_out))
        fwd_log.append(("matmul", f"{p}/attn/out", cat, wo.rsplit("/Read", 1)[0], T, D, D))
        x = G.eltwise(f"{p}/residual1/AddV2", "AddV2", [o, ln_in], act, "forward")
        res1 = x
        # MLP: up-projection, GELU (tanh form), down-projection.
        w1 = G.variable(f"{p}/mlp/w1", D * 4 * D)
        u = G.matmul(f"{p}/mlp/up/MatMul", x, w1, T, D, 4 * D, "forward")
        fwd_log.append(("matmul", f"{p}/mlp/up", x, w1.rsplit("/Read", 1)[0], T, D, 4 * D))
        gelu_in = u
        for j, op in enumerate(("Pow", "Mul", "AddV2", "Tanh", "AddV2", "Mul")):
            u = G.eltwise(f"{p}/mlp/gelu/{op}_{j}", op, [u], 4 * act, "forward")
        fwd_log.append(("gelu", f"{p}/mlp/gelu", gelu_in, u))
        w2 = G.variable(f"{p}/mlp/w2", 4 * D * D)
        dn = G.matmul(f"{p}/mlp/down/MatMul", u, w2, T, 4 * D, D, "forward")
        fwd_log.append(("matmul", f"{p}/mlp/down", u, w2.rsplit("/Read", 1)[0], T, 4 * D, D))
        x = G.eltwise(f"{p}/residual2/AddV2", "AddV2", [dn, res1], act, "forward")
        fwd_log.append(("residual", p, res1))

    # Loss.
    wl = G.variable("head/w", D * 8)
    logits = G.matmul("head/MatMul", x, wl, T, D, 8, "forward")
    loss = G.op("loss/SparseSoftmaxCrossEntropy", "SparseSoftmaxCrossEntropyWithLogits", [logits, labels],
                out=_F32, time_us=10.0, phase="forward", temp=T * 8 * _F32)
    dlogits = G.op("gradients/loss/grad", "Mul", [loss, logits], out=T * 8 * _F32, time_us=6.0, phase="backward")
    G.grad("head/w", G.matmul("gradients/head/MatMul_grad/MatMul_1", x, dlogits, D, T, 8, "backward"))
    dy = G.matmul("gradients/head/MatMul_grad/MatMul", dlogits, wl, T, 8, D, "backward")

    # Backward pass, mirroring the forward log in reverse.
    # A residual connection's gradient waits on a stack until the branch it skips has been
    # differentiated; the per-head gradients of an attention block are summed at its end.
    pending_residual: list[str] = []
    pending_heads: list[str] = []
    head_sums: list[str] = []
    for entry in reversed(fwd_log):
        kind = entry[0]
        gp = f"gradients/{entry[1]}"
        if kind == "residual":
            pending_residual.append(dy)   # the gradient also flows to the residual input
        elif kind == "matmul":
            _, _, xin, var, m, kk, n = entry
            if entry[1].endswith("attn/out"):
                pending_residual.append(dy)
            G.grad(var, G.matmul(f"{gp}/MatMul_grad/MatMul_1", xin, dy, kk, m, n, "backward"))
            dy = G.matmul(f"{gp}/MatMul_grad/MatMul", dy, f"{var}/Read", m, n, kk, "backward")
            if pending_residual and entry[1].endswith("mlp/up"):
                dy = G.eltwise(f"{gp}/residual_AddN", "AddN", [dy, pending_residual.pop()], act, "backward")
        elif kind == "gelu":
            _, _, gin, gout = entry
            for j, op in enumerate(("Mul", "Sub", "Mul", "Mul")):
                dy = G.eltwise(f"{gp}/{op}_grad_{j}", op, [dy, gin] if j == 0 else [dy], 4 * act, "backward")
        elif kind == "concat":
            _, _, parts = entry
            split = G.op(f"{gp}/concat_grad/Split", "Split", [dy], out=act, time_us=_LAUNCH_US + act / _BYTES_PER_US,
                         phase="backward")
            pending_heads.extend(G.op(f"{gp}/concat_grad/Slice_{i}", "Slice", [split], out=head_act, time_us=2.0,
                                      phase="backward") for i in range(len(parts)))
        elif kind == "attention":
            _, hp, q, kk_, v, prob, s = entry
            dctx = pending_heads.pop()
            dprob = G.matmul(f"gradients/{hp}/context/MatMul_grad/MatMul", dctx, v, T, Dh, min(T, 512), "backward")
            dv = G.matmul(f"gradients/{hp}/context/MatMul_grad/MatMul_1", prob, dctx, min(T, 512), T, Dh, "backward")
            ds = G.eltwise(f"gradients/{hp}/softmax_grad/Mul", "Mul", [dprob, prob], attn, "backward")
            ds = G.eltwise(f"gradients/{hp}/softmax_grad/Sub", "Sub", [ds, s], attn, "backward")
            dq = G.matmul(f"gradients/{hp}/scores/MatMul_grad/MatMul", ds, kk_, T, min(T, 512), Dh, "backward")
            dk = G.matmul(f"gradients/{hp}/scores/MatMul_grad/MatMul_1", ds, q, min(T, 512), T, Dh, "backward")
            contributions = []
            for qkv, dproj in (("q", dq), ("k", dk), ("v", dv)):
                var = f"{hp}/w{qkv}"
                d2 = G.op(f"gradients/{hp}/{qkv}/Reshape_grad", "Reshape", [dproj], out=head_act, time_us=1.5,
                          phase="backward")
                ln_out = hp.split("/attn/", 1)[0] + "/ln1/scale"
                G.grad(var, G.matmul(f"gradients/{hp}/{qkv}/MatMul_grad/MatMul_1", ln_out, d2, D, T, Dh,
                                     "backward"))
                contributions.append(G.matmul(f"gradients/{hp}/{qkv}/MatMul_grad/MatMul", d2, f"{var}/Read",
                                              T, Dh, D, "backward"))
            head_sums.append(G.eltwise(f"gradients/{hp}/AddN", "AddN", contributions, act, "backward"))
            if not pending_heads:
                dy = G.eltwise(f"gradients/{hp.rsplit('/attn', 1)[0]}/attn/AddN", "AddN", head_sums, act, "backward")
                head_sums.clear()
        elif kind == "ln":
            _, lp, ln_in, ln_out, gvar = entry
            G.grad(gvar, G.eltwise(f"{gp}/scale_grad/Sum", "Sum", [dy, ln_out], D * _F32, "backward"))
            dy = G.eltwise(f"{gp}/scale_grad/Mul", "Mul", [dy, f"{gvar}/Read"], act, "backward")
            for j, op in enumerate(("Mul", "Sum", "Mul", "Sub", "Mul")):
                dy = G.eltwise(f"{gp}/norm_grad/{op}_{j}", op, [dy, ln_in] if j == 0 else [dy], act, "backward")
            if pending_residual:
                dy = G.eltwise(f"{gp}/residual_AddN", "AddN", [dy, pending_residual.pop()], act, "backward")

    # Optimizer: sum the gradient contributions, then an Adam update in the variable's group.
    for var, contributions in G.grads.items():
        nbytes = G.var_bytes[var]
        srcs = [c[0] for c in contributions]
        gsum = srcs[0] if len(srcs) == 1 else G.eltwise(f"{var}/grad/AddN", "AddN", srcs, nbytes, "backward")
        t = G.op(f"{var}/Adam/update_m", "Mul", [gsum, var], out=nbytes, time_us=_LAUNCH_US + 3 * nbytes / _BYTES_PER_US,
                 phase="optimizer", group=var)
        t = G.op(f"{var}/Adam/update_v", "Mul", [gsum, t], out=nbytes, time_us=_LAUNCH_US + 3 * nbytes / _BYTES_PER_US,
                 phase="optimizer", group=var)
        G.op(f"{var}/Adam/ResourceApplyAdam", "ResourceApplyAdam", [var, t], out=0,
             time_us=_LAUNCH_US + 4 * nbytes / _BYTES_PER_US, phase="optimizer", group=var)
    return G.b.build()
