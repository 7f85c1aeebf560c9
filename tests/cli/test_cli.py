"""The command line: commands, JSON output, exit codes and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path
import os
import socket

import numpy as np
import pytest
from click.testing import CliRunner

from pardnn.cli import cli
from pardnn.errors import EXIT_INFEASIBLE, EXIT_INPUT, EXIT_RUNTIME, EXIT_USAGE
from pardnn.ir import save_graph

from ..helpers import tiny


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.fixture
def graph_file(tmp_path):
    """
    a(10) --> b(5) --> d(1)        a, b, c, d: outputs 1000 B; v holds 4000 B in group "var"
    a     --> c(5) --> d
    v (group var) --> r (group var) --> b
    """
    g = tiny([("v", 1, 0, {"persistent_bytes": 4000, "colocation": "var"}), ("r", 1, 0, {"colocation": "var"}),
              ("a", 10, 1000), ("b", 5, 1000), ("c", 5, 1000), ("d", 1, 1000)],
             [("v", "r"), ("r", "b"), ("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")])
    return save_graph(g, tmp_path / "g.json")


def test_info_table_and_json(graph_file):
    r = run("info", graph_file)
    assert r.exit_code == 0, r.output
    assert "critical path       16.0 us over 3 ops" in r.output   # a -> b -> d (a -> c -> d ties)
    r = run("info", graph_file, "--json")
    d = json.loads(r.stdout)
    assert d["nodes"] == 6 and d["critical_path_us"] == 16.0
    assert d["largest_groups"][0] == {"name": "var", "ops": 2, "persistent_bytes": 4000}
    assert d["single_device_peak_bytes"] == 4000 + 3000
    assert d["batch_size"] is None and d["costs"] is None and "batch size" not in run("info", graph_file).output


def test_info_shows_the_batch_and_the_op_times_a_frontend_recorded(tmp_path, graph_file):
    imported = tmp_path / "imported.json"
    d = json.loads(Path(graph_file).read_text())
    imported.write_text(json.dumps({**d, "batch_size": 4, "costs": "roofline", "device_profile": "a100"}))
    r = run("info", imported)
    assert "batch size          4 (it sized the model" in r.output and "op times            roofline (a100)" in r.output
    j = json.loads(run("info", imported, "--json").stdout)
    assert j["batch_size"] == 4 and j["costs"] == "roofline (a100)"


def test_partition_then_simulate_agree(tmp_path, graph_file):
    out = tmp_path / "p.json"
    r = run("partition", graph_file, "--devices", 2, "--memory", "8KiB", "-o", out, "--place", tmp_path / "p.place")
    assert r.exit_code == 0, r.output
    assert "feasible             yes" in r.stdout
    placement = json.loads(out.read_text())
    assert placement["format"] == "pardnn.placement" and len(placement["assignment"]) == 6
    assert (tmp_path / "p.place").read_text().count("\n") == 6
    r = run("simulate", graph_file, out, "--devices", 2, "--memory", "8KiB", "--json")
    assert r.exit_code == 0, r.output
    sim = json.loads(r.stdout)
    assert sim["makespan_us"] == placement["predicted"]["makespan_us"]
    assert sim["peak_bytes"] == placement["predicted"]["peak_bytes"]
    assert sim["feasible"] is True and len(sim["peak_bytes"]) == 2


def test_simulate_reports_a_placement_that_breaks_memory_then_exits_4(tmp_path, graph_file):
    out = tmp_path / "p.json"
    assert run("partition", graph_file, "--devices", 2, "-o", out).exit_code == 0
    for args in ((), ("--json",)):
        r = run("simulate", graph_file, out, "--devices", 2, "--memory", "64B", *args)
        assert r.exit_code == EXIT_INFEASIBLE, r.output
        if args:
            assert json.loads(r.stdout)["feasible"] is False
        else:
            assert "feasible             NO" in r.stdout and "bytes short" in r.stdout
        assert r.stderr.startswith(f"pardnn: error: {out}: the placement breaks the machine model: device ")
        assert r.stderr.count("\n") == 1 and "bytes short" in r.stderr


def test_simulate_defaults_to_the_placement_devices(tmp_path, graph_file):
    out = tmp_path / "p.json"
    assert run("partition", graph_file, "-k", 3, "-o", out).exit_code == 0
    r = run("simulate", graph_file, out, "--json")
    assert r.exit_code == 0 and len(json.loads(r.stdout)["peak_bytes"]) == 3
    r = run("simulate", graph_file, out, "--devices", 2)
    assert r.exit_code == EXIT_INPUT and "is for 3 devices but the cluster has 2" in r.stderr


def test_simulate_writes_the_timeline_as_chrome_trace_events(tmp_path, graph_file):
    """One complete event per op on its device's track, one per transfer on its link's track, at the simulated
    times; tracks named by metadata events (what Perfetto and chrome://tracing read)."""
    from pardnn.ir import load_graph
    from pardnn.machine import simulate
    from pardnn.placement import load_placement

    out, trace = tmp_path / "p.json", tmp_path / "t.json"
    assert run("partition", graph_file, "-k", 2, "--method", "m-topo", "-o", out).exit_code == 0
    placement = json.loads(out.read_text())
    placement["assignment"] = {"v": 0, "r": 0, "a": 0, "b": 0, "c": 1, "d": 1}    # a -> c and b -> d cross
    out.write_text(json.dumps(placement))
    r = run("simulate", graph_file, out, "--trace", trace)
    assert r.exit_code == 0, r.output
    doc = json.loads(trace.read_text())
    ev = doc["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names == {0: "/device:GPU:0", 1: "/device:GPU:1", 2: "link /device:GPU:0 -> /device:GPU:1"}
    g = load_graph(graph_file)
    s = simulate(g, __import__("pardnn").Cluster.homogeneous(2), load_placement(out, g))
    ops = {e["name"]: e for e in ev if e["ph"] == "X" and e["cat"] != "transfer"}
    assert set(ops) == set(g.names)
    for v, name in enumerate(g.names):
        assert ops[name]["tid"] == int(s.device[v]) and ops[name]["ts"] == s.start_us[v]
        assert ops[name]["ts"] + ops[name]["dur"] == pytest.approx(s.finish_us[v])
        assert ops[name]["args"]["op"] == g.ops[v]
    moved = sorted((e["name"], e["args"]["bytes"], e["tid"]) for e in ev if e["ph"] == "X" and e["cat"] == "transfer")
    assert moved == [("a:0", 1000, 2), ("b:0", 1000, 2)]
    # the trace may not replace an input
    r = run("simulate", graph_file, out, "--trace", out)
    assert r.exit_code == EXIT_INPUT and "refusing to overwrite the input file" in r.stderr
    assert json.loads(out.read_text())["assignment"]["c"] == 1


def test_infeasible_memory_exits_4_with_bytes_short(tmp_path, graph_file):
    r = run("partition", graph_file, "--devices", 2, "--memory", "3000", "-o", tmp_path / "p.json")
    assert r.exit_code == EXIT_INFEASIBLE
    assert r.stderr.strip().count("\n") == 0
    assert "colocation group 'var' alone holds" in r.stderr and "1000 bytes short" in r.stderr
    assert not (tmp_path / "p.json").exists()


@pytest.mark.parametrize("content, message", [
    ("{not json", "invalid JSON at line 1"),
    ('{"format": "pardnn.graph", "nodes": [{"name": "a"}, {"name": "b"}], '
     '"edges": [{"src": "a", "dst": "b"}, {"src": "b", "dst": "a"}]}', "has a cycle through node"),
    ('{"format": "pardnn.graph", "nodes": [{"name": "a"}], "edges": [{"src": "a", "dst": "nope"}]}',
     "unknown destination node 'nope'"),
    ('{"format": "pardnn.graph", "nodes": [{"name": "a", "time_us": -3}], "edges": []}',
     "node 'a': time_us must be a non-negative number"),
])
def test_bad_graphs_exit_3_with_one_line(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    for args in (["info", path], ["partition", path, "-k", 2, "-o", tmp_path / "o.json"]):
        r = run(*args)
        assert r.exit_code == EXIT_INPUT, r.output
        assert message in r.stderr and "bad.json" in r.stderr
        assert r.stderr.startswith("pardnn: error: ") and r.stderr.count("\n") == 1
        assert "Traceback" not in r.output


def test_bad_placements_exit_3(tmp_path, graph_file):
    p = tmp_path / "p.json"
    p.write_text(json.dumps({"format": "pardnn.placement", "version": 1, "devices": ["x", "y"],
                             "assignment": {"a": 0}}))
    r = run("simulate", graph_file, p)
    assert r.exit_code == EXIT_INPUT and "have no device, for example 'v'" in r.stderr
    full = {n: 0 for n in ["v", "r", "a", "b", "c", "d"]}
    full["d"] = 7
    p.write_text(json.dumps({"format": "pardnn.placement", "devices": ["x", "y"], "assignment": full}))
    r = run("simulate", graph_file, p)
    assert r.exit_code == EXIT_INPUT and "node 'd' is on device 7" in r.stderr


def test_usage_errors_exit_2(tmp_path, graph_file):
    assert run("partition", graph_file).exit_code == EXIT_USAGE                      # no -o
    r = run("partition", graph_file, "-k", 2, "--memory", "lots", "-o", tmp_path / "o.json")
    assert r.exit_code == EXIT_USAGE and "cannot read 'lots' as a size" in r.output
    r = run("partition", graph_file, "-k", 2, "--memory", "1,2,3", "-o", tmp_path / "o.json")
    assert r.exit_code == EXIT_USAGE and "gives 3 values for 2 devices" in r.output
    # every flag of the cluster is named (the rate and the latency were not: found by a new user's trial)
    for flag, value, message in (("--bandwidth", "-5GB/s", "cannot read '-5GB/s' as a rate"),
                                 ("--bandwidth", "0", "must be positive, got '0'"),
                                 ("--latency", "-1us", "cannot read '-1us' as a duration"),
                                 ("--latency", "1e999", "must be a finite duration, got '1e999'"),
                                 ("--bandwidth", "1e400", "must be a finite rate, got '1e400'"),
                                 ("--speed", "1e400", "must be a finite positive number, got inf"),
                                 ("--speed", "0", "must be a positive number, got 0"),
                                 ("--latency", "3parsecs", "unknown time unit 'parsecs'")):
        r = run("partition", graph_file, "-k", 2, flag, value, "-o", tmp_path / "o.json")
        assert r.exit_code == EXIT_USAGE and f"Invalid value for {flag}: {message}" in r.output, r.output
    assert not (tmp_path / "o.json").exists()


def test_never_overwrites_the_input(graph_file):
    before = graph_file.read_bytes()
    r = run("partition", graph_file, "-k", 2, "-o", graph_file)
    assert r.exit_code == EXIT_INPUT and "refusing to overwrite the input" in r.stderr
    assert graph_file.read_bytes() == before


def test_cluster_file_and_heterogeneous_flags(tmp_path, graph_file):
    cfile = tmp_path / "c.json"
    cfile.write_text(json.dumps({"format": "pardnn.cluster", "version": 1, "latency_us": 5,
                                 "bandwidth_bytes_per_us": 1000,
                                 "devices": [{"name": "/device:CPU:0", "memory_bytes": 10000},
                                             {"name": "/device:CPU:1", "memory_bytes": 10000, "speed": 2}]}))
    r = run("partition", graph_file, "--cluster", cfile, "-o", tmp_path / "p.json", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["devices"] == ["/device:CPU:0", "/device:CPU:1"]
    r = run("partition", graph_file, "-k", 2, "--speed", "1,2", "--memory", "8KiB,16KiB", "-o", tmp_path / "q.json")
    assert r.exit_code == 0, r.output
    r = run("partition", graph_file, "--cluster", cfile, "-k", 2, "-o", tmp_path / "q.json")
    assert r.exit_code == EXIT_USAGE


def test_import_peer_format(tmp_path):
    path = tmp_path / "graph.txt"
    path.write_text("node1 -- Input -- forward_compute_time=1.0, backward_compute_time=0.000, "
                    "activation_size=100.000, parameter_size=0.000\n"
                    "node2 -- Linear(2, 2) -- forward_compute_time=2.0, backward_compute_time=3.0, "
                    "activation_size=100.000, parameter_size=16.000\n\tnode1 -- node2")
    out = tmp_path / "g.json.gz"
    r = run("import", path, "-o", out)
    assert r.exit_code == 0, r.output
    r = run("info", out, "--json")
    assert json.loads(r.stdout)["nodes"] == 3


def test_help_lists_exit_codes():
    r = run("--help")
    assert "Exit codes:" in r.output and "4  infeasible" in r.output


def test_verbose_logs_stage_timings_and_quiet_silences(tmp_path, graph_file):
    r = run("-v", "partition", graph_file, "-k", 2, "-o", tmp_path / "p.json")
    assert r.exit_code == 0
    assert "pardnn: reading" in r.stderr and "placing 6 ops with pardnn:" in r.stderr
    r = run("-q", "partition", graph_file, "-k", 2, "-o", tmp_path / "p.json")
    assert r.exit_code == 0 and r.stderr == ""


def test_an_empty_graph_is_placed_with_a_warning(tmp_path, graph_file):
    """A graph of no ops is valid (every figure 0), but likely not what was meant: a warning says so, on
    every command that reads it; -q leaves it out; a graph with ops gets none."""
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"format": "pardnn.graph", "version": 1, "name": "empty", "nodes": [], "edges": []}))
    for args in (["partition", empty, "-k", 2, "-o", tmp_path / "p.json"], ["info", empty]):
        r = run(*args)
        assert r.exit_code == 0, r.output
        assert r.stderr == f"pardnn: {empty}: the graph has no ops\n"
    assert json.loads((tmp_path / "p.json").read_text())["assignment"] == {}
    assert run("-q", "info", empty).stderr == ""
    assert "no ops" not in run("info", graph_file).stderr
    # its report, and one of a graph whose only op takes no time: every figure 0, a speedup of 1 (it crashed)
    r = run("report", empty, tmp_path / "p.json", "-o", tmp_path / "r.html")
    assert r.exit_code == 0, r.output
    zero = tmp_path / "zero.json"
    zero.write_text(json.dumps({"format": "pardnn.graph", "version": 1, "name": "zero",
                                "nodes": [{"name": "a", "op": "NoOp"}], "edges": []}))
    r = run("-q", "partition", zero, "-k", 2, "-o", tmp_path / "pz.json", "--report", tmp_path / "rz.html")
    assert r.exit_code == 0, r.output
    for page in ("r.html", "rz.html"):
        assert 'data-key="speedup" data-value="1.0">1.00x' in (tmp_path / page).read_text()


def test_flags_that_size_or_cost_a_model_are_named_on_a_graph_file(tmp_path, graph_file):
    """A pardnn.graph's shapes and op times are fixed: --batch-size, --dim and --profile were ignored without a
    word there (a review). They are named in a warning; a --batch-size other than the one the graph was
    imported with is refused, and the same one says nothing."""
    r = run("-q", "partition", graph_file, "-k", 2, "--batch-size", 8, "--dim", "seq=4", "-o", tmp_path / "p.json")
    assert r.exit_code == 0, r.output
    assert r.stderr == ""          # -q: no warnings
    r = run("partition", graph_file, "-k", 2, "--batch-size", 8, "--dim", "seq=4", "-o", tmp_path / "p.json")
    assert r.exit_code == 0 and r.stderr.startswith(f"pardnn: {graph_file}: --batch-size, --dim are ignored: a "
                                                    "pardnn.graph is read as it is"), r.stderr
    assert "ignored" not in run("partition", graph_file, "-k", 2, "-o", tmp_path / "p.json").stderr
    imported = tmp_path / "b4.json"
    d = json.loads(Path(graph_file).read_text())
    imported.write_text(json.dumps({**d, "batch_size": 4}))
    r = run("partition", imported, "-k", 2, "--batch-size", 8, "-o", tmp_path / "q.json")
    assert r.exit_code == EXIT_INPUT and not (tmp_path / "q.json").exists()
    assert r.stderr == (f"pardnn: error: {imported}: the graph was imported with --batch-size 4, and its shapes are "
                        "fixed: --batch-size 8 cannot resize it (import the model again with --batch-size 8)\n")
    r = run("partition", imported, "-k", 2, "--batch-size", 4, "-o", tmp_path / "q.json")
    assert r.exit_code == 0 and "ignored" not in r.stderr
    assert json.loads((tmp_path / "q.json").read_text())["batch_size"] == 4
    # the same for an ONNX graph's --dim (a second review: the same one was called ignored, another one taken)
    imported.write_text(json.dumps({**d, "dims": {"seq": 32}}))
    r = run("info", imported, "--dim", "seq=32")
    assert r.exit_code == 0 and "ignored" not in r.stderr and f"next: pardnn plan {imported} --memory" in r.output
    r = run("partition", imported, "-k", 2, "--dim", "seq=64", "-o", tmp_path / "q.json")
    assert r.exit_code == EXIT_INPUT and "imported with --dim seq=32, and its shapes are fixed: --dim seq=64 " \
        "cannot resize it" in r.stderr, r.stderr
    r = run("info", imported, "--dim", "len=3")      # a dimension the graph never had: ignored, as said
    assert r.exit_code == 0 and "--dim is ignored" in r.stderr
    r = run("import", imported, "--name", "renamed", "-o", tmp_path / "renamed.json")
    assert r.stderr == f"pardnn: {imported}: --name is ignored: a pardnn.graph keeps the name it was made with " \
        f"('{d['name']}')\n", r.stderr


def test_refine_evals_bounds_the_refinement(tmp_path):
    """--refine-evals 0 skips refinement; a budget lets it run, and it never makes the step slower."""
    from ..conftest import SAMPLES

    sample = SAMPLES / "pipedream_gnmt.json.gz"
    times = {}
    for evals in (0, 50):
        r = run("partition", sample, "-k", 4, "--refine-evals", evals, "--time-passes", "--json",
                "-o", tmp_path / f"p{evals}.json")
        assert r.exit_code == 0, r.output
        passes = [line.split()[0] for line in r.stderr.splitlines() if line[:1].isalpha()]
        assert ("refine" in passes) == (evals > 0), r.stderr
        times[evals] = json.loads(r.stdout)["makespan_us"]
    assert times[50] <= times[0]
    assert run("partition", sample, "-k", 4, "--refine-evals", -1, "-o", tmp_path / "x.json").exit_code == EXIT_USAGE


def test_time_passes_prints_the_passes_also_when_nothing_fits(tmp_path):
    """The passes ran before the placement was found not to fit: their times come before the one-line error."""
    from ..conftest import SAMPLES

    r = run("partition", SAMPLES / "pardnn_vgg16.json.gz", "-k", 2, "-m", "1.2GiB", "--no-capacity-search",
            "--time-passes", "-o", tmp_path / "p.json")
    assert r.exit_code == EXIT_INFEASIBLE
    lines = r.stderr.splitlines()
    passes = [line.split()[0] for line in lines if line[:1].isalpha()]
    assert passes[:3] == ["pass", "slice", "map"] and "total" in passes, r.stderr
    # naming the graph's file (a SPEC trial: the message named none, as SPEC §5 asks)
    assert lines[-1].startswith(f"pardnn: error: {SAMPLES / 'pardnn_vgg16.json.gz'}: pardnn found no placement "
                                "within memory"), lines[-1]
    assert not (tmp_path / "p.json").exists()
    g = tiny([("a", 1, 0, {"persistent_bytes": 600, "colocation": "g"}), ("b", 1, 0, {"persistent_bytes": 400,
                                                                                    "colocation": "g"})], [])
    r = run("partition", save_graph(g, tmp_path / "two.json"), "-k", 2, "--memory", 500, "-o", tmp_path / "x.json")
    assert r.exit_code == EXIT_INFEASIBLE and r.stderr.startswith(
        f"pardnn: error: {tmp_path / 'two.json'}: no feasible placement exists: colocation group 'g'"), r.stderr


def test_run_trace_is_for_tensorflow_models_only(tmp_path):
    """The measured timeline comes from TensorFlow's step stats; an ONNX run refuses --trace before running."""
    from ..conftest import SAMPLES
    r = run("run", SAMPLES / "onnx_gpt_tiny.onnx", tmp_path / "p.json", "--trace", tmp_path / "t.json")
    assert r.exit_code == EXIT_USAGE and "--trace applies to TensorFlow models only" in r.stderr
    assert not (tmp_path / "t.json").exists()


@pytest.mark.parametrize("args,msg", [
    (["--pin"], "--pin applies to --local-cluster only"),
    (["--local-cluster", "2", "--cores-per-task", "1"], "--cores-per-task needs --pin"),
    (["--local-cluster", "2", "--cluster-spec", "c.json"], "either --local-cluster or --cluster-spec"),
    (["--sizes", "1MiB,1MiB"], "at least two different sizes"),
    (["--sizes", "1MiB,lots"], "--sizes"),
    (["--memory", "lots"], "--memory"),
])
def test_calibrate_usage_errors(tmp_path, args, msg):
    r = run("calibrate", "-o", tmp_path / "c.json", *args)
    assert r.exit_code == EXIT_USAGE and msg in r.stderr and not (tmp_path / "c.json").exists()


@pytest.mark.tf
def test_calibrate_on_gpus_this_host_lacks_says_so(tmp_path):
    pytest.importorskip("tensorflow")
    import subprocess
    import sys
    code = "import tensorflow as tf, sys; sys.exit(len(tf.config.list_physical_devices('GPU')) >= 2)"
    if subprocess.run([sys.executable, "-c", code], capture_output=True).returncode:
        pytest.skip("this host has GPUs")
    cmd = [sys.executable, "-c", "from pardnn.cli import main; main()", "-q", "calibrate", "--device-kind", "gpu",
           "-k", "2", "-o", str(tmp_path / "c.json")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == EXIT_INPUT, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith("pardnn: error: --device-kind gpu with 2 devices needs 2 "
                                                           "GPUs, but this host has")
    assert not (tmp_path / "c.json").exists()


def test_calibrate_never_writes_over_its_cluster_spec(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text('{"worker": ["127.0.0.1:1"]}')
    r = run("calibrate", "--cluster-spec", spec, "-o", spec)
    assert r.exit_code == EXIT_INPUT and "refusing to overwrite the input file" in r.stderr
    assert spec.read_text() == '{"worker": ["127.0.0.1:1"]}'


def test_a_pardnn_graph_keeps_the_batch_size_it_was_imported_with(tmp_path):
    """--batch-size changes nothing in a pardnn.graph, so the placement does not claim it (pardnn run checks it)."""
    from ..conftest import SAMPLES
    out = tmp_path / "p.json"
    assert run("partition", SAMPLES / "tf_resnet14.json.gz", "-k", 2, "--batch-size", 4, "--method", "m-topo",
               "-o", out).exit_code == 0
    from pardnn.ir import load_graph
    assert json.loads(out.read_text()).get("batch_size") == load_graph(SAMPLES / "tf_resnet14.json.gz").meta.get(
        "batch_size")


def test_the_run_table_prints_a_measured_peak_without_a_ratio():
    from pardnn.cli.run import _memory_lines
    m = {"predicted_single_device_peak_bytes": 0, "reference_peak_bytes": {"CPU:0": 1 << 20},
         "measured_over_predicted": None, "measured_peak_bytes": None, "note": "", "shared_allocator": True,
         "predicted_peak_bytes": [0]}
    assert _memory_lines(m) == ["peak memory, 1 dev   predicted 0 B, measured 1.00 MiB (TensorFlow's allocator)"]


def test_serve_says_why_it_cannot_serve_before_tensorflow_loads(tmp_path):
    """A busy port (also under another spelling of the host), two tasks at one address and cores this process
    may not use are each one line, before TensorFlow loads (these run without it); a busy port used to say
    only that the server did not start (found by a new user's trial, with the rest)."""
    spec = tmp_path / "spec.json"

    def serve(tasks, *flags):
        spec.write_text(json.dumps({"worker": tasks}))
        return run("serve", "--cluster-spec", spec, "--task", 0, *flags)

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = serve([f"127.0.0.1:{port}"])
        other = serve([f"localhost:{port}"])
    assert r.exit_code == EXIT_RUNTIME and r.stderr.strip() == (
        f"pardnn: error: task 0 cannot serve at 127.0.0.1:{port}: port {port} is in use (another server, or a task "
        "started twice?)")
    assert other.exit_code == EXIT_RUNTIME and f"port {port} is in use" in other.stderr
    r = serve(["127.0.0.1:2222", "127.0.0.1:2222"])
    assert r.exit_code == EXIT_INPUT and "tasks 0 and 1 of job 'worker' are both at 127.0.0.1:2222" in r.stderr
    top = max(os.sched_getaffinity(0))
    r = serve(["127.0.0.1:2222"], "--cores", f"0-{top + 1}")
    assert r.exit_code == EXIT_USAGE and f"Invalid value for --cores: core {top + 1} is not one this process may use" \
        in r.stderr
    for cores in ("0,,1", "0,", "\u0661", "1-0"):     # read as 0,1; 0; core 1 (an Arabic-Indic one); refused
        r = serve(["127.0.0.1:2222"], "--cores", cores)
        assert r.exit_code == EXIT_USAGE and f"Invalid value for --cores: cores {cores!r}: expected a list such as " \
            "0,2-3" in r.stderr, cores
    # a range past any machine's is refused before it is made (a review: 0-9999999999 ran out of memory)
    r = serve(["127.0.0.1:2222"], "--cores", "0-9999999999")
    assert r.exit_code == EXIT_USAGE and "core 9999999999 is past any machine's (at most 65535)" in r.stderr


def test_bench_refuses_a_run_with_no_case_and_a_count_of_zero(tmp_path):
    """A second new user's trial: `bench --max-nodes 10` ran nothing, exited 0 and replaced the last run's
    tables with empty ones beside its old plot; `--k 0` was exit 3. Both are usage errors, nothing written."""
    out = tmp_path / "bench-out"
    r = run("bench", "--suite", "samples", "--max-nodes", 10, "--no-scaling", "-o", out)
    assert r.exit_code == EXIT_USAGE and "Invalid value for --max-nodes: no graph of the 'samples' suite has at " \
        "most 10 ops" in r.stderr
    r = run("bench", "--suite", "samples", "--k", "2,0", "-o", out)
    assert r.exit_code == EXIT_USAGE and "Invalid value for --k: device counts are at least 1" in r.stderr
    assert not out.exists()


def test_the_summary_counts_the_violations_it_does_not_list(tmp_path):
    """A review: `simulate` of 25 ops on 25 devices of 100 bytes listed 10 violations and dropped the other 15
    without a word (the HTML page said how many it left out)."""
    from pardnn.placement import Placement, save_placement
    g = tiny([(f"n{i}", 1, 1000) for i in range(25)], [])
    graph = save_graph(g, tmp_path / "g.json")
    place = save_placement(Placement(np.arange(25), tuple(f"/device:GPU:{i}" for i in range(25))), g,
                           tmp_path / "p.json")
    r = run("simulate", graph, place, "-k", 25, "--memory", 100)
    assert r.exit_code == EXIT_INFEASIBLE
    listed = [line for line in r.stdout.splitlines() if line.startswith("  - device ")]
    assert len(listed) == 10 and "  ... and 15 more, 25 in all (simulate --json lists them" in r.stdout, r.stdout
    assert len(json.loads(run("simulate", graph, place, "-k", 25, "--memory", 100, "--json").stdout)
               ["violations"]) == 25


def test_simulate_names_the_placements_devices_unless_told_otherwise(tmp_path, graph_file):
    """A SPEC trial: docs/running.md says simulate's cluster defaults to "the placement's devices", but a
    placement of /job:worker/... devices was simulated (and shown) on /device:GPU:0 and 1; `--device-prefix`
    beside `--cluster` was ignored without a word."""
    out = tmp_path / "p.json"
    assert run("partition", graph_file, "-k", 2, "--device-prefix", "/job:worker/task:", "-o", out).exit_code == 0
    d = json.loads(run("simulate", graph_file, out, "--json").stdout)
    assert d["devices"] == ["/job:worker/task:0", "/job:worker/task:1"], d["devices"]
    d = json.loads(run("simulate", graph_file, out, "--json", "--device-prefix", "/device:CPU:").stdout)
    assert d["devices"] == ["/device:CPU:0", "/device:CPU:1"]
    cluster = tmp_path / "c.json"
    cluster.write_text(json.dumps({"format": "pardnn.cluster", "version": 1,
                                   "devices": [{"name": "a"}, {"name": "b"}]}))
    r = run("simulate", graph_file, out, "--cluster", cluster, "--device-prefix", "/device:CPU:")
    assert r.exit_code == EXIT_USAGE and "--cluster cannot be combined with" in r.output


def test_the_placements_names_and_the_flags_agree_across_commands(tmp_path, graph_file):
    """A review: `report --device-prefix` kept the placement's names (simulate took the prefix); `--cluster` with
    `--device-prefix` was refused only after the graph was read; `partition --allow-infeasible` of a plan that
    does not fit named no file."""
    out = tmp_path / "p.json"
    assert run("partition", graph_file, "-k", 2, "--device-prefix", "/job:w/task:", "-o", out).exit_code == 0
    page = tmp_path / "r.html"
    pytest.importorskip("matplotlib")
    assert run("report", graph_file, out, "--device-prefix", "/device:CPU:", "-o", page).exit_code == 0
    html = page.read_text()
    assert "/device:CPU:1" in html and "/job:w/task:1" not in html
    assert run("report", graph_file, out, "-o", page).exit_code == 0 and "/job:w/task:1" in page.read_text()
    missing = tmp_path / "no-such-graph.json"       # refused before the graph is read: no "no such file"
    r = run("simulate", missing, out, "--cluster", tmp_path / "c.json", "--device-prefix", "x")
    assert r.exit_code == EXIT_USAGE and "--cluster cannot be combined with" in r.output and "no such" not in r.output
    bad = tmp_path / "bad.json"
    r = run("partition", graph_file, "-k", 2, "--memory", 1500, "--allow-infeasible", "-o", bad)
    assert r.exit_code == EXIT_INFEASIBLE and f"pardnn: error: {bad}: the placement written breaks" in r.stderr
