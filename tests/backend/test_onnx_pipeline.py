"""The ONNX backend: stages from a placement, a pipelined onnxruntime run equal to the whole model, and `pardnn run`."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pardnn.cli import cli
from pardnn.errors import EXIT_DEPENDENCY, EXIT_INFEASIBLE, EXIT_INPUT, EXIT_RUNTIME, PlacementError

from ..conftest import REPO

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402

from pardnn.api import partition  # noqa: E402
from pardnn.backend.onnx_pipeline import node_devices, plan_stages, run_placement, stage_model  # noqa: E402
from pardnn.cluster import Cluster  # noqa: E402
from pardnn.frontends import FrontendOptions  # noqa: E402
from pardnn.frontends.onnx import graph_from_prepared, load_onnx, prepare  # noqa: E402
from pardnn.frontends.onnx.zoo import gpt, mlp  # noqa: E402
from pardnn.ir import load_graph  # noqa: E402
from pardnn.placement import Placement, save_placement  # noqa: E402

from ..onnx_models import if_with_capture, make_model, save, split_to_sequence  # noqa: E402

pytestmark = pytest.mark.onnx


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("onnx-backend")
    return {"mlp": save(mlp([32, 64, 64, 64, 10], seed=3), d / "mlp.onnx"),
            "gpt": save(gpt(vocab=128, d_model=32, heads=4, layers=2, max_len=32, seed=4), d / "gpt.onnx")}


def placement_for(g, devices_by_name, k):
    """A placement putting each node on ``devices_by_name(name)``."""
    return Placement(np.array([devices_by_name(n) for n in g.names], dtype=np.int64),
                     tuple(f"/device:GPU:{i}" for i in range(k)), g.name)


@pytest.mark.parametrize("method", ["pardnn", "m-topo"])
@pytest.mark.parametrize("name, opts", [("mlp", FrontendOptions(batch_size=4)),
                                        ("gpt", FrontendOptions(batch_size=2, dims={"seq": 10}))])
def test_partition_then_pipelined_run_equals_the_whole_model(models, name, opts, method, tmp_path):
    g = load_onnx(models[name], opts)
    plan, sched = partition(g, Cluster.homogeneous(2), method=method)
    used = set(plan.assignment.tolist())
    assert sched.feasible
    if method == "m-topo":   # fills the devices in order: both are used
        assert used == {0, 1}
    path = save_placement(plan, g, tmp_path / "p.json")
    r = run_placement(models[name], path, options=opts, steps=2)
    assert r.outputs_match and r.max_abs_diff <= 1e-5
    assert {s.device for s in r.stages} == used and len(r.stages) >= len(used)
    assert all(s.provider == "CPU" for s in r.stages)   # no CUDA provider in this onnxruntime
    assert r.predicted_us == pytest.approx(sched.makespan_us)   # same roofline graph, same simulator
    assert r.measured_us > 0 and r.whole_model_us > 0
    assert sum(s.nodes for s in r.stages) == len(onnx.load(str(models[name])).graph.node)


def test_non_contiguous_devices_become_topological_segments(models):
    """Alternate the MLP's layers between two devices: 0 1 0 1 ... gives one stage per layer segment."""
    opts = FrontendOptions(batch_size=3)
    pm = prepare(models["mlp"], batch_size=3)
    g = graph_from_prepared(pm, opts)

    def dev(name):
        digits = [c for c in name if c.isdigit()]
        return int(digits[0]) % 2 if digits else 0

    pl = placement_for(g, dev, 2)
    stages = plan_stages(pm, node_devices(pm, g, pl))
    assert [s.device for s in stages] == [0, 1, 0, 1]          # fc0+act0 | fc1+act1 | fc2+act2 | fc3
    assert [len(s.nodes) for s in stages] == [2, 2, 2, 1]
    r = run_placement(models["mlp"], pl, options=opts, steps=1)
    assert r.outputs_match and len(r.stages) == 4


def _chain_model():
    """
    x -> n0 -> n1 -> n3          n0 on d0, n1 on d1, n2 on d0, n3 on d1
          \\-> n2                 (file order n0 n1 n2 n3)
    """
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="n0"), helper.make_node("Neg", ["a"], ["b"], name="n1"),
             helper.make_node("Sin", ["a"], ["c"], name="n2"), helper.make_node("Cos", ["b"], ["d"], name="n3")]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info("c", TensorProto.FLOAT, [3]),
                               helper.make_tensor_value_info("d", TensorProto.FLOAT, [3])])
    return make_model(graph)


def test_stages_prefer_staying_on_a_device(tmp_path):
    """File order alternates devices (4 runs), but a topological order exists with 2: [n0 n2] [n1 n3]."""
    path = save(_chain_model(), tmp_path / "chain.onnx")
    pm = prepare(path)
    stages = plan_stages(pm, np.array([0, 1, 0, 1]))
    assert [(s.device, [pm.graph.node[i].name for i in s.nodes]) for s in stages] == [(0, ["n0", "n2"]),
                                                                                      (1, ["n1", "n3"])]
    assert stages[0].inputs == ("x",) and set(stages[0].outputs) == {"a", "c"} and stages[1].inputs == ("a",)
    assert stages[1].after == (0,)


def test_subgraph_capture_crosses_a_cut(tmp_path):
    path = save(if_with_capture(), tmp_path / "if.onnx")
    g = load_onnx(path)
    pl = placement_for(g, lambda n: 1 if n in ("if", "output:y") else 0, 2)
    r = run_placement(path, pl, steps=1)
    assert r.outputs_match and [s.device for s in r.stages] == [0, 1]


@pytest.mark.parametrize("cut", [False, True])
def test_a_sequence_value_runs_in_one_stage_and_across_a_cut(tmp_path, cut):
    """A ragged sequence (SplitToSequence rows [1, 3]) inside a stage, and passed between two stages as a list
    of arrays; the sequence is a graph output too, compared element by element with the whole model's."""
    path = save(split_to_sequence((1, 3), sequence_output=True), tmp_path / "seq.onnx")
    g = load_onnx(path)
    pl = placement_for(g, lambda n: 0 if not cut or n in ("input:x", "sts", "output:seq") else 1, 2 if cut else 1)
    r = run_placement(path, pl, steps=1)
    assert r.outputs_match and r.max_abs_diff == 0.0
    assert [s.device for s in r.stages] == ([0, 1] if cut else [0])


def test_an_optional_value_runs(tmp_path):
    nodes = [helper.make_node("Optional", ["x"], ["o"], name="opt"),
             helper.make_node("OptionalGetElement", ["o"], ["y"], name="get")]
    graph = helper.make_graph(nodes, "opt", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    path = save(make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), tmp_path / "opt.onnx")
    g = load_onnx(path)
    r = run_placement(path, placement_for(g, lambda n: 0, 1), steps=1)
    assert r.outputs_match


@st.composite
def dags(draw):
    """A random DAG of unary/binary element-wise ONNX ops on [2, 3] floats, and a device per node."""
    n = draw(st.integers(2, 9))
    k = draw(st.integers(1, 3))
    nodes, values = [], ["x"]
    for i in range(n):
        a = draw(st.sampled_from(values))
        if draw(st.booleans()) and len(values) > 1:
            b = draw(st.sampled_from(values))
            nodes.append(helper.make_node(draw(st.sampled_from(["Add", "Mul", "Sub"])), [a, b], [f"v{i}"],
                                          name=f"n{i}"))
        else:
            nodes.append(helper.make_node(draw(st.sampled_from(["Relu", "Tanh", "Neg", "Sigmoid"])), [a],
                                          [f"v{i}"], name=f"n{i}"))
        values.append(f"v{i}")
    outs = sorted(set(draw(st.lists(st.sampled_from(values[1:]), min_size=1, max_size=3))))
    devs = draw(st.lists(st.integers(0, k - 1), min_size=n, max_size=n))
    graph = helper.make_graph(nodes, "random", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, [2, 3]) for o in outs])
    return make_model(graph), devs, k


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=dags())
def test_random_placements_split_and_run_exactly(tmp_path, case):
    """Every node in exactly one single-device stage; stage inputs come from feeds or earlier stages; same outputs."""
    model, devs, k = case
    path = save(model, tmp_path / "random.onnx")
    pm = prepare(path)
    g = graph_from_prepared(pm)
    dev = {n.name: d for n, d in zip(model.graph.node, devs)}
    pl = placement_for(g, lambda name: dev.get(name, 0), k)
    stages = plan_stages(pm, node_devices(pm, g, pl))
    seen = sorted(i for s in stages for i in s.nodes)
    assert seen == list(range(len(model.graph.node)))
    available = {"x"}
    for s in stages:
        assert len({devs[i] for i in s.nodes}) == 1 and devs[s.nodes[0]] == s.device
        assert set(s.inputs) <= available
        available |= set(s.outputs)
        onnx.checker.check_model(stage_model(pm, s, {}))
    r = run_placement(path, pl, steps=1)
    assert r.outputs_match and r.max_abs_diff == 0.0


def test_a_placement_for_another_graph_is_rejected(models, tmp_path):
    g = load_onnx(models["mlp"], FrontendOptions(batch_size=2))
    plan, _ = partition(g, Cluster.homogeneous(2))
    path = save_placement(plan, g, tmp_path / "mlp.placement.json")
    with pytest.raises(PlacementError, match="is not in graph 'gpt'"):
        run_placement(models["gpt"], path, options=FrontendOptions(batch_size=2, dims={"seq": 4}))


def test_a_device_outside_the_cluster_is_rejected(models):
    opts = FrontendOptions(batch_size=2)
    g = load_onnx(models["mlp"], opts)
    pl = placement_for(g, lambda n: 2 if n == "/fc1/Gemm" else 0, 3)
    with pytest.raises(PlacementError, match=r"node '/fc1/Gemm' is placed on device 2 \(/device:GPU:2\), which is "
                                             r"not in the cluster \(2 devices"):
        run_placement(models["mlp"], pl, cluster=Cluster.homogeneous(2), options=opts)


def test_training_graphs_need_onnxruntime_training_to_run():
    from pardnn.errors import MissingDependencyError

    path = REPO / "tests" / "data" / "onnx" / "mlp_training" / "training_model.onnx"
    g = load_onnx(path)
    pl = placement_for(g, lambda n: 0, 1)
    with pytest.raises(MissingDependencyError, match="needs onnxruntime-training"):
        run_placement(path, pl)


# ---------------------------------------------------------------------------
# pardnn run
# ---------------------------------------------------------------------------

def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def test_cli_partition_then_run_json(models, tmp_path):
    out = tmp_path / "p.json"
    flags = ["--dim", "seq=8", "--batch-size", 2]
    r = run("partition", models["gpt"], "--devices", 2, "-o", out, *flags)
    assert r.exit_code == 0, r.output
    r = run("run", models["gpt"], out, *flags, "--json", "--steps", 2)
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["outputs_match"] is True and d["max_abs_diff"] == 0.0
    assert d["predicted_us"] == pytest.approx(json.loads(out.read_text())["predicted"]["makespan_us"], abs=1e-3)
    assert d["measured_us"] > 0 and d["steps"] == 2 and d["devices"] == ["/device:GPU:0", "/device:GPU:1"]
    assert d["steps_compared"] == 1 and d["feasible"] is True and d["violations"] == []
    assert {s["device"] for s in d["stages"]} == {0, 1} and d["cost_model"] == "roofline (h100)"
    # the ops on each device, as placed: `report --measured` takes this run for its placement, and no other's
    placed = list(json.loads(out.read_text())["assignment"].values())
    assert d["ops_per_device"] == [placed.count(0), placed.count(1)]
    measured = tmp_path / "run.json"
    measured.write_text(r.stdout)
    assert run("report", models["gpt"], out, *flags, "--measured", measured, "-o", tmp_path / "r.html").exit_code == 0
    other = tmp_path / "mlp.p.json"
    assert run("partition", models["mlp"], "--devices", 2, "--batch-size", 2, "-o", other).exit_code == 0
    r = run("report", models["mlp"], other, "--batch-size", 2, "--measured", measured, "-o", tmp_path / "r2.html")
    assert r.exit_code == EXIT_INPUT and "give --measured the run of" in r.output and not (tmp_path / "r2.html").exists()
    r = run("run", models["gpt"], out, *flags)
    assert r.exit_code == 0 and "outputs match        yes" in r.stdout and "fits the model       yes" in r.stdout
    stages = len(d["stages"])
    assert r.stdout.startswith(f"{d['graph']}: {stages} stages on 2 devices "), r.stdout
    # a cluster larger than the placement: the line said "on 3 devices" of stages that use 2
    r = run("run", models["gpt"], out, *flags, "--devices", 3, "--steps", 1)
    assert r.exit_code == 0 and f": {stages} stages on 2 of 3 devices " in r.stdout, r.stdout


def test_a_run_that_predicts_with_other_op_times_than_its_placement_says_so(models, tmp_path):
    """A placement made with --profile, run without it, compared a roofline prediction with the measured step
    without a word (a new user's trial: 1.1 ms predicted, 145 ms measured). The placement records its costs,
    and such a run warns; the same flags say nothing."""
    out = tmp_path / "p.json"
    flags = ["--batch-size", 2]
    assert run("-q", "partition", models["mlp"], "--devices", 2, "--profile", 1, "-o", out, *flags).exit_code == 0
    assert json.loads(out.read_text())["costs"] == "profiled"
    r = run("run", models["mlp"], out, *flags, "--steps", 1)
    assert r.exit_code == 0, r.output
    assert f"pardnn: {out}: the placement was made with profiled op times, but this run predicts with roofline " \
        "(h100) ones; give it --profile, as the placement's graph had, for a prediction of the same costs" \
        in r.stderr, r.stderr
    r = run("run", models["mlp"], out, *flags, "--steps", 1, "--profile", 1)
    assert r.exit_code == 0 and "op times" not in r.stderr, r.stderr
    # simulate and report say the same; and of another batch, that it is another step's (run refuses it)
    r = run("simulate", models["mlp"], out, *flags)
    assert r.exit_code == 0 and "but this simulation predicts with roofline (h100) ones" in r.stderr, r.stderr
    r = run("report", models["mlp"], out, "--batch-size", 3, "-o", tmp_path / "r.html")
    assert r.exit_code == 0 and "but this report predicts with roofline" in r.stderr, r.stderr
    assert f"{out}: the placement was made with --batch-size 2; this report reads the graph at --batch-size 3, " \
        "another step's memory and times" in r.stderr, r.stderr
    assert run("-q", "partition", models["mlp"], "--devices", 2, "-o", out, *flags).exit_code == 0
    assert json.loads(out.read_text())["costs"] == "roofline (h100)"
    r = run("run", models["mlp"], out, *flags, "--steps", 1, "--device-profile", "a100")
    assert "made with roofline (h100) op times, but this run predicts with roofline (a100) ones; give it " \
        "--device-profile h100, as the placement's graph had" in r.stderr, r.stderr
    # and the other way round: a roofline placement run with --profile (a second review: it said "give it the
    # --profile flag partition had", which partition had not)
    r = run("run", models["mlp"], out, *flags, "--steps", 1, "--profile", 1)
    assert "made with roofline (h100) op times, but this run predicts with profiled ones; leave --profile out, " \
        "as the placement's graph did" in r.stderr, r.stderr


def test_cli_run_checks_the_placement_against_the_model(models, tmp_path):
    """Found by a new user's trial: an ONNX ``run`` never checked the placement against the cluster's memory
    (``simulate`` and ``report`` did). It runs and reports as before, then, as ``simulate``, exits 4 with one
    line naming the device and the bytes short."""
    out = tmp_path / "p.json"
    flags = ["--dim", "seq=8", "--batch-size", 2]
    assert run("partition", models["gpt"], "--devices", 2, "-o", out, *flags).exit_code == 0
    need = json.loads(run("simulate", models["gpt"], out, *flags, "--json").stdout)["peak_bytes"]
    small = max(need) - 1
    r = run("run", models["gpt"], out, *flags, "--steps", 1, "--memory", small)
    assert r.exit_code == EXIT_INFEASIBLE, r.output
    assert "outputs match        yes" in r.stdout and "fits the model       NO: device" in r.stdout
    assert r.stderr.strip().count("\n") == 0 and "the placement breaks the machine model" in r.stderr
    assert r.stderr.rstrip().endswith(": 1 bytes short")   # the worst device is one byte over
    r = run("run", models["gpt"], out, *flags, "--steps", 1, "--memory", small, "--json")
    assert r.exit_code == EXIT_INFEASIBLE
    d = json.loads(r.stdout)
    assert d["feasible"] is False and d["violations"][0].startswith("device ")
    assert run("run", models["gpt"], out, *flags, "--steps", 1, "--memory", max(need)).exit_code == 0


def test_an_onnxruntime_failure_names_the_file(tmp_path):
    """Found by a new user's trial: onnxruntime's load error named the node but not the model's file."""
    x = helper.make_tensor_value_info("x", TensorProto.UINT16, [4])
    y = helper.make_tensor_value_info("y", TensorProto.UINT16, [4])
    m = helper.make_model(helper.make_graph([helper.make_node("Sin", ["x"], ["y"], name="s")], "g", [x], [y]),
                          opset_imports=[helper.make_opsetid("", 17)])
    bad = tmp_path / "bad.onnx"
    onnx.save(m, str(bad))
    r = run("partition", bad, "--devices", 2, "-o", tmp_path / "p.json", "--profile", 1)
    assert r.exit_code == EXIT_RUNTIME and r.stderr.strip().count("\n") == 0
    assert f"{bad}: onnxruntime cannot load the model" in r.stderr and "node (s)" in r.stderr
    assert not (tmp_path / "p.json").exists()
    assert run("partition", bad, "--devices", 2, "-o", tmp_path / "p.json").exit_code == 0
    r = run("run", bad, tmp_path / "p.json", "--steps", 1)
    assert r.exit_code == EXIT_RUNTIME and f"{bad}: onnxruntime cannot load the model" in r.stderr


def test_simulate_takes_a_model_with_the_input_flags(models, tmp_path):
    """Found by a new user's trial: simulate read only pardnn graphs' flags, so an ONNX or Keras model's
    error asked for --batch-size, which simulate then refused. It takes partition's input flags now."""
    out = tmp_path / "p.json"
    flags = ["--dim", "seq=8", "--batch-size", 2]
    assert run("partition", models["gpt"], "--devices", 2, "-o", out, *flags).exit_code == 0
    r = run("simulate", models["gpt"], out, *flags, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["makespan_us"] == pytest.approx(json.loads(out.read_text())["predicted"]["makespan_us"],
                                                                abs=1e-3)
    r = run("simulate", models["gpt"], out)
    assert r.exit_code == EXIT_INPUT and "--batch-size" in r.output


def test_a_placement_of_an_imported_graph_keeps_its_batch_size(models, tmp_path):
    """Found by a new user's trial: a graph imported with --batch-size 2 gave placements without a batch size,
    so `run --batch-size 4` went ahead with another step's placement. The graph file keeps the batch size
    (as TensorFlow's do), the placement takes it, and the run is refused; the same --dim twice with two
    values, or --dim batch=... against --batch-size, is refused too."""
    graph, out = tmp_path / "gpt.json.gz", tmp_path / "p.json"
    flags = ["--dim", "seq=8"]
    assert run("import", models["gpt"], "--batch-size", 2, *flags, "-o", graph).exit_code == 0
    assert run("partition", graph, "--devices", 2, "-o", out).exit_code == 0
    assert json.loads(out.read_text())["batch_size"] == 2
    r = run("run", models["gpt"], out, "--batch-size", 4, *flags)
    assert r.exit_code == EXIT_INPUT and r.stderr.strip() == (
        f"pardnn: error: {out}: the placement was made with --batch-size 2, but this run has --batch-size 4; run "
        "with --batch-size 2, or partition again for the batch you want")
    r = run("info", models["gpt"], "--dim", "batch=2", "--dim", "batch=4", *flags)
    assert r.exit_code == 2 and "Invalid value for --dim: batch is given twice, as 2 and 4" in r.stderr
    r = run("info", models["gpt"], "--batch-size", 8, "--dim", "batch=4", *flags)
    assert r.exit_code == EXIT_INPUT and "--dim batch=4 and --batch-size 8 disagree" in r.stderr
    assert run("info", models["gpt"], "--batch-size", 4, "--dim", "batch=4", *flags, *flags).exit_code == 0
    # a model of fixed batch: --batch-size sizes nothing, and nothing is recorded to refuse a run by (the review
    # found it recorded, and the run then refused with the wrong batch)
    fixed = REPO / "tests" / "data" / "onnx" / "mlp_training"
    assert run("import", fixed, "--batch-size", 4, "-o", graph).exit_code == 0
    assert "batch_size" not in load_graph(graph).meta
    assert run("partition", fixed, "--batch-size", 4, "-k", 2, "-o", out).exit_code == 0
    assert "batch_size" not in json.loads(out.read_text())


def test_cli_run_errors_are_one_line_with_exit_codes(models, tmp_path):
    out = tmp_path / "p.json"
    assert run("partition", models["mlp"], "--devices", 2, "--batch-size", 2, "--method", "m-topo",
               "-o", out).exit_code == 0
    cases = [
        (("run", models["mlp"], out, "--batch-size", 2, "--devices", 1), EXIT_INPUT,
         f"{out}: node '/fc1/Gemm' is placed on device 1 (/device:GPU:1), which is not in the cluster (1 device: "),
        (("run", models["gpt"], out, "--batch-size", 2, "--dim", "seq=4"), EXIT_INPUT, "is not in graph 'gpt'"),
        (("run", models["mlp"], out), EXIT_INPUT, "the placement was made with --batch-size 2, but this run has no "
                                                  "--batch-size; run with --batch-size 2"),
        (("run", models["mlp"], out, "--batch-size", 3), EXIT_INPUT,
         "the placement was made with --batch-size 2, but this run has --batch-size 3"),
        (("run", REPO / "sample_graphs" / "pipedream_gnmt.json.gz", out), EXIT_INPUT,
         "a pardnn.graph holds no model to run; run the model it was imported from"),
    ]
    # Python callers of the backend are held to the same rule as the command line
    from pardnn.errors import InputError
    with pytest.raises(InputError, match="made with --batch-size 2, but this run has --batch-size 3"):
        run_placement(models["mlp"], out, options=FrontendOptions(batch_size=3), steps=1)
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not an onnx model")
    cases.append((("run", junk, out, "--batch-size", 2), EXIT_INPUT, "not a readable ONNX model"))
    for args, code, message in cases:
        r = run(*args)
        assert r.exit_code == code, (args, r.output)
        assert message in r.stderr and r.stderr.strip().count("\n") == 0, r.stderr


def test_cli_import_reports_unresolved_dimension(models, tmp_path):
    r = run("import", models["gpt"], "-o", tmp_path / "g.json", "--batch-size", 2)
    assert r.exit_code == EXIT_INPUT
    assert r.stderr.strip() == (f"pardnn: error: {models['gpt']}: input 'input_ids' dimension 1 ('seq') is dynamic "
                                "and pardnn needs its size: give it with --dim seq=VALUE")


def test_cli_run_training_graph_needs_the_training_build(tmp_path):
    path = REPO / "tests" / "data" / "onnx" / "mlp_training" / "training_model.onnx"
    out = tmp_path / "p.json"
    assert run("partition", path, "--devices", 2, "-o", out).exit_code == 0
    r = run("run", path, out)
    assert r.exit_code == EXIT_DEPENDENCY and "onnxruntime-training" in r.stderr


def test_shipped_samples_import_and_run(tmp_path):
    for name, flags in [("onnx_mlp.onnx", ["--batch-size", 8]),
                        ("onnx_gpt_tiny.onnx", ["--batch-size", 2, "--dim", "seq=32"])]:
        path = REPO / "sample_graphs" / name
        assert path.stat().st_size < 2 * 2**20
        out = tmp_path / f"{name}.placement.json"
        assert run("partition", path, "-k", 2, "-o", out, *flags).exit_code == 0
        r = run("run", path, out, *flags, "--json", "--steps", 1)
        assert r.exit_code == 0 and json.loads(r.stdout)["outputs_match"] is True, r.output


def test_shipped_samples_are_reproducible():
    """sample_graphs/make_onnx_samples.py rebuilds the shipped .onnx files byte for byte."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_onnx_samples", REPO / "sample_graphs" / "make_onnx_samples.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    for name, make in script.SAMPLES.items():
        assert make().SerializeToString() == (REPO / "sample_graphs" / name).read_bytes(), name


def test_import_pardnn_does_not_import_onnx():
    code = ("import sys, pardnn, pardnn.cli, pardnn.backend, pardnn.frontends; "
            "assert 'onnx' not in sys.modules and 'onnxruntime' not in sys.modules, 'onnx imported'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_outputs_that_differ_exit_5(models, tmp_path, monkeypatch):
    """A real mismatch: one stage's session runs a model whose weights were changed."""
    import pardnn.backend.onnx_pipeline as backend

    real = backend.stage_model

    def perturbed(pm, stage, weights):
        m = real(pm, stage, weights)
        if stage.index == 0 and m.graph.initializer:
            t = m.graph.initializer[0]
            arr = onnx.numpy_helper.to_array(t) + 1.0
            m.graph.initializer[0].CopyFrom(onnx.numpy_helper.from_array(arr.astype(np.float32), t.name))
        return m

    monkeypatch.setattr(backend, "stage_model", perturbed)
    out = tmp_path / "p.json"
    assert run("partition", models["mlp"], "-k", 2, "-o", out, "--batch-size", 2).exit_code == 0
    r = run("run", models["mlp"], out, "--batch-size", 2)
    assert r.exit_code == EXIT_RUNTIME and "outputs differ from the whole model's" in r.stderr
    assert "outputs match        NO" in r.stdout
