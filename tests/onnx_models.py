"""ONNX models the tests write (needs the ``onnx`` extra; test modules import this after ``importorskip``)."""

from __future__ import annotations

import onnx
from onnx import helper


def make_model(graph, **kw):
    """A model onnxruntime 1.18+ reads: opset 17, IR version 8 (helper's default IR may be newer)."""
    kw.setdefault("opset_imports", [helper.make_opsetid("", 17)])
    m = helper.make_model(graph, **kw)
    m.ir_version = 8
    return m


def save(model, path):
    onnx.save_model(model, str(path))
    return path


def if_with_capture() -> onnx.ModelProto:
    """An ``If`` whose branches read ``h``, a value of the outer graph (a subgraph capture), from ``sin``."""
    import numpy as np
    from onnx import TensorProto, numpy_helper

    then_g = helper.make_graph([helper.make_node("Relu", ["h"], ["o1"])], "then", [],
                               [helper.make_tensor_value_info("o1", TensorProto.FLOAT, [4])])
    else_g = helper.make_graph([helper.make_node("Neg", ["h"], ["o2"])], "else", [],
                               [helper.make_tensor_value_info("o2", TensorProto.FLOAT, [4])])
    nodes = [helper.make_node("Sin", ["x"], ["h"], name="sin"),
             helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["cond"], name="gt"),
             helper.make_node("If", ["cond"], ["y"], name="if", then_branch=then_g, else_branch=else_g)]
    graph = helper.make_graph(nodes, "if", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
                              initializer=[numpy_helper.from_array(np.array(0, np.float32), "zero")])
    return make_model(graph)


def split_to_sequence(split=(1, 3), sequence_output: bool = False) -> onnx.ModelProto:
    """x [4, 8] -> ``SplitToSequence`` (rows in pieces of ``split``) -> ``SequenceAt(1)`` -> Relu: a sequence value.

    With ``sequence_output`` the sequence itself is a graph output too.
    """
    import numpy as np
    from onnx import TensorProto, numpy_helper

    rows = split[1]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, 8])]
    if sequence_output:
        outputs.append(helper.make_tensor_sequence_value_info("seq", TensorProto.FLOAT, None))
    nodes = [helper.make_node("SplitToSequence", ["x", "split"], ["seq"], name="sts", axis=0),
             helper.make_node("SequenceAt", ["seq", "one"], ["x1"], name="at"),
             helper.make_node("Relu", ["x1"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "seq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])], outputs,
                              initializer=[numpy_helper.from_array(np.array(split, np.int64), "split"),
                                           numpy_helper.from_array(np.array(1, np.int64), "one")])
    return make_model(graph)
