"""What a fuzzing trial of the readers found (round 31): each was an internal error (exit 1), an input
overwritten, or a file of another form than asked. Each case runs the real command line in a fresh
interpreter and checks the error contract: the documented exit code, one line naming the file, nothing
written, the inputs unchanged."""

from __future__ import annotations

import gzip
import json

import pytest

from pardnn.errors import EXIT_INFEASIBLE, EXIT_INPUT, EXIT_OUTPUT

from ..conftest import SAMPLES
from .test_errors import assert_one_line_error, graph_json, pardnn, snapshot


@pytest.fixture
def work(tmp_path):
    (tmp_path / "g.json").write_text(graph_json([{"name": "a", "time_us": 1, "output_bytes": 8},
                                                 {"name": "b", "time_us": 2, "output_bytes": 8}], [("a", "b")]))
    return tmp_path


def _deflate_damaged(path):
    data = bytearray(gzip.compress(json.dumps({"format": "pardnn.graph", "version": 1, "nodes": [
        {"name": f"n{i}", "time_us": i} for i in range(200)], "edges": []}).encode(), mtime=0))
    data[60] ^= 0xFF       # inside the deflate stream: zlib's "invalid distance" and the like, not a CRC error
    path.write_bytes(bytes(data))


BAD_INPUTS = {
    # Python reads at most 4300 digits of an integer: json.loads raised a ValueError
    "digits.json": lambda p: p.write_text('{"format":"pardnn.graph","version":1,"nodes":[{"name":"a","time_us":1'
                                          + "0" * 5000 + '}],"edges":[]}'),
    "deflate.json.gz": _deflate_damaged,
    "msr-latency.json": lambda p: p.write_text('{"nodes":[{"id":1,"cpuLatency":"abc"}],"edges":[]}'),
    "msr-size.json": lambda p: p.write_text('{"nodes":[{"id":1},{"id":2}],"edges":[{"sourceId":1,"destId":2,'
                                            '"size":null}]}'),
    "msr-id.json": lambda p: p.write_text('{"nodes":[{"id":1e400}],"edges":[]}'),
    "msr-edges.json": lambda p: p.write_text('{"nodes":[{"id":1}],"edges":[[1,2]]}'),
    # the review of these fixes: an id of 1.7 read as 1 ("appears twice"), a list as colorClass
    "msr-fraction.json": lambda p: p.write_text('{"nodes":[{"id":1.7},{"id":1}],"edges":[]}'),
    "msr-class.json": lambda p: p.write_text('{"nodes":[{"id":1,"colorClass":[1]}],"edges":[]}'),
}


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_a_damaged_input_is_bad_input_naming_the_file(work, name):
    BAD_INPUTS[name](work / name)
    fmt = ["--format", "msr"] if name.startswith("msr") else []
    before = snapshot(work)
    r = pardnn("info", name, *fmt, cwd=work)
    assert_one_line_error(r, EXIT_INPUT, name)
    assert snapshot(work) == before


def test_a_place_file_with_a_device_of_thousands_of_digits_is_out_of_range(work):
    (work / "p.place").write_text("a 0\nb 1" + "0" * 5000 + "\n")
    (work / "z.place").write_text("a 0\nb " + "0" * 5000 + "\n")      # leading zeros: device 0
    r = pardnn("simulate", "g.json", "p.place", cwd=work)
    assert "expected 0..4095" in assert_one_line_error(r, EXIT_INPUT, "p.place:2", "'b'")
    assert pardnn("simulate", "g.json", "z.place", cwd=work).returncode == 0


@pytest.mark.parametrize("events", ['[1]', '[{"ph":"M","name":"process_name","pid":1,"args":{"name":5}}]',
                                    '[{"ph":"X","pid":[1],"args":{"name":"a"}}]'])
def test_a_timeline_event_that_is_no_object_names_the_timeline(work, events):
    (work / "profs").mkdir()
    (work / "g.dot").write_text('"a" -> "b"\n')
    (work / "profs" / "t.json").write_text('{"traceEvents":' + events + '}')
    r = pardnn("info", "g.dot", cwd=work)
    assert_one_line_error(r, EXIT_INPUT, "t.json", "traceEvents[0]")


def test_an_output_is_refused_onto_a_dot_graphs_side_files(work, tmp_path):
    """The sizes and durations files beside a ParDNN .dot are inputs too: writing the placement over them
    was exit 0, and the file read next time held JSON."""
    d = tmp_path / "dot"
    d.mkdir()
    (d / "g.dot").write_text('"a" -> "b"\n')
    (d / "tensors_sz.txt").write_text('"a": 8,\n"b": 8,\n')
    (d / "time_steps_32").mkdir()
    (d / "time_steps_32" / "nodes_average_durations.txt").write_text("a::10\nb::20\n")
    before = snapshot(d)
    for args in (["-o", "tensors_sz.txt"], ["-o", "p.json", "--place", "time_steps_32/nodes_average_durations.txt"]):
        r = pardnn("partition", "g.dot", "-k", "2", *args, cwd=d)
        assert "refusing to overwrite the input file" in assert_one_line_error(r, EXIT_INPUT)
        assert snapshot(d) == before


def test_place_writes_the_plain_form_whatever_the_name(work):
    r = pardnn("partition", "g.json", "-k", "2", "-o", "p.json", "--place", "p.txt", cwd=work)
    assert r.returncode == 0, r.stderr
    assert (work / "p.txt").read_text().split("\n")[0] in ("a 0", "a 1")     # was the JSON placement
    json.loads((work / "p.json").read_text())
    # and it is read back by its contents (the review: "invalid JSON at line 1 column 1")
    r = pardnn("simulate", "g.json", "p.txt", cwd=work)
    assert r.returncode == 0, r.stderr
    # a JSON name for it is refused before the work: read back, it would not be JSON
    before = snapshot(work)
    r = pardnn("partition", "g.json", "-k", "2", "-o", "q.json", "--place", "q.json.gz", cwd=work)
    assert r.returncode == 2 and "--place writes the plain 'name device' text" in r.stderr, r.stderr
    assert snapshot(work) == before


def test_a_name_with_a_lone_surrogate_cannot_go_in_a_place_file(work):
    (work / "s.json").write_text(graph_json([{"name": "a\ud800", "time_us": 1}, {"name": "b", "time_us": 1}]))
    r = pardnn("partition", "s.json", "-k", "2", "-o", "p.place", cwd=work)
    assert "cannot be written in the .place text form" in assert_one_line_error(r, EXIT_INPUT, "p.place")
    assert not (work / "p.place").exists()
    assert pardnn("partition", "s.json", "-k", "2", "-o", "p.json", cwd=work).returncode == 0


def test_an_output_name_too_long_for_the_file_system_is_an_output_error(work):
    long = "x" * 300 + ".json"
    r = pardnn("partition", "g.json", "-k", "2", "-o", long, cwd=work)
    assert "cannot write" in assert_one_line_error(r, EXIT_OUTPUT, "xxx")
    assert sorted(p.name for p in work.iterdir()) == ["g.json"]


# ---------------------------------------------------------------------------
# Round 32: what the round before left accepted. Each was exit 0 on nonsense, or an internal error.

_LAYER = "{} -- {} -- forward_compute_time={}, backward_compute_time=1.0, activation_size={}, parameter_size={}\n"


def _pipedream(*layers: tuple, edges: tuple = ("node1 -- node2",)) -> str:
    return "".join(_LAYER.format(*L) for L in layers) + "".join(f"\t{e}\n" for e in edges)


_INPUT = ("node1", "Input0", 1.0, 4.0, 0.0)
_LINEAR = ("node2", "Linear", 1.0, 4.0, 8.0)
ROUND_32 = {
    # NaN and Infinity are no JSON: `import` copied them into its output, which no strict reader takes
    "nan.json": ('{"format":"pardnn.graph","version":1,"nodes":[{"name":"a","time_us":1,"note":NaN}],'
                 '"edges":[]}', "line 1 column 78: NaN is not a number in JSON"),
    "inf.json": ('{"format":"pardnn.graph","version":1,\n"nodes":[{"name":"a","time_us":1,"note":-Infinity}],'
                 '"edges":[]}', "line 2 column 41: -Infinity is not a number"),
    "big.json": ('{"format":"pardnn.graph","version":1,"nodes":[{"name":"a","time_us":1,"note":"1e400",'
                 '"x":1e400}],"edges":[]}', "line 1 column 90: 1e400 is beyond the range"),
    # ParDNN's DOT: a line that names no node was a node ('$$$', 'rankdir=LR' was one named so)
    "garbage.dot": ('"a" -> "b"\n$$$\n', "garbage.dot:2: cannot read a node name from '$$$'"),
    "chain.dot": ('a -> b -> c\n', "chain.dot:1: cannot read a node name from 'b -> c'"),
    # PipeDream: the second of two lines of one layer won, without a word; 1e999 was an OverflowError
    "twice/graph.txt": (_pipedream(_INPUT, _LINEAR, ("node2", "Linear", 9.0, 4.0, 8.0)),
                        "graph.txt:3: layer 'node2' is given twice (first at line 2)"),
    "edge/graph.txt": (_pipedream(_INPUT, _LINEAR, edges=("node1 -- node2", "node1 -- node2")),
                       "graph.txt:4: the edge node1 -- node2 is given twice (first at line 3)"),
    "huge/graph.txt": (_pipedream(_INPUT, ("node2", "Linear", 1.0, 4.0, "1e999")),
                       "graph.txt:2: layer 'node2': parameter_size is inf"),
    "negative/graph.txt": (_pipedream(("node1", "Input0", 1.0, -4.0, 0.0), _LINEAR),
                           "graph.txt:1: layer 'node1': activation_size is -4"),
}


@pytest.mark.parametrize("name", sorted(ROUND_32))
def test_round_32_nonsense_is_bad_input_naming_the_file_and_line(work, name):
    text, message = ROUND_32[name]
    (work / name).parent.mkdir(exist_ok=True)
    (work / name).write_text(text)
    before = snapshot(work)
    r = pardnn("import", name, "-o", "out.json", cwd=work)
    assert message in assert_one_line_error(r, EXIT_INPUT, name)
    assert snapshot(work) == before


def test_a_dot_size_below_minus_one_or_a_duration_not_finite_is_bad_input(work):
    d = work / "dot"
    d.mkdir()
    (d / "g.dot").write_text('"a" -> "b"\n')
    (d / "tensors_sz.txt").write_text('"a": 8,\n"b": -5,\n')
    r = pardnn("info", "g.dot", cwd=d)
    assert "size of 'b' is -5" in assert_one_line_error(r, EXIT_INPUT, "tensors_sz.txt:2")
    (d / "tensors_sz.txt").write_text('"a": 8,\n"b": -1,\n')          # -1: unknown, as ParDNN wrote it
    (d / "time_steps_32").mkdir()
    for value in ("nan", "-3", "inf"):
        (d / "time_steps_32" / "nodes_average_durations.txt").write_text(f"a::10\nb::{value}\n")
        r = pardnn("info", "g.dot", cwd=d)
        assert f"duration of 'b' is '{value}'" in assert_one_line_error(r, EXIT_INPUT,
                                                                        "nodes_average_durations.txt:2")
    (d / "time_steps_32" / "nodes_average_durations.txt").write_text("a::10\nb::0\n")
    assert pardnn("info", "g.dot", cwd=d).returncode == 0


@pytest.mark.parametrize("args", [("info", "g.json", "--top", "-1"),
                                  ("plan", "g.json", "-k", "2", "--tolerance", "nan"),
                                  ("calibrate", "-k", "1", "--timeout", "inf", "-o", "c.json"),
                                  ("bench", "--max-nodes", "-1", "-o", "b")])
def test_a_count_below_zero_or_a_number_not_finite_is_a_usage_error(work, args):
    """--top -1 listed all groups but the last; --tolerance nan bisected to 'nan%'; --timeout inf was an
    OverflowError (exit 1)."""
    before = snapshot(work)
    r = pardnn(*args, cwd=work)
    assert r.returncode == 2 and "Invalid value for '--" in r.stderr, r.stderr
    assert snapshot(work) == before


def test_a_placement_for_another_graph_is_used_with_a_warning_and_a_graph_not_named_is_refused(work):
    assert pardnn("partition", "g.json", "-k", "2", "-o", "p.json", cwd=work).returncode == 0
    d = json.loads((work / "p.json").read_text())
    (work / "other.json").write_text(json.dumps({**d, "graph": "other"}))
    r = pardnn("simulate", "g.json", "other.json", cwd=work)
    assert r.returncode == 0 and "the placement was made for graph 'other', not 'hostile'" in r.stderr, r.stderr
    (work / "seven.json").write_text(json.dumps({**d, "graph": 7}))
    r = pardnn("simulate", "g.json", "seven.json", cwd=work)
    assert "\"graph\" must be the graph's name" in assert_one_line_error(r, EXIT_INPUT, "seven.json")


# ---------------------------------------------------------------------------
# Round 33: cluster files, pipeline specs, size flags, ONNX models and the API.

_BIG = "9" * 400


@pytest.mark.parametrize("field", ["memory_bytes", "speed", "latency_us", "bandwidth_bytes_per_us"])
def test_a_cluster_number_beyond_a_double_is_bad_input(work, field):
    """An integer of 400 digits (valid JSON, read as Python's int) was an OverflowError in math.isfinite:
    exit 1."""
    device = f',"{field}":{_BIG}' if field in ("memory_bytes", "speed") else ""
    top = f',"{field}":{_BIG}' if not device else ""
    (work / "c.json").write_text('{"format":"pardnn.cluster","version":1,"devices":[{"name":"a"' + device
                                 + '},{"name":"b"}]' + top + '}')
    before = snapshot(work)
    r = pardnn("partition", "g.json", "--cluster", "c.json", "-o", "p.json", cwd=work)
    assert f"{field} must be a finite number" in assert_one_line_error(r, EXIT_INPUT, "c.json")
    assert snapshot(work) == before


def test_a_graph_or_device_named_with_a_lone_surrogate_is_printed_and_reported_escaped(work):
    """"\\ud800" is valid JSON and a name may hold it (a JSON placement writes it escaped), but the summary on
    stdout was a UnicodeEncodeError after the placement was written (exit 1, an output left), and the HTML
    report a TypeError in matplotlib's font code (a message of several lines)."""
    (work / "s.json").write_text('{"format":"pardnn.graph","version":1,"name":"s\\ud800","nodes":[{"name":"a",'
                                 '"time_us":1},{"name":"b","time_us":1}],"edges":[]}')
    (work / "c.json").write_text('{"format":"pardnn.cluster","version":1,"devices":[{"name":"d\\ud800"},'
                                 '{"name":"e"}]}')
    r = pardnn("partition", "s.json", "--cluster", "c.json", "-o", "p.json", "--report", "r.html", cwd=work)
    assert r.returncode == 0, r.stderr
    assert "s\\ud800: 2 ops on 2 devices" in r.stdout and "d\\ud800" in r.stdout
    assert "d\\ud800" in (work / "r.html").read_text()
    r = pardnn("info", "s.json", cwd=work)
    assert r.returncode == 0 and "s\\ud800" in r.stdout, r.stderr
    r = pardnn("plan", "s.json", "-k", "1,2", "-o", "plan.html", cwd=work)
    assert r.returncode == 0, r.stderr


def test_a_bandwidth_near_the_largest_double_weighs_edges_without_nan(work):
    """A latency's worth of bytes at 1e308 B/us is beyond a double: METIS's edge weights were inf / inf = NaN,
    cast to integers as garbage, with numpy's RuntimeWarnings on stderr."""
    (work / "c.json").write_text(json.dumps({"format": "pardnn.cluster", "version": 1, "devices": [
        {"name": "a"}, {"name": "b"}], "bandwidth_bytes_per_us": 1e308}))
    (work / "six.json").write_text(graph_json([{"name": f"n{i}", "time_us": 10 + i, "output_bytes": 1000 * (i + 1)}
                                               for i in range(6)], [(f"n{i}", f"n{i + 1}") for i in range(5)]))
    for method in ("pardnn", "metis"):
        r = pardnn("partition", "six.json", "--cluster", "c.json", "--method", method, "-o", "p.json", cwd=work)
        assert r.returncode == 0 and "Warning" not in r.stderr, r.stderr


@pytest.mark.parametrize("option", ["floor_share", "overflow_share"])
def test_a_huge_refine_share_is_a_budget_not_an_overflow(work, option):
    """refine{floor_share=1e308} made the budget's floor inf: an OverflowError in int (exit 1); overflow_share
    the same where the plan breaks a memory limit (resnet14 at 16 MiB)."""
    r = pardnn("partition", SAMPLES / "tf_resnet14.json.gz", "-k", "2", "-m", "16MiB", "--no-capacity-search",
               "--pipeline", f"slice,map,refine{{{option}=1e308}}", "-o", "p.json", cwd=work)
    assert "found no placement within memory" in assert_one_line_error(r, EXIT_INFEASIBLE)


@pytest.mark.parametrize("spec, message", [
    ("refine", "pass 'refine' needs assignment in the plan, which no pass before it makes (it comes first)"),
    ("best,slice,map", "pass 'best' needs assignment"),
    ("map", "pass 'map' needs paths"),
    ("slice", "the pipeline makes no assignment"),
    ("slice{},slice", "the pipeline makes no assignment")])
def test_a_pipeline_in_the_wrong_order_is_a_usage_error_before_the_work(work, spec, message):
    """'refine' alone ran and failed as a PassError (exit 1, "a bug"), 'slice' alone as an invalid placement
    of shape () (exit 3): docs/partitioner.md says a spec is checked when read, exit 2."""
    before = snapshot(work)
    r = pardnn("partition", "g.json", "-k", "2", "--pipeline", spec, "-o", "p.json", cwd=work)
    assert r.returncode == 2 and message in r.stderr and "Invalid value for --pipeline" in r.stderr, r.stderr
    assert snapshot(work) == before


@pytest.mark.parametrize("counts", ["1..100000000", "1.." + "9" * 400])
def test_a_device_count_range_past_the_limit_is_refused_before_it_is_listed(work, counts):
    """plan -k 1..100000000 built the list of 1e8 counts (14 s, 4 GB) before refusing it; 400 digits was an
    OverflowError in list(range(...)), exit 1."""
    r = pardnn("plan", "g.json", "-k", counts, cwd=work, timeout=10)
    assert r.returncode == 2 and "devices is more than the 4096 available" in r.stderr, r.stderr


def _mlp_with_external_weight(work, **external: str):
    """A one-MatMul ONNX model whose 8x16 float weight (512 bytes) lies in w.bin, with these external_data
    entries beside its location."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    w = helper.make_tensor("W", TensorProto.FLOAT, [8, 16], [0.0] * 128)
    w.ClearField("float_data")
    w.data_location = TensorProto.EXTERNAL
    for key, value in {"location": "w.bin", **external}.items():
        entry = w.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")], "mlp",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    (work / "m.onnx").write_bytes(model.SerializeToString())


@pytest.mark.parametrize("external, size, message", [
    ({"length": "abc"}, 512, "external data length must be a whole number of bytes, got 'abc'"),
    ({"offset": "-5"}, 512, "external data offset must be a whole number of bytes, got '-5'"),
    ({}, 10, "external data file 'w.bin' is 10 bytes, but initializer 'W' needs 512: truncated?"),
    ({"offset": "8"}, 512, "is 512 bytes, but initializer 'W' needs 520")])
def test_onnx_external_data_past_its_file_or_not_a_count_is_bad_input(work, external, size, message):
    """A length of 'abc' was a ValueError (exit 1); an offset of -5 and a file too short for the tensor when
    no length is given were taken (docs/onnx.md: a truncated file is an error naming it)."""
    _mlp_with_external_weight(work, **external)
    (work / "w.bin").write_bytes(b"\0" * size)
    before = snapshot(work)
    r = pardnn("partition", "m.onnx", "-k", "2", "-o", "p.json", cwd=work)
    assert message in assert_one_line_error(r, EXIT_INPUT, "m.onnx")
    assert snapshot(work) == before
    (work / "w.bin").write_bytes(b"\0" * 1024)
    assert pardnn("partition", "m.onnx", "-k", "2", "-o", "p.json", cwd=work).returncode == (
        3 if "whole number" in message else 0)


def test_a_cluster_made_in_python_is_checked_as_a_file_is():
    """Device(None) made a cluster that saved and did not load; devices that are no Device, links that are no
    Link and a number beyond a double (10**400) were AttributeErrors and OverflowErrors deep inside;
    with_memory and renamed with a short list dropped the devices past it without a word."""
    from pardnn.cluster import Cluster, Device, Link
    from pardnn.errors import ClusterError

    two = Cluster.homogeneous(2)
    for make, message in [
            (lambda: Cluster((Device(None),)), "name must be a non-empty string, got None"),
            (lambda: Cluster((Device(""), Device("b"))), "name must be a non-empty string, got ''"),
            (lambda: Cluster("ab"), "devices must be Device objects"),
            (lambda: Cluster((Device("a"), Device("b")), links=((None, 5), (None, None))), "Link objects"),
            (lambda: Cluster.homogeneous(2, memory_bytes=10**400), "memory_bytes must be within a double's range"),
            (lambda: Cluster.homogeneous(2, speed=10**400), "speed must be a positive number"),
            (lambda: Cluster.homogeneous(2, latency_us=10**400), "latency_us must be a number"),
            (lambda: Cluster.homogeneous(2, bandwidth_bytes_per_us=10**400), "bandwidth_bytes_per_us must be"),
            (lambda: two.with_memory([1]), "with_memory: 1 capacities for 2 devices"),
            (lambda: two.with_memory(10**400), "within a double's range"),
            (lambda: two.renamed(["a"]), "renamed: 1 names for 2 devices")]:
        with pytest.raises(ClusterError, match=message):
            make()
    assert Cluster((Device("a"), Device("b")), links=((None, Link(1.0, 2.0)), (None, None))).num_devices == 2
    assert two.with_memory([1, 2]).capacity.tolist() == [1.0, 2.0]


@pytest.mark.parametrize("spec", ["slice", "refine", "best,slice,map"])
def test_a_pipeline_in_the_wrong_order_from_python_is_a_value_error(spec):
    """partition(options=PardnnOptions(pipeline="slice")) was a PlacementError ("got shape ()"), "refine" a
    PassError (exit 1's class): the ValueError a spec's other mistakes raise."""
    from pardnn import Cluster, partition
    from pardnn.ir import GraphBuilder
    from pardnn.partitioner import PardnnOptions

    b = GraphBuilder("two")
    b.add_node("a", time_us=1, output_bytes=4)
    b.add_node("b", time_us=1)
    b.add_edge("a", "b")
    with pytest.raises(ValueError, match="slice,map"):
        partition(b.build(), Cluster.homogeneous(2), options=PardnnOptions(pipeline=spec))


def test_graph_builder_setters_check_as_add_node_does():
    """set_pinned(-7) was kept as a pin and set_colocation(5) saved a graph that did not load; an unknown
    node was a bare KeyError."""
    from pardnn.errors import GraphError
    from pardnn.ir import GraphBuilder

    b = GraphBuilder("x")
    b.add_node("a")
    for call, message in [(lambda: b.set_pinned("a", -7), "pinned must be a device index"),
                          (lambda: b.set_pinned("a", 1.5), "pinned must be a device index"),
                          (lambda: b.set_colocation("a", 5), "colocation must be a group name or null"),
                          (lambda: b.set_pinned("zz", 1), "unknown node 'zz'"),
                          (lambda: b.set_colocation("zz", "g"), "unknown node 'zz'")]:
        with pytest.raises(GraphError, match=message):
            call()
    b.set_pinned("a", 3)
    b.set_colocation("a", "g")
    g = b.build()
    assert g.pinned.tolist() == [3]
