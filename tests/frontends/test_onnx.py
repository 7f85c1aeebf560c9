"""The ONNX frontend on real models: an MLP, a GPT-2 style Transformer, onnxruntime-training artifacts.

Byte counts are checked against ONNX shape inference run independently and
against the arrays onnxruntime actually produces.
"""

from __future__ import annotations


import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from pardnn.analysis import is_topologically_ordered  # noqa: E402
from pardnn.errors import InputError  # noqa: E402
from pardnn.frontends import roofline  # noqa: E402
from pardnn.frontends import FrontendOptions, load_input  # noqa: E402
from pardnn.frontends.onnx import load_onnx, prepare  # noqa: E402
from pardnn.frontends.onnx.costs import node_bytes_moved  # noqa: E402
from pardnn.frontends.onnx.zoo import gpt, mlp  # noqa: E402

from ..conftest import REPO  # noqa: E402

from ..onnx_models import if_with_capture, make_model, save, split_to_sequence  # noqa: E402

pytestmark = pytest.mark.onnx
TRAINING = REPO / "tests" / "data" / "onnx"


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("onnx")
    return {"mlp": save(mlp([8, 16, 16, 4], seed=1), d / "mlp.onnx"),
            "gpt": save(gpt(vocab=96, d_model=32, heads=4, layers=2, max_len=32, seed=2), d / "gpt.onnx")}


def extras(g, key):
    return [(x or {}).get(key) for x in g.node_extra]


def test_mlp_nodes_bytes_and_weights_against_shape_inference(models):
    """
    input:input -> /fc0/Gemm -> /act0/Relu -> /fc1/Gemm -> /act1/Relu -> /fc2/Gemm -> output:logits
    Each Gemm alone reads its weight and bias: they are its persistent bytes.
    """
    g = load_onnx(models["mlp"], FrontendOptions(batch_size=3))
    assert g.names == ("input:input", "/fc0/Gemm", "/act0/Relu", "/fc1/Gemm", "/act1/Relu", "/fc2/Gemm",
                       "output:logits")
    assert g.num_edges == 6 and is_topologically_ordered(g)
    # independent shape inference with the batch fixed by hand
    m = onnx.load(str(models["mlp"]))
    for vi in list(m.graph.input) + list(m.graph.output):
        vi.type.tensor_type.shape.dim[0].dim_value = 3
    inferred = onnx.shape_inference.infer_shapes(m)
    shapes = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
              for vi in list(inferred.graph.value_info) + list(inferred.graph.output)}
    for n in m.graph.node:
        assert g.output_bytes_of(g.id(n.name)) == [4 * int(np.prod(shapes[n.output[0]]))]
    assert g.output_bytes_of(0) == [3 * 8 * 4]
    weights = {t.name: numpy_helper.to_array(t).nbytes for t in m.graph.initializer}
    assert int(g.persistent_bytes[g.id("/fc1/Gemm")]) == weights["fc1.weight"] + weights["fc1.bias"] == 16 * 17 * 4
    assert int(g.persistent_bytes.sum()) == sum(weights.values())
    assert set(extras(g, "phase")) == {"forward"}
    assert g.meta["dims"] == {"batch": 3} and g.meta["training"] is False


def test_mlp_roofline_costs_by_hand(models):
    g = load_onnx(models["mlp"], FrontendOptions(batch_size=3, device_profile="v100"))
    p = roofline.get_profile("v100")
    v = g.id("/fc1/Gemm")   # [3,16] x [16,16]^T + bias
    flops = 2 * 3 * 16 * 16 + 3 * 16
    moved = (3 * 16 + 16 * 16 + 16 + 3 * 16) * 4
    assert g.node_extra[v]["flops"] == flops
    assert g.time_us[v] == pytest.approx(roofline.op_time_us(flops, moved, p))
    relu = g.id("/act0/Relu")
    assert g.node_extra[relu]["flops"] == 3 * 16
    assert g.time_us[g.id("input:input")] == 0 and g.time_us[g.id("output:logits")] == 0
    assert g.meta["cost_model"] == "roofline (v100)"


def _recurrent_model(op, *, seq, batch, inp, hidden, layout=0, direction="forward"):
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    dirs = 2 if direction == "bidirectional" else 1
    rng = np.random.default_rng(0)
    init = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n) for n, s in
            (("W", (dirs, gates * hidden, inp)), ("R", (dirs, gates * hidden, hidden)),
             ("B", (dirs, 2 * gates * hidden)))]
    x_shape = [batch, seq, inp] if layout else [seq, batch, inp]
    node = helper.make_node(op, ["x", "W", "R", "B"], ["y"], name="rnn", hidden_size=hidden, layout=layout,
                            direction=direction)
    y_shape = [batch, seq, dirs, hidden] if layout else [seq, dirs, batch, hidden]
    graph = helper.make_graph([node], "rnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)], init)
    return make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("op, layout, direction", [("LSTM", 0, "forward"), ("GRU", 1, "bidirectional"),
                                                   ("RNN", 0, "reverse")])
def test_recurrent_ops_count_their_gates_products_over_every_step(tmp_path, op, layout, direction):
    """ONNX LSTM, GRU and RNN counted no FLOPs (an LSTM of 2.1 GFLOP cost less than a MatMul of 0.27 next to
    it, where onnxruntime's profile had it at 7.4x): now each step's gate products, biases and element-wise
    work, timed as the steps one after another."""
    seq, batch, inp, hidden = 6, 2, 3, 5
    gates, per_unit = {"LSTM": (4, 10), "GRU": (3, 9), "RNN": (1, 2)}[op]
    dirs = 2 if direction == "bidirectional" else 1
    path = save(_recurrent_model(op, seq=seq, batch=batch, inp=inp, hidden=hidden, layout=layout,
                                 direction=direction), tmp_path / "rnn.onnx")
    g = load_onnx(path, FrontendOptions(device_profile="v100"))
    v = g.id("rnn")
    flops = seq * batch * dirs * (2 * gates * hidden * (inp + hidden) + 2 * gates * hidden + per_unit * hidden)
    assert g.node_extra[v]["flops"] == flops
    moved = 4 * (seq * batch * inp + dirs * gates * hidden * (inp + hidden) + dirs * 2 * gates * hidden
                 + seq * dirs * batch * hidden)
    p = roofline.get_profile("v100")
    assert g.time_us[v] == pytest.approx(seq * roofline.op_time_us(flops / seq, moved / seq, p))
    assert g.time_us[v] > seq * p.launch_us
    if not layout:      # the shapes above are onnxruntime's (its CPU kernels refuse layout=1)
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        assert sess.run(None, {"x": np.zeros([seq, batch, inp], np.float32)})[0].shape == (seq, dirs, batch, hidden)


def test_onnxruntime_trainings_recurrent_ops_are_sized_without_it():
    """``pardnn info`` on a PyTorch LSTM's training artifacts needed onnxruntime-training to measure
    ``LSTMTraining``'s outputs (exit 3 otherwise); they are sized from ``X`` and ``hidden_size`` (the shapes
    onnxruntime-training 1.19.2 measured: all states [seq, dirs, batch, hidden], the gates 4 x hidden)."""
    from types import SimpleNamespace

    from pardnn.frontends.onnx.training_ops import training_rule
    f = TensorProto.FLOAT
    known = {"x": SimpleNamespace(elem_type=f, shape=(10, 4, 16)), "R": SimpleNamespace(elem_type=f, shape=(1, 128, 32))}
    lstm = helper.make_node("LSTMTraining", ["x", "W", "R"], ["hall", "ht", "ct", "cells", "iofc"],
                            domain="com.microsoft", hidden_size=32, direction="forward")
    got = [training_rule(lstm, j, known) for j in range(5)]
    assert got == [(f, (10, 1, 4, 32)), (f, (1, 4, 32)), (f, (1, 4, 32)), (f, (10, 1, 4, 32)), (f, (10, 1, 4, 128))]
    gru = helper.make_node("GRUTraining", ["x", "W", "R"], ["hall", "ht", "zrh"], domain="com.microsoft",
                           direction="bidirectional")        # no hidden_size: R's last axis
    known["R"] = SimpleNamespace(elem_type=f, shape=(2, 96, 32))
    assert [training_rule(gru, j, known) for j in range(3)] == [(f, (10, 2, 4, 32)), (f, (2, 4, 32)),
                                                                 (f, (10, 2, 4, 96))]


def test_a_tensor_only_onnxruntime_training_can_size_says_it_needs_it(tmp_path):
    """Measuring a value that only an onnxruntime-training op makes failed with exit 3 and onnxruntime's
    message; it is the missing dependency (exit 6), as ``run`` says for training graphs."""
    from pardnn.errors import MissingDependencyError
    node = helper.make_node("GRUGrad", ["x", "x", "x"], ["odd"], name="g", domain="com.microsoft")
    relu = helper.make_node("Relu", ["odd"], ["y"], name="r")
    graph = helper.make_graph([node, relu], "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4])])
    model = make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    path = save(model, tmp_path / "t.onnx")
    with pytest.raises(MissingDependencyError, match=r"t.onnx: tensor 'odd' \(output of node 'g', GRUGrad\) has no "
                                                      r"static shape .* install onnxruntime-training to read it"):
        prepare(path)


def _intermediate_arrays(path, feeds):
    """Run the model in onnxruntime with every node output exposed: {value name: array}."""
    m = onnx.load(str(path))
    names = [o for n in m.graph.node for o in n.output if o]
    have = {o.name for o in m.graph.output}
    m.graph.output.extend(onnx.ValueInfoProto(name=o) for o in names if o not in have)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def test_gpt_counts_match_shape_inference_and_a_real_run(models):
    opts = FrontendOptions(batch_size=2, dims={"seq": 12})
    g = load_onnx(models["gpt"], opts)
    m = onnx.load(str(models["gpt"]))
    users = {}
    for n in m.graph.node:
        for t in set(n.input):
            users[t] = users.get(t, 0) + 1
    shared = [t.name for t in m.graph.initializer if users.get(t.name, 0) > 1]
    assert "wte.weight" in shared and "shape_heads" in shared        # tied embedding, shared shape constant
    assert g.num_nodes == len(m.graph.node) + 1 + 1 + len(shared)    # + input + output sink + shared weights
    assert g.ops.count("Initializer") == len(shared)
    wte = g.id("init:wte.weight")
    assert int(g.persistent_bytes[wte]) == 96 * 32 * 4 and g.output_bytes_of(wte) == [0]
    readers = g.edge_dst[g.edge_src == wte]
    assert sorted(g.names[v] for v in readers) == ["/lm_head/Transpose", "/wte/Gather"]
    assert set(g.edge_bytes[g.edge_src == wte].tolist()) == {96 * 32 * 4}
    weights = sum(numpy_helper.to_array(t).nbytes for t in m.graph.initializer)
    assert int(g.persistent_bytes.sum()) == weights
    # every node's output bytes equal the arrays onnxruntime produces for batch 2, seq 12
    arrays = _intermediate_arrays(models["gpt"], {"input_ids": np.zeros((2, 12), np.int64)})
    for n in m.graph.node:
        assert g.output_bytes_of(g.id(n.name)) == [arrays[o].nbytes for o in n.output], n.name
    assert g.output_bytes_of(g.id("/lm_head/MatMul")) == [2 * 12 * 96 * 4]
    assert is_topologically_ordered(g)
    # the Range/ConstantOfShape mask chain was sized by folding, not by a run
    assert "shapes_measured" not in g.meta
    attn = g.id("/h.0.attn/MatMul_qk")   # [2,4,12,8] x [2,4,8,12]
    assert g.node_extra[attn]["flops"] == roofline.matmul_flops(12, 8, 12, batch=2 * 4)


def test_profiled_costs_come_from_onnxruntime(models):
    g = load_onnx(models["mlp"], FrontendOptions(batch_size=4, profile_steps=3))
    assert g.meta["cost_model"].startswith("onnxruntime profile, 3 runs")
    for name in ("/fc0/Gemm", "/fc1/Gemm", "/fc2/Gemm", "/act0/Relu"):
        assert g.time_us[g.id(name)] > 0
    assert g.time_us[g.id("input:input")] == 0


def test_names_are_unique_stable_and_keep_the_original(tmp_path):
    """Empty and repeated ONNX names get NAME_i / OPTYPE_i; onnx_name keeps what the file said."""
    nodes = [helper.make_node("Relu", ["x"], ["a"], name=""), helper.make_node("Neg", ["a"], ["b"], name="n"),
             helper.make_node("Neg", ["b"], ["c"], name="n"), helper.make_node("Relu", ["c"], ["y"], name="Relu_0")]
    graph = helper.make_graph(nodes, "names", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    path = save(make_model(graph), tmp_path / "names.onnx")
    g1, g2 = load_onnx(path), load_onnx(path)
    assert g1.names == g2.names
    compute = [n for n in g1.names if not n.startswith(("input:", "output:"))]
    assert compute == ["Relu_0_", "n_1", "n_2", "Relu_0"]
    assert extras(g1, "onnx_name")[1:5] == ["", "n", "n", None]


def test_external_data_is_read(tmp_path, models):
    m = onnx.load(str(models["gpt"]))
    ext = tmp_path / "ext" / "gpt.onnx"
    ext.parent.mkdir()
    onnx.save_model(m, str(ext), save_as_external_data=True, all_tensors_to_one_file=True, location="gpt.weights",
                    size_threshold=0)
    assert (ext.parent / "gpt.weights").stat().st_size > 100_000
    opts = FrontendOptions(batch_size=2, dims={"seq": 8})
    a, b = load_onnx(models["gpt"], opts), load_onnx(ext, opts)
    assert a.names == b.names and np.array_equal(a.persistent_bytes, b.persistent_bytes)
    assert np.array_equal(a.port_bytes, b.port_bytes) and np.allclose(a.time_us, b.time_us)
    # profiling needs the weights themselves
    p = load_onnx(ext, FrontendOptions(batch_size=2, dims={"seq": 8}, profile_steps=1))
    assert p.time_us.sum() > 0
    (ext.parent / "gpt.weights").unlink()
    with pytest.raises(InputError, match="needs external data file 'gpt.weights', which is missing"):
        load_onnx(ext, opts)


def test_no_output_replaces_the_external_data_of_an_onnx_input(tmp_path, models):
    """`-o` (and `report -o`, `simulate --trace`) naming the file that holds an ONNX model's weights is refused
    in one line, exit 3, and the weights stay as they were."""
    from click.testing import CliRunner

    from pardnn.cli import cli
    from pardnn.errors import EXIT_INPUT

    m = onnx.load(str(models["gpt"]))
    ext = tmp_path / "gpt.onnx"
    (tmp_path / "data").mkdir()
    onnx.save_model(m, str(ext), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="data/gpt.weights", size_threshold=0)
    weights = tmp_path / "data" / "gpt.weights"
    before = weights.read_bytes()
    flags = ("--batch-size", "2", "--dim", "seq=8")
    runner = CliRunner()
    ok = runner.invoke(cli, ["partition", str(ext), *flags, "-k", "2", "-o", str(tmp_path / "p.json")])
    assert ok.exit_code == 0, ok.output
    for args in (["partition", str(ext), *flags, "-k", "2", "-o", str(weights)],
                 ["simulate", str(ext), str(tmp_path / "p.json"), *flags, "--trace",
                  str(tmp_path / "x" / ".." / "data" / "gpt.weights")],
                 ["report", str(ext), str(tmp_path / "p.json"), *flags, "-o", str(weights)]):
        r = runner.invoke(cli, args)
        assert r.exit_code == EXIT_INPUT, (args, r.output)
        assert r.stderr.strip().splitlines() == [
            f"pardnn: error: {args[-1]}: refusing to overwrite data/gpt.weights, the external data of the input "
            f"{ext}; choose another output path"]
        assert weights.read_bytes() == before


@pytest.mark.parametrize("dims, batch, message", [
    ({}, None, "input 'input_ids' dimension 0 ('batch') is dynamic and pardnn needs its size: give it with "
               "--dim batch=VALUE or --batch-size VALUE; also unresolved: seq"),
    ({}, 2, "input 'input_ids' dimension 1 ('seq') is dynamic and pardnn needs its size: give it with "
            "--dim seq=VALUE"),
    ({"sequence": 4}, 2, "--dim sequence=4: the model has no dynamic input dimension named 'sequence' "
                         "(its dynamic dimensions: batch, seq)"),
    ({"batch": 4, "seq": 8}, 8, "--dim batch=4 and --batch-size 8 disagree on the batch dimension 'batch' (axis 0 "
                                "of input 'input_ids'); give one of them"),
    ({"input_ids:0": 4, "seq": 8}, 8, "--dim input_ids:0=4 and --batch-size 8 disagree on the batch dimension "
                                      "'batch' (axis 0 of input 'input_ids'); give one of them"),
    # a named dimension also given by input and axis (one of the two was dropped without a word)
    ({"seq": 8, "input_ids:1": 16}, 4, "--dim seq=8 and --dim input_ids:1=16 disagree on dimension 'seq' (axis 1 of "
                                       "input 'input_ids'); give one of them"),
    ({"batch": 4, "input_ids:0": 8, "seq": 16}, None, "--dim batch=4 and --dim input_ids:0=8 disagree on dimension "
                                                      "'batch' (axis 0 of input 'input_ids')"),
])
def test_unresolved_dynamic_dimensions_are_named(models, dims, batch, message):
    with pytest.raises(InputError) as err:
        load_onnx(models["gpt"], FrontendOptions(batch_size=batch, dims=dims))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_batch_size_that_sizes_nothing_is_said(tmp_path, caplog):
    """On a model with fixed input shapes ``--batch-size`` was ignored without a word (the TensorFlow frontend
    warns); quiet where it is an input's fixed leading dimension, or where it sizes a dynamic one."""
    node = helper.make_node("Relu", ["x"], ["y"], name="r")
    graph = helper.make_graph([node], "fixed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 5])])
    path = save(make_model(graph), tmp_path / "fixed.onnx")
    with caplog.at_level("WARNING", logger="pardnn.frontends.onnx"):
        prepare(path, batch_size=8)
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}: --batch-size 8 sizes nothing: no input has a named dynamic first dimension (inputs: x [4, 5]); "
        "ignored"]
    caplog.clear()
    with caplog.at_level("WARNING", logger="pardnn.frontends.onnx"):
        prepare(path, batch_size=4)
        prepare(REPO / "sample_graphs" / "onnx_mlp.onnx", batch_size=8)
    assert not caplog.records


def test_unnamed_dimension_needs_input_axis_not_the_batch_size(tmp_path):
    node = helper.make_node("Relu", ["x"], ["y"], name="r")
    graph = helper.make_graph([node], "anon", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 5])])
    path = save(make_model(graph), tmp_path / "anon.onnx")
    with pytest.raises(InputError, match=r"input 'x' dimension 0 \(unnamed\) is dynamic .* --dim x:0=VALUE$"):
        load_onnx(path, FrontendOptions(batch_size=8))
    g = load_onnx(path, FrontendOptions(dims={"x:0": 7}))
    assert g.output_bytes_of(g.id("r")) == [7 * 5 * 4]


def test_an_opset_or_element_type_onnx_does_not_know_is_refused_when_read(tmp_path):
    """Both passed onnx's checker, were read and converted, and failed only at ``pardnn run`` (exit 5)."""
    src = REPO / "sample_graphs" / "onnx_gpt_tiny.onnx"
    newest = onnx.defs.onnx_opset_version()
    m = onnx.load(str(src))
    m.opset_import[0].version = newest + 1
    path = save(m, tmp_path / "new.onnx")
    with pytest.raises(InputError, match=rf"new.onnx: opset {newest + 1} of the standard domain is newer than "
                                         rf"onnx .* knows \(up to {newest}\)"):
        prepare(path, batch_size=2, dims={"seq": 32})
    m.opset_import[0].version = newest        # the newest onnx knows is read
    assert prepare(save(m, tmp_path / "ok.onnx"), batch_size=2, dims={"seq": 32}).graph.node
    m = onnx.load(str(src))
    m.graph.input[0].type.tensor_type.elem_type = 99
    with pytest.raises(InputError, match=r"odd.onnx: input 'input_ids' has element type 99, which is no ONNX"):
        prepare(save(m, tmp_path / "odd.onnx"), batch_size=2, dims={"seq": 32})
    m = onnx.load(str(src))
    m.graph.initializer[0].data_type = 77
    with pytest.raises(InputError, match=rf"initializer {m.graph.initializer[0].name!r} has element type 77"):
        prepare(save(m, tmp_path / "init.onnx"), batch_size=2, dims={"seq": 32})


def test_malformed_models_are_one_line_input_errors(tmp_path):
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x08\x07garbage that is not a protobuf \xff\xff\xff")
    with pytest.raises(InputError, match="junk.onnx: not a readable ONNX model"):
        load_input(junk)
    bad = helper.make_graph([helper.make_node("Relu", ["nowhere"], ["y"], name="r")], "bad",
                            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    path = save(make_model(bad), tmp_path / "bad.onnx")
    with pytest.raises(InputError) as err:
        load_input(path)
    assert str(err.value).startswith(f"{path}: invalid ONNX model:") and "nowhere" in str(err.value)
    assert "\n" not in str(err.value)
    # onnx's checker names the node on the message's second line: the one line keeps it
    assert "input 'nowhere' of node: name: r OpType: Relu is not output of any previous nodes" in str(err.value)
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(InputError, match="not an ONNX model with a graph"):
        load_input(empty)


def test_data_dependent_shapes_are_measured_with_onnxruntime(tmp_path):
    """NonZero's output size depends on the data: shape inference cannot size it, one onnxruntime run does."""
    nodes = [helper.make_node("NonZero", ["x"], ["nz"], name="nonzero"),
             helper.make_node("Transpose", ["nz"], ["y"], name="t")]
    graph = helper.make_graph(nodes, "nz", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.INT64, [None, None])])
    g = load_onnx(save(make_model(graph), tmp_path / "nz.onnx"))
    assert g.meta["shapes_measured"] == ["nz", "y"]
    assert g.output_bytes_of(g.id("nonzero")) == [2 * 15 * 8]   # normal inputs are all non-zero


def test_a_sequence_keeps_its_type_and_is_sized_by_its_elements(tmp_path):
    """SplitToSequence of x [4, 8] into rows [1, 3]: a ragged sequence of 32 + 96 bytes, measured by a run.

    The model pardnn rewrites keeps the value a sequence (onnxruntime refuses a tensor declaration), so a
    profile runs; the sequence's bytes are the sum of its elements'.
    """
    path = save(split_to_sequence((1, 3)), tmp_path / "seq.onnx")
    pm = prepare(path)
    seq = pm.tensors["seq"]
    assert seq.is_sequence and seq.elements == ((1, 8), (3, 8)) and seq.nbytes == 128
    declared = {vi.name: vi.type for vi in pm.graph.value_info}
    assert declared["seq"].HasField("sequence_type")
    assert [d.dim_value for d in declared["seq"].sequence_type.elem_type.tensor_type.shape.dim] == [0, 8]
    assert pm.measured == ("seq", "x1")
    g = load_onnx(path, FrontendOptions(profile_steps=1))
    assert g.output_bytes_of(g.id("sts")) == [128] and g.output_bytes_of(g.id("at")) == [96]
    assert g.meta["cost_model"].startswith("onnxruntime profile")
    nodes = {n.name: n for n in pm.graph.node}
    assert node_bytes_moved(nodes["sts"], pm.tensors) == 128 + 16 + 128      # x and split in, the sequence out
    assert node_bytes_moved(nodes["at"], pm.tensors) == 2 * 96 + 8           # reads the element it returns


def test_an_optional_keeps_its_type(tmp_path):
    """Optional(x) -> OptionalGetElement -> Relu: the optional is measured, declared optional, and profiled."""
    nodes = [helper.make_node("Optional", ["x"], ["o"], name="opt"),
             helper.make_node("OptionalGetElement", ["o"], ["x1"], name="get"),
             helper.make_node("Relu", ["x1"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "opt", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])])
    path = save(make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), tmp_path / "opt.onnx")
    pm = prepare(path)
    assert pm.tensors["o"].optional and pm.tensors["o"].nbytes == 128
    assert {vi.name: vi for vi in pm.graph.value_info}["o"].type.HasField("optional_type")
    g = load_onnx(path, FrontendOptions(profile_steps=1))
    assert g.output_bytes_of(g.id("opt")) == [128]


@pytest.mark.parametrize("case", ["empty then insert", "of weights", "optional of a weight"])
def test_a_sequence_or_optional_of_constants_is_not_folded_into_a_tensor(tmp_path, case):
    """A second review: SequenceEmpty -> SequenceInsert(x), SequenceConstruct(weights) and Optional(weight) have
    only known inputs, so the shape folder evaluated them and wrote a tensor initializer; shape inference then
    refused the valid model ("type case mismatch", exit 3). They import and keep their types."""
    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    vi = helper.make_tensor_value_info
    c1 = numpy_helper.from_array(np.ones((4, 8), np.float32), "c1")
    c2 = numpy_helper.from_array(np.full((4, 8), 2, np.float32), "c2")
    opset = 17
    if case == "empty then insert":
        nodes = [helper.make_node("SequenceEmpty", [], ["s0"], name="empty", dtype=f),
                 helper.make_node("SequenceInsert", ["s0", "c1"], ["s"], name="ins"),
                 helper.make_node("ConcatFromSequence", ["s"], ["e"], name="cat", axis=0)]
        inits = [c1]
    elif case == "of weights":
        nodes = [helper.make_node("SequenceConstruct", ["c1", "c2"], ["s"], name="sc"),
                 helper.make_node("SequenceAt", ["s", "one"], ["e"], name="at")]
        inits = [c1, c2, numpy_helper.from_array(np.array(1, np.int64), "one")]
    else:
        nodes = [helper.make_node("Optional", ["c1"], ["s"], name="opt"),
                 helper.make_node("OptionalGetElement", ["s"], ["e"], name="get")]
        inits, opset = [c1], 18
    nodes.append(helper.make_node("Add", ["x", "e"], ["y"], name="add"))
    del i64
    graph = helper.make_graph(nodes, "consts", [vi("x", f, [4, 8])], [vi("y", f, [4, 8])], initializer=inits)
    path = save(make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), tmp_path / "c.onnx")
    pm = prepare(path)
    kind = "optional_type" if case.startswith("optional") else "sequence_type"
    assert {v.name: v for v in pm.graph.value_info}["s"].type.HasField(kind)
    g = load_onnx(path)
    assert g.output_bytes_of(g.id("add")) == [128]


def test_a_trip_count_written_as_a_plain_number_is_read(tmp_path):
    """A second review: Constant(value_int=10), as exporters write a Loop's M, was not read (the Loop cost one
    iteration); it counts as Constant(value=10) does."""
    from pardnn.frontends.onnx.shapes import small_values

    graph = helper.make_graph([helper.make_node("Constant", [], ["m"], value_int=10),
                               helper.make_node("Constant", [], ["fs"], value_floats=[0.5, 2.0])], "c", [], [])
    got = small_values(graph)
    assert got["m"].dtype == np.int64 and got["m"].item() == 10
    assert got["fs"].dtype == np.float32 and got["fs"].tolist() == [0.5, 2.0]


def test_an_empty_optional_holds_no_bytes(tmp_path):
    """A second review: Optional() of a type alone (an empty optional) was refused, "value 'o' is a
    optional(tensor(float)): pardnn sizes tensors and sequences of tensors only". It holds no tensor: 0 bytes."""
    f = TensorProto.FLOAT
    vi = helper.make_tensor_value_info
    nodes = [helper.make_node("Optional", [], ["o"], name="opt", type=helper.make_tensor_type_proto(f, [8, 8])),
             helper.make_node("OptionalHasElement", ["o"], ["has"], name="has"),
             helper.make_node("Relu", ["x"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "empty_opt", [vi("x", f, [8, 8])],
                              [vi("y", f, [8, 8]), vi("has", TensorProto.BOOL, [])])
    path = save(make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), tmp_path / "eo.onnx")
    pm = prepare(path)
    assert pm.tensors["o"].optional and pm.tensors["o"].nbytes == 0
    g = load_onnx(path, FrontendOptions(profile_steps=1))
    assert g.output_bytes_of(g.id("opt")) == [0]


def test_an_unknown_op_without_shapes_is_named(tmp_path):
    nodes = [helper.make_node("Mystery", ["x"], ["m"], name="mystery", domain="example.custom"),
             helper.make_node("Relu", ["m"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "custom", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None])])
    model = make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("example.custom", 1)])
    with pytest.raises(InputError) as err:
        load_onnx(save(model, tmp_path / "custom.onnx"))
    assert str(err.value).startswith(f"{tmp_path / 'custom.onnx'}: tensor 'm' (output of node 'mystery', Mystery) "
                                     "has no static shape after ONNX shape inference, and running the model to "
                                     "measure it failed: onnxruntime cannot load the model")
    assert "\n" not in str(err.value)


def test_conv_convtranspose_einsum_flops(tmp_path):
    """Conv 2x3x8x8 * 4x3x3x3 (pad 1) -> 2x4x8x8; ConvTranspose back 4->3 channels; Einsum batched product."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    wt = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "wt")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("ConvTranspose", ["c", "wt"], ["t"], name="deconv", pads=[1, 1, 1, 1]),
             helper.make_node("Einsum", ["t", "t"], ["e"], name="ein", equation="bcij,bcjk->bcik")]
    graph = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8, 8])],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2, 3, 8, 8])],
                              initializer=[w, wt])
    g = load_onnx(save(make_model(graph), tmp_path / "c.onnx"))
    assert g.node_extra[g.id("conv")]["flops"] == 2 * (2 * 4 * 8 * 8) * 3 * 9
    assert g.node_extra[g.id("deconv")]["flops"] == 2 * (2 * 4 * 8 * 8) * 3 * 9
    assert g.node_extra[g.id("ein")]["flops"] == roofline.matmul_flops(8, 8, 8, batch=2 * 3)


def test_subgraph_captures_become_edges(tmp_path):
    """An If whose branches read an outer value 'h' gets an edge from h's producer."""
    g = load_onnx(save(if_with_capture(), tmp_path / "if.onnx"))
    assert g.id("sin") in g.predecessors(g.id("if")).tolist()
    assert g.output_bytes_of(g.id("if")) == [16]


def test_local_functions_are_inlined(tmp_path):
    fn = helper.make_function("local", "Swish", ["X"], ["Y"],
                              [helper.make_node("Sigmoid", ["X"], ["s"]), helper.make_node("Mul", ["X", "s"], ["Y"])],
                              [helper.make_opsetid("", 17)])
    graph = helper.make_graph([helper.make_node("Swish", ["x"], ["y"], name="swish", domain="local")], "fn",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
                              functions=[fn])
    g = load_onnx(save(model, tmp_path / "fn.onnx"))
    assert sorted(op for op in g.ops if op not in ("Input", "Output")) == ["Mul", "Sigmoid"]


# ---------------------------------------------------------------------------
# onnxruntime-training artifacts
# ---------------------------------------------------------------------------

def test_training_artifact_mlp_phases_parameters_and_groups():
    """tests/data/onnx/mlp_training: onnxruntime-training 1.19.2's training_model.onnx for MLP 16-32-32-4, batch 8."""
    g = load_onnx(TRAINING / "mlp_training" / "training_model.onnx")
    assert g.meta["training"] is True
    phase = dict(zip(g.names, extras(g, "phase")))
    assert phase["/fc0/Gemm"] == "forward" and phase["onnx::SoftmaxCrossEntropyLoss::4"] == "forward"
    assert phase["/fc0/Gemm_Grad/Gemm_0"] == "backward" and phase["/act1/Relu_Grad/ReluGrad_0"] == "backward"
    assert phase["GradientAccumulator1"] == "optimizer"
    counts = {p: list(phase.values()).count(p) for p in ("forward", "backward", "optimizer")}
    assert counts["backward"] == 14   # every gradient node of the artifact
    # parameters are graph inputs holding persistent bytes, grouped with their gradient buffer and accumulator
    group = g.group_names.index("param:fc0.weight")
    members = sorted(g.names[v] for v in g.groups[group])
    assert members == ["GradientAccumulator1", "input:fc0.weight", "input:fc0.weight_grad.accumulation.buffer",
                       "output:fc0.weight_grad.accumulation.out"]
    assert g.ops[g.id("input:fc0.weight")] == "Parameter"
    assert int(g.persistent_bytes[g.id("input:fc0.weight")]) == 32 * 16 * 4
    params = (32 * 16 + 32 + 32 * 32 + 32 + 4 * 32 + 4) * 4
    assert int(g.persistent_bytes.sum()) == 2 * params + 4 + 3 * 8   # + float loss-gradient seed, 3 int64 axes
    # gradients are sized by shape inference plus the T_grad convention
    assert g.output_bytes_of(g.id("/act1/Relu_Grad/ReluGrad_0")) == [8 * 32 * 4]


def test_an_artifact_folder_reads_its_training_model():
    folder = TRAINING / "mlp_training"
    from pardnn.frontends import detect_format

    assert detect_format(folder) == "onnx"
    a, b = load_input(folder), load_onnx(folder / "training_model.onnx")
    assert a.names == b.names and np.array_equal(a.persistent_bytes, b.persistent_bytes)


def test_training_artifact_gpt_needs_its_label_dimension_and_partitions():
    path = TRAINING / "gpt_training" / "training_model.onnx"
    with pytest.raises(InputError, match=r"input 'labels' dimension 0 \(unnamed\).*--dim labels:0=VALUE"):
        load_onnx(path, FrontendOptions(batch_size=2, dims={"seq": 16}))
    g = load_onnx(path, FrontendOptions(batch_size=2, dims={"seq": 16, "labels:0": 32}))
    phases = extras(g, "phase")
    assert {"forward", "backward", "optimizer"} <= set(phases)
    assert g.output_bytes_of(g.id("/lm_head/MatMul")) == [2 * 16 * 64 * 4]
    grads = [v for v, n in enumerate(g.names) if "LayerNormalizationGrad" in n]
    assert grads and all(phases[v] == "backward" for v in grads)
    from pardnn.api import partition
    from pardnn.cluster import Cluster

    plan, sched = partition(g, Cluster.homogeneous(2))
    assert sched.feasible
    for members in g.groups:
        assert len(set(plan.assignment[members].tolist())) == 1


def test_views_forward_their_input_buffer(tmp_path):
    """x (1000 floats) -> Sin -> h -> Reshape -> Unsqueeze -> Flatten -> Squeeze -> Identity -> i; Add(h, i);
    ReduceSum. 24 B of shape constants are persistent.

    Each view's input edge is marked ``forwarded_as`` 0, so on one device the chain is h's one buffer:
    the step peaks at two 4000-byte buffers (x and h at Sin, h and the sum's input at Add): 8024 B. Without
    the marks every view is a buffer of its own, and h, a view's input and its output are alive at each
    view's start: 12024 B.
    """
    import dataclasses

    from pardnn.ir import FORWARDED_AS
    from pardnn.machine import single_device_peak

    shape = numpy_helper.from_array(np.array([10, 100], np.int64), "shape")
    axes0 = numpy_helper.from_array(np.array([0], np.int64), "axes0")
    nodes = [helper.make_node("Sin", ["x"], ["h"], name="sin"),
             helper.make_node("Reshape", ["h", "shape"], ["r"], name="reshape"),
             helper.make_node("Unsqueeze", ["r", "axes0"], ["u"], name="unsqueeze"),
             helper.make_node("Flatten", ["u"], ["f"], name="flatten", axis=0),
             helper.make_node("Squeeze", ["f", "axes0"], ["q"], name="squeeze"),
             helper.make_node("Identity", ["q"], ["i"], name="identity"),
             helper.make_node("Add", ["h", "i"], ["a"], name="add"),
             helper.make_node("ReduceSum", ["a"], ["y"], name="sum", keepdims=0)]
    graph = helper.make_graph(nodes, "views", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1000])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
                              initializer=[shape, axes0])
    g = load_onnx(save(make_model(graph), tmp_path / "views.onnx"))
    marked = {(g.names[int(g.edge_src[e])], g.names[int(g.edge_dst[e])])
              for e, x in enumerate(g.edge_extra) if x and x.get(FORWARDED_AS) == 0}
    assert marked == {("sin", "reshape"), ("reshape", "unsqueeze"), ("unsqueeze", "flatten"),
                      ("flatten", "squeeze"), ("squeeze", "identity")}
    assert single_device_peak(g) == 2 * 4000 + 24
    assert single_device_peak(dataclasses.replace(g, edge_extra=())) == 3 * 4000 + 24
    session = ort.InferenceSession(str(tmp_path / "views.onnx"))
    assert np.allclose(session.run(None, {"x": np.ones(1000, np.float32)})[0], 2000 * np.sin(1.0))


def _control_flow_model(trip: str | None, from_shape: bool | str = False) -> onnx.ModelProto:
    """x [64, 64]; ``mm_once`` = x @ w; a Loop of ``h = tanh(h @ w)`` (trip count: the constant ``trip`` = 10,
    with ``from_shape`` computed as ``Shape(x)[0] / 6``, the graph input ``n`` when ``trip`` is None) whose body also holds an If (then: 2 MatMuls, else: Neg);
    an If outside (then: 3 MatMuls, else: Neg); a Scan adding the 64 rows of x. No body value is declared:
    their shapes come from shape inference."""
    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    vi = helper.make_tensor_value_info
    mm = lambda a, b, o: helper.make_node("MatMul", [a, b], [o])  # noqa: E731

    def branches(k, x, out):
        chain = [mm(x if j == 0 else f"{out}_t{j}", "w", out if j == k - 1 else f"{out}_t{j + 1}") for j in range(k)]
        then_g = helper.make_graph(chain, f"{out}_then", [], [vi(out, f, None)])
        else_g = helper.make_graph([helper.make_node("Neg", [x], [out + "_neg"])], f"{out}_else", [],
                                   [vi(out + "_neg", f, None)])
        return dict(then_branch=then_g, else_branch=else_g)

    body = helper.make_graph(
        [mm("h_in", "w", "hm"), helper.make_node("Tanh", ["hm"], ["ht"]),
         helper.make_node("If", ["c"], ["h_out"], **branches(2, "ht", "inner")),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body", [vi("i", i64, []), vi("cond_in", TensorProto.BOOL, []), vi("h_in", f, None)],
        [vi("cond_out", TensorProto.BOOL, []), vi("h_out", f, None)])
    scan_body = helper.make_graph([helper.make_node("Add", ["s_in", "row"], ["s_out"])], "scan_body",
                                  [vi("s_in", f, None), vi("row", f, None)], [vi("s_out", f, None)])
    nodes = [mm("x", "w", "once"),
             helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0, name="sum"),
             helper.make_node("Greater", ["s", "zero"], ["c"], name="gt"),
             helper.make_node("Loop", [trip or "n", "true", "x"], ["hf"], name="loop", body=body),
             helper.make_node("If", ["c"], ["yi"], name="if", **branches(3, "x", "outer")),
             helper.make_node("Scan", ["row0", "x"], ["sf"], name="scan", body=scan_body, num_scan_inputs=1),
             helper.make_node("Add", ["hf", "yi"], ["y"], name="add")]
    nodes[0].name = "mm_once"
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((64, 64)) * 0.1).astype(np.float32), "w"),
             numpy_helper.from_array(np.array(0, np.float32), "zero"),
             numpy_helper.from_array(np.array(True), "true"),
             numpy_helper.from_array(np.zeros(64, np.float32), "row0")]
    if trip and from_shape == "value_int":     # Constant(value_int=10), as exporters write it
        nodes[:0] = [helper.make_node("Constant", [], [trip], name="trip", value_int=10)]
    elif trip and from_shape:
        nodes[:0] = [helper.make_node("Shape", ["x"], ["x_shape"], name="shape"),
                     helper.make_node("Gather", ["x_shape", "k0"], ["rows"], name="rows"),
                     helper.make_node("Div", ["rows", "six"], [trip], name="trip")]
        inits += [numpy_helper.from_array(np.array(0, np.int64), "k0"),
                  numpy_helper.from_array(np.array(6, np.int64), "six")]
    elif trip:
        inits.append(numpy_helper.from_array(np.array(10, np.int64), trip))
    inputs = [vi("x", f, [64, 64])] + ([] if trip else [vi("n", i64, [])])
    graph = helper.make_graph(nodes, "control", inputs, [vi("y", f, [64, 64]), vi("sf", f, [64])],
                              initializer=inits)
    if from_shape is True:      # every value sized without folding: the trip count alone needs it
        graph.value_info.append(vi("hf", f, [64, 64]))
    return make_model(graph)


@pytest.mark.parametrize("from_shape", [False, True, "value_int"],
                         ids=["constant trip count", "trip count from Shape", "trip count as value_int"])
def test_control_flow_bodies_are_costed(tmp_path, caplog, from_shape):
    """Loop: 10 x (MatMul + Tanh + the If's costlier branch, 2 MatMuls); If: its 3-MatMul branch; Scan: 64 x Add.

    Each adds its own roofline time (its inputs and outputs moved) to its bodies'. A trip count computed from a
    shape (``Shape(x)[0] / 6``) is folded like a constant one (it was costed once, with a warning)."""
    from pardnn.frontends.onnx.costs import roofline_time_us
    from pardnn.frontends.onnx.shapes import TensorInfo

    path = save(_control_flow_model("trip", from_shape), tmp_path / "cf.onnx")
    with caplog.at_level("WARNING", logger="pardnn.frontends.onnx"):
        g = load_onnx(path, FrontendOptions(device_profile="v100"))
    assert not caplog.records
    flops = {n: g.node_extra[g.id(n)].get("flops") for n in ("mm_once", "loop", "if", "scan")}
    mm = 2.0 * 64 ** 3
    tanh = 64 * 64 * roofline.ELEMENTWISE_FLOPS["Tanh"]
    assert flops == {"mm_once": mm, "loop": 10 * (mm + tanh + 2 * mm), "if": 3 * mm, "scan": 64 * 64}
    t = {n: float(g.time_us[g.id(n)]) for n in ("mm_once", "loop", "if")}
    v100 = roofline.get_profile("v100")
    x = TensorInfo("x", TensorProto.FLOAT, (64, 64))
    tanh_us = roofline_time_us(helper.make_node("Tanh", ["x"], ["t"]), {"x": x, "t": x}, v100)[0]
    assert 3 * t["mm_once"] < t["if"] < 3 * t["mm_once"] + 2 * v100.launch_us
    # per iteration: MatMul, Tanh, the inner If (a launch, 32 KiB in and out, its 2 MatMuls), Identity (a launch)
    assert t["loop"] == pytest.approx(10 * (3 * t["mm_once"] + tanh_us + 2 * v100.launch_us), rel=0.02)


def test_a_loop_of_unknown_trip_count_is_costed_once_with_a_warning(tmp_path, caplog):
    path = save(_control_flow_model(None), tmp_path / "cf.onnx")
    with caplog.at_level("WARNING", logger="pardnn.frontends.onnx"):
        g = load_onnx(path)
    mm = 2.0 * 64 ** 3
    assert g.node_extra[g.id("loop")]["flops"] == mm + 64 * 64 * roofline.ELEMENTWISE_FLOPS["Tanh"] + 2 * mm
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}: 1 Loop/Scan node(s) with no static trip count (loop); the roofline costs each body as "
        "one iteration (--profile measures it)"]


def _nested_loops(inner_trip_from_shape: bool) -> onnx.ModelProto:
    """An outer Loop (M = 3) whose body runs an inner Loop (M = 4, or Shape(h)[0] when ``inner_trip_from_shape``,
    which inference cannot fold there: MatMul + Relu on [64, 64]) and then a MatMul of the inner Loop's result."""
    f, i64, b = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
    vi = helper.make_tensor_value_info
    inner = helper.make_graph(
        [helper.make_node("MatMul", ["g_in", "w"], ["gm"]), helper.make_node("Relu", ["gm"], ["g_out"]),
         helper.make_node("Identity", ["d_in"], ["d_out"])],
        "inner", [vi("j", i64, []), vi("d_in", b, []), vi("g_in", f, None)], [vi("d_out", b, []), vi("g_out", f, None)])
    trip = ([helper.make_node("Shape", ["h_in"], ["hs"]), helper.make_node("Gather", ["hs", "k0"], ["four"])]
            if inner_trip_from_shape else
            [helper.make_node("Constant", [], ["four"], value=numpy_helper.from_array(np.array(4, np.int64)))])
    outer = helper.make_graph(
        trip + [helper.make_node("Loop", ["four", "c_in", "h_in"], ["h2"], name="inner", body=inner),
                helper.make_node("MatMul", ["h2", "w"], ["h_out"], name="after_inner"),
                helper.make_node("Identity", ["c_in"], ["c_out"])],
        "outer", [vi("i", i64, []), vi("c_in", b, []), vi("h_in", f, None)], [vi("c_out", b, []), vi("h_out", f, None)])
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((64, 64)) * 0.1).astype(np.float32), "w"),
             numpy_helper.from_array(np.array(3, np.int64), "three"), numpy_helper.from_array(np.array(True), "true"),
             numpy_helper.from_array(np.array(0, np.int64), "k0")]
    return make_model(helper.make_graph([helper.make_node("Loop", ["three", "true", "x"], ["y"], name="outer",
                                                          body=outer)],
                                        "nested", [vi("x", f, [64, 64])], [vi("y", f, [64, 64])], inits))


def test_nested_loops_cost_what_follows_the_inner_loop_and_name_it(tmp_path, caplog):
    """A second review: the inner Loop's result stayed unsized in the outer body, so the MatMul after it cost
    nothing (20% of the FLOPs lost); and the warning of an inner Loop without a static trip count named the
    outer one."""
    mm, relu = 2.0 * 64 ** 3, 64 * 64 * roofline.ELEMENTWISE_FLOPS["Relu"]
    g = load_onnx(save(_nested_loops(False), tmp_path / "n.onnx"))
    assert g.node_extra[g.id("outer")]["flops"] == 3 * (4 * (mm + relu) + mm)
    path = save(_nested_loops(True), tmp_path / "ns.onnx")
    with caplog.at_level("WARNING", logger="pardnn.frontends.onnx"):
        load_onnx(path)
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}: 1 Loop/Scan node(s) with no static trip count (outer/inner); the roofline costs each body as "
        "one iteration (--profile measures it)"]
