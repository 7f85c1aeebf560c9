"""The TensorFlow frontend on small real Keras models: flat graphs, groups, costs, profiles, errors.

Every graph here comes from a real Keras 3 training step (forward, GradientTape
gradients, Adam) traced and flattened by TensorFlow itself; profiles are real
runs on this machine's CPU.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter

import numpy as np
import pytest
from click.testing import CliRunner

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from pardnn.analysis import is_topologically_ordered  # noqa: E402
from pardnn.cli import cli  # noqa: E402
from pardnn.errors import EXIT_INPUT, InputError  # noqa: E402
from pardnn.frontends import FrontendOptions, load_input  # noqa: E402
from pardnn.frontends.tensorflow import TFModel, import_keras, import_tensorflow, load_tensorflow  # noqa: E402
from pardnn.frontends.tensorflow.build import to_opgraph  # noqa: E402
from pardnn.frontends.tensorflow.flatten import CALL_OPS  # noqa: E402
from pardnn.frontends.tensorflow.keras_step import keras_train_step  # noqa: E402

from .. import tf_models  # noqa: E402

pytestmark = pytest.mark.tf

UPDATE_OPS = ("AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp")


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def node(g, name):
    return g.id(name)


def extra(g, v, key):
    return (g.node_extra[v] or {}).get(key) if g.node_extra else None


@pytest.fixture(scope="module")
def mlp_model() -> TFModel:
    model, loss, batch = tf_models.mlp(keras)
    return keras_train_step(model, loss, keras.optimizers.Adam(1e-3), batch), model


@pytest.fixture(scope="module")
def mlp_static(mlp_model):
    m, _ = mlp_model
    return to_opgraph(m, device_profile="h100")


@pytest.fixture(scope="module")
def mlp_profiled(mlp_model):
    m, _ = mlp_model
    return to_opgraph(m, profile_steps=3)


@pytest.fixture(scope="module")
def lstm_model():
    model, loss, batch = tf_models.lstm(keras)
    return keras_train_step(model, loss, keras.optimizers.Adam(1e-3), batch)


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    return tf_models.save_train_savedmodel(tf, keras, tmp_path_factory.mktemp("sm") / "mlp_train")


# ---------------------------------------------------------------------------
# One flat graph
# ---------------------------------------------------------------------------

def test_keras_step_is_one_flat_graph_named_as_tensorflow_names_it(mlp_model, mlp_static):
    m, model = mlp_model
    g = mlp_static.graph
    assert not m.graph_def.library.function and not any(n.op in CALL_OPS for n in m.graph_def.node)
    assert set(g.names) == {n.name for n in m.graph_def.node}           # names are TF's names, 1:1
    assert is_topologically_ordered(g)
    ops = Counter(g.ops)
    # 4 model variables, Adam's iteration and learning rate, 2 slots per variable.
    assert ops["VarHandleOp"] == 4 + 2 + 8
    # forward: 2 MatMuls; backward: both kernels' gradients and the hidden activation's.
    assert ops["MatMul"] == 5
    assert Counter(extra(g, v, "phase") for v in range(g.num_nodes) if g.ops[v] == "MatMul") == \
        {"forward": 2, "backward": 3}
    assert ops["AssignSubVariableOp"] == 4                               # one update per model variable
    assert 150 <= g.num_nodes <= 300, g.num_nodes                        # ~39 Adam ops per variable
    assert [f.name for f in m.feeds] == ["x:0", "y:0"] and len(m.fetches) == 1
    assert set(g.meta["phases"]) == {"forward", "backward", "optimizer"}


def test_phases_follow_gradient_and_optimizer_scopes(mlp_static):
    g = mlp_static.graph
    for v in range(g.num_nodes):
        phase = extra(g, v, "phase")
        if "gradient_tape" in g.names[v]:
            assert phase == "backward", g.names[v]
        if g.ops[v] in UPDATE_OPS:
            assert phase == "optimizer", g.names[v]
    assert extra(g, g.id("hidden/kernel"), "phase") == "forward"      # read by the forward pass
    assert extra(g, g.id("adam/hidden_kernel_momentum"), "phase") == "optimizer"


def test_every_variable_group_holds_its_readers_and_its_update(mlp_model, mlp_static):
    m, model = mlp_model
    g = mlp_static.graph
    consumers: dict[str, list[str]] = {}
    for n in m.graph_def.node:
        for ref in n.input:
            consumers.setdefault(ref.lstrip("^").split(":")[0], []).append(n.name)
    variables = [g.names[v] for v in range(g.num_nodes) if g.ops[v] == "VarHandleOp"]
    for var in variables:
        group = g.colocation[g.id(var)]
        assert group >= 0 and g.group_names[group] == var
        members = {g.names[u] for u in g.groups[group]}
        assert set(consumers[var]) <= members, var                      # every op taking the handle
        assert any(g.ops[g.id(u)] == "ReadVariableOp" for u in members)
    trained = [v.path for v in model.trainable_variables]
    assert sorted(trained) == sorted(n for n in variables if not n.startswith("adam/"))
    for var in trained + [n for n in variables if n.endswith(("_momentum", "_velocity"))] + ["adam/iteration"]:
        members = g.groups[g.colocation[g.id(var)]]
        updates = [u for u in members if g.ops[u] in UPDATE_OPS]
        assert updates, f"{var}: no update op in its group"
        assert all(extra(g, u, "phase") == "optimizer" for u in updates)


def test_persistent_bytes_are_the_weights_and_the_slots(mlp_model, mlp_static):
    m, model = mlp_model
    g = mlp_static.graph
    params = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
    assert params == 16 * 32 + 32 + 32 * 4 + 4
    var_bytes = {g.names[v]: int(g.persistent_bytes[v]) for v in range(g.num_nodes) if g.ops[v] == "VarHandleOp"}
    assert var_bytes["hidden/kernel"] == 16 * 32 * 4
    assert sum(b for n, b in var_bytes.items() if not n.startswith("adam/")) == 4 * params
    assert sum(b for n, b in var_bytes.items() if n.endswith(("_momentum", "_velocity"))) == 2 * 4 * params
    # variable reads alias the variable: no new memory on their device, but their edges carry the tensor
    read = next(v for v in range(g.num_nodes) if g.ops[v] == "ReadVariableOp"
                and g.names[g.predecessors(v)[0]] == "hidden/kernel")
    assert g.output_bytes_of(read) == [0]
    out_edges = g.out_csr[1][g.out_csr[0][read]:g.out_csr[0][read + 1]]
    assert {int(g.edge_bytes[e]) for e in out_edges if not g.edge_control[e]} == {16 * 32 * 4}


def test_static_costs_come_from_the_roofline(mlp_model, mlp_static):
    from pardnn.frontends.roofline import DEVICE_PROFILES, matmul_flops, op_time_us

    m, _ = mlp_model
    g = mlp_static.graph
    mm = g.id(next(n for n in g.names if n.endswith("hidden_1/MatMul") and "gradient" not in n))
    assert g.output_bytes_of(mm) == [8 * 32 * 4]
    h100 = DEVICE_PROFILES["h100"]
    expected = op_time_us(matmul_flops(8, 16, 32), (8 * 16 + 16 * 32 + 8 * 32) * 4, h100)
    assert g.time_us[mm] == pytest.approx(expected)
    cpu = to_opgraph(m, device_profile="cpu").graph
    assert cpu.time_us[cpu.id(g.names[mm])] == pytest.approx(
        op_time_us(matmul_flops(8, 16, 32), (8 * 16 + 16 * 32 + 8 * 32) * 4, DEVICE_PROFILES["cpu"]))
    assert g.meta["costs"] == "roofline" and g.meta["device_profile"] == "h100"


# ---------------------------------------------------------------------------
# Profiles
# ---------------------------------------------------------------------------

def test_profiled_times_are_positive_and_bounded_by_the_step(mlp_profiled):
    g = mlp_profiled.graph
    prof = mlp_profiled.profile
    assert g.meta["costs"] == "profile" and g.meta["profile_steps"] == 3
    measured = [v for v in range(g.num_nodes) if g.names[v] in prof.time_us]
    assert len(measured) == g.num_nodes - 2                              # all but the two feeds
    times = g.time_us[measured]
    assert (times > 0).mean() > 0.98 and times.min() >= 0
    # one inter-op thread: ops run one at a time, so their sum fits in a step's wall time
    assert 0 < times.sum() <= 1.05 * max(prof.step_ms) * 1e3


def test_profiled_times_are_of_the_right_order():
    """The one big MatMul (134 MFLOP) takes far longer than scalar ops, at a CPU's FLOP rate."""
    model, loss, batch = tf_models.big_mlp(keras)
    g = import_keras(model, loss, keras.optimizers.Adam(1e-3), batch,
                     options=FrontendOptions(profile_steps=3)).graph
    big = g.id(next(n for n in g.names if n.endswith("wide_1/MatMul") and "gradient" not in n))
    flops = 2 * 256 * 512 * 512
    seconds = g.time_us[big] / 1e6
    assert 1e8 < flops / seconds < 5e12                                  # 0.1 GFLOP/s .. 5 TFLOP/s
    scalar = [v for v in range(g.num_nodes) if g.ops[v] in ("AddV2", "Mul", "Sub")
              and sum(g.output_bytes_of(v)) <= 8 and g.time_us[v] > 0]
    assert len(scalar) > 10
    assert g.time_us[big] > 20 * np.median(g.time_us[scalar])


def test_static_and_profiled_bytes_agree_where_shapes_are_static(mlp_static, mlp_profiled):
    s, p = mlp_static.graph, mlp_profiled.graph
    assert s.names == p.names
    differ = [v for v in range(s.num_nodes) if s.output_bytes_of(v) != p.output_bytes_of(v)]
    # BroadcastGradientArgs returns a data-dependent number of axes; statically it takes the bound
    assert all(s.ops[v] == "BroadcastGradientArgs" for v in differ), [s.names[v] for v in differ]
    for v in differ:
        assert all(a >= b for a, b in zip(s.output_bytes_of(v), p.output_bytes_of(v)))
    assert np.array_equal(s.edge_bytes[s.ops.index("MatMul")], p.edge_bytes[p.ops.index("MatMul")])


def test_profile_uses_the_given_batch_and_the_models_weights(mlp_model):
    """The traced MatMul sees the real batch's shape; a profiled run leaves the Keras model untouched."""
    m, model = mlp_model
    before = [v.numpy().copy() for v in model.trainable_variables]
    g = to_opgraph(m, profile_steps=1).graph
    after = [v.numpy() for v in model.trainable_variables]
    assert all(np.array_equal(a, b) for a, b in zip(before, after))
    v = g.id(next(n for n in g.names if n.endswith("head_1/MatMul") and "gradient" not in n))
    assert g.output_bytes_of(v) == [8 * 4 * 4]


# ---------------------------------------------------------------------------
# Loops
# ---------------------------------------------------------------------------

def test_lstm_loops_are_cut_into_a_dag_and_counted(lstm_model, caplog):
    with caplog.at_level("WARNING", logger="pardnn.frontends.tensorflow"):
        imp = to_opgraph(lstm_model, device_profile="cpu")
    g = imp.graph
    cut = g.meta["cut_back_edges"]
    assert cut and all(g.ops[g.id(s)] == "NextIteration" and g.ops[g.id(d)] == "Merge" for s, d in cut)
    assert any("cut" in r.getMessage() and "back edge" in r.getMessage() for r in caplog.records)
    assert is_topologically_ordered(g)
    assert sorted(g.meta["loops"].values()) == [5, 5]                   # forward loop and its gradient, 5 steps
    inner = g.id(next(n for n in g.names if "while" in n and n.endswith("lstm_cell_1/MatMul")))
    assert g.output_bytes_of(inner) == [4 * 32 * 4]                     # [batch, 4 x hidden] per iteration
    assert g.time_us[inner] > 4 * 0.2 * 2.0                             # counted 5 times, not once


def test_each_while_loop_is_one_colocation_group(lstm_model):
    """Every op of a loop frame, its Exits included, shares one group; the gradient loop is a group of its own."""
    from pardnn.frontends.tensorflow import loops
    from pardnn.frontends.tensorflow.build import BACK_EDGE_SOURCES

    g = to_opgraph(lstm_model, device_profile="cpu").graph
    node_defs = {n.name: n for n in lstm_model.graph_def.node}
    frame = loops.frames(g.names, node_defs, BACK_EDGE_SOURCES)
    frames = sorted({f for f in frame.values() if f}, key=lambda f: f.endswith("_grad"))
    assert len(frames) == 2 and frames[1].endswith("_grad")        # the forward loop and its gradient
    groups = []
    for f in frames:
        members = {g.colocation[g.id(n)] for n, x in frame.items() if x == f}
        assert len(members) == 1 and -1 not in members, (f, members)
        groups.append(members.pop())
    assert groups[0] != groups[1]
    kinds = Counter(g.ops[v] for v in g.groups[groups[0]])
    assert {"Enter", "Merge", "Switch", "NextIteration", "LoopCond", "Exit", "MatMul"} <= set(kinds)
    exits = [v for v in range(g.num_nodes) if g.ops[v] == "Exit"]
    assert set(g.colocation[exits].tolist()) == set(groups)


def test_a_constant_joins_its_only_reader(tmp_path):
    """
    w (Const 256x256) --> mm (MatMul) <-- x        shape (Const) --> r1 (Reshape), --> r2 (Reshape)
    w2 (Const) -------> mm2

    w joins mm's group, w2 mm2's; `shape` is read by two ungrouped ops: free.
    A placement with w away from mm breaks the group; the partitioner keeps them together.
    """
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (8, 256), name="x")
        w = tf.constant(np.ones((256, 256), np.float32), name="w")
        w2 = tf.constant(np.ones((256, 256), np.float32), name="w2")
        mm = tf.matmul(x, w, name="mm")
        mm2 = tf.matmul(mm, w2, name="mm2")
        shape = tf.constant([256, 8], name="shape")
        r1 = tf.reshape(mm2, shape, name="r1")
        r2 = tf.reshape(mm, shape, name="r2")
        tf.add(r1, r2, name="out")
    pb = tmp_path / "consts.pb"
    pb.write_bytes(graph.as_graph_def().SerializeToString())
    g = load_tensorflow(pb, FrontendOptions(signature="out"))
    assert g.colocation[g.id("w")] == g.colocation[g.id("mm")] >= 0
    assert g.colocation[g.id("w2")] == g.colocation[g.id("mm2")] >= 0
    assert g.colocation[g.id("w")] != g.colocation[g.id("w2")]
    assert g.colocation[g.id("shape")] == -1 and g.colocation[g.id("r1")] == -1
    out = tmp_path / "p.json"
    r = run("partition", pb, "--signature", "out", "-k", 2, "-o", out)
    assert r.exit_code == 0, r.output
    assign = json.loads(out.read_text())["assignment"]
    assert assign["w"] == assign["mm"] and assign["w2"] == assign["mm2"]


def test_a_call_compiled_with_xla_joins_the_variable_it_reads():
    """Keras runs a grouped convolution as an XLA-compiled call, which grappler leaves as one node.

    TensorFlow's placer exempts call ops from the resource rule, but the compiled kernel reads the
    kernel variable on its own device: placed away from it, the step failed with "Trying to access
    resource ... located in device CPU:0 from device CPU:1" (ConvNeXtTiny on 2 devices). So the call
    joins the variable's group; the gradient's call, which reads no variable, stays free.
    """
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((6, 6, 4)), keras.layers.Conv2D(4, 3, groups=4, name="gconv"),
                              keras.layers.Flatten(), keras.layers.Dense(2, name="out")], name="grouped")
    batch = (np.zeros((2, 6, 6, 4), "float32"), np.zeros((2,), "int32"))
    g = import_keras(model, "sparse_categorical_crossentropy", "sgd", batch).graph
    calls = [v for v in range(g.num_nodes) if g.ops[v] in CALL_OPS]
    kernel = g.colocation[g.id("grouped/gconv/kernel")]
    assert kernel >= 0 and len(calls) == 2
    assert [g.names[v] for v in calls if g.colocation[v] == kernel] == ["grouped_1/gconv_1/StatefulPartitionedCall"]


def test_a_switch_joins_the_producer_of_its_data(tmp_path):
    """
    x --> c (Sin) --> sw (Switch) --> i (Identity) --> m (Merge)
    x --> p (All) -----^

    TensorFlow runs a Switch on its data input's device, whatever device it was given (soft placement
    off): a Keras LossScaleOptimizer's lowered cond on 2 logical CPUs had a Switch placed on CPU:1 run on
    CPU:0, and the run was not ok. So sw joins c's group; its predicate and its consumers do not.
    """
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (4,), name="x")
        c = tf.math.sin(x, name="c")
        p = tf.reduce_all(tf.math.is_finite(x), name="p")
        f, t = tf.raw_ops.Switch(data=c, pred=p, name="sw")
        tf.raw_ops.Merge(inputs=[tf.identity(f, name="f"), tf.identity(t, name="i")], name="m")
    pb = tmp_path / "switch.pb"
    pb.write_bytes(graph.as_graph_def().SerializeToString())
    g = load_tensorflow(pb, FrontendOptions(signature="m"))
    assert g.colocation[g.id("sw")] == g.colocation[g.id("c")] >= 0
    assert g.colocation[g.id("p")] != g.colocation[g.id("sw")]     # p's group is its axis constant's
    assert g.colocation[g.id("i")] == g.colocation[g.id("m")] == -1


def test_a_constant_read_by_one_group_joins_it(tmp_path):
    """c (Const) is read by two ops of one `_class` group: it joins that group."""
    path = tmp_path / "g.pbtxt"
    path.write_text("""
node { name: "c" op: "Const" attr { key: "dtype" value { type: DT_FLOAT } }
       attr { key: "value" value { tensor { dtype: DT_FLOAT tensor_shape { dim { size: 2 } } float_val: 1 } } } }
node { name: "a" op: "Neg" input: "c" attr { key: "T" value { type: DT_FLOAT } } }
node { name: "b" op: "Neg" input: "c" attr { key: "T" value { type: DT_FLOAT } }
       attr { key: "_class" value { list { s: "loc:@a" } } } }
node { name: "d" op: "Neg" input: "c" attr { key: "T" value { type: DT_FLOAT } } }
node { name: "e" op: "Neg" input: "d" attr { key: "T" value { type: DT_FLOAT } } }
""")
    g = load_tensorflow(path, FrontendOptions(signature="a,b,e"))
    # c is read by a, b (one group) and d (ungrouped): readers of two sets, so c stays free
    assert g.colocation[g.id("a")] == g.colocation[g.id("b")] >= 0 and g.colocation[g.id("c")] == -1
    path.write_text(path.read_text().replace('input: "c" attr { key: "T" value { type: DT_FLOAT } } }\nnode { name: "e"',
                                             'input: "a" attr { key: "T" value { type: DT_FLOAT } } }\nnode { name: "e"'))
    g = load_tensorflow(path, FrontendOptions(signature="a,b,e"))
    assert g.colocation[g.id("c")] == g.colocation[g.id("a")] == g.colocation[g.id("b")] >= 0


def test_lstm_profile_sums_loop_iterations(lstm_model):
    g = to_opgraph(lstm_model, profile_steps=2).graph
    s = to_opgraph(lstm_model).graph
    differ = [v for v in range(g.num_nodes) if g.output_bytes_of(v) != s.output_bytes_of(v)]
    # only TensorList handles differ: a variant's size is not static
    kinds = Counter(g.ops[v] for v in differ)
    assert set(kinds) <= {"EmptyTensorList", "TensorListReserve", "TensorListFromTensor", "TensorListPushBack",
                          "TensorListPopBack", "TensorListSetItem", "Enter", "Merge", "Switch", "Exit",
                          "Identity", "NextIteration", "TensorListElementShape"}, kinds
    assert g.meta["unprofiled_ops"] == 0


# ---------------------------------------------------------------------------
# SavedModel and GraphDef through the command line
# ---------------------------------------------------------------------------

def test_partition_a_savedmodel_end_to_end(saved_model, tmp_path):
    out = tmp_path / "p.json"
    r = run("partition", saved_model, "--devices", 4, "--memory", "2GiB", "-o", out)
    assert r.exit_code == 0, r.output
    placement = json.loads(out.read_text())
    g = load_tensorflow(saved_model)
    assert g.meta["signature"] == "train_step"                           # the training step by default
    assert set(placement["assignment"]) == set(g.names)
    assert placement["predicted"]["feasible"] is True
    assert {"forward", "backward", "optimizer"} <= set(g.meta["phases"])
    assert Counter(g.ops)["VarHandleOp"] == 14                           # the signature's variables only


def test_savedmodel_signatures_and_restored_weights(saved_model, tmp_path):
    serve = load_tensorflow(saved_model, FrontendOptions(signature="serving_default"))
    assert set(serve.meta["phases"]) == {"forward"} and Counter(serve.ops)["VarHandleOp"] == 4
    r = run("import", saved_model, "--signature", "nope", "-o", tmp_path / "g.json")
    assert r.exit_code == EXIT_INPUT
    assert "no signature 'nope'" in r.stderr and "serving_default" in r.stderr and "train_step" in r.stderr
    imp = import_tensorflow(saved_model)
    values = imp.model.variable_values()
    assert values["hidden/kernel"].shape == (16, 32) and np.abs(values["hidden/kernel"]).sum() > 0
    r = run("import", saved_model, "--profile", 2, "-o", tmp_path / "g.json.gz")
    assert r.exit_code == 0, r.output
    g = load_input(tmp_path / "g.json.gz")
    assert g.meta["costs"] == "profile" and g.time_us.sum() > 0


def test_unknown_batch_needs_batch_size(tmp_path):
    sm = tf_models.save_train_savedmodel(tf, keras, tmp_path / "dyn", batch=None)
    r = run("import", sm, "-o", tmp_path / "g.json")
    assert r.exit_code == EXIT_INPUT
    assert r.stderr.count("\n") == 1 and "--batch-size" in r.stderr and "train_step_x" in r.stderr
    g = load_tensorflow(sm, FrontendOptions(batch_size=8))
    assert g.meta["batch_size"] == 8
    v = g.id("train_step_x")
    assert g.output_bytes_of(v) == [8 * 16 * 4]


def test_a_batch_size_that_sizes_nothing_is_not_recorded(saved_model, tmp_path, caplog):
    """The saved train step fixes its batch at 8: --batch-size fills no dimension, so the graph and its
    placements record none (a run then takes the model's own shapes, with or without the flag); a value
    other than the model's is named in a warning. It was recorded, and `run` without the flag refused a
    placement "made with --batch-size 4" of a step whose batch is 8."""
    with caplog.at_level("WARNING", logger="pardnn.frontends.tensorflow"):
        g = load_tensorflow(saved_model, FrontendOptions(batch_size=8))
    assert g.meta["batch_size"] is None and not caplog.records
    with caplog.at_level("WARNING", logger="pardnn.frontends.tensorflow"):
        g = load_tensorflow(saved_model, FrontendOptions(batch_size=4))
    assert g.meta["batch_size"] is None
    (rec,) = caplog.records
    assert "--batch-size 4 sizes nothing" in rec.getMessage() and "train_step_x:0 [8, 16]" in rec.getMessage()
    out = tmp_path / "p.json"
    r = run("partition", saved_model, "-k", 2, "--batch-size", 4, "-o", out)
    assert r.exit_code == 0, r.output
    assert "--batch-size 4 sizes nothing" in r.stderr and "batch_size" not in json.loads(out.read_text())
    r = run("-q", "run", saved_model, out, "--steps", 1, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["ok"] is True


def test_a_batch_size_that_is_one_inputs_leading_dimension_is_not_warned_of(tmp_path, caplog):
    """Inputs of fixed shapes with different leading dimensions (8 and 4): --batch-size 8 is one of them, so
    no warning (a review found one); 5 is neither, and is named."""
    class Step(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(tf.ones((16, 4)), name="w")

        @tf.function(input_signature=[tf.TensorSpec((8, 16), tf.float32, name="x"),
                                      tf.TensorSpec((4, 4), tf.float32, name="y")])
        def train_step(self, x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.matmul(x, self.w)) + tf.reduce_mean(y)
            self.w.assign_sub(0.01 * tape.gradient(loss, self.w))
            return {"loss": loss}

    step = Step()
    sm = tmp_path / "two"
    tf.saved_model.save(step, str(sm), signatures={"train_step": step.train_step})
    for batch, warned in ((8, False), (4, False), (5, True)):
        caplog.clear()
        with caplog.at_level("WARNING", logger="pardnn.frontends.tensorflow"):
            g = load_tensorflow(sm, FrontendOptions(batch_size=batch))
        assert g.meta["batch_size"] is None
        said = [r.getMessage() for r in caplog.records if "sizes nothing" in r.getMessage()]
        assert bool(said) == warned, said
    assert "--batch-size 5 sizes nothing: the model's inputs have fixed shapes (train_step_x:0 [8, 16], " \
        "train_step_y:0 [4, 4]), and they size the step; ignored" in said[0]


def test_partition_a_graphdef_with_functions_and_a_saver(saved_model, tmp_path):
    """The SavedModel's own GraphDef as a .pb: calls inlined, saver ops kept and pinned to the host."""
    from tensorflow.core.protobuf import saved_model_pb2

    sm = saved_model_pb2.SavedModel()
    sm.ParseFromString((saved_model / "saved_model.pb").read_bytes())
    pb = tmp_path / "model.pb"
    pb.write_bytes(sm.meta_graphs[0].graph_def.SerializeToString())
    out = tmp_path / "p.json"
    r = run("partition", pb, "--devices", 4, "--memory", "2GiB", "-o", out, "--batch-size", 8)
    assert r.exit_code == 0, r.output
    g = load_tensorflow(pb, FrontendOptions(batch_size=8))
    assert g.meta["inlined_functions"] > 0 and not any(op in CALL_OPS for op in g.ops)
    save = [v for v in range(g.num_nodes) if g.ops[v] == "SaveV2"]
    assert save and all(g.pinned[v] == 0 and extra(g, v, "host") for v in save)
    assert set(json.loads(out.read_text())["assignment"]) == set(g.names)
    sub = load_tensorflow(pb, FrontendOptions(batch_size=8, signature="StatefulPartitionedCall_1"))
    assert sub.num_nodes < g.num_nodes and "SaveV2" not in sub.ops


def test_pbtxt_of_a_flat_train_step_profiles(mlp_model, tmp_path):
    m, _ = mlp_model
    path = tmp_path / "step.pbtxt"
    path.write_text(str(m.graph_def))
    g = load_tensorflow(path, FrontendOptions(profile_steps=1))
    assert set(g.names) == {n.name for n in m.graph_def.node}
    assert g.meta["costs"] == "profile" and g.time_us.sum() > 0


def test_tf1_reference_variables_and_class_attributes(tmp_path):
    """A TF1 graph: VariableV2 refs, `var/read` Identities colocated by `_class`, ApplyGradientDescent."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (4, 3), name="x")
        w = tf.compat.v1.get_variable("w", (3, 2), use_resource=False,
                                      initializer=tf.compat.v1.zeros_initializer())
        loss = tf.reduce_sum(tf.matmul(x, w), name="loss")
        train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, name="train")
        del train
    pb = tmp_path / "tf1.pb"
    pb.write_bytes(graph.as_graph_def().SerializeToString())
    g = load_tensorflow(pb, FrontendOptions(signature="loss,train"))
    group = g.colocation[g.id("w")]
    members = {g.names[u] for u in g.groups[group]}
    assert {"w", "w/read", "train/update_w/ApplyGradientDescent"} <= members
    assert g.persistent_bytes[g.id("w")] == 3 * 2 * 4
    assert g.output_bytes_of(g.id("w/read")) == [0]
    assert extra(g, g.id("train/update_w/ApplyGradientDescent"), "phase") == "optimizer"
    assert extra(g, g.id("gradients/loss_grad/Reshape"), "phase") == "backward"
    prof = load_tensorflow(pb, FrontendOptions(signature="loss,train", profile_steps=1))
    assert prof.time_us[prof.id("MatMul")] > 0


def test_class_attribute_groups_ops_without_handles(tmp_path):
    path = tmp_path / "loc.pbtxt"
    path.write_text("""
node { name: "a" op: "Const" attr { key: "dtype" value { type: DT_FLOAT } }
       attr { key: "value" value { tensor { dtype: DT_FLOAT tensor_shape { dim { size: 2 } } float_val: 1 } } } }
node { name: "b" op: "Neg" input: "a" attr { key: "T" value { type: DT_FLOAT } }
       attr { key: "_class" value { list { s: "loc:@a" } } } }
node { name: "c" op: "Neg" input: "b" attr { key: "T" value { type: DT_FLOAT } } }
""")
    g = load_tensorflow(path)
    assert g.colocation[g.id("a")] == g.colocation[g.id("b")] >= 0 and g.colocation[g.id("c")] == -1
    assert g.group_names[g.colocation[g.id("a")]] == "a"
    assert g.persistent_bytes[g.id("a")] == 8 and g.output_bytes_of(g.id("a")) == [0]


# ---------------------------------------------------------------------------
# Errors: one line, exit code 3
# ---------------------------------------------------------------------------

def test_malformed_savedmodel_is_a_one_line_input_error(tmp_path):
    bad = tmp_path / "broken"
    bad.mkdir()
    (bad / "saved_model.pb").write_bytes(b"\x0a\xff\xff\xff\xff garbage, not a protobuf")
    r = run("partition", bad, "--devices", 2, "-o", tmp_path / "p.json")
    assert r.exit_code == EXIT_INPUT
    assert r.stderr.startswith("pardnn: error: ") and r.stderr.count("\n") == 1
    assert "saved_model.pb" in r.stderr and "not a valid SavedModel" in r.stderr
    assert "Traceback" not in r.output


def test_graphdef_with_an_unknown_op_is_a_one_line_input_error(tmp_path):
    path = tmp_path / "custom.pbtxt"
    path.write_text('node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } }\n'
                    'node { name: "y" op: "MyCustomKernel" input: "x" }\n')
    r = run("import", path, "-o", tmp_path / "g.json")
    assert r.exit_code == EXIT_INPUT
    assert r.stderr.count("\n") == 1 and "'y'" in r.stderr and "'MyCustomKernel'" in r.stderr
    with pytest.raises(InputError, match="does not know"):
        load_tensorflow(path)


def test_unparsable_pbtxt_and_missing_output_are_input_errors(tmp_path):
    path = tmp_path / "bad.pbtxt"
    path.write_text("node { name: ")
    with pytest.raises(InputError, match="not a valid GraphDef"):
        load_tensorflow(path)
    ok = tmp_path / "ok.pbtxt"
    ok.write_text('node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } '
                  'attr { key: "shape" value { shape { dim { size: 2 } } } } }\n')
    with pytest.raises(InputError, match="'nope'"):
        load_tensorflow(ok, FrontendOptions(signature="nope"))
    assert load_tensorflow(ok).num_nodes == 1


# ---------------------------------------------------------------------------
# Properties over random models; docstring examples
# ---------------------------------------------------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(widths=st.lists(st.integers(1, 12), min_size=1, max_size=4), batch=st.integers(1, 6))
def test_dense_stacks_keep_the_frontend_invariants(widths, batch):
    """For any stack of Dense layers: 3d-1 MatMuls, every handle's consumers in its group,
    persistent bytes = weights + two Adam slots (+ two scalars), a topologically ordered DAG."""
    keras.utils.set_random_seed(0)
    inp = keras.Input((5,))
    x = inp
    for i, w in enumerate(widths):
        x = keras.layers.Dense(w, activation="tanh")(x)
    model = keras.Model(inp, x)
    data = (np.ones((batch, 5), "float32"), np.zeros((batch, widths[-1]), "float32"))
    imp = import_keras(model, "mse", keras.optimizers.Adam(1e-3), data)
    g, gd = imp.graph, imp.model.graph_def
    d = len(widths)
    assert Counter(g.ops)["MatMul"] == 3 * d - 1
    params = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
    assert int(g.persistent_bytes[[v for v in range(g.num_nodes) if g.ops[v] == "VarHandleOp"]].sum()) == \
        3 * 4 * params + 4 + 8                                          # + float32 learning rate, int64 iteration
    assert is_topologically_ordered(g) and set(g.names) == {n.name for n in gd.node}
    for n in gd.node:
        for ref in n.input:
            src = ref.lstrip("^").split(":")[0]
            if not ref.startswith("^") and g.ops[g.id(src)] == "VarHandleOp":
                assert g.colocation[g.id(src)] == g.colocation[g.id(n.name)] >= 0



def _allocator_peak(model: TFModel, feed: dict) -> int:
    """TensorFlow's own CPU allocator peak over a step of ``model``'s GraphDef, run as ``pardnn run`` runs it (a v1
    Session, graph optimizer off, after a warm-up step), less what the process held before
    (`pardnn.backend.tf_memory.PeakMeter`)."""
    from pardnn.backend.tf_run import build_program, run_program, session_config
    run = run_program(build_program(model, model.graph_def, {}), feed, steps=1, trace=False, allocators=("CPU:0",),
                      config=session_config())
    assert run.peak_bytes is not None, run.peak_note
    return run.peak_bytes["CPU:0"]


def test_a_reshape_identityn_chain_costs_what_tensorflow_allocates():
    """x = Fill (4 MiB) -> Reshape -> IdentityN (with x again) -> ExpandDims -> Squeeze -> two sums.

    Every view forwards x's buffer, so TensorFlow's allocator peaks at x's 4 MiB. The machine model, with the
    frontend's ``forwarded_as`` marks, predicts the same within 1%; counting each view as a buffer of its own (the
    marks dropped) it would predict at least twice that. x is made in the graph: a fed array TensorFlow may use
    in place, without allocating, when numpy happened to align it.
    """
    from pardnn.frontends.tensorflow import import_function
    from pardnn.ir import FORWARDED_AS
    from pardnn.machine import single_device_peak

    n = 1 << 20

    @tf.function
    def step(v):
        x = tf.fill([n], v)
        a, b = tf.identity_n([tf.reshape(x, [1024, 1024]), x])
        s = tf.squeeze(tf.expand_dims(a, 0), 0)
        return tf.reduce_sum(s) + tf.reduce_sum(b)

    v = np.float32(1.0)
    imp = import_function(step, v)
    g = imp.graph
    forwarding = {g.ops[int(g.edge_dst[e])] for e in np.flatnonzero(
        [bool(x and FORWARDED_AS in x) for x in g.edge_extra])} if g.edge_extra else set()
    assert {"Reshape", "IdentityN", "ExpandDims", "Squeeze"} <= forwarding
    ident = g.id("IdentityN")
    assert g.port_forward[g.port_ptr[ident]:g.port_ptr[ident + 1]].tolist() != [-1, -1]   # both ports forward
    measured = _allocator_peak(imp.model, {imp.model.feeds[0].name: v})
    predicted = single_device_peak(g)
    assert measured >= 4 * n
    assert abs(predicted - measured) <= 0.01 * measured
    plain = dataclasses.replace(g, edge_extra=())
    assert single_device_peak(plain) >= 2 * measured


def test_element_wise_ops_that_write_in_place_cost_what_tensorflow_allocates():
    """x = Fill (4 MiB) -> Mul -> Relu -> AddV2 -> Sqrt -> sum s, then w = x * s -> (Square(w) + w) * x -> sum.

    Mul cannot write into x (x has three readers), so it allocates; Relu, AddV2 and Sqrt each hold the only
    reference to their input and write into it, as TensorFlow's kernels do (``forward_input_or_allocate_output``).
    ``w`` is read twice, so its Square allocates (the AddV2 and Mul after it write into the square). The second
    part waits for ``s``, so the order is fixed: TensorFlow's allocator peaks at x, w and the square (12 MiB), and
    the machine model predicts the same within 1%; without the in-place marks it predicts more. x is made in the
    graph: a fed array TensorFlow may use in place, without allocating, when numpy happened to align it.
    """
    from pardnn.frontends.tensorflow import import_function
    from pardnn.ir import FORWARDED_AS
    from pardnn.machine import single_device_peak

    n = 1 << 20

    @tf.function
    def step(v):
        x = tf.fill([n], v)
        s = tf.reduce_sum(tf.sqrt(tf.nn.relu(x * 2.0) + 1.0))
        w = x * s
        return tf.reduce_sum((tf.square(w) + w) * x)

    v = np.float32(1.0)
    imp = import_function(step, v)
    g = imp.graph
    marked = [e for e in range(g.num_edges) if g.edge_extra and g.edge_extra[e] and FORWARDED_AS in g.edge_extra[e]]
    into = {(g.ops[int(g.edge_src[e])], g.ops[int(g.edge_dst[e])]) for e in marked}
    assert {("Mul", "Relu"), ("Relu", "AddV2"), ("AddV2", "Sqrt")} <= into
    assert not any(g.ops[int(g.edge_src[e])] in ("Placeholder", "Fill") for e in marked)   # x has three readers
    square = g.id(next(nm for nm, op in zip(g.names, g.ops) if op == "Square"))
    assert g.port_forward[g.port_ptr[square]] == -1                                   # w has two readers
    measured = _allocator_peak(imp.model, {imp.model.feeds[0].name: v})
    predicted = single_device_peak(g)
    assert 3 * 4 * n <= measured < 4 * 4 * n
    assert abs(predicted - measured) <= 0.01 * measured
    plain = dataclasses.replace(g, edge_extra=())
    assert single_device_peak(plain) > 1.2 * measured


def test_a_collapsed_loop_runs_after_all_its_inputs_and_before_its_outputs(lstm_model):
    """With the back edges cut, control edges keep each loop's body between its Enters and its Exits: on one
    device, no body op starts before every Enter has finished, and no Exit before the last body op (else a
    recurrent layer's consumers would overlap with it, and its ``h @ U`` would run before its input)."""
    from pardnn.frontends.tensorflow import loops
    from pardnn.frontends.tensorflow.build import BACK_EDGE_SOURCES
    from pardnn.cluster import Cluster
    from pardnn.machine import simulate

    g = to_opgraph(lstm_model, device_profile="cpu").graph
    node_defs = {n.name: n for n in lstm_model.graph_def.node}
    frame = loops.frames(g.names, node_defs, BACK_EDGE_SOURCES)
    s = simulate(g, Cluster.homogeneous(1), np.zeros(g.num_nodes, dtype=np.int64), memory=False)
    checked = 0
    for f in {x for x in frame.values() if x}:
        inside = [g.id(n) for n, x in frame.items() if x == f]
        enters = [v for v in inside if g.ops[v] == "Enter"]
        body = [v for v in inside if g.ops[v] not in ("Enter", "Const")]
        exits = [v for v in range(g.num_nodes) if g.ops[v] == "Exit" and
                 frame[node_defs[g.names[v]].input[0].split(":")[0]] == f]
        assert enters and body and exits, f
        assert s.start_us[body].min() >= s.finish_us[enters].max() - 1e-9, f
        assert s.start_us[exits].min() >= s.finish_us[body].max() - 1e-9, f
        checked += 1
    assert checked == 2


def test_fed_inputs_are_host_ops_on_device_zero(mlp_static):
    """The client sends a fed tensor to device 0's task with the step: a Placeholder is pinned there."""
    g = mlp_static.graph
    feeds = [v for v in range(g.num_nodes) if g.ops[v] == "Placeholder"]
    assert len(feeds) == 2
    assert all(g.pinned[v] == 0 and (g.node_extra[v] or {}).get("host") for v in feeds)


def test_profile_charges_the_executors_overhead_per_execution(mlp_profiled):
    """Op times include the executor's overhead per execution, so they add up to an untraced step."""
    g, prof = mlp_profiled.graph, mlp_profiled.profile
    assert prof.op_overhead_us >= 0 and g.meta["profile_op_overhead_us"] == round(prof.op_overhead_us, 4)
    assert len(prof.untraced_step_ms) == 3 and g.meta["profile_untraced_step_ms"]
    assert set(prof.executions) == set(prof.time_us) and all(c == 1 for c in prof.executions.values())
    # every op pays at least the overhead once
    assert min(prof.time_us.values()) >= prof.op_overhead_us - 1e-9
    total_ms = g.time_us.sum() / 1e3
    assert 0.5 * min(prof.untraced_step_ms) <= total_ms <= 1.5 * max(prof.untraced_step_ms)


def test_a_keras_steps_targets_are_in_name_order(lstm_model):
    """The step's control outputs (the variable updates) came in the order of a set, another from one
    import to the next, so two imports of one model wrote different graph files (a review: `targets`
    shuffled, nodes and edges the same). They are sorted by name."""
    targets = list(lstm_model.targets)
    assert len(targets) > 3 and targets == sorted(targets)
