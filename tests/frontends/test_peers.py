"""Peer-format importers: parsing on real excerpts (always) and the real files (when present).

Expected counts and values come from ../shared/data/README.md, which was
counted on the files, or are recomputed here from the raw files.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from pardnn.errors import InputError
from pardnn.frontends.common import robust_average
from pardnn.frontends.peers.msr import load_msr
from pardnn.frontends.peers.pardnn_text import (load_pardnn_dot, parse_dot, parse_durations, parse_sizes,
                                                timeline_op_times)
from pardnn.frontends import detect_format, load_input
from pardnn.frontends.peers.pipedream import load_pipedream, parse_pipedream

# ---------------------------------------------------------------------------
# Excerpts (real lines quoted in the data README)
# ---------------------------------------------------------------------------

PIPEDREAM_EXCERPT = (
    "node1 -- Input -- forward_compute_time=635.902, backward_compute_time=0.000, "
    "activation_size=154140672.000, parameter_size=0.000\n"
    "node7 -- LSTM(2048, 1024) -- forward_compute_time=3.190, backward_compute_time=5.348, "
    "activation_size=[6291456.0; 131072.0; 131072.0], parameter_size=50364416.000\n"
    "node11 -- MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False) -- "
    "forward_compute_time=2.211, backward_compute_time=2.788, activation_size=205520896.000, parameter_size=0.000\n"
    "\tnode1 -- node7\n\tnode7 -- node11")


def test_pipedream_training_graph_from_an_excerpt(tmp_path):
    """
    node1 (Input) --> node7 (LSTM) --> node11 (MaxPool)
    backward: node11/grad --> node7/grad   (no grad for the input)
    """
    path = tmp_path / "graph.txt"
    path.write_text(PIPEDREAM_EXCERPT)
    g = load_pipedream(path)
    assert g.names == ("node1", "node7", "node11", "node11/grad", "node7/grad")
    t = dict(zip(g.names, g.time_us.tolist()))
    assert t["node1"] == 0.0                       # data loading is not compute
    assert g.node_extra[0]["data_loading_us"] == pytest.approx(635902.0)
    assert t["node7"] == pytest.approx(3190.0) and t["node7/grad"] == pytest.approx(5348.0)
    assert g.output_bytes_of(g.id("node7")) == [6291456, 131072, 131072]
    assert g.persistent_bytes[g.id("node7")] == 50364416
    assert g.colocation[g.id("node7")] == g.colocation[g.id("node7/grad")] >= 0
    edges = {(g.names[s], g.names[d]): int(b) for s, d, b in zip(g.edge_src, g.edge_dst, g.edge_bytes)}
    assert edges[("node7", "node11")] == 6291456             # the first activation
    assert edges[("node11/grad", "node7/grad")] == 6291456   # gradient flows back
    assert edges[("node7", "node11/grad")] == 6291456        # stashed input activation
    assert edges[("node11", "node11/grad")] == 205520896     # the last layer seeds backward


def test_pipedream_bad_line(tmp_path):
    path = tmp_path / "graph.txt"
    path.write_text("node1 -- Input -- forward_compute_time=1\n")
    with pytest.raises(InputError, match="graph.txt:1: layer 'node1': missing or bad metric"):
        parse_pipedream(path.read_text(), str(path))


def test_msr_excerpt(tmp_path):
    d = {"maxSizePerFPGA": 17185374208.0, "maxFPGAs": 6, "maxCPUs": 1, "nodes": [
        {"name": "node77", "id": 77, "supportedOnFpga": 1, "cpuLatency": 12.36, "fpgaLatency": 1.236,
         "isBackwardNode": 0, "colorClass": 77, "size": 205524992.0},
        {"name": "node77grad", "id": 178, "supportedOnFpga": 1, "cpuLatency": 14.42, "fpgaLatency": 1.442,
         "isBackwardNode": 1, "colorClass": 77, "size": 205524992.0},
        {"name": "node78", "id": 78, "supportedOnFpga": 1, "cpuLatency": 1.0, "fpgaLatency": 0.1,
         "isBackwardNode": 0, "colorClass": 78, "size": 4096.0}],
        "edges": [{"sourceId": 77, "destId": 78, "cost": 0.095703125, "size": 205520896.0},
                  {"sourceId": 78, "destId": 178, "cost": 0.0, "size": 0.0}]}
    path = tmp_path / "resnet.json"
    path.write_text(json.dumps(d))
    assert detect_format(path) == "msr"
    g = load_msr(path)
    assert g.names == ("node77", "node78", "node77grad")     # topological order
    assert g.time_us[g.id("node77")] == pytest.approx(1236.0)
    assert g.persistent_bytes[g.id("node77grad")] == 205524992
    assert g.group_names == ("color:77",)
    assert g.edge_bytes.tolist() == [205520896, 0]
    assert g.meta["msr_problem"]["maxFPGAs"] == 6


def test_dot_line_variants():
    text = """digraph {
\t"a/b" [label="a/b"]
\t"a/b":1 -> "c"
\t"^a/b" -> "c";
x->y
"p" -> "q" [weight="4"];
}"""
    names, edges = parse_dot(text)
    assert names == ["a/b", "c", "x", "y", "p", "q"]
    assert edges == [("a/b", "c", 1, False), ("a/b", "c", 0, True), ("x", "y", 0, False), ("p", "q", 0, False)]


def test_dot_statements_that_are_no_nodes_are_skipped_and_garbage_is_an_error():
    """Found by a bad-input trial: every line starting with 'graph' was skipped (the edge ``graph_x -> y``
    too), ``rankdir=LR`` and ``node [shape=box]`` became nodes of those names, and ``$$$`` was a node."""
    names, edges = parse_dot('strict digraph "a b" {\nnode [shape=box];\nrankdir=LR\ngraph_x -> y\n'
                             '/* note */\nedge [color=red]\n}\n')
    assert names == ["graph_x", "y"] and edges == [("graph_x", "y", 0, False)]
    assert parse_dot("digraph{\n0[weight=\"0\"];\n0->1\n}")[0] == ["0", "1"]      # ParDNN's own DAGP files
    for line, said in (("$$$", "cannot read a node name from '$$$'"), ("a -> b -> c", "from 'b -> c'"),
                       ("[w=1]", "attributes without a node"), ("a b", "from 'a b'")):
        with pytest.raises(InputError, match=r"g\.dot:2: .*" + re.escape(said)):
            parse_dot(f"x -> y\n{line}\n", "g.dot")


def test_size_and_duration_tables():
    sizes, skipped = parse_sizes('"conv1_1/Conv2D": 12845056,\n"conv5_1/bias/Adam/Assign": 2048,\n"x":: -1')
    assert sizes == {"conv1_1/Conv2D": 12845056, "conv5_1/bias/Adam/Assign": 2048, "x": -1} and skipped == 0
    with pytest.raises(InputError, match="t.txt:1: expected"):
        parse_sizes("this is\nnot\na\nsize\ntable\n", "t.txt")
    d = parse_durations("resnet_model/conv2d_2/conv2d::1148\n/job:x/device:gpu:0 compute::1\nA::2.5")
    assert d["resnet_model/conv2d_2/conv2d"] == 1148 and d["a"] == 2.5


def test_timeline_prefers_gpu_kernels_over_host_time():
    trace = {"traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/device:GPU:0/stream:all Compute"}},
        {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "/job:localhost/replica:0/task:0/device:GPU:0 Compute"}},
        {"ph": "M", "name": "process_name", "pid": 3, "args": {"name": "/device:GPU:0/stream:46 Compute"}},
        {"ph": "X", "pid": 1, "dur": 100, "args": {"name": "conv", "op": "Conv2D"}},
        {"ph": "X", "pid": 1, "dur": 20, "args": {"name": "conv", "op": "Conv2D"}},
        {"ph": "X", "pid": 3, "dur": 100, "args": {"name": "conv", "op": "Conv2D"}},
        {"ph": "X", "pid": 2, "dur": 7, "args": {"name": "conv", "op": "Conv2D"}},
        {"ph": "X", "pid": 2, "dur": 3, "args": {"name": "shape", "op": "Shape"}}]}
    times, types = timeline_op_times(trace)
    assert times == {"conv": 120.0, "shape": 3.0}
    assert types == {"conv": "Conv2D", "shape": "Shape"}


def test_robust_average_is_parddns_rule():
    assert robust_average([1, 2, 3, 4, 5, 6, 100]) == pytest.approx((4 + 4) / 2)
    assert robust_average([3.0]) == 3.0


# ---------------------------------------------------------------------------
# The real files
# ---------------------------------------------------------------------------

PIPEDREAM = {  # model: (layers, input layers, sum forward ms excl. input, sum backward ms)
    "alexnet": (23, 1, 44.80, 40.52), "vgg16": (41, 1, 233.90, 438.63), "resnet50": (177, 1, 182.49, 260.93),
    "gnmt": (48, 3, 33.53, 55.88), "nasnetalarge": (1251, 1, 409.09, 249.21), "densenet121": (429, 1, 177.40, 148.75),
}


@pytest.mark.parametrize("model", sorted(PIPEDREAM))
def test_pipedream_real_files(data_dir, model):
    layers, inputs, fwd_ms, bwd_ms = PIPEDREAM[model]
    g = load_pipedream(data_dir / "pipedream" / model / "graph.txt")
    phase = np.array([x["phase"] for x in g.node_extra])
    assert g.num_nodes == 2 * layers - inputs
    assert g.time_us[phase == "forward"].sum() / 1000 == pytest.approx(fwd_ms, abs=0.01)
    assert g.time_us[phase == "backward"].sum() / 1000 == pytest.approx(bwd_ms, abs=0.01)


def test_every_pipedream_file_imports(data_dir):
    files = sorted((data_dir / "pipedream").glob("*/graph*.txt"))
    assert len(files) == 15
    for f in files:
        assert detect_format(f) == "pipedream"
        assert load_input(f).num_nodes > 0


MSR = {  # file: (nodes, edges, backward nodes)
    "throughput-inputs/OperatorGraphs/bert_L-12_training.json": (2012, 2751, 1229),
    "throughput-inputs/OperatorGraphs/resnet50_training.json": (1243, 1806, 639),
    "throughput-inputs/LayerGraphs/gnmt_training.json": (192, 244, 96),
    "latency-inputs/LayerGraphs/inceptionv3_inference.json": (326, 363, 0),
}


@pytest.mark.parametrize("rel", sorted(MSR))
def test_msr_real_files(data_dir, rel):
    nodes, edges, backward = MSR[rel]
    g = load_msr(data_dir / "msr" / rel)
    assert (g.num_nodes, g.num_edges) == (nodes, edges)
    assert sum(1 for x in g.node_extra if x["phase"] == "backward") == backward


def test_every_msr_file_imports(data_dir):
    files = sorted((data_dir / "msr").glob("*-inputs/*/*.json"))
    assert len(files) == 24
    for f in files:
        g = load_input(f)
        raw = json.loads(f.read_text())
        assert g.num_nodes == len(raw["nodes"])
        # hand check: time_us is fpgaLatency in ms x 1000, size is persistent
        first = raw["nodes"][0]
        v = g.id(first["name"]) if first["name"] in g.index else g.id(f"{first['name']}#{first['id']}")
        assert g.time_us[v] == pytest.approx(first["fpgaLatency"] * 1000)
        assert g.persistent_bytes[v] == int(first["size"])


def test_msr_layer_times_equal_pipedream_ms(data_dir):
    """The README's cross-check: msr resnet50 node77 is PipeDream's node77 forward time, 1.236 ms."""
    g = load_msr(data_dir / "msr/throughput-inputs/LayerGraphs/resnet50_training.json")
    assert g.time_us[g.id("node77")] == pytest.approx(1236.0)
    assert g.time_us[g.id("node77grad")] == pytest.approx(1442.0)


def test_pardnn_vgg_whole_graph_and_profile(data_dir):
    vgg = data_dir / "pardnn_v1" / "vgg"
    g = load_pardnn_dot(vgg / "vgg_dot.dot", keep_unexecuted=True)
    assert (g.num_nodes, g.num_edges) == (1098, 1872)
    # sizes: conv1_1/Conv2D = 224 x 224 x 64 x 4
    assert g.output_bytes_of(g.id("conv1_1/Conv2D")) == [12845056]
    # durations: recompute one op's kernel time from both timelines by hand
    per_step = []
    for f in sorted((vgg / "profs").glob("*.json")):
        trace = json.loads(f.read_text())
        rows = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M"}
        per_step.append(sum(e["dur"] for e in trace["traceEvents"] if e["ph"] == "X"
                            and rows[e["pid"]].endswith("stream:all Compute")
                            and e["args"]["name"] == "gradients/conv1_2/Conv2D_grad/Conv2DBackpropFilter"))
    v = g.id("gradients/conv1_2/Conv2D_grad/Conv2DBackpropFilter")
    assert g.time_us[v] == pytest.approx(np.median(per_step))
    assert per_step[0] >= 104259   # the README's largest kernel
    # variables: Adam slots and the weights share one group, holding 3 x the weights
    grp = g.colocation[g.id("conv1_1/weights")]
    assert grp >= 0 and g.colocation[g.id("conv1_1/weights/Adam")] == grp
    assert g.colocation[g.id("Adam/update_conv1_1/weights/ApplyAdam")] == grp
    assert g.persistent_bytes[g.groups[grp]].sum() == 3 * 3 * 3 * 3 * 64 * 4


def test_pardnn_step_pruning_drops_initialisers(data_dir):
    g = load_pardnn_dot(data_dir / "pardnn_v1/vgg/vgg_dot.dot")
    assert g.meta["pruned_nodes"] == 1098 - g.num_nodes > 0
    assert "fc6/weights/Initializer/random_uniform" not in g.index
    assert "Adam/update_fc6/weights/ApplyAdam" in g.index


def test_pardnn_resnet_duration_table(data_dir):
    g = load_pardnn_dot(data_dir / "pardnn_v1/resnet/resnet.dot", keep_unexecuted=True)
    assert (g.num_nodes, g.num_edges) == (6092, 10593)
    assert g.time_us[g.id("resnet_model/conv2d_2/Conv2D")] == 1148   # table: lowercase name, 1148 us
    unprofiled = [v for v, x in enumerate(g.node_extra) if x and x.get("profiled") is False]
    assert len(unprofiled) == 6092 - 1504    # the README: 1,504 table names match graph nodes
    assert set(g.time_us[unprofiled].tolist()) == {1.0}     # ParDNN's rule for missing profiles


def test_pardnn_nmt_cuts_loop_back_edges(data_dir):
    g = load_pardnn_dot(data_dir / "pardnn_v1/nmt/nmt_A_dot.dot", keep_unexecuted=True)
    assert g.num_nodes == 2187 and g.meta["cut_back_edges"] == 42
    assert int(g.edge_control.sum()) == 548


def test_pardnn_inception_subgraph(data_dir):
    g = load_pardnn_dot(data_dir / "pardnn_v1/inception/sub_20_1799/20_1799.dot.gz", keep_unexecuted=True)
    assert (g.num_nodes, g.num_edges) == (8507, 10425)
    assert g.meta["skipped_size_lines"] == 1
    # the README: 5,645 names match the batch-32 table, summing to 420,222 us; the rest get 1 us
    assert g.time_us.sum() == pytest.approx(420222 + 1.0 * (8507 - 5645), rel=1e-6)
