"""Roofline FLOP counting for TensorFlow op types, on hand-checkable shapes."""

from __future__ import annotations

import pytest

tf = pytest.importorskip("tensorflow")

from pardnn.frontends.roofline import DEVICE_PROFILES, op_time_us  # noqa: E402
from pardnn.frontends.tensorflow.costs import bytes_moved, estimate_time_us, op_flops  # noqa: E402
from pardnn.frontends.tensorflow.shapes import TensorInfo, dtype_size  # noqa: E402

pytestmark = pytest.mark.tf


def f32(*shape):
    return TensorInfo(tf.float32, tuple(shape))


def attrs(**kw):
    node = tf.compat.v1.NodeDef()
    for k, v in kw.items():
        if isinstance(v, bool):
            node.attr[k].b = v
        elif isinstance(v, str):
            node.attr[k].s = v.encode()
        elif isinstance(v, list):
            node.attr[k].list.i.extend(v)
    return node.attr


def test_matmul_counts_two_flops_per_multiply_add_and_honours_transpose():
    assert op_flops("MatMul", attrs(), [f32(8, 16), f32(16, 32)], [f32(8, 32)]) == 2 * 8 * 16 * 32
    # a^T b with a stored as (16, 8)
    assert op_flops("MatMul", attrs(transpose_a=True), [f32(16, 8), f32(16, 32)], [f32(8, 32)]) == 2 * 8 * 16 * 32


def test_batch_matmul_and_einsum():
    assert op_flops("BatchMatMulV2", attrs(), [f32(4, 8, 16), f32(4, 16, 2)], [f32(4, 8, 2)]) == 2 * 4 * 8 * 16 * 2
    assert op_flops("BatchMatMulV3", attrs(adj_x=True), [f32(4, 16, 8), f32(4, 16, 2)], [f32(4, 8, 2)]) == \
        2 * 4 * 8 * 16 * 2
    # attention scores: b h q d, b h k d -> b h q k
    assert op_flops("Einsum", attrs(equation="abqd,abkd->abqk"), [f32(2, 4, 8, 16), f32(2, 4, 8, 16)],
                    [f32(2, 4, 8, 8)]) == 2 * 2 * 4 * 8 * 8 * 16


def test_convolutions_forward_and_backward_cost_the_same():
    x, w, y = f32(2, 8, 8, 3), f32(3, 3, 3, 16), f32(2, 8, 8, 16)
    fwd = op_flops("Conv2D", attrs(), [x, w], [y])
    assert fwd == 2 * (2 * 8 * 8 * 16) * (3 * 3 * 3)
    sizes = TensorInfo(tf.int32, (4,))
    assert op_flops("Conv2DBackpropInput", attrs(), [sizes, w, y], [x]) == fwd
    assert op_flops("Conv2DBackpropFilter", attrs(), [x, sizes, y], [w]) == fwd
    dw = f32(3, 3, 3, 1)
    assert op_flops("DepthwiseConv2dNative", attrs(), [x, dw], [f32(2, 8, 8, 3)]) == 2 * (2 * 8 * 8 * 3) * 9


def test_elementwise_reductions_and_kernel_free_ops():
    h100 = DEVICE_PROFILES["h100"]
    a = f32(1024, 1024)
    assert op_flops("Relu", attrs(), [a], [a]) == 1024 * 1024
    assert op_flops("Tanh", attrs(), [a], [a]) == 4 * 1024 * 1024
    assert op_flops("Sum", attrs(), [a, TensorInfo(tf.int32, (1,))], [f32(1024)]) == 1024 * 1024
    assert bytes_moved("Relu", [a], [a]) == 2 * 4 * 1024 * 1024
    t, flops = estimate_time_us("Relu", attrs(), [a], [a], h100)
    assert flops == 1024 * 1024 and t == pytest.approx(op_time_us(flops, 8 * 1024 * 1024, h100))
    assert estimate_time_us("Reshape", attrs(), [a], [a], h100) == (0.2 * h100.launch_us, 0.0)
    # a variable update reads and writes the variable besides reading the value
    handle = TensorInfo(tf.resource, ())
    assert bytes_moved("AssignSubVariableOp", [handle, a], []) == 3 * 4 * 1024 * 1024


def test_unknown_dimensions_take_the_fill_value_and_handles_have_no_size():
    x = TensorInfo(tf.float32, (None, 16))
    assert x.nbytes() is None and x.nbytes(fill=8) == 8 * 16 * 4
    assert TensorInfo(tf.float32, None).elements(fill=3) == 3
    assert dtype_size(tf.resource) == dtype_size(tf.variant) == dtype_size(tf.string) == 0
    assert op_flops("MatMul", attrs(), [x, f32(16, 4)], [TensorInfo(tf.float32, (None, 4))], fill=8) == \
        2 * 8 * 16 * 4
