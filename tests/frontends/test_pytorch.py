"""PyTorch models through ONNX (docs/pytorch.md), on fixtures made by sample_graphs/make_pytorch_samples.py.

``tests/data/onnx/cnn_training`` holds onnxruntime-training 1.19.2's
artifacts for a small CNN exported by torch 2.13 (conv, batch norm, ReLU, max
pool, conv, batch norm, ReLU, global average pool, linear; 3x16x16 images,
10 classes); ``cnn_inference.onnx`` is the same module exported for
inference. Neither torch nor onnxruntime-training is needed here: the
commands run in real ``pardnn`` processes with the ``onnx`` extra.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402

from pardnn.errors import EXIT_DEPENDENCY, EXIT_INPUT, InputError  # noqa: E402
from pardnn.frontends import FrontendOptions  # noqa: E402
from pardnn.frontends.onnx import load_onnx, prepare  # noqa: E402
from pardnn.frontends.onnx.costs import node_flops  # noqa: E402
from pardnn.ir import load_graph  # noqa: E402

from ..cli.test_errors import assert_one_line_error, pardnn  # noqa: E402
from ..conftest import REPO  # noqa: E402
from ..onnx_models import make_model, save  # noqa: E402

pytestmark = pytest.mark.onnx
DATA = REPO / "tests" / "data" / "onnx"
CNN = DATA / "cnn_training"
F = 4   # bytes per float32


def test_import_the_training_artifacts_through_the_cli(tmp_path):
    """Batch 4: every com.microsoft op is sized from its inputs, and the gradients cost what they compute.

    conv1 3->8 (3x3, pad 1) on 16x16, max pool 2 -> 8x8, conv2 8->16 (3x3, pad 1).
    """
    out = tmp_path / "cnn.json.gz"
    r = pardnn("import", CNN, "-o", out, "--batch-size", 4, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    g = load_graph(out)
    assert g.meta["training"] is True and g.meta["dims"] == {"batch": 4}
    op = dict(zip(g.names, g.ops))
    assert {"ConvGrad", "MaxPoolGrad", "BatchNormInternal", "BatchNormalizationGrad", "ReluGrad",
            "SoftmaxCrossEntropyLossGrad", "InPlaceAccumulatorV2"} <= set(op.values())
    out_bytes = {n: g.output_bytes_of(v) for v, n in enumerate(g.names)}
    # BatchNormInternal: Y like X, then running mean/var and saved mean/inv-std, one per channel
    assert out_bytes["/bn1/BatchNormalization_BatchNormInternal"] == [4 * 8 * 16 * 16 * F] + [8 * F] * 4
    # MaxPoolGrad: dX like the MaxPool's input
    pool_grad = next(n for n, o in op.items() if o == "MaxPoolGrad")
    assert out_bytes[pool_grad] == [4 * 8 * 16 * 16 * F]
    # ConvGrad of conv2: dX like its input (the pooled 4x8x8x8), dW like the 16x8x3x3 weight
    conv2_grad = [n for n, o in op.items() if o == "ConvGrad" and out_bytes[n][0]]
    assert [out_bytes[n] for n in conv2_grad] == [[4 * 8 * 8 * 8 * F, 16 * 8 * 9 * F]]
    # conv1's ConvGrad computes only dW (dX of the image is omitted): half the FLOPs of conv2's
    flops = {n: (g.node_extra[v] or {}).get("flops", 0.0) for v, n in enumerate(g.names)}
    fwd = {n: flops[n] for n, o in op.items() if o == "Conv"}
    assert flops[conv2_grad[0]] == 2 * fwd["/conv2/Conv"] == 2 * (2 * 4 * 16 * 8 * 8 * 8 * 9)
    conv1_grad = next(n for n, o in op.items() if o == "ConvGrad" and n not in conv2_grad)
    assert flops[conv1_grad] == fwd["/conv1/Conv"] == 2 * 4 * 8 * 16 * 16 * 3 * 9
    assert flops[pool_grad] == 4 * 8 * 8 * 8       # one per incoming gradient element
    phase = {n: (g.node_extra[v] or {}).get("phase") for v, n in enumerate(g.names)}
    assert phase[pool_grad] == phase[conv1_grad] == "backward"
    assert phase["/bn1/BatchNormalization_BatchNormInternal"] == "forward"


def test_shapes_match_what_onnxruntime_training_computed():
    """Each value's size against the arrays onnxruntime-training 1.19.2 produced for batch 4 (recorded when the
    fixture was made: `real_shapes.json`, {value: [elem_type, shape]} for every node output)."""
    pm = prepare(CNN, batch_size=4, measure_unknown=False)
    real = json.loads((CNN / "real_shapes.json").read_text())
    produced = [o for n in pm.graph.node for o in n.output if o]
    assert sorted(real) == sorted(produced) and len(real) == 51
    got = {name: [pm.tensors[name].elem_type, list(pm.tensors[name].shape)] for name in produced}
    assert got == real


def test_partition_the_training_graph_through_the_cli(tmp_path):
    """Two devices: a feasible placement keeps each parameter, its buffer and its accumulator together."""
    out = tmp_path / "p.json"
    r = pardnn("partition", CNN, "--batch-size", 4, "-k", 2, "--memory", "1MiB", "-o", out, "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["feasible"] is True and summary["makespan_us"] > 0
    where = json.loads(out.read_text())["assignment"]
    g = load_onnx(CNN, FrontendOptions(batch_size=4))
    assert sorted(where) == sorted(g.names)
    assert len(g.group_names) == 9      # 8 parameters, and the loss with its output
    for name, members in zip(g.group_names, g.groups):
        assert len({where[g.names[v]] for v in members}) == 1, name
    param = g.groups[g.group_names.index("param:conv1.weight")]
    assert sorted(g.ops[v] for v in param) == ["GradientBuffer", "InPlaceAccumulatorV2", "Output", "Parameter"]


def test_run_refuses_a_training_graph_in_one_line(tmp_path):
    """Plain onnxruntime has no gradient kernels: exit 6 and one line saying so, nothing else."""
    p = tmp_path / "p.json"
    assert pardnn("partition", CNN, "--batch-size", 4, "-k", 2, "-o", p, cwd=tmp_path).returncode == 0
    r = pardnn("run", CNN, p, "--batch-size", 4, "--json", cwd=tmp_path)
    line = assert_one_line_error(r, EXIT_DEPENDENCY, str(CNN), "training graph", "onnxruntime-training")
    assert "BatchNormInternal" in line and r.stdout == ""


def test_the_exported_inference_model_partitions_and_runs(tmp_path):
    """torch.onnx.export's model of the same CNN: the recipe's pipelined run, outputs checked."""
    model = DATA / "cnn_inference.onnx"
    p = tmp_path / "p.json"
    r = pardnn("partition", model, "--batch-size", 8, "-k", 2, "-o", p, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = pardnn("run", model, p, "--batch-size", 8, "--steps", 2, "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["outputs_match"] is True and report["measured_us"] > 0
    assert sum(s["nodes"] for s in report["stages"]) == 8   # Conv, Relu, MaxPool, Conv, Relu, GAP, Flatten, Gemm


# ---------------------------------------------------------------------------
# the checker and the shape rules on hand-made graphs
# ---------------------------------------------------------------------------

def _ms(nodes, inputs, outputs, *, ms=True):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid("com.microsoft", 1)] if ms else [])
    return make_model(graph, opset_imports=opsets)


def _vi(name, shape, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


def test_gradient_ops_are_sized_from_their_inputs_not_their_names(tmp_path):
    """Outputs named a, b, c, ...: no ``T_grad`` convention can help, the ops' own rules must."""
    nodes = [helper.make_node("MaxPool", ["x"], ["y", "idx"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
             helper.make_node("MaxPoolGrad", ["y", "idx"], ["a"], kernel_shape=[2, 2], strides=[2, 2],
                              name="pool_grad"),
             helper.make_node("BatchNormInternal", ["a", "s", "s", "s", "s"], ["b", "rm", "rv", "sm", "si"],
                              domain="com.microsoft", name="bn"),
             helper.make_node("BatchNormalizationGrad", ["b", "a", "s", "sm", "si"], ["c", "ds", "db"],
                              domain="com.microsoft", name="bn_grad"),
             helper.make_node("ConvGrad", ["dy", "c", "w"], ["d", "dw", "dbias"], domain="com.microsoft",
                              kernel_shape=[3, 3], pads=[1, 1, 1, 1], name="conv_grad"),
             helper.make_node("SoftmaxCrossEntropyLossInternal", ["logits", "labels"], ["loss", "logp"],
                              domain="com.microsoft", reduction="mean", name="sce"),
             helper.make_node("SoftmaxCrossEntropyLossInternalGrad", ["gl", "logp", "labels"], ["e"],
                              domain="com.microsoft", name="sce_grad")]
    inputs = [_vi("x", [2, 3, 8, 8]), _vi("s", [3]), _vi("dy", [2, 5, 8, 8]), _vi("w", [5, 3, 3, 3]),
              _vi("logits", [2, 7]), _vi("labels", [2], TensorProto.INT64), _vi("gl", [])]
    ranks = {"d": 4, "dw": 4, "dbias": 1, "ds": 1, "db": 1, "rm": 1, "rv": 1, "loss": 0, "e": 2}
    outs = [_vi(n, [f"{n}_{i}" for i in range(r)]) for n, r in ranks.items()]   # dynamic: sized by the rules
    path = save(_ms(nodes, inputs, outs), tmp_path / "grads.onnx")
    t = prepare(path, measure_unknown=False).tensors
    shapes = {n: t[n].shape for n in ("a", "b", "sm", "si", "c", "ds", "db", "d", "dw", "dbias", "loss", "logp",
                                      "e")}
    assert shapes == {"a": (2, 3, 8, 8), "b": (2, 3, 8, 8), "sm": (3,), "si": (3,), "c": (2, 3, 8, 8),
                      "ds": (3,), "db": (3,), "d": (2, 3, 8, 8), "dw": (5, 3, 3, 3), "dbias": (5,), "loss": (),
                      "logp": (2, 7), "e": (2, 7)}
    conv_grad = next(n for n in prepare(path, measure_unknown=False).graph.node if n.op_type == "ConvGrad")
    assert node_flops(conv_grad, t) == 2 * (2 * 2 * 5 * 8 * 8 * 3 * 9) + 2 * 5 * 8 * 8


def test_an_unsized_gradient_is_one_error_naming_its_node(tmp_path):
    """A MaxPoolGrad whose indices come from a graph input (no MaxPool to size it from), output named 'a'."""
    nodes = [helper.make_node("MaxPoolGrad", ["dy", "idx"], ["a"], kernel_shape=[2, 2], name="lonely_grad"),
             helper.make_node("Relu", ["a"], ["b"], name="relu")]
    path = save(_ms(nodes, [_vi("dy", [1, 1, 2, 2]), _vi("idx", [1, 1, 2, 2], TensorProto.INT64)],
                    [_vi("b", ["n", "c", "h", "w"])]), tmp_path / "lonely.onnx")
    r = pardnn("import", path, "-o", tmp_path / "g.json", cwd=tmp_path)
    assert_one_line_error(r, EXIT_INPUT, "'a'", "'lonely_grad'", "MaxPoolGrad")
    assert not (tmp_path / "g.json").exists()


def test_the_checker_still_refuses_what_it_can_check(tmp_path):
    """Only onnxruntime's standard-domain gradient ops skip the schema check, and only in onnxruntime graphs."""
    grad = helper.make_node("MaxPoolGrad", ["dy", "idx"], ["a"], kernel_shape=[2, 2], name="g")
    ins = [_vi("dy", [1, 1, 2, 2]), _vi("idx", [1, 1, 2, 2], TensorProto.INT64)]
    cases = {
        # no com.microsoft import: not an onnxruntime-training graph, the unknown op stands
        "plain": (_ms([grad], ins, [_vi("a", [1, 1, 4, 4])], ms=False), "No Op registered for MaxPoolGrad"),
        # a misspelt standard op in a training graph is still unknown
        "typo": (_ms([helper.make_node("Relux", ["dy"], ["a"], name="r")], ins, [_vi("a", [1, 1, 2, 2])]),
                 "No Op registered for Relux"),
        # the rest of the graph is checked: a value read before anything makes it
        "order": (_ms([helper.make_node("Relu", ["a"], ["b"], name="r"), grad], ins, [_vi("b", [1, 1, 4, 4])]),
                  "topologically sorted"),
        # and the other nodes' schemas: Relu takes one input
        "arity": (_ms([grad, helper.make_node("Relu", ["a", "dy"], ["b"], name="r")], ins,
                      [_vi("b", [1, 1, 4, 4])]), "Relu"),
    }
    for name, (model, message) in cases.items():
        path = save(model, tmp_path / f"{name}.onnx")
        with pytest.raises(InputError, match="invalid ONNX model") as err:
            prepare(path)
        assert message in str(err.value) and "\n" not in str(err.value), (name, str(err.value))
    r = pardnn("import", tmp_path / "typo.onnx", "-o", tmp_path / "g.json", cwd=tmp_path)
    assert_one_line_error(r, EXIT_INPUT, "typo.onnx", "invalid ONNX model", "Relux")


def test_the_artifact_folder_means_its_training_model():
    """The optimizer and eval models beside it are not read: the folder is the training step."""
    assert sorted(p.name for p in CNN.iterdir()) == ["checkpoint", "eval_model.onnx", "optimizer_model.onnx",
                                                     "real_shapes.json", "training_model.onnx"]
    a = load_onnx(CNN, FrontendOptions(batch_size=2))
    assert a.meta["onnx_file"].endswith("training_model.onnx") and "AdamWOptimizer" not in a.ops
    assert math.isclose(float(np.sum(a.time_us)), float(np.sum(load_onnx(CNN / "training_model.onnx",
                                                                          FrontendOptions(batch_size=2)).time_us)))
