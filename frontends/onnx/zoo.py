"""Small real architectures written with `onnx.helper`: an MLP and a GPT-2 style Transformer.

These are the models pardnn ships in ``sample_graphs/`` and tests against.
The architectures are the real ones (layer for layer what PyTorch exports at
opset 17: ``Gemm`` + ``Relu`` for the MLP; pre-LayerNorm blocks with fused
QKV, causal masked softmax attention, erf-GELU MLP and residuals, tied
token embedding / LM head for the GPT); the weights are randomly
initialised with a fixed seed, the way the real models start training.

>>> m = mlp([8, 16, 4], seed=0)
>>> [n.op_type for n in m.graph.node]
['Gemm', 'Relu', 'Gemm']
>>> g = gpt(vocab=32, d_model=16, heads=2, layers=1, max_len=8, seed=0)
>>> sum(n.op_type == "Softmax" for n in g.graph.node), g.graph.input[0].name
(1, 'input_ids')
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8   # what opset 17 shipped with; readable by every onnxruntime >= 1.13


class _Writer:
    """Collects nodes and initializers; names values and nodes like torch.onnx does."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.ln_stats = False   # LayerNormalization also outputs mean and inverse std-dev

    def weight(self, name: str, array: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def const_i64(self, name: str, values) -> str:
        return self.weight(name, np.asarray(values, dtype=np.int64))

    def const_f32(self, name: str, value: float) -> str:
        return self.weight(name, np.asarray(value, dtype=np.float32))

    def op(self, op_type: str, inputs: list[str], name: str, n_out: int = 1, **attrs) -> str | list[str]:
        outs = [f"{name}_output_{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=name, **attrs))
        return outs[0] if n_out == 1 else outs

    def model(self, name: str, inputs, outputs, doc: str) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, initializer=self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="pardnn.frontends.onnx.zoo", doc_string=doc)
        m.ir_version = IR_VERSION
        onnx.checker.check_model(m, full_check=True)
        return m


def mlp(sizes: list[int], *, seed: int = 0, batch: str | int = "batch", name: str = "mlp") -> onnx.ModelProto:
    """A multi-layer perceptron ``sizes[0] -> ... -> sizes[-1]``: ``Gemm`` layers with ``Relu`` between.

    Weights are He-uniform (PyTorch's ``nn.Linear`` default scale), biases
    zero. The batch dimension is the symbolic ``batch`` unless a number is given.
    """
    if len(sizes) < 2:
        raise ValueError("an MLP needs at least an input and an output size")
    w = _Writer(seed)
    x = "input"
    for i, (fan_in, fan_out) in enumerate(zip(sizes, sizes[1:])):
        bound = 1.0 / np.sqrt(fan_in)
        wt = w.weight(f"fc{i}.weight", w.rng.uniform(-bound, bound, (fan_out, fan_in)).astype(np.float32))
        bias = w.weight(f"fc{i}.bias", w.rng.uniform(-bound, bound, (fan_out,)).astype(np.float32))
        x = w.op("Gemm", [x, wt, bias], f"/fc{i}/Gemm", transB=1)
        if i < len(sizes) - 2:
            x = w.op("Relu", [x], f"/act{i}/Relu")
    w.nodes[-1].output[0] = "logits"
    inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, sizes[0]])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, sizes[-1]])]
    return w.model(name, inputs, outputs, f"MLP {'-'.join(map(str, sizes))}, random init (seed {seed})")


def _layer_norm(w: _Writer, x: str, d: int, prefix: str) -> str:
    g = w.weight(f"{prefix}.weight", np.ones(d, dtype=np.float32))
    b = w.weight(f"{prefix}.bias", np.zeros(d, dtype=np.float32))
    outs = w.op("LayerNormalization", [x, g, b], f"/{prefix}/LayerNormalization", n_out=3 if w.ln_stats else 1,
                axis=-1, epsilon=1e-5)
    return outs[0] if w.ln_stats else outs


def _linear(w: _Writer, x: str, d_in: int, d_out: int, prefix: str, std: float = 0.02) -> str:
    wt = w.weight(f"{prefix}.weight", (w.rng.standard_normal((d_in, d_out)) * std).astype(np.float32))
    b = w.weight(f"{prefix}.bias", np.zeros(d_out, dtype=np.float32))
    y = w.op("MatMul", [x, wt], f"/{prefix}/MatMul")
    return w.op("Add", [y, b], f"/{prefix}/Add")


def _gelu(w: _Writer, x: str, prefix: str) -> str:
    """GELU as torch exports it at opset 17: x * 0.5 * (1 + erf(x / sqrt(2)))."""
    s = w.op("Div", [x, w.const_f32(f"{prefix}.sqrt2", np.sqrt(2.0))], f"/{prefix}/Div")
    e = w.op("Erf", [s], f"/{prefix}/Erf")
    one = w.op("Add", [e, w.const_f32(f"{prefix}.one", 1.0)], f"/{prefix}/Add")
    m = w.op("Mul", [x, one], f"/{prefix}/Mul")
    return w.op("Mul", [m, w.const_f32(f"{prefix}.half", 0.5)], f"/{prefix}/Mul_1")


def _attention(w: _Writer, x: str, d: int, heads: int, prefix: str, shape_heads: str, shape_model: str,
               mask: str) -> str:
    """Causal multi-head self-attention with a fused QKV projection (GPT-2's ``c_attn``)."""
    hd = d // heads
    qkv = _linear(w, x, d, 3 * d, f"{prefix}.c_attn")
    q, k, v = w.op("Split", [qkv, w.const_i64(f"{prefix}.split", [d, d, d])], f"/{prefix}/Split", n_out=3, axis=-1)
    heads_of = {}
    for label, t in (("q", q), ("k", k), ("v", v)):
        r = w.op("Reshape", [t, shape_heads], f"/{prefix}/Reshape_{label}")
        perm = [0, 2, 3, 1] if label == "k" else [0, 2, 1, 3]   # k arrives transposed for q @ k^T
        heads_of[label] = w.op("Transpose", [r], f"/{prefix}/Transpose_{label}", perm=perm)
    scores = w.op("MatMul", [heads_of["q"], heads_of["k"]], f"/{prefix}/MatMul_qk")
    scaled = w.op("Div", [scores, w.const_f32(f"{prefix}.scale", np.sqrt(hd))], f"/{prefix}/Div")
    masked = w.op("Add", [scaled, mask], f"/{prefix}/Add_mask")
    probs = w.op("Softmax", [masked], f"/{prefix}/Softmax", axis=-1)
    ctx = w.op("MatMul", [probs, heads_of["v"]], f"/{prefix}/MatMul_av")
    ctx = w.op("Transpose", [ctx], f"/{prefix}/Transpose_ctx", perm=[0, 2, 1, 3])
    ctx = w.op("Reshape", [ctx, shape_model], f"/{prefix}/Reshape_ctx")
    return _linear(w, ctx, d, d, f"{prefix}.c_proj")


def gpt(*, vocab: int = 512, d_model: int = 64, heads: int = 4, layers: int = 2, max_len: int = 64,
        seed: int = 0, batch: str | int = "batch", seq: str | int = "seq", for_training: bool = False,
        name: str = "gpt") -> onnx.ModelProto:
    """A GPT-2 style decoder: token + position embeddings, ``layers`` pre-LN Transformer blocks, tied LM head.

    Input ``input_ids`` (int64, ``[batch, seq]``), output ``logits``
    (``[batch, seq, vocab]``). Weights are N(0, 0.02) as in GPT-2, LayerNorms
    start at (1, 0). The causal mask is built in the graph from ``seq``, so the
    model runs for any ``seq <= max_len``. The token embedding is used twice
    (lookup and LM head): a shared initializer.

    ``for_training`` writes the variant onnxruntime-training's artifact
    generator takes: logits flattened to ``[batch * seq, vocab]`` for a token
    cross-entropy, and LayerNormalization with its optional mean and inverse
    standard deviation outputs, which its gradient builder reads.
    """
    if d_model % heads:
        raise ValueError(f"d_model {d_model} is not a multiple of heads {heads}")
    w = _Writer(seed)
    wte = w.weight("wte.weight", (w.rng.standard_normal((vocab, d_model)) * 0.02).astype(np.float32))
    wpe = w.weight("wpe.weight", (w.rng.standard_normal((max_len, d_model)) * 0.01).astype(np.float32))
    # Shapes and the causal mask, from the runtime sequence length (as torch exports dynamic axes).
    shape = w.op("Shape", ["input_ids"], "/Shape")
    seq_len = w.op("Gather", [shape, w.const_i64("axis1", 1)], "/Gather_seq", axis=0)
    seq_1d = w.op("Unsqueeze", [seq_len, w.const_i64("unsq0", [0])], "/Unsqueeze_seq")
    positions = w.op("Range", [w.const_i64("zero", 0), seq_len, w.const_i64("one", 1)], "/Range")
    pos_emb = w.op("Gather", [wpe, positions], "/wpe/Gather", axis=0)
    tok_emb = w.op("Gather", [wte, "input_ids"], "/wte/Gather", axis=0)
    x = w.op("Add", [tok_emb, pos_emb], "/Add_embed")
    mask_shape = w.op("Concat", [seq_1d, seq_1d], "/Concat_mask", axis=0)
    ones = w.op("ConstantOfShape", [mask_shape], "/ConstantOfShape_mask",
                value=numpy_helper.from_array(np.ones(1, dtype=np.float32)))
    upper = w.op("Trilu", [ones, w.const_i64("diag1", 1)], "/Trilu_mask", upper=1)
    mask = w.op("Mul", [upper, w.const_f32("neg_inf", -1e9)], "/Mul_mask")
    hd = d_model // heads
    shape_heads = w.const_i64("shape_heads", [0, 0, heads, hd])   # 0 copies the input's dimension
    shape_model = w.const_i64("shape_model", [0, 0, d_model])
    w.ln_stats = for_training
    for i in range(layers):
        p = f"h.{i}"
        a = _attention(w, _layer_norm(w, x, d_model, f"{p}.ln_1"), d_model, heads, f"{p}.attn",
                       shape_heads, shape_model, mask)
        x = w.op("Add", [x, a], f"/{p}/Add_attn")
        hidden = _gelu(w, _linear(w, _layer_norm(w, x, d_model, f"{p}.ln_2"), d_model, 4 * d_model,
                                  f"{p}.mlp.c_fc"), f"{p}.mlp.gelu")
        x = w.op("Add", [x, _linear(w, hidden, 4 * d_model, d_model, f"{p}.mlp.c_proj")], f"/{p}/Add_mlp")
    x = _layer_norm(w, x, d_model, "ln_f")
    x = w.op("MatMul", [x, w.op("Transpose", [wte], "/lm_head/Transpose", perm=[1, 0])], "/lm_head/MatMul")
    out_shape: list = [batch, seq, vocab]
    if for_training:
        w.op("Reshape", [x, w.const_i64("shape_tokens", [-1, vocab])], "/lm_head/Reshape")
        out_shape = [None, vocab]
    w.nodes[-1].output[0] = "logits"
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [batch, seq])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, out_shape)]
    doc = (f"GPT-2 style decoder: {layers} layers, d_model {d_model}, {heads} heads, vocab {vocab}, "
           f"max_len {max_len}; random init (seed {seed})")
    return w.model(name, inputs, outputs, doc)
