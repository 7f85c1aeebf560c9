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


def einsum_flops(equation: str, shapes) -> float:
    """FLOPs of an einsum: 2 x the product of every index's size (one multiply-add per term).

    A single operand costs one add per term. ``...`` stands for the
    broadcast leading dimensions, sized from the operand with most of them.
    Raises ``ValueError`` on an equation that does not match the shapes.

    >>> einsum_flops("bij,bjk->bik", [(8, 2, 3), (8, 3, 4)]) == 2 * 8 * 2 * 3 * 4
    True
    >>> einsum_flops("...ij,jk->...ik", [(5, 2, 3), (3, 4)]) == 2 * 5 * 2 * 3 * 4
    True
    """
    lhs = equation.replace(" ", "").split("->")[0]
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise ValueError(f"einsum {equation!r}: {len(terms)} operands in the equation, {len(shapes)} given")
    sizes: dict[str, int] = {}
    ellipsis: list[int] = []
    for term, shape in zip(terms, shapes):
        shape = list(shape)
        if "..." in term:
            head, tail = term.split("...")
            n_ell = len(shape) - len(head) - len(tail)
            if n_ell < 0:
                raise ValueError(f"einsum {equation!r}: operand {term!r} has rank {len(shape)}")
            ell = shape[len(head):len(head) + n_ell]
            if len(ell) > len(ellipsis):
                ellipsis = ell[:len(ell) - len(ellipsis)] + ellipsis
            for i, d in enumerate(ell[::-1]):
                ellipsis[-1 - i] = max(ellipsis[-1 - i], d)
            letters = head + tail
            dims = shape[:len(head)] + shape[len(head) + n_ell:]
        else:
            letters, dims = term, shape
        if len(letters) != len(dims):
            raise ValueError(f"einsum {equation!r}: operand {term!r} has rank {len(dims)}")
        for c, d in zip(letters, dims):
            sizes[c] = max(sizes.get(c, 1), int(d))
    total = 1.0
    for d in list(sizes.values()) + ellipsis:
        total *= d
    return total * (2.0 if len(terms) > 1 else 1.0)
