"""A roofline cost model shared by the TensorFlow and ONNX frontends.

Without a profile, an op's time is estimated from its arithmetic and its
memory traffic on a described device:

    time_us = launch_us + max(flops / (peak_flops x compute_eff),
                              bytes_moved / (mem_bandwidth x memory_eff)) x 1e6

Frontends count FLOPs and bytes per op type with the helpers below (a matrix
product, a convolution, an element-wise op) and call `op_time_us`. The
presets describe whole devices; ``--device-profile`` on the command line picks
one.

>>> p = DEVICE_PROFILES["h100"]
>>> round(op_time_us(matmul_flops(4096, 4096, 4096), 3 * 4096 * 4096 * 4, p), 1)
468.7
>>> op_time_us(0, 0, p) == p.launch_us
True
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceProfile:
    """What the roofline needs to know about a device."""

    name: str
    peak_flops: float          # FLOP/s of the dense matrix units used for fp32 training (TF32 where it exists)
    mem_bandwidth: float       # bytes/s of device memory
    launch_us: float = 5.0     # fixed cost per op (kernel launch, framework overhead)
    compute_eff: float = 0.6   # fraction of peak FLOP/s large products reach in practice
    memory_eff: float = 0.8    # fraction of peak bandwidth streaming ops reach
    description: str = ""


DEVICE_PROFILES: dict[str, DeviceProfile] = {
    "h100": DeviceProfile("h100", 494e12, 3.35e12, 5.0, description="NVIDIA H100 SXM: TF32 dense, HBM3"),
    "a100": DeviceProfile("a100", 156e12, 2.0e12, 5.0, description="NVIDIA A100 80GB: TF32 dense, HBM2e"),
    "v100": DeviceProfile("v100", 15.7e12, 0.9e12, 5.0, description="NVIDIA V100: fp32, HBM2"),
    "t4": DeviceProfile("t4", 8.1e12, 0.32e12, 5.0, description="NVIDIA T4: fp32, GDDR6"),
    "cpu": DeviceProfile("cpu", 0.2e12, 40e9, 2.0, compute_eff=0.5, memory_eff=0.6,
                         description="a server CPU socket: AVX-512 fp32, DDR"),
}
DEFAULT_PROFILE = "h100"


def get_profile(name: str) -> DeviceProfile:
    try:
        return DEVICE_PROFILES[name.lower()]
    except KeyError:
        raise ValueError(f"unknown device profile {name!r}; choose one of {', '.join(sorted(DEVICE_PROFILES))}") \
            from None


def op_time_us(flops: float, bytes_moved: float, profile: DeviceProfile) -> float:
    """Estimated time of one op: launch overhead plus the slower of compute and memory."""
    compute_s = flops / (profile.peak_flops * profile.compute_eff)
    memory_s = bytes_moved / (profile.mem_bandwidth * profile.memory_eff)
    return profile.launch_us + max(compute_s, memory_s) * 1e6


def matmul_flops(m: int, k: int, n: int, batch: int = 1) -> float:
    """FLOPs of ``batch`` products of an (m x k) and a (k x n) matrix (multiply-adds count 2)."""
    return 2.0 * batch * m * k * n


def conv_flops(output_elements: int, in_channels_per_group: int, kernel_spatial: int) -> float:
    """FLOPs of a convolution: each output element is a dot product over cin/groups x kernel taps."""
    return 2.0 * output_elements * in_channels_per_group * kernel_spatial


def elementwise_flops(output_elements: int, per_element: float = 1.0) -> float:
    return float(output_elements) * per_element


# ---------------------------------------------------------------------------
# More op families (added with the ONNX frontend; TensorFlow spellings match where they exist)
# ---------------------------------------------------------------------------

#: FLOPs per output element of element-wise and normalisation ops, by op type.
#: Arithmetic counts 1; a transcendental (exp, erf, tanh, ...) about 4; a
#: softmax 5 (max, subtract, exp, sum, divide); a layer norm 8 (mean,
#: variance, normalise, scale, shift). Op types not listed move data only.
ELEMENTWISE_FLOPS: dict[str, float] = {
    **dict.fromkeys(["Add", "AddV2", "Sub", "Mul", "Div", "RealDiv", "Neg", "Abs", "Max", "Maximum", "Min",
                     "Minimum", "Relu", "Relu6", "LeakyRelu", "PRelu", "Clip", "ClipByValue", "Where", "Select",
                     "SelectV2", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor",
                     "Not", "LogicalAnd", "LogicalOr", "LogicalNot", "Sign", "Floor", "Ceil", "Round", "Mod",
                     "FloorMod", "Sum", "AddN", "Mean", "Square", "SquaredDifference", "BiasAdd", "Cast",
                     "ReluGrad", "ThresholdedRelu", "Shrink", "BitShift", "IsNaN", "IsInf", "Scale"], 1.0),
    **dict.fromkeys(["Exp", "Log", "Tanh", "Sigmoid", "Erf", "Sqrt", "Rsqrt", "Reciprocal", "Pow", "Sin", "Cos",
                     "Tan", "Softplus", "Softsign", "Elu", "Selu", "Celu", "HardSigmoid", "HardSwish", "Mish",
                     "Swish", "Silu", "TanhGrad", "SigmoidGrad", "Atan", "Asin", "Acos", "Sinh", "Cosh"], 4.0),
    **dict.fromkeys(["Softmax", "LogSoftmax", "SoftmaxGrad", "SoftmaxGrad_13", "LogSoftmaxGrad",
                     "SoftmaxCrossEntropyLoss", "SoftmaxCrossEntropyLossGrad", "SoftmaxCrossEntropyLossInternal",
                     "SoftmaxCrossEntropyLossInternalGrad",
                     "SoftmaxCrossEntropyWithLogits", "SparseSoftmaxCrossEntropyWithLogits"], 5.0),
    **dict.fromkeys(["Gelu", "BiasGelu", "FastGelu", "GeluGrad", "BiasGeluGrad_dX", "FastGeluGrad"], 8.0),
    **dict.fromkeys(["LayerNormalization", "SimplifiedLayerNormalization", "SkipLayerNormalization",
                     "LayerNormalizationGrad", "InstanceNormalization", "GroupNormalization", "RMSNormalization",
                     "FusedBatchNormV3", "FusedBatchNormGradV3", "BatchNormInternal", "BatchNormalizationGrad"],
                    8.0),
    "BatchNormalization": 2.0,   # inference: a per-channel scale and shift
}


def einsum_flops(equation: str, shapes: list[tuple[int, ...]]) -> float:
    """FLOPs of an ``einsum``: 2 per multiply-add over every index combination (one operand: 1 per element read).

    Handles ``...`` (broadcast dimensions) and implicit outputs.

    >>> einsum_flops("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]) == matmul_flops(3, 4, 5, batch=2)
    True
    >>> einsum_flops("...ij,...jk", [(7, 3, 4), (7, 4, 5)])
    840.0
    """
    lhs = equation.replace(" ", "").split("->")[0]
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise ValueError(f"einsum {equation!r} has {len(terms)} operands but {len(shapes)} shapes were given")
    sizes: dict[str, int] = {}
    for term, shape in zip(terms, shapes):
        if "..." in term:
            head, tail = term.split("...")
            n_ell = len(shape) - len(head) - len(tail)
            # broadcast dimensions align from the right: name them by their distance from the end
            letters = list(head) + [f"...{n_ell - 1 - k}" for k in range(n_ell)] + list(tail)
        else:
            letters = list(term)
        if len(letters) != len(shape):
            raise ValueError(f"einsum {equation!r}: operand {term!r} does not match shape {shape}")
        for letter, size in zip(letters, shape):
            sizes[letter] = max(sizes.get(letter, 1), int(size))
    total = 1.0
    for size in sizes.values():
        total *= size
    return total if len(shapes) == 1 else 2.0 * (len(shapes) - 1) * total


def attention_flops(batch: int, heads: int, q_len: int, kv_len: int, head_dim: int,
                    v_head_dim: int | None = None) -> float:
    """FLOPs of scaled dot-product attention: ``Q K^T`` plus ``softmax(.) V`` (projections not included).

    >>> attention_flops(1, 1, 2, 3, 4) == matmul_flops(2, 4, 3) + matmul_flops(2, 3, 4)
    True
    """
    v = head_dim if v_head_dim is None else v_head_dim
    return matmul_flops(q_len, head_dim, kv_len, batch * heads) + matmul_flops(q_len, kv_len, v, batch * heads)
