"""The TensorFlow backend on real Keras models: placed runs on logical CPUs and on a 2-task local cluster.

Every run here is real TensorFlow: the Keras training step (forward,
GradientTape gradients, Adam) of a small Transformer and a small CNN is
flattened, placed across devices, and run in a ``tf.compat.v1.Session`` with
soft placement off. The checks compare against an all-on-device-0 run of the
same graph and against Keras's own training step, read where each op ran
from ``RunMetadata.step_stats``, and count TensorFlow's ``_Send``/``_Recv``
pairs. Cluster servers run in subprocesses on 127.0.0.1, bounded in time and
always stopped.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import threading

import numpy as np
import pytest
from click.testing import CliRunner

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from pardnn.api import partition  # noqa: E402
from pardnn.backend import tf_run  # noqa: E402
from pardnn.backend.equivalence import compare_tensors  # noqa: E402
from pardnn.backend.tf_backend import run_on_cluster  # noqa: E402
from pardnn.backend.tf_checks import check_step_stats, count_send_recv  # noqa: E402
from pardnn.backend.tf_cluster import LocalCluster, Pinning, TFClusterSpec  # noqa: E402
from pardnn.backend.tf_devices import LocalTarget, map_devices  # noqa: E402
from pardnn.backend.tf_rewrite import Assignment, assign_devices, placed_graph_def  # noqa: E402
from pardnn.backend.tf_step import place_step  # noqa: E402
from pardnn.cli import cli  # noqa: E402
from pardnn.cluster import Cluster  # noqa: E402
from pardnn.errors import EXIT_INPUT, EXIT_RUNTIME, EXIT_USAGE, PlacementError, RuntimeFailure  # noqa: E402
from pardnn.frontends.tensorflow import import_function, import_keras  # noqa: E402
from pardnn.frontends.tensorflow.keras_step import make_train_step  # noqa: E402
from pardnn.placement import Placement, save_placement  # noqa: E402

from .. import tf_models  # noqa: E402
from ..conftest import REPO  # noqa: E402

pytestmark = pytest.mark.tf

MODELS = {"transformer": tf_models.transformer, "cnn": tf_models.cnn}
LR = 1e-2


def scattered(g, k: int) -> Placement:
    """Placement unit ``u`` on device ``u % k``: groups whole, most edges cross devices (a hard case)."""
    return Placement(g.unit % k, tuple(f"/device:GPU:{i}" for i in range(k)), g.name)


def keras_losses(build, steps: int) -> list[float]:
    """The losses of Keras's own training step on a fresh copy of the model (same seed, same batch)."""
    model, loss, batch = build(keras)
    opt = keras.optimizers.Adam(LR)
    opt.build(model.trainable_variables)
    step = make_train_step(model, loss, opt)
    return [float(step(*batch)) for _ in range(steps)]


@pytest.fixture(scope="module", autouse=True)
def fresh_keras_names():
    """Keras numbers layer and optimizer names per process; leave the counters as other modules expect them."""
    keras.backend.clear_session()
    yield
    keras.backend.clear_session()


@pytest.fixture(scope="module")
def imports():
    out = {}
    for name, build in MODELS.items():
        model, loss, batch = build(keras)
        out[name] = import_keras(model, loss, keras.optimizers.Adam(LR), batch)
    return out


@pytest.fixture(scope="module")
def local_runs(imports):
    """Each model placed over 4 logical CPU devices, 2 timed steps (4 steps compared in all), with the noise
    reference run even where every tensor is close elementwise."""
    return {name: tf_run.run_placed(imp, scattered(imp.graph, 4), steps=2, noise="always")
            for name, imp in imports.items()}


# ---------------------------------------------------------------------------
# rewrite
# ---------------------------------------------------------------------------

def test_rewrite_sets_every_device_and_keeps_split_groups_with_their_variable(imports):
    g = imports["cnn"].graph
    pl = scattered(g, 2)
    gid = next(i for i, m in enumerate(g.groups) if m.size >= 3)
    members = g.groups[gid]
    anchor = g.id(g.group_names[gid])                       # the variable the group is named after
    split = pl.assignment.copy()
    split[members] = 0
    split[anchor] = 1                                       # the variable alone on device 1
    devices = ("/device:GPU:0", "/device:GPU:1")
    a = assign_devices(g, Placement(split, devices, g.name), devices)
    assert {a.device[g.names[v]] for v in members} == {"/device:GPU:1"}
    assert len(a.regrouped) == members.size - 1
    placed = placed_graph_def(imports["cnn"].model.graph_def, a)
    assert all(n.device == a.device[n.name] for n in placed.node)
    # the fed images are a host op: on the CPU of device 0's task, every other op on a GPU
    host = {n.name for n in placed.node if n.device == "/device:CPU:0"}
    assert host and all(g.ops[g.index[h]] == "Placeholder" for h in host)
    assert {n.device for n in placed.node} - {"/device:CPU:0"} == set(devices)


def test_host_ops_go_to_the_cpu_of_device_zeros_task_not_device_zero():
    v = tf.Variable(tf.ones((3,)), name="counter_w")

    @tf.function
    def step(x):
        tf.print("step", x[0])                              # PrintV2 and StringFormat: host-only ops
        v.assign_add(x)
        return tf.reduce_sum(v)

    imp = import_function(step, np.ones(3, "float32"))
    g = imp.graph
    host = [g.names[i] for i in range(g.num_nodes) if (g.node_extra[i] or {}).get("host")]
    assert host and all(g.ops[g.index[h]] in ("PrintV2", "StringFormat", "Placeholder") for h in host)
    assert {g.ops[g.index[h]] for h in host} == {"PrintV2", "StringFormat", "Placeholder"}   # x is fed: a host op
    devices = map_devices(("/device:GPU:0", "/device:GPU:1"), LocalTarget("gpu", available=2))
    a = assign_devices(g, Placement(np.ones(g.num_nodes, np.int64), ("/device:GPU:0", "/device:GPU:1")), devices)
    assert {a.device[h] for h in host} == {"/device:CPU:0"} and a.host_ops == len(host)
    assert {a.device[n] for n in g.names if n not in host} == {"/device:GPU:1"}


# ---------------------------------------------------------------------------
# one host, 4 logical CPU devices
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(MODELS))
def test_four_logical_cpus_reproduce_single_device_losses(name, imports, local_runs):
    r = local_runs[name]
    g = imports[name].graph
    assert r.mode == "cpu" and r.devices == tuple(f"/device:CPU:{i}" for i in range(4))
    assert all(n > 0 for n in r.ops_per_device)
    # the same numbers as the all-on-device-0 run of the same graph, step by step, and the same variables: within
    # rtol/atol, or within the rounding noise of a perturbed single-device run (another CPU sums in another order)
    assert r.outputs_match and r.variables_match and r.ok and r.criterion in ("elementwise", "rounding noise")
    assert r.noise_reference and r.noise_s > 0 and r.mismatched == 0
    assert all(x is None or x <= r.noise_factor for x in (r.max_output_ratio, r.max_variable_ratio))
    assert r.steps == 4 and len(r.losses) == 4
    np.testing.assert_allclose(r.losses, r.reference_losses, rtol=1e-5, atol=1e-6)
    assert r.variables_compared == sum(1 for op in g.ops if op == "VarHandleOp")
    # and the same losses as Keras's own training step on a fresh copy of the model
    np.testing.assert_allclose(r.losses, keras_losses(MODELS[name], 4), rtol=1e-5, atol=1e-6)
    assert r.losses[-1] < r.losses[0]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_op_ran_on_its_assigned_device_and_transfers_match_the_simulator(name, imports, local_runs):
    r = local_runs[name]
    g = imports[name].graph
    pc = r.placement_check
    assert pc.moved == () and pc.checked + pc.untraced == g.num_nodes
    assert pc.checked >= 0.95 * g.num_nodes                 # what is not traced: feeds, copied constants
    sr = r.send_recv
    assert sr.data > 50 and sr.feed >= 1
    # every tensor TensorFlow sent between devices is a transfer the machine model counts
    assert r.transfers_only_tf == 0
    assert r.simulated_transfers - r.simulated_feed_transfers == sr.data + r.transfers_only_simulated
    assert r.predicted_us > 0 and r.measured_us > 0 and r.reference_us > 0


def test_the_check_sees_ops_that_moved():
    """With soft placement and only 2 CPU devices, ops placed on CPU:2 and CPU:3 move; the trace shows it."""
    model, loss, batch = tf_models.mlp(keras)
    imp = import_keras(model, loss, keras.optimizers.Adam(LR), batch)
    g = imp.graph
    pl = scattered(g, 4)
    devices = map_devices(pl.devices, LocalTarget("cpu"))
    a = assign_devices(g, pl, devices)
    program = tf_run.build_program(imp.model, placed_graph_def(imp.model.graph_def, a),
                                   tf_run.starting_values(imp.model))
    run = tf_run.run_program(program, dict(imp.model.feed_values), steps=1,
                             config=tf_run.session_config(cpus=2, soft_placement=True))
    check = check_step_stats(run.metadata.step_stats, a.device)
    wanted_elsewhere = {n for n, d in a.device.items() if d in ("/device:CPU:2", "/device:CPU:3")}
    moved = {m[0] for m in check.moved}
    assert moved and moved <= wanted_elsewhere
    assert all(m[2].endswith(("CPU:0", "CPU:1")) for m in check.moved)


def test_a_cluster_smaller_than_the_placement_is_refused_before_anything_runs(monkeypatch):
    """`pardnn run -k 1` of a 2-device placement ran every step (and the reference, and started servers) before
    it said the cluster was too small, and named no file."""
    model, loss, batch = tf_models.mlp(keras)
    imp = import_keras(model, loss, keras.optimizers.Adam(LR), batch)

    def ran(*args, **kwargs):
        raise AssertionError("the step ran")

    monkeypatch.setattr(tf_run, "compare_with_reference", ran)
    with pytest.raises(PlacementError, match=r"^mlp.keras: node '.+' is placed on device 1 \(/device:GPU:1\), "
                       r"which is not in the cluster \(1 device: /device:GPU:0\)$"):
        tf_run.run_placed(imp, scattered(imp.graph, 2), cluster=Cluster.homogeneous(1), steps=1,
                          model_name="mlp.keras")
    # a device the placement lists but puts no op on need not exist (as an ONNX run; a review found the
    # TensorFlow run counted the listed devices): the check passes and the step runs
    pl = scattered(imp.graph, 2)
    pl = dataclasses.replace(pl, devices=pl.devices + ("/device:GPU:2",))
    with pytest.raises(AssertionError, match="the step ran"):
        tf_run.run_placed(imp, pl, cluster=Cluster.homogeneous(2), steps=1, model_name="mlp.keras")


def test_a_step_whose_session_cannot_close_either_fails_in_one_line_without_a_thread_traceback(monkeypatch):
    """A task killed mid-run fails the step, and closing the session then fails too (Deadline Exceeded):
    `with tf.compat.v1.Session` closed it on a thread whose traceback came out beside pardnn's one line."""
    lost = ("Graph execution error:\n\n=====================\nUNAVAILABLE: From /job:worker/replica:0/task:1:\n"
            "Socket closed\n\t [[{{node mm}}]]\n=====================")

    class Dying(tf.compat.v1.Session):
        def run(self, *args, **kwargs):
            raise tf.errors.UnavailableError(None, None, lost)

        def close(self):
            super().close()
            raise tf.errors.DeadlineExceededError(None, None, "Deadline Exceeded")

    graph = tf.Graph()
    with graph.as_default():
        x = tf.constant(np.ones((2, 2), np.float32))
        y = tf.matmul(x, x, name="mm")
    program = tf_run.StepProgram(graph, (y,), (), (), (), {}, {})
    thread_errors = []
    monkeypatch.setattr(threading, "excepthook", lambda args: thread_errors.append(args.exc_value))
    monkeypatch.setattr(tf.compat.v1, "Session", Dying)
    with pytest.raises(RuntimeFailure) as err:
        tf_run.run_program(program, {}, steps=1, what="the placed step")
    assert str(err.value) == ("the placed step failed at node 'mm': UNAVAILABLE: From /job:worker/replica:0/task:1: "
                              "Socket closed")
    assert thread_errors == []


def test_send_recv_pairs_of_a_hand_built_graph():
    """
    x (fed) --> mm [CPU:2] --> s [CPU:3] --> c [CPU:3] (fetched)
                z [CPU:1] ..control..> c
    TensorFlow: x arrives on the client's CPU:0 and is sent to CPU:2 (1 feed pair), mm crosses to CPU:3
    (1 data pair), z's control edge crosses to CPU:3 (1 control pair), c goes back to CPU:0 (1 fetch pair).
    """
    graph = tf.Graph()
    with graph.as_default():
        with tf.device("/device:CPU:2"):
            x = tf.compat.v1.placeholder(tf.float32, (4, 4), name="x")
            mm = tf.matmul(x, x, name="mm")
        with tf.device("/device:CPU:1"):
            z = tf.add(tf.constant(1.0, name="one"), 1.0, name="z")
        with tf.device("/device:CPU:3"):
            s = tf.reduce_sum(mm, name="s")
            with tf.control_dependencies([z]):
                c = tf.identity(s, name="c")
    names = frozenset(op.name for op in graph.get_operations())
    options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE, output_partition_graphs=True)
    meta = tf.compat.v1.RunMetadata()
    with tf.compat.v1.Session(graph=graph, config=tf_run.session_config(cpus=4)) as sess:
        assert sess.run(c, {x: np.ones((4, 4), "float32")}, options=options, run_metadata=meta) == 64.0
    sr = count_send_recv(meta.partition_graphs, names)
    assert (sr.data, sr.feed, sr.control, sr.fetch, sr.forward, sr.other) == (1, 1, 1, 1, 0, 0)
    assert [t[:2] for t in sr.data_tensors] == [("mm", 0)] and sr.data_tensors[0][2].endswith("CPU:3")
    expected = {op.name: op.device for op in graph.get_operations()}
    check = check_step_stats(meta.step_stats, expected)
    assert check.moved == () and {"mm", "s", "c", "z"} <= {n for n in expected} and check.checked >= 4


def test_a_gpu_the_host_does_not_have_is_a_placement_error(imports):
    imp = imports["cnn"]
    with pytest.raises(PlacementError, match=r"needs GPU 0, but this host has 0 GPU"):
        tf_run.run_placed(imp, scattered(imp.graph, 2), target=LocalTarget("gpu", available=0), steps=1)


def test_a_placement_for_another_graph_is_a_placement_error(imports):
    other = imports["transformer"].graph
    with pytest.raises(PlacementError, match="made for another graph"):
        tf_run.run_placed(imports["cnn"], scattered(other, 2), steps=1)


# ---------------------------------------------------------------------------
# the results check: float reassociation passes, a broken placed graph does not
# ---------------------------------------------------------------------------

def _placed_and_reference(imp, k: int = 4):
    """The scattered placement's GraphDef on ``k`` logical CPUs, and the same graph with every op on CPU:0."""
    g, gd = imp.graph, imp.model.graph_def
    devices = map_devices(scattered(g, k).devices, LocalTarget("cpu"))
    a = assign_devices(g, scattered(g, k), devices)
    one = Assignment({n: devices[0] for n in g.names}, a.host_ops, ())
    return placed_graph_def(gd, a), placed_graph_def(gd, one)


def _swap_inputs(gd, pick):
    """A copy of ``gd`` whose first node for which ``pick(node)`` holds has its first two inputs swapped."""
    out = tf.compat.v1.GraphDef()
    out.CopyFrom(gd)
    node = next(n for n in out.node if pick(n))
    node.input[0], node.input[1] = node.input[1], node.input[0]
    return out, node.name


def _drop_update(gd, variable: str):
    """A copy of ``gd`` where the update of ``variable`` is a ``NoOp`` of the same name with its control inputs
    (so that the step's targets and control edges still resolve, but the variable no longer changes)."""
    out = tf.compat.v1.GraphDef()
    out.CopyFrom(gd)
    node = next(n for n in out.node if n.op in ("AssignSubVariableOp", "AssignAddVariableOp", "AssignVariableOp",
                                                "ResourceApplyAdam") and n.input[0] == variable)
    name, device, controls = node.name, node.device, [i for i in node.input if i.startswith("^")]
    node.Clear()
    node.name, node.op, node.device = name, "NoOp", device
    node.input.extend(controls)
    return out, name


@pytest.mark.parametrize("bug", ["swapped inputs", "dropped update"])
def test_a_broken_placed_graph_fails_the_check(bug, imports):
    """Bugs move results by amounts of the order of the values or their updates: far beyond rounding noise."""
    imp = imports["cnn"]
    placed, reference = _placed_and_reference(imp)
    if bug == "swapped inputs":      # the batch norm's beta - mean * scale becomes mean * scale - beta
        broken, where = _swap_inputs(placed, lambda n: n.op == "Sub" and "bn2" in n.name
                                     and n.name.endswith("batchnorm/sub"))
    else:                            # conv2/kernel never learns
        broken, where = _drop_update(placed, "conv2/kernel")
    values, batch = tf_run.starting_values(imp.model), tf_run.feed_values(imp.model, None)
    config = tf_run.session_config(cpus=4)
    rc = tf_run.compare_with_reference(imp.model, broken, reference, values, batch, steps=1, config=config)
    assert rc.noise is not None and not rc.ok and rc.criterion == "none", where
    failed = {c.name for c in rc.outputs.failed() + rc.variables.failed()}
    loss = f"output {imp.model.fetches[0]}"
    assert loss in failed and (bug == "swapped inputs" or "conv2/kernel" in failed)
    # by far: the worst tensor is more than 100 times beyond the allowed multiple of the noise spread
    worst = max(r for r in (rc.outputs.max_ratio, rc.variables.max_ratio) if r is not None)
    assert worst > 100 * rc.outputs.factor
    # the correct placement of the same graph passes the same check
    good = tf_run.compare_with_reference(imp.model, placed, reference, values, batch, steps=1, config=config)
    assert good.ok and good.criterion in ("elementwise", "rounding noise")


@pytest.fixture(scope="module")
def onednn_runs(tmp_path_factory):
    """Both models on one device, with oneDNN's kernels off and on: each in a fresh interpreter, at once."""
    out = tmp_path_factory.mktemp("onednn")
    procs = {}
    for flag in ("0", "1"):
        env = {**os.environ, "TF_ENABLE_ONEDNN_OPTS": flag, "TF_CPP_MIN_LOG_LEVEL": "2"}
        procs[flag] = subprocess.Popen([sys.executable, "-m", "tests.tf_reference_run", str(out / f"{flag}.npz"),
                                        *sorted(MODELS)], cwd=REPO, env=env, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True)
    runs = {}
    for flag, proc in procs.items():
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-2000:]
        runs[flag] = dict(np.load(out / f"{flag}.npz"))
    return runs


@pytest.mark.parametrize("name", sorted(MODELS))
def test_kernels_that_sum_in_another_order_are_within_rounding_noise(name, onednn_runs):
    """TF_ENABLE_ONEDNN_OPTS=0 and =1 are two valid executions of the same step with other kernels (other
    reduction orders). On some CPUs Adam amplifies the difference beyond rtol/atol (an element whose gradient is
    rounding noise, such as a bias just before a batch norm, moves by about the learning rate); the noise
    reference accepts it."""
    def part(flag, kind):
        prefix = f"{name}/{kind}/"
        return {k[len(prefix):]: v for k, v in onednn_runs[flag].items() if k.startswith(prefix)}

    both = [compare_tensors(part(other, "run"), part(ref, "run"), part(ref, "noise"), rtol=1e-4, atol=1e-5)
            for ref, other in (("0", "1"), ("1", "0"))]
    for c in both:
        assert c.ok, [t.to_dict() for t in c.failed()]
        assert c.max_ratio is None or c.max_ratio <= c.factor
    if all(c.elementwise for c in both):
        pytest.skip(f"{name}: oneDNN off and on agree within rtol/atol on this CPU (max |difference| "
                    f"{both[0].max_abs_diff:.3g}); nothing for the noise reference to judge")
    assert {c.criterion for c in both} == {"rounding noise"}


# ---------------------------------------------------------------------------
# Python API
# ---------------------------------------------------------------------------

def test_place_step_runs_keras_training_with_variables_on_their_devices():
    model, loss, batch = tf_models.cnn(keras)
    imp = import_keras(model, loss, keras.optimizers.Adam(LR), batch)
    plan, _ = partition(imp.graph, Cluster.homogeneous(3), method="m-topo")
    plan = scattered(imp.graph, 3) if len(set(plan.assignment.tolist())) < 2 else plan
    with place_step(imp, plan) as step:
        placed = [float(step(*batch)) for _ in range(3)]
        devices = map_devices(plan.devices, LocalTarget("cpu"))
        want = {n: devices[int(plan.assignment[imp.graph.index[n]])] for n in step.variable_devices}
        assert step.variable_devices == want and len(set(want.values())) > 1
        loss4, meta = step.run_traced(*batch)
        assert check_step_stats(meta.step_stats, step.assignment.device).moved == ()
        values = step.variable_values()
        assert step.write_back() == len(imp.model.variable_objects) > 0
    np.testing.assert_allclose(placed + [float(loss4)], keras_losses(tf_models.cnn, 4), rtol=1e-5, atol=1e-6)
    kernel = model.get_layer("conv1").kernel
    np.testing.assert_array_equal(kernel.numpy(), values["conv1/kernel"])


def test_place_step_runs_a_custom_tf_function():
    w = tf.Variable(np.arange(16, dtype="float32").reshape(4, 4) / 16, name="fn_w")
    b = tf.Variable(np.zeros(4, "float32"), name="fn_b")

    @tf.function
    def step(x):
        y = tf.tanh(tf.matmul(x, w) + b)
        w.assign_sub(0.1 * tf.matmul(tf.transpose(x), y))
        b.assign_add(0.01 * tf.reduce_sum(y, axis=0))
        return tf.reduce_mean(y)

    x = np.linspace(-1, 1, 8, dtype="float32").reshape(2, 4)
    imp = import_function(step, x)
    g = imp.graph
    assign = np.zeros(g.num_nodes, np.int64)
    assign[g.colocation == g.colocation[g.id("fn_b")]] = 1        # b and its ops on device 1
    assign[g.id("MatMul")] = 1
    with place_step(imp, Placement(assign, ("/device:GPU:0", "/device:GPU:1"), g.name)) as placed:
        assert placed.variable_devices == {"fn_w": "/device:CPU:0", "fn_b": "/device:CPU:1"}
        got = [float(placed(x)) for _ in range(3)]
        final = placed.variable_values()
    want = [float(step(x)) for _ in range(3)]                     # the eager tf.function, same start values
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(final["fn_w"], w.numpy(), rtol=1e-6)


# ---------------------------------------------------------------------------
# a 2-task cluster on 127.0.0.1
# ---------------------------------------------------------------------------

def test_two_task_local_cluster_reproduces_losses_and_always_shuts_down(imports, local_runs):
    with LocalCluster(2, cpus_per_task=2, start_timeout_s=120, lifetime_s=300) as lc:
        procs = lc.processes
        assert all(t.startswith("127.0.0.1:") for t in lc.spec.tasks)
        for name, imp in imports.items():
            r = run_on_cluster(imp, scattered(imp.graph, 4), lc.spec, device_kind="cpu", steps=2)
            assert r.mode == "cluster" and r.session_target == lc.spec.target
            assert [d.split("/device:")[0] for d in r.devices] == ["/job:worker/replica:0/task:0"] * 2 + \
                ["/job:worker/replica:0/task:1"] * 2
            assert r.ok and r.placement_check.moved == () and r.placement_check.checked > 0.95 * imp.graph.num_nodes
            # the same numbers as on one host, up to rounding (the tasks' kernels may sum in another order)
            np.testing.assert_allclose(r.losses, local_runs[name].losses, rtol=1e-5, atol=1e-6)
            # the same tensors cross devices as on one host (a cross-task tensor may take a second hop)
            assert r.send_recv.data_tensors and r.send_recv.other == 0
            assert [t[:2] for t in r.send_recv.data_tensors] == [t[:2] for t in local_runs[name].send_recv.data_tensors]
            assert r.transfers_only_tf == 0
        # 6 devices need 3 per task; these servers have 2 CPU devices each
        g = imports["cnn"].graph
        with pytest.raises(PlacementError, match=r"needs CPU:2 on task 0 \(127\.0\.0\.1:\d+\), which has 2"):
            run_on_cluster(imports["cnn"], scattered(g, 6), lc.spec, device_kind="cpu", steps=1)
    assert all(p.poll() is not None for p in procs)


def test_pinned_servers_each_run_on_cores_of_their_own(imports):
    """With a Pinning, each task's process is pinned to its own block of cores before TensorFlow starts, and a
    placed step on them still reproduces the single-device results."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("pinning two tasks needs two cores")
    with LocalCluster(2, pinning=Pinning(cores_per_task=1)) as lc:
        assert [os.sched_getaffinity(p.pid) for p in lc.processes] == [{cores[0]}, {cores[1]}]
        g = imports["cnn"].graph
        r = run_on_cluster(imports["cnn"], scattered(g, 2), lc.spec, device_kind="cpu", steps=1)
        assert r.ok and r.placement_check.moved == () and r.mode == "cluster"
    assert all(p.poll() is not None for p in lc.processes)


def test_servers_stop_by_themselves_when_their_lifetime_is_over():
    lc = LocalCluster(1, lifetime_s=1.0)
    lc.start()
    try:
        proc = lc.processes[0]
        proc.wait(timeout=30)
        assert proc.returncode == 0
    finally:
        lc.close()


def test_a_server_that_does_not_start_is_a_runtime_failure():
    lc = LocalCluster(2, start_timeout_s=0.05)
    with pytest.raises(RuntimeFailure, match=r"server of task 0 on 127\.0\.0\.1:\d+ did not start within 0\.05 s"):
        lc.start()
    assert lc.processes == []                                  # start() stopped what it had started


def test_an_unreachable_task_is_a_runtime_failure(imports):
    imp = imports["cnn"]
    port = socket.socket()
    port.bind(("127.0.0.1", 0))
    addr = f"127.0.0.1:{port.getsockname()[1]}"
    port.close()                                               # nobody listens there now
    with pytest.raises(RuntimeFailure, match=rf"task 0 of job 'worker' at {addr} is not reachable"):
        run_on_cluster(imp, scattered(imp.graph, 2), TFClusterSpec((addr,)), steps=1, connect_timeout_s=2)


# ---------------------------------------------------------------------------
# the command line, in a fresh process (logical devices set up before TensorFlow starts)
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cnn_savedmodel(tmp_path_factory):
    return tf_models.save_keras_train_savedmodel(tf, keras, tf_models.cnn, tmp_path_factory.mktemp("sm") / "cnn")


@pytest.mark.parametrize("method", ["pardnn", "m-topo"])
def test_an_lstm_placement_keeps_its_loops_whole_and_runs_ok(tmp_path_factory, tmp_path, method):
    """Each while loop is one colocation group (docs/tensorflow.md): split, TensorFlow moved 32 (pardnn) and
    38 (m-topo) of the tiny LSTM's loop ops to another device than placed, and the run was not ok."""
    sm = tf_models.save_keras_train_savedmodel(tf, keras, tf_models.lstm, tmp_path_factory.mktemp("sm") / "lstm")
    placement = tmp_path / "p.json"
    res = CliRunner().invoke(cli, ["-q", "partition", str(sm), "-k", "2", "--method", method, "-o", str(placement)])
    assert res.exit_code == 0, res.output
    assert len(set(json.loads(placement.read_text())["assignment"].values())) == 2      # both devices used
    cmd = [sys.executable, "-c", "from pardnn.cli import main; main()", "-q", "run", str(sm), str(placement),
           "--steps", "2", "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["ok"] and report["ops_moved"] == 0
    assert report["outputs_match"] and report["variables_match"]


def _nan_step_savedmodel(path):
    """A SavedModel whose training step fails when it runs: a numerics check on the log of a negative tensor."""
    class Step(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(tf.ones((6, 2)), name="w")

        @tf.function(input_signature=[tf.TensorSpec((4, 6), tf.float32, name="x")])
        def train_step(self, x):
            with tf.GradientTape() as tape:
                h = tf.debugging.check_numerics(tf.math.log(-1.0 - tf.abs(x)), "the log of a negative input")
                loss = tf.reduce_mean(tf.matmul(h, self.w))
            self.w.assign_sub(0.01 * tape.gradient(loss, self.w))
            return {"loss": loss}

    step = Step()
    tf.saved_model.save(step, str(path), signatures={"train_step": step.train_step})
    return path


def test_a_step_that_fails_as_it_runs_names_the_node_and_the_cause(tmp_path):
    # TensorFlow's message opens "Graph execution error:" and the node's stack trace; the cause comes after
    sm = _nan_step_savedmodel(tmp_path / "nan")
    runner = CliRunner()
    res = runner.invoke(cli, ["import", str(sm), "--profile", "1", "-o", str(tmp_path / "g.json")])
    assert res.exit_code == EXIT_RUNTIME, res.output
    assert "the profiled step failed at node 'CheckNumerics': the log of a negative input : Tensor had NaN" \
        in res.output, res.output
    assert not (tmp_path / "g.json").exists()
    placement = tmp_path / "p.json"
    res = runner.invoke(cli, ["-q", "partition", str(sm), "-k", "2", "-o", str(placement)])
    assert res.exit_code == 0, res.output
    res = runner.invoke(cli, ["run", str(sm), str(placement), "--steps", "1"])
    assert res.exit_code == EXIT_RUNTIME, res.output
    line = [ln for ln in res.output.splitlines() if ln.startswith("pardnn: error")]
    assert len(line) == 1 and "the placed step failed at node 'CheckNumerics': the log of a negative input" \
        in line[0], res.output


def test_a_device_tensorflow_does_not_have_is_a_placement_error_from_its_message():
    # the phrase that tells a missing device sits after the header and the node's stack trace
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
        with tf.device("/device:CPU:7"):
            z = tf.add(x, x, name="twice")
    config = tf.compat.v1.ConfigProto(allow_soft_placement=False)
    with tf.compat.v1.Session(graph=g, config=config) as sess, pytest.raises(tf.errors.OpError) as info:
        sess.run(z, {x: np.ones((2, 3), np.float32)})
    err = tf_run.op_failure(info.value, "the step")
    assert isinstance(err, PlacementError)
    assert "at node 'twice'" in str(err) and "was explicitly assigned to /device:CPU:7" in str(err)


def test_pardnn_run_a_savedmodel_writes_the_report_and_the_placed_graph(cnn_savedmodel, tmp_path):
    runner = CliRunner()
    placement = tmp_path / "p.json"
    res = runner.invoke(cli, ["-q", "partition", str(cnn_savedmodel), "--devices", "4", "--method", "m-topo",
                              "-o", str(placement)])
    assert res.exit_code == 0, res.output
    out, trace = tmp_path / "placed.pbtxt", tmp_path / "trace.json"
    cmd = [sys.executable, "-c", "from pardnn.cli import main; main()", "-q", "run", str(cnn_savedmodel),
           str(placement), "--steps", "2", "--json", "--write", str(out), "--trace", str(trace)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["backend"] == "tensorflow" and report["mode"] == "cpu" and report["ok"]
    assert report["ops_moved"] == 0 and report["outputs_match"] and report["variables_match"]
    assert report["predicted_us"] > 0 and report["measured_us"] > 0
    # with oneDNN on, TensorFlow's runtime may fuse a Conv2DBackpropFilter and the BiasAddGrad beside it into one
    # op whose output 1 is the bias gradient: that transfer is counted as fused, not as one the model lacks
    assert report["send_recv"]["data"] > 0 and report["transfers_only_tf"] == 0
    assert report["transfers_only_simulated"] == 0
    # TensorFlow's own allocator peak for the all-on-device-0 step beside the machine model's single-device peak
    # (4 logical CPUs share one allocator: one figure for the placed run)
    mem = report["memory"]
    assert mem["allocators"] == ["CPU:0"] and mem["shared_allocator"] and mem["note"] == ""
    measured = mem["reference_peak_bytes"]["CPU:0"]
    assert measured > 0 and mem["measured_peak_bytes"]["CPU:0"] > 0
    assert mem["measured_over_predicted"] == round(measured / mem["predicted_single_device_peak_bytes"], 4)
    # no upper bound: with oneDNN off, TensorFlow's own convolution gradients take tens of MiB of scratch, which a
    # roofline import does not know (a profiled one does: docs/machine-model.md)
    assert mem["measured_over_predicted"] > 0.5
    assert len(mem["predicted_peak_bytes"]) == 4
    # each device's measured op time in the traced step, for `pardnn report --measured`
    busy = {d["device"]: d["busy_us"] for d in report["per_device"]}
    assert sorted(busy) == [0, 1, 2, 3] and all(busy[i] > 0 for i, n in enumerate(report["ops_per_device"]) if n)
    # both timelines in one Chrome trace: the model's (a track per device and per link) and the traced step's (a
    # track per TensorFlow device, whose slices are the placed graph's nodes and TensorFlow's own)
    ev = json.loads(trace.read_text())["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    assert procs == {1: "predicted (machine model)", 2: "measured (TensorFlow)"}
    tracks = {(e["pid"], e["args"]["name"]) for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {(1, f"/device:CPU:{i}") for i in range(4)} <= tracks       # the devices the run used
    assert {(2, f"/job:localhost/replica:0/task:0/device:CPU:{i}") for i in range(4)} <= tracks
    predicted = [e for e in ev if e["pid"] == 1 and e["ph"] == "X" and e["cat"] != "transfer"]
    assert len(predicted) == sum(report["ops_per_device"])
    measured = {e["name"].rsplit("/", 1)[-1] for e in ev if e["pid"] == 2 and e["ph"] == "X"}
    assert len(measured) > 50 and all(e["dur"] >= 0 for e in ev if e["ph"] == "X")
    from google.protobuf import text_format
    gd = text_format.Parse(out.read_text(), tf.compat.v1.GraphDef())
    assert {n.device for n in gd.node} <= {f"/device:CPU:{i}" for i in range(4)} and all(n.device for n in gd.node)


def test_the_report_draws_the_measured_timeline_of_a_real_run(cnn_savedmodel, tmp_path):
    """`pardnn run --json` on 2 logical CPUs keeps the traced step's ops per device; `pardnn report --measured`
    draws them under the prediction and names the real ops where the timelines part."""
    pytest.importorskip("matplotlib")
    from ..report.test_report import Page, assert_self_contained

    placement, run_json, html = tmp_path / "p.json", tmp_path / "run.json", tmp_path / "r.html"
    res = CliRunner().invoke(cli, ["-q", "partition", str(cnn_savedmodel), "--devices", "2", "--method", "m-topo",
                                   "-o", str(placement)])
    assert res.exit_code == 0, res.output
    cmd = [sys.executable, "-c", "from pardnn.cli import main; main()", "-q", "run", str(cnn_savedmodel),
           str(placement), "--steps", "1", "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    run_json.write_text(proc.stdout)
    report = json.loads(proc.stdout)
    assert proc.stdout.count("\n") < 200             # one compact line for the timeline, whatever the op count
    lanes = report["measured_timeline"]["devices"]
    assert [(d["device"], d["name"]) for d in lanes] == list(enumerate(report["devices"]))
    names = [{op[0] for op in d["ops"]} for d in lanes]
    assert all(len(n) > 10 for n in names) and not names[0] & names[1]
    assert sum(map(len, names)) == report["ops_checked"]          # every traced op of the graph, once
    for d, lane in zip(report["per_device"], lanes):              # the same op times as the busy time
        assert sum(op[2] for op in lane["ops"]) == d["busy_us"]
        starts = [op[1] for op in lane["ops"]]
        assert starts == sorted(starts) and min(starts) >= 0
    res = CliRunner().invoke(cli, ["-q", "report", str(cnn_savedmodel), str(placement), "--measured", str(run_json),
                                   "-o", str(html)])
    assert res.exit_code == 0, res.output
    text = html.read_text()
    page = Page(text)
    assert_self_contained(text, page)
    assert "measured-timeline" in page.images and "No measured timeline" not in text
    for d, lane in enumerate(lanes):
        ops = lane["ops"]
        assert int(page.values[f"measured_lane[{d}].ops"]) == len(ops)
        last = max(ops, key=lambda op: op[1] + op[2])
        assert float(page.values[f"measured_lane[{d}].end_us"]) == last[1] + last[2]
        assert page.texts[f"measured_lane[{d}].last_op"] in {op[0] for op in ops if op[1] + op[2] == last[1] + last[2]}
    assert page.texts["departure[0].op"] in names[0] | names[1]


def test_without_allocator_statistics_the_run_says_so_instead_of_reporting_zero(cnn_savedmodel, tmp_path):
    """With oneDNN off and the BFC allocator refused, TensorFlow's plain CPU allocator counts nothing: the report
    gives no measured peak and says why (never a peak of 0)."""
    runner = CliRunner()
    placement = tmp_path / "p.json"
    assert runner.invoke(cli, ["-q", "partition", str(cnn_savedmodel), "--devices", "2", "--method", "m-topo",
                               "-o", str(placement)]).exit_code == 0
    env = dict(os.environ, TF_CPU_ALLOCATOR_USE_BFC="false", TF_ENABLE_ONEDNN_OPTS="0")
    cmd = [sys.executable, "-c", "from pardnn.cli import main; main()", "-q", "run", str(cnn_savedmodel),
           str(placement), "--steps", "1", "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    mem = json.loads(proc.stdout)["memory"]
    assert mem["reference_peak_bytes"] is None and mem["measured_peak_bytes"] is None
    assert mem["measured_over_predicted"] is None and "TF_CPU_ALLOCATOR_USE_BFC" in mem["note"]
    assert mem["predicted_single_device_peak_bytes"] > 0


def _scattered_on_3(model, tmp_path):
    """The model imported, a placement scattering it on 3 devices, and that placement's file."""
    from pardnn.frontends.tensorflow import import_tensorflow

    imp = import_tensorflow(model)
    pl = scattered(imp.graph, 3)
    placement = tmp_path / "p.json"
    save_placement(pl, imp.graph, placement)
    return imp, pl, placement


def test_pardnn_rewrite_writes_a_placed_savedmodel_users_can_load(cnn_savedmodel, tmp_path):
    imp, pl, placement = _scattered_on_3(cnn_savedmodel, tmp_path)
    res = CliRunner().invoke(cli, ["-q", "rewrite", str(cnn_savedmodel), str(placement), "-o",
                                   str(tmp_path / "placed"), "--device-kind", "cpu", "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.output)
    assert summary["devices"] == ["/device:CPU:0", "/device:CPU:1", "/device:CPU:2"]
    res = CliRunner().invoke(cli, ["-q", "rewrite", str(cnn_savedmodel), str(placement), "-o",
                                   str(tmp_path / "tasks.pbtxt"), "--tasks", "2", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["devices"] == ["/job:worker/replica:0/task:0/device:CPU:0",
                                                 "/job:worker/replica:0/task:0/device:CPU:1",
                                                 "/job:worker/replica:0/task:1/device:CPU:0"]
    local = tf_run.run_placed(imp, pl, steps=1)
    batch = tf_run.feed_values(imp.model, None)
    config = tf.compat.v1.ConfigProto(device_count={"CPU": 3}, allow_soft_placement=False)
    with tf.compat.v1.Session(graph=tf.Graph(), config=config) as sess:
        mg = tf.compat.v1.saved_model.load(sess, ["train"], str(tmp_path / "placed"))
        sig = mg.signature_def["train_step"]
        graph = sess.graph
        devices = {op.name: op.device for op in graph.get_operations() if op.type == "VarHandleOp"}
        assert devices and all(d == f"/device:CPU:{pl.assignment[imp.graph.index[n]]}" for n, d in devices.items())
        feeds = {graph.get_tensor_by_name(sig.inputs[f.node].name): batch[f.name] for f in imp.model.feeds}
        losses = [float(sess.run(sig.outputs["output"].name, feeds)) for _ in range(3)]
    np.testing.assert_allclose(losses, local.losses, rtol=1e-5, atol=1e-6)


def test_a_placed_savedmodel_for_a_cluster_keeps_its_task_devices(cnn_savedmodel, tmp_path):
    """Found by a new user's trial: `rewrite --tasks 2 -o DIR` (and `run --local-cluster 2 --write DIR`) failed
    with exit code 5, "was explicitly assigned to /job:worker/... but available devices are
    [ /job:localhost/... ]": the variables are saved in a session of this process, which has no such job. They
    are now saved on local CPUs, and the SavedModel names the cluster's devices."""
    from pardnn.frontends.tensorflow._tf import saved_model_pb2

    imp, pl, placement = _scattered_on_3(cnn_savedmodel, tmp_path)
    res = CliRunner().invoke(cli, ["-q", "rewrite", str(cnn_savedmodel), str(placement), "-o",
                                   str(tmp_path / "tasks"), "--tasks", "2", "--json"])
    assert res.exit_code == 0, res.output
    names = json.loads(res.output)["devices"]
    sm = saved_model_pb2.SavedModel()
    sm.ParseFromString((tmp_path / "tasks" / "saved_model.pb").read_bytes())
    nodes = sm.meta_graphs[0].graph_def.node
    handles = {n.name: n.device for n in nodes if n.op == "VarHandleOp" and n.name in imp.graph.index}
    assert handles and all(d == names[pl.assignment[imp.graph.index[n]]] for n, d in handles.items())
    assert {n.device for n in nodes if n.device} <= set(names)


def test_a_savedmodel_that_captures_a_constant_restores_every_variable(tmp_path):
    """The Transformer's step captures its position indices as a constant beside the variables; the
    variables still start from the SavedModel's values, so the run's first loss is Keras's first loss."""
    from pardnn.frontends.tensorflow import import_tensorflow

    path = tf_models.save_keras_train_savedmodel(tf, keras, tf_models.transformer, tmp_path / "t")
    imp = import_tensorflow(path)
    values = imp.model.variable_values()
    variables = [n.name for n in imp.model.graph_def.node if n.op == "VarHandleOp"]
    assert set(values) == set(variables)
    model, _, (x, y) = tf_models.transformer(keras)
    np.testing.assert_array_equal(values["embed/embeddings"], model.get_layer("embed").embeddings.numpy())
    batch = {imp.model.feeds[0].name: x, imp.model.feeds[1].name: y}
    imp = dataclasses.replace(imp, model=dataclasses.replace(imp.model, feed_values=batch))
    r = tf_run.run_placed(imp, scattered(imp.graph, 2), steps=1)
    assert r.ok and r.finite
    np.testing.assert_allclose(r.losses, keras_losses(tf_models.transformer, 3), rtol=1e-5)


def test_cli_errors_are_one_line_with_their_exit_codes(cnn_savedmodel, tmp_path, imports):
    from pardnn.frontends.tensorflow import import_tensorflow

    g = import_tensorflow(cnn_savedmodel).graph
    ok = tmp_path / "p.json"
    save_placement(scattered(g, 2), g, ok)
    other = tmp_path / "other.json"
    save_placement(scattered(imports["transformer"].graph, 2), imports["transformer"].graph, other)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"worker": ["127.0.0.1:1"]}))
    runner = CliRunner()
    cores = len(os.sched_getaffinity(0))
    for args, code, msg in [
        ([str(other)], EXIT_INPUT, "(the placement was made for graph"),
        ([str(ok), "--device-kind", "gpu"], EXIT_INPUT, "needs GPU 0, but this host has 0 GPU"),
        ([str(ok), "--cluster-spec", str(spec)], EXIT_RUNTIME,     # the hint names the file (it said SPEC)
         f"at 127.0.0.1:1 is not reachable (Connection refused); start its server there with `pardnn serve "
         f"--cluster-spec {spec} --task 0`"),
        ([str(ok), "--local-cluster", "2", "--pin", "--cores-per-task", str(cores)], EXIT_INPUT,
         f"pinning 2 task(s) to {cores} core(s) each needs {2 * cores} cores; this process may use {cores}"),
    ]:
        res = runner.invoke(cli, ["-q", "run", str(cnn_savedmodel), *args])
        assert res.exit_code == code, res.output
        lines = [ln for ln in res.output.splitlines() if ln.startswith("pardnn: error:")]
        assert len(lines) == 1 and msg in lines[0]
    for args, msg in [(["--pin"], "--pin applies to --local-cluster only"),
                      (["--local-cluster", "2", "--intra-op-threads", "1"], "--intra-op-threads needs --pin")]:
        res = runner.invoke(cli, ["-q", "run", str(cnn_savedmodel), str(ok), *args])
        assert res.exit_code == EXIT_USAGE and f"Error: {msg}" in res.output, res.output


# ---------------------------------------------------------------------------
# pardnn calibrate
# ---------------------------------------------------------------------------

def _calibrate(tmp_path, *args):
    out = tmp_path / "cluster.json"
    cmd = [sys.executable, "-c", "from pardnn.cli import main; main()", "-q", "calibrate", "-o", str(out),
           "--repeats", "2", "--sizes", "4KiB,16MiB", "--json", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout), out


def test_calibrate_two_logical_cpus_writes_a_cluster_partition_and_simulate_take(tmp_path, cnn_savedmodel):
    from pardnn.cluster import load_cluster

    report, out = _calibrate(tmp_path, "-k", "2", "--memory", "1GiB")
    c = load_cluster(out)
    assert c.names == ("/device:CPU:0", "/device:CPU:1") and c.devices[0].speed == 1.0
    assert all(d.memory_bytes == 1 << 30 for d in c.devices) and c.devices[1].speed > 0
    assert c.links is not None and c.links[0][1] is not None and c.links[1][0] is not None
    # the printed fit: 2 sizes x counts 1 and 4 per link, with its residuals
    fit = report["links"][0][1]
    assert fit["sizes"] == [4096, 4096, 16 << 20, 16 << 20] and fit["counts"] == [1, 4, 1, 4]
    assert len(fit["residuals_us"]) == 4 and report["speed"][0] == 1.0
    placement = tmp_path / "p.json"
    runner = CliRunner()
    r = runner.invoke(cli, ["-q", "partition", str(cnn_savedmodel), "--cluster", str(out), "-o", str(placement)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(cli, ["-q", "simulate", str(cnn_savedmodel), str(placement), "--cluster", str(out), "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["devices"] == list(c.names)


def test_calibrate_a_pinned_local_cluster_measures_its_grpc_links(tmp_path):
    from pardnn.cluster import load_cluster

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("pinning two tasks needs two cores")
    report, out = _calibrate(tmp_path, "--local-cluster", "2", "--pin")
    c = load_cluster(out)
    assert c.names == ("/job:worker/replica:0/task:0/device:CPU:0", "/job:worker/replica:0/task:1/device:CPU:0")
    # gRPC between two processes copies every byte: a real, finite bandwidth and a step that costs time
    fit = report["links"][0][1]
    assert 1.0 < fit["bandwidth_bytes_per_us"] < 1e6 and fit["times_us"][-1] > 0
    # the tasks' cores do that work: the CPU time their processes spent per transfer and end, fitted like the
    # link, over a free link (pardnn.calibration.link_of)
    assert c.has_transfer_cpu and c.latency[0, 1] == 0.0
    cpu_fit = report["cpu_links"][0][1]
    assert cpu_fit["sizes"] == fit["sizes"] and all(t >= 0 for t in cpu_fit["times_us"])
    assert c.transfer_cpu[0, 1] == pytest.approx(cpu_fit["latency_us"])
    assert max(cpu_fit["times_us"]) > 0      # 4 x 16 MiB through gRPC costs the tasks' CPU
    if cpu_fit["bandwidth_bytes_per_us"] < 1e9:
        assert c.transfer_cpu_bandwidth[0, 1] == pytest.approx(cpu_fit["bandwidth_bytes_per_us"])
