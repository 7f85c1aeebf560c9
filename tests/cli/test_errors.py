"""The error contract through the real `pardnn` process: exit code, one stderr line, no output left, input unchanged.

Each case runs the command line in a fresh interpreter (as a user does), so
what reaches file descriptor 2 from anywhere (TensorFlow's C++ logging
included) is what is checked. See README "Exit codes".
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from pardnn.errors import EXIT_INFEASIBLE, EXIT_INPUT, EXIT_MEMORY, EXIT_OUTPUT, EXIT_USAGE

from ..conftest import SAMPLES

VGG = SAMPLES / "pardnn_vgg16.json.gz"


def pardnn(*args, cwd: Path, env: dict | None = None, limit_bytes: int | None = None, timeout: float = 300,
           prefix: tuple[str, ...] = ()):
    """Run ``pardnn ARGS`` in a fresh interpreter; ``limit_bytes`` caps its address space (RLIMIT_AS);
    ``prefix`` runs it through another program (`without_root_reads`)."""
    def cap():
        if limit_bytes:
            resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    full_env = {**os.environ, **(env or {})}
    return subprocess.run([*prefix, sys.executable, "-c", "from pardnn.cli import main; main()", *map(str, args)],
                          cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout,
                          preexec_fn=cap if limit_bytes else None)


def snapshot(root: Path) -> dict[str, str]:
    """Every file under ``root`` with its SHA-256."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def assert_one_line_error(r, code: int, *names: str) -> str:
    assert r.returncode == code, (r.returncode, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("pardnn: error: ") and "Traceback" not in r.stderr
    for name in names:
        assert name in lines[0], (name, lines[0])
    return lines[0]


def graph_json(nodes, edges=()) -> str:
    return json.dumps({"format": "pardnn.graph", "version": 1, "name": "hostile", "nodes": nodes,
                       "edges": [{"src": s, "dst": d} for s, d in edges]})


def check_failure(tmp_path: Path, name: str, text: str, code: int, *names: str, args=("-k", 2)) -> str:
    """Write ``text`` as input ``name``, partition it, and check the failure left everything as it was."""
    (tmp_path / name).write_text(text)
    before = snapshot(tmp_path)
    r = pardnn("partition", name, *args, "-o", "out/p.json", "--place", "out/p.place", cwd=tmp_path)
    line = assert_one_line_error(r, code, name, *names)
    assert r.stdout == ""
    assert snapshot(tmp_path) == before and not (tmp_path / "out").exists()
    return line


def test_colocation_group_pinned_to_two_devices_is_bad_input(tmp_path):
    nodes = [{"name": "w", "time_us": 1, "output_bytes": 4, "colocation": "layer1", "pinned": 0},
             {"name": "x", "time_us": 1, "output_bytes": 4},
             {"name": "w_update", "time_us": 1, "output_bytes": 4, "colocation": "layer1", "pinned": 1}]
    check_failure(tmp_path, "g.json", graph_json(nodes, [("w", "x"), ("x", "w_update")]), EXIT_INPUT,
                  "'layer1'", "'w'", "'w_update'", "device 0", "device 1")


def test_a_pin_beyond_the_clusters_devices_is_bad_input_naming_the_file(tmp_path):
    nodes = [{"name": "a", "time_us": 1, "output_bytes": 4, "pinned": 3}, {"name": "b", "time_us": 1}]
    check_failure(tmp_path, "g.json", graph_json(nodes, [("a", "b")]), EXIT_INPUT, "'a'", "device 3",
                  "1 device (0 to 0)", args=("-k", 1))


@pytest.mark.parametrize("field", ["output_bytes", "persistent_bytes", "temp_bytes"])
def test_byte_counts_beyond_int64_are_bad_input(tmp_path, field):
    nodes = [{"name": "a", "time_us": 1, "output_bytes": 4}, {"name": "big", "time_us": 1, "output_bytes": 4}]
    nodes[1][field] = 1e30
    check_failure(tmp_path, "g.json", graph_json(nodes, [("a", "big")]), EXIT_INPUT, "'big'", field)


def test_edge_bytes_and_ports_beyond_the_limits_are_bad_input(tmp_path):
    nodes = [{"name": "a", "time_us": 1}, {"name": "b", "time_us": 1}]
    doc = json.loads(graph_json(nodes))
    doc["edges"] = [{"src": "a", "dst": "b", "bytes": 10 ** 30}]
    check_failure(tmp_path, "g.json", json.dumps(doc), EXIT_INPUT, "'a' -> 'b'", "bytes")
    doc["edges"] = [{"src": "a", "dst": "b", "port": 10 ** 30}]
    check_failure(tmp_path, "g2.json", json.dumps(doc), EXIT_INPUT, "'a' -> 'b'", "port")


def test_many_large_byte_counts_that_overflow_together_are_bad_input(tmp_path):
    nodes = [{"name": f"n{i}", "time_us": 1, "persistent_bytes": 2 ** 52} for i in range(1100)]
    check_failure(tmp_path, "g.json", graph_json(nodes), EXIT_INPUT, "add up to")


def test_pathologically_nested_json_is_bad_input(tmp_path):
    check_failure(tmp_path, "g.json", "[" * 200_000 + "]" * 200_000, EXIT_INPUT, "nested too deeply")
    check_failure(tmp_path, "g2.json", '{"format": "pardnn.graph", "nodes": ' + "[" * 100_000 + "]" * 100_000 + "}",
                  EXIT_INPUT, "nested too deeply")


def test_a_text_placement_naming_an_absurd_device_is_bad_input(tmp_path):
    (tmp_path / "p.place").write_text("a 100000000000000000000000000\n")
    (tmp_path / "g.json").write_text(graph_json([{"name": "a", "time_us": 1}]))
    before = snapshot(tmp_path)
    r = pardnn("simulate", "g.json", "p.place", cwd=tmp_path)
    assert_one_line_error(r, EXIT_INPUT, "p.place:1", "'a'")
    assert snapshot(tmp_path) == before


def test_a_placement_of_more_devices_than_a_cluster_may_have_is_bad_input(tmp_path):
    """It failed with "a cluster may have at most 4096 devices", naming no file, though no cluster was given."""
    (tmp_path / "g.json").write_text(graph_json([{"name": "a", "time_us": 1}]))
    (tmp_path / "p.json").write_text(json.dumps({"format": "pardnn.placement", "version": 1, "assignment": {"a": 0},
                                                 "devices": [f"/device:GPU:{i}" for i in range(5000)]}))
    for command in (("simulate",), ("report", "-o", "r.html")):
        r = pardnn(command[0], "g.json", "p.json", *command[1:], cwd=tmp_path)
        assert_one_line_error(r, EXIT_INPUT, "p.json", "at most 4096 devices")
        assert not (tmp_path / "r.html").exists()


@pytest.fixture
def small_graph(tmp_path):
    (tmp_path / "g.json").write_text(graph_json([{"name": "a", "time_us": 1, "output_bytes": 8},
                                                 {"name": "b", "time_us": 2, "output_bytes": 8}], [("a", "b")]))
    return tmp_path


def unwritable_outputs(root: Path) -> list[tuple[str, str]]:
    """Output paths that cannot be written here, with the words the message must hold."""
    (root / "a_file").write_text("not a directory\n")
    cases = [("a_file/p.json", "a_file is not a directory"), ("a_file/deeper/p.json", "not a directory")]
    if Path("/proc/self").is_dir():
        cases.append(("/proc/p.json", "/proc/p.json"))            # a special filesystem refuses new files
    if os.geteuid() != 0:                                        # root writes into read-only directories
        (root / "ro").mkdir()
        (root / "ro").chmod(0o555)
        cases.append(("ro/p.json", "ro/p.json"))
    return cases


def test_outputs_that_cannot_be_written_name_the_output_and_leave_nothing(small_graph):
    for out, words in unwritable_outputs(small_graph):
        before = snapshot(small_graph)
        for cmd in (["partition", "g.json", "-k", 2, "-o", out], ["import", "g.json", "-o", out]):
            r = pardnn(*cmd, cwd=small_graph)
            line = assert_one_line_error(r, EXIT_OUTPUT, out, words)
            assert ".tmp" not in line                             # the output's name, not the temporary file's
            assert snapshot(small_graph) == before


def without_root_reads() -> tuple[str, ...]:
    """A `pardnn` prefix under which file permissions hold: empty for a user; for root, setpriv dropping the
    capabilities that read and search any file (skipped where there is no setpriv)."""
    if os.geteuid() != 0:
        return ()
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("root reads every file, and there is no setpriv to drop that")
    drop = "-dac_override,-dac_read_search"
    return setpriv, f"--inh-caps={drop}", f"--bounding-set={drop}"


def test_inputs_that_may_not_be_read_are_bad_input_and_outputs_behind_them_cannot_be_written(small_graph):
    """Found by a bad-input trial: a graph, cluster or placement without read permission was a usage error
    (exit 2, click's "is not readable"), a file in a directory that may not be searched an internal error
    (exit 1, PermissionError), and an existing output without read permission, which pardnn replaces, was
    refused. Now: exit 3 for an input and 7 for an output, one line naming the file."""
    prefix = without_root_reads()
    root = small_graph
    assert pardnn("partition", "g.json", "-k", 2, "-o", "p.json", cwd=root).returncode == 0
    (root / "c.json").write_text(json.dumps({"format": "pardnn.cluster", "devices": [{"name": "a"}, {"name": "b"}]}))
    (root / "shut").mkdir()
    (root / "shut" / "g.json").write_text((root / "g.json").read_text())
    for name in ("ng.json", "np.json", "nc.json", "old.json"):
        (root / name).write_text((root / {"ng.json": "g.json", "nc.json": "c.json"}.get(name, "p.json")).read_text())
    before = snapshot(root)
    modes = {"ng.json": 0, "np.json": 0, "nc.json": 0, "old.json": 0, "shut": 0o600}
    cases = [(("info", "ng.json"), EXIT_INPUT, "ng.json"),
             (("partition", "ng.json", "-k", 2, "-o", "q.json"), EXIT_INPUT, "ng.json"),
             (("simulate", "g.json", "np.json"), EXIT_INPUT, "np.json"),
             (("partition", "g.json", "--cluster", "nc.json", "-o", "q.json"), EXIT_INPUT, "nc.json"),
             (("info", "shut/g.json"), EXIT_INPUT, "shut/g.json"),
             (("partition", "g.json", "-k", 2, "-o", "shut/q.json"), EXIT_OUTPUT, "shut/q.json")]
    try:
        for name, mode in modes.items():
            (root / name).chmod(mode)
        for args, code, name in cases:
            r = pardnn(*args, cwd=root, prefix=prefix)
            assert_one_line_error(r, code, name, "Permission denied")
            assert not (root / "q.json").exists()
        r = pardnn("partition", "g.json", "-k", 2, "-o", "old.json", cwd=root, prefix=prefix)
        assert r.returncode == 0, r.stderr
    finally:
        for name in modes:
            (root / name).chmod(0o755 if name == "shut" else 0o644)
    before["old.json"] = snapshot(root)["old.json"]     # replaced, as any output is
    assert snapshot(root) == before


def test_a_place_output_for_names_it_cannot_carry_is_refused_before_the_work(tmp_path):
    """Found by a bad-input trial: partition --place wrote a node named 'b 1 ' as 'b 1  0', which simulate
    then refused ("node 'b 1' is not in graph"); a name with a line break broke the file into two lines."""
    (tmp_path / "g.json").write_text(graph_json([{"name": "a", "time_us": 1}, {"name": "b 1 ", "time_us": 1}],
                                                [("a", "b 1 ")]))
    before = snapshot(tmp_path)
    r = pardnn("partition", "g.json", "-k", 2, "-o", "p.json", "--place", "p.place", cwd=tmp_path)
    assert_one_line_error(r, EXIT_INPUT, "p.place", "node 'b 1 ' cannot be written in the .place text form")
    assert snapshot(tmp_path) == before


def test_a_command_writes_all_its_outputs_or_none(small_graph):
    """partition -o P --place Q where Q cannot be written: P must not appear either."""
    (small_graph / "a_file").write_text("not a directory\n")
    before = snapshot(small_graph)
    r = pardnn("partition", "g.json", "-k", 2, "-o", "p.json", "--place", "a_file/q.place", cwd=small_graph)
    assert r.returncode == EXIT_OUTPUT and "a_file/q.place" in r.stderr
    assert not (small_graph / "p.json").exists()
    assert snapshot(small_graph) == before
    # the same command with both outputs writable writes both
    r = pardnn("partition", "g.json", "-k", 2, "-o", "p.json", "--place", "out/q.place", cwd=small_graph)
    assert r.returncode == 0, r.stderr
    assert (small_graph / "p.json").exists() and (small_graph / "out" / "q.place").exists()
    assert r.stderr == ""


def test_out_of_memory_while_reading_says_what_and_how_large(tmp_path):
    """A graph whose ports need about 8 GB, read under a 2 GiB address-space limit."""
    nodes = [{"name": f"n{i}", "time_us": 1} for i in range(1001)]
    doc = json.loads(graph_json(nodes))
    doc["edges"] = [{"src": f"n{i}", "dst": f"n{i + 1}", "port": 2 ** 20} for i in range(1000)]
    (tmp_path / "g.json").write_text(json.dumps(doc))
    before = snapshot(tmp_path)
    r = pardnn("partition", "g.json", "-k", 2, "-o", "p.json", cwd=tmp_path, limit_bytes=2 * 2 ** 30)
    assert_one_line_error(r, EXIT_MEMORY, "out of memory", "reading g.json", "peak resident memory")
    assert snapshot(tmp_path) == before


def test_out_of_memory_while_placing_names_the_pass_and_the_input_size(tmp_path):
    """4096 devices for VGG-16 under a 768 MiB address-space limit: a pass runs out (names it and the sizes).
    (Under 1 GiB the cluster's 4096 x 4096 link matrices fit since the kernel's link state is sized by the
    links in use, and the first allocation to fail then falls in a worker thread or a library's import.)"""
    r = pardnn("partition", VGG, "-k", 4096, "-o", "p.json", cwd=tmp_path, limit_bytes=768 << 20)
    assert_one_line_error(r, EXIT_MEMORY, "out of memory", "687 nodes and 1,348 edges", "4096 devices")
    assert "pass '" in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_unknown_method_is_a_usage_error(small_graph):
    r = pardnn("partition", "g.json", "-k", 2, "-o", "p.json", "--method", "nope", cwd=small_graph)
    assert r.returncode == EXIT_USAGE
    assert "Invalid value for '--method'" in r.stderr and "'nope' is not one of" in r.stderr
    assert "Traceback" not in r.stderr and not (small_graph / "p.json").exists()


@pytest.mark.parametrize("args, message", [
    (["info", "g.json", "--device-profile", "h200"], "Invalid value for '--device-profile': 'h200' is not one of"),
    (["info", "g.json", "--dim", "batch=0"], "Invalid value for --dim: a dimension must be at least 1"),
    (["info", "g.json", "--dim", "seq=-3"], "Invalid value for --dim: a dimension must be at least 1"),
    (["info", "g.json", "--dim", "seq=99999999999"], "Invalid value for --dim: a dimension must be at most "
                                                     "2,147,483,647"),
    # a review: "²" was an internal error (int() refuses what isdigit() takes), "١" read as 1
    (["info", "g.json", "--dim", "seq=\u00b2"], "Invalid value for --dim: expected NAME=VALUE with an integer"),
    (["info", "g.json", "--dim", "seq=\u0661"], "Invalid value for --dim: expected NAME=VALUE with an integer"),
    (["run", "g.json", "p.json", "--rtol", "-1"], "Invalid value for '--rtol': -1.0 is not in the range x>=0"),
    (["run", "g.json", "p.json", "--atol", "-1"], "Invalid value for '--atol'"),
    (["run", "g.json", "p.json", "--local-cluster", "2", "--cluster-spec", "c.json"],
     "give either --local-cluster or --cluster-spec, not both"),
    (["partition", "g.json", "-k", "2", "-o", "same.json", "--report", "same.json"],
     "same.json is given for two outputs"),
    (["import", "g.json", "-o", "g.onnx"], "a pardnn.graph is JSON: name it .json or .json.gz, got 'g.onnx'"),
    # a fuzzing trial (round 31): an OverflowError (exit 1) each, and a file written for "newdir/"
    (["partition", "g.json", "-k", "2", "-m", "1e400", "-o", "p.json"], "a size must be a finite number of bytes"),
    (["partition", "g.json", "-k", "2", "--refine-evals", "99999999999999999999", "-o", "p.json"],
     "is not in the range 0<=x<=1000000000000"),
    (["partition", "g.json", "-k", "2", "-o", "newdir/"], "'newdir/' names a directory; give a file name"),
    (["partition", "g.json", "-k", "2", "-o", "newdir/."], "'newdir/.' names a directory; give a file name"),
    (["partition", "g.json", "-k", "2", "-o", ""], "Invalid value for '-o' / '--output': an empty name"),
])
def test_flag_problems_found_by_a_new_user_are_usage_errors(small_graph, args, message):
    """Found by a new user's trial: these were exit 3 (bad input), or a late error after TensorFlow had
    traced the model, or (negative tolerances) a run reported as matching. Now: exit 2 at once, nothing
    written."""
    if "--report" in args:
        pytest.importorskip("matplotlib")
    before = snapshot(small_graph)
    r = pardnn(*args, cwd=small_graph)
    assert r.returncode == EXIT_USAGE, r.stderr
    assert message in r.stderr and "Usage:" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert snapshot(small_graph) == before


def test_outputs_that_are_not_regular_files_are_written_through(small_graph):
    """Found by a new user's trial: ``-o /dev/null`` (as root) replaced the device node with a regular
    file, as it did a FIFO or a symbolic link. Here: a FIFO with a reader, and a link to a file."""
    import threading

    fifo = small_graph / "fifo"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    r = pardnn("partition", "g.json", "-k", 2, "-o", "fifo", cwd=small_graph)
    reader.join(30)
    assert r.returncode == 0, r.stderr
    assert json.loads(got[0])["format"] == "pardnn.placement" and fifo.is_fifo()
    (small_graph / "real.json").write_text("{}")
    (small_graph / "link.json").symlink_to("real.json")
    r = pardnn("partition", "g.json", "-k", 2, "-o", "link.json", cwd=small_graph)
    assert r.returncode == 0, r.stderr
    assert (small_graph / "link.json").is_symlink()
    assert json.loads((small_graph / "real.json").read_text())["format"] == "pardnn.placement"
    # /dev/stdout with stdout a file: the placement lands where stdout is, alone; the summary goes to stderr
    if Path("/dev/stdout").exists():
        with open(small_graph / "out.txt", "w") as fh:
            r = subprocess.run([sys.executable, "-c", "from pardnn.cli import main; main()", "partition", "g.json",
                                "-k", "2", "-o", "/dev/stdout"], cwd=small_graph, stdout=fh, stderr=subprocess.PIPE,
                               text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        assert json.loads((small_graph / "out.txt").read_text())["format"] == "pardnn.placement"
        assert "wrote /dev/stdout" in r.stderr


def _pardnn_piped(args, cwd, **kw):
    """``pardnn ARGS`` in a process of its own, stdout and stderr captured through pipes."""
    return subprocess.run([sys.executable, "-c", "from pardnn.cli import main; main()", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=300, **kw)


@pytest.mark.skipif(not Path("/dev/stdout").exists(), reason="no /dev/stdout on this platform")
@pytest.mark.parametrize("args, check", [
    (["import", "g.json", "-o", "/dev/stdout"], lambda out: json.loads(out)["format"] == "pardnn.graph"),
    (["report", "g.json", "p.json", "-o", "/dev/stdout"], lambda out: out.lstrip().startswith("<!DOCTYPE html>")),
    (["simulate", "g.json", "p.json", "--trace", "/dev/stdout"], lambda out: "traceEvents" in json.loads(out)),
    (["simulate", "g.json", "p.json", "--trace", "/dev/stdout", "--json"],
     lambda out: "traceEvents" in json.loads(out)),
    (["partition", "g.json", "-k", 2, "-o", "p2.json", "--place", "/dev/stdout"],     # the plain form (round 31)
     lambda out: [line.split(" ")[0] for line in out.splitlines()] == ["a", "b"]),
    # ``-`` is stdout, as for click and most tools (it wrote a file named "-": found by a new user's trial)
    (["partition", "g.json", "-k", 2, "-o", "-"], lambda out: json.loads(out)["format"] == "pardnn.placement"),
    (["import", "g.json", "-o", "-"], lambda out: json.loads(out)["format"] == "pardnn.graph"),
    (["report", "g.json", "p.json", "-o", "-"], lambda out: out.lstrip().startswith("<!DOCTYPE html>")),
    (["simulate", "g.json", "p.json", "--trace", "-"], lambda out: "traceEvents" in json.loads(out)),
])
def test_every_command_leaves_stdout_to_an_output_there(small_graph, args, check):
    """The review of the change above: `simulate --trace`, `report`, `import` and `--place` onto stdout still
    got the summary after the output. Every output that can be stdout now gets it to itself."""
    r = _pardnn_piped(["partition", "g.json", "-k", 2, "-o", "p.json"], small_graph)
    assert r.returncode == 0, r.stderr
    r = _pardnn_piped(args, small_graph)
    assert r.returncode == 0, r.stderr
    assert check(r.stdout), r.stdout[:500]
    assert r.stderr.strip(), "the summary went to stderr"
    assert not (small_graph / "-").exists()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_an_output_that_is_the_same_stream_as_stdout_gets_it_to_itself(small_graph):
    """Not /dev/stdout but the same file: stdout is a FIFO, and ``-o`` names that FIFO."""
    fifo = small_graph / "out.fifo"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    with open(fifo, "wb") as fh:
        r = subprocess.run([sys.executable, "-c", "from pardnn.cli import main; main()", "partition", "g.json",
                            "-k", "2", "-o", str(fifo)], cwd=small_graph, stdout=fh, stderr=subprocess.PIPE,
                           text=True, timeout=300)
    reader.join(30)
    assert r.returncode == 0, r.stderr
    assert json.loads(got[0])["format"] == "pardnn.placement"
    assert "wrote " in r.stderr and "predicted step time" in r.stderr


@pytest.mark.skipif(not Path("/dev/stdout").exists(), reason="no /dev/stdout on this platform")
@pytest.mark.parametrize("flags", [[], ["--json"], ["-q"], ["-q", "--json"]])
def test_an_output_on_stdout_gets_stdout_to_itself(small_graph, flags):
    """Found by a review: with ``-o /dev/stdout`` the human summary (or the ``--json`` one) followed the
    placement on the same stream, also with ``-q``, so ``... -o /dev/stdout | jq`` failed. Through a pipe,
    stdout now carries the placement alone; the summary goes to stderr (the human one not at all with
    ``-q``, which asks for errors only; ``--json``'s still, since it was asked for)."""
    quiet = ["-q"] if "-q" in flags else []
    rest = [f for f in flags if f != "-q"]
    r = subprocess.run([sys.executable, "-c", "from pardnn.cli import main; main()", *quiet, "partition", "g.json",
                        "-k", "2", "-o", "/dev/stdout", *rest], cwd=small_graph, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["format"] == "pardnn.placement"
    if "--json" in rest:
        assert json.loads(r.stderr)["output"] == "/dev/stdout"
    elif quiet:
        assert r.stderr == ""
    else:
        assert "wrote /dev/stdout" in r.stderr and "predicted step time" in r.stderr



@pytest.fixture
def long_chain(tmp_path):
    """A 10,000-op chain: its placement file (about 100 KB) is more than a pipe holds (64 KiB on Linux)."""
    n = 10000
    (tmp_path / "big.json").write_text(graph_json([{"name": f"n{i}", "time_us": 1, "output_bytes": 8} for i in range(n)],
                                                  [(f"n{i}", f"n{i + 1}") for i in range(n - 1)]))
    return tmp_path


def _with_stdout_gone(args, cwd):
    """``pardnn ARGS`` with stdout a pipe whose reader has already gone (``... | head -c 0``)."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run([sys.executable, "-c", "from pardnn.cli import main; main()", *map(str, args)], cwd=cwd,
                              stdout=write, stderr=subprocess.PIPE, text=True, timeout=300)
    finally:
        os.close(write)


@pytest.mark.skipif(not Path("/dev/stdout").exists(), reason="no /dev/stdout on this platform")
@pytest.mark.parametrize("args, code, said", [
    (["partition", "g.json", "-k", 2, "--method", "single", "-o", "/dev/stdout", "--report", "r.html"], 0,
     "predicted step time"),
    (["partition", "g.json", "-k", 2, "--method", "single", "-o", "/dev/fd/1", "--report", "r.html", "--json"], 0,
     '"makespan_us"'),
    (["partition", "g.json", "-k", 2, "--method", "single", "-m", "4B", "--allow-infeasible",
      "--no-capacity-search", "-o", "/dev/stdout", "--report", "r.html"], 4, "breaks the machine model"),
    (["simulate", "g.json", "p.json", "--trace", "/dev/stdout"], 0, "predicted step time"),
    (["import", "g.json", "-o", "/dev/stdout"], 0, "wrote /dev/stdout"),
])
def test_a_reader_that_leaves_stdout_early_is_no_error(small_graph, args, code, said):
    """``pardnn partition g.json -o /dev/stdout | head -c 50`` exited 7 ("/dev/stdout: cannot write: Broken
    pipe"), where ``pardnn info x | head`` exits 0. Now the rest of that output is dropped and the command
    goes on: its other outputs are written, its summary goes to stderr as with any output on stdout, and
    its exit code is its own (4 for a placement that breaks memory, as with stdout on /dev/null)."""
    r = _pardnn_piped(["partition", "g.json", "-k", 2, "--method", "single", "-o", "p.json"], small_graph)
    assert r.returncode == 0, r.stderr
    r = _with_stdout_gone(args, small_graph)
    assert r.returncode == code, r.stderr
    assert said in r.stderr and "Broken pipe" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    if "--report" in args:
        assert (small_graph / "r.html").read_text().rstrip().endswith("</html>")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_a_fifo_named_by_its_path_whose_reader_leaves_is_an_output_error(long_chain):
    """Only stdout's reader may stop early: a FIFO the command was asked to write by its own path, whose
    reader goes away before the placement is all in, is exit 7, and the other outputs are put back."""
    fifo = long_chain / "out.fifo"
    os.mkfifo(fifo)

    def leave():        # open (so the writer's open returns), take nothing, go
        with open(fifo, "rb"):
            pass
    reader = threading.Thread(target=leave, daemon=True)
    reader.start()
    r = _pardnn_piped(["partition", "big.json", "-k", 2, "--method", "single", "-o", str(fifo), "--report",
                       "r.html"], long_chain)
    reader.join(30)
    assert_one_line_error(r, EXIT_OUTPUT, "out.fifo", "Broken pipe")
    assert not (long_chain / "r.html").exists()


@pytest.mark.parametrize("args", [["rewrite", "m.keras", "p.json", "-o", "placed"],
                                  ["run", "m.keras", "p.json", "--write", "placed"]])
def test_a_savedmodel_output_onto_a_full_directory_is_an_output_error_before_any_work(tmp_path, args):
    """Found by a new user's trial: exit 3 (bad input), after the model was built. Now exit 7 at once."""
    (tmp_path / "m.keras").write_bytes(b"never read")
    (tmp_path / "p.json").write_text("{}")
    (tmp_path / "placed").mkdir()
    (tmp_path / "placed" / "keep.txt").write_text("mine")
    before = snapshot(tmp_path)
    r = pardnn(*args, cwd=tmp_path)
    assert_one_line_error(r, EXIT_OUTPUT, "placed: already exists; choose a new directory")
    assert snapshot(tmp_path) == before


def test_descriptor_outputs_go_where_the_descriptor_went(small_graph):
    """Found by a review: ``-o /dev/stderr`` went to the discarded file that keeps TensorFlow's native logs
    off stderr; ``-o /dev/stdout`` with stdout closed, or ``/dev/fd/3`` never given, wrote into whatever
    file pardnn had opened under that number. Now stderr is stderr, and a descriptor not given is exit 7."""
    base = [sys.executable, "-c", "from pardnn.cli import main; main()", "-q", "partition", "g.json", "-k", "2"]
    with open(small_graph / "err.txt", "w") as err:
        r = subprocess.run(base + ["-o", "/dev/stderr"], cwd=small_graph, stdout=subprocess.PIPE, stderr=err,
                           text=True, timeout=300)
    assert r.returncode == 0
    assert json.loads((small_graph / "err.txt").read_text().splitlines()[0])["format"] == "pardnn.placement"
    r = subprocess.run(base + ["-o", "/dev/stdout"], cwd=small_graph, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True, timeout=300, preexec_fn=lambda: os.close(1))
    assert_one_line_error(r, EXIT_OUTPUT, "/dev/stdout: cannot write: descriptor 1 was not open when pardnn started")
    r = subprocess.run(base + ["-o", "/dev/fd/3"], cwd=small_graph, capture_output=True, text=True, timeout=300)
    assert_one_line_error(r, EXIT_OUTPUT, "/dev/fd/3: cannot write: descriptor 3 was not open")
    with open(small_graph / "three.txt", "w") as three:
        r = subprocess.run(base + ["-o", f"/dev/fd/{three.fileno()}"], cwd=small_graph, capture_output=True,
                           text=True, timeout=300, pass_fds=(three.fileno(),))
    assert r.returncode == 0, r.stderr
    assert json.loads((small_graph / "three.txt").read_text())["format"] == "pardnn.placement"


@pytest.mark.parametrize("value, message", [("", "'' names no method"), (",", "',' names no method"),
                                            (" , ", "' , ' names no method"), ("pardnn,nope", "unknown method(s) nope")])
def test_bench_methods_that_name_no_known_method_are_a_usage_error(tmp_path, value, message):
    """Found by a reviewer: ``--methods ,`` left the list empty and ended in an internal error; ``--methods ''``
    ran every method."""
    r = pardnn("bench", "--suite", "samples", "--methods", value, "-o", "b", cwd=tmp_path)
    assert r.returncode == EXIT_USAGE, r.stderr
    assert "Invalid value for --methods: " + message in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args, code, message", [
    (["--suite", "synthetic", "--synthetic-sizes", "-1"], EXIT_USAGE,
     "Invalid value for --synthetic-sizes: graph sizes are at least 1 op, got '-1'"),
    (["--suite", "real", "--data", "no-such-dir"], EXIT_INPUT,
     "pardnn: error: the 'real' suite needs the peer data directory (--data); no-such-dir not found"),
])
def test_bench_suites_it_cannot_make_are_a_usage_error_or_bad_input(tmp_path, args, code, message):
    """Found by a bad-input trial: both were exit 1, the code of a bug (a negative size: "internal error:
    ValueError: math domain error")."""
    r = pardnn("bench", *args, "--no-scaling", "-o", "b", cwd=tmp_path)
    assert r.returncode == code and message in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("flag, value", [("--speed", "0"), ("--speed", "1,-2"), ("--speed", "nan"),
                                         ("--bandwidth", "0"), ("--bandwidth", "0GB/s")])
def test_a_speed_or_bandwidth_that_is_not_positive_is_a_usage_error_naming_the_flag(small_graph, flag, value):
    """Found by a new user's trial: these were exit 3 (bad input) naming the cluster file's field."""
    r = pardnn("partition", "g.json", "-k", 2, "-o", "p.json", flag, value, cwd=small_graph)
    assert r.returncode == EXIT_USAGE, r.stderr
    assert f"Invalid value for {flag}: " in r.stderr and "positive" in r.stderr and "bandwidth_bytes_per_us" not in r.stderr
    assert "Traceback" not in r.stderr and not (small_graph / "p.json").exists()


@pytest.mark.parametrize("flag, value, message", [
    ("--speed", "1e-300,1", "Invalid value for --speed: must be from 1e-06 to 1e+06, got 1e-300"),
    ("--latency", "1e300s", "Invalid value for --latency: '1e300s' is more than the largest allowed (1e+15 us)"),
    ("--bandwidth", "1e-300", "Invalid value for --bandwidth: '1e-300' is less than the smallest allowed"),
])
def test_cluster_flags_beyond_what_the_model_holds_are_a_usage_error(small_graph, flag, value, message):
    """Found by a bad-input trial: --speed 1e-300,1 failed inside METIS (exit 1, "pass 'seed' failed"), and
    --latency 1e300s printed numpy's warnings with the lines of code that raised them."""
    r = pardnn("partition", "g.json", "-k", 2, "--memory", "1MiB", "-o", "p.json", flag, value, cwd=small_graph)
    assert r.returncode == EXIT_USAGE and message in r.stderr and "Warning" not in r.stderr, r.stderr
    assert not (small_graph / "p.json").exists()


@pytest.mark.parametrize("memory", ["0", "0.5"])
def test_no_memory_at_all_is_infeasible_in_one_line(small_graph, memory):
    """Found by a bad-input trial: --memory 0 (and 0.5, rounded to 0 bytes) printed numpy's "divide by zero"
    warning, with the line of the memory pass that raised it, before the error."""
    r = pardnn("partition", "g.json", "-k", 2, "--memory", memory, "-o", "p.json", cwd=small_graph)
    assert_one_line_error(r, EXIT_INFEASIBLE, "device 0 (/device:GPU:0) needs 16 B", "has 0 B")
    assert not (small_graph / "p.json").exists()


def test_tensorflow_native_logging_stays_off_stderr_unless_vv(tmp_path):
    """A corrupt saved_model.pb with TensorFlow told to log everything: still one line; -vv shows the log."""
    pytest.importorskip("tensorflow")
    model = tmp_path / "model"
    model.mkdir()
    (model / "saved_model.pb").write_bytes(bytes(range(256)) * 2)
    before = snapshot(tmp_path)
    env = {"TF_CPP_MIN_LOG_LEVEL": "0"}
    r = pardnn("-q", "import", "model", "-o", "g.json", cwd=tmp_path, env=env)
    assert_one_line_error(r, EXIT_INPUT, "saved_model.pb")
    assert snapshot(tmp_path) == before
    r = pardnn("-vv", "import", "model", "-o", "g.json", cwd=tmp_path, env=env)
    assert r.returncode == EXIT_INPUT and len(r.stderr.splitlines()) > 1   # TensorFlow's own lines are back


def test_progress_shows_a_live_line_on_a_terminal_only(tmp_path):
    """On a terminal a live line names the stage; not with -q, and nothing when stderr is a pipe."""
    import pty

    def on_tty(*args) -> tuple[int, bytes]:
        main, sub = pty.openpty()
        try:
            p = subprocess.run([sys.executable, "-c", "from pardnn.cli import main; main()", *map(str, args)],
                               cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=sub, timeout=300)
        finally:
            os.close(sub)
        chunks = []
        while True:
            try:
                data = os.read(main, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
        os.close(main)
        return p.returncode, b"".join(chunks)

    code, tty = on_tty("partition", VGG, "-k", 4, "--memory", "2GiB", "-o", "a.json")
    assert code == 0
    assert b"] reading" in tty and b"placing 687 ops with pardnn" in tty and b"pass refine" in tty
    tiny = tmp_path / "g.json"
    tiny.write_text(graph_json([{"name": "a", "time_us": 1, "output_bytes": 8}]))
    code, tty = on_tty("-q", "partition", tiny, "-k", 2, "-o", "b.json")
    assert code == 0 and tty == b""
    r = pardnn("partition", tiny, "-k", 2, "-o", "c.json", cwd=tmp_path)
    assert r.returncode == 0 and r.stderr == ""


def test_every_public_name_works_after_every_submodule_is_imported(tmp_path):
    """`pardnn.evaluate` and friends stay the API functions, whatever submodule was imported first."""
    import importlib
    import pkgutil

    import pardnn

    for mod in pkgutil.walk_packages(pardnn.__path__, "pardnn."):
        try:
            importlib.import_module(mod.name)
        except ImportError as exc:      # an optional extra (TensorFlow, onnx) that is not installed
            assert any(x in str(exc) for x in ("tensorflow", "onnx", "keras", "matplotlib", "pymetis")), exc
    from pardnn import Cluster, GraphBuilder

    b = GraphBuilder("api")
    b.add_node("x", "X", time_us=1.0, output_bytes=[8])
    b.add_node("y", "Y", time_us=2.0, output_bytes=[8])
    b.add_edge("x", "y")
    g = b.build()
    c = Cluster.homogeneous(2, memory_bytes=1024)
    for name in pardnn.__all__:
        obj = getattr(pardnn, name)
        assert not isinstance(obj, type(pardnn)), f"pardnn.{name} is a module, not the API object"
    called = set()

    def call(api_name, /, *args, **kwargs):
        called.add(api_name)
        return getattr(pardnn, api_name)(*args, **kwargs)

    plan, sched = call("partition", g, c)
    assert call("evaluate", g, c, plan).makespan_us == sched.makespan_us == call("simulate", g, c, plan).makespan_us
    assert isinstance(sched, pardnn.Schedule) and isinstance(plan, call("Placement", plan.assignment, plan.devices,
                                                                           g.name).__class__)
    assert call("single_device_peak", g) == 16
    assert call("load_graph", call("save_graph", g, tmp_path / "g.json")).names == g.names
    assert call("load_placement", call("save_placement", plan, g, tmp_path / "p.json"), g).assignment.tolist() \
        == plan.assignment.tolist()
    c2 = call("Cluster", (call("Device", "/device:GPU:0", 1024), call("Device", "/device:GPU:1", 1024)))
    assert call("load_cluster", call("save_cluster", c2, tmp_path / "c.json")).num_devices == 2
    assert call("graph_from_networkx", g.to_networkx()).num_nodes == 2
    assert isinstance(call("OpGraph", **{f: getattr(g, f) for f in g.__dataclass_fields__}), pardnn.OpGraph)
    for err in ("GraphError", "InfeasibleError", "InputError", "PardnnError", "PlacementError"):
        assert isinstance(call(err, "x"), pardnn.PardnnError)
    called |= {"GraphBuilder", "Schedule", "__version__"}       # built and checked above
    assert set(pardnn.__all__) == called, set(pardnn.__all__) ^ called


def test_a_bad_transfer_cpu_in_a_cluster_file_is_one_line_naming_file_and_field(tmp_path):
    cluster = {"format": "pardnn.cluster", "devices": [{"name": "a"}, {"name": "b"}], "transfer_cpu_us": -5}
    (tmp_path / "c.json").write_text(json.dumps(cluster))
    (tmp_path / "g.json").write_text(graph_json([{"name": "x", "time_us": 1}]))
    before = snapshot(tmp_path)
    r = pardnn("partition", "g.json", "--cluster", "c.json", "-o", "out/p.json", cwd=tmp_path)
    assert_one_line_error(r, EXIT_INPUT, "c.json", "transfer_cpu_us")
    assert r.stdout == "" and snapshot(tmp_path) == before


def test_ctrl_c_stops_a_partition_at_once_with_one_line_and_no_output(tmp_path):
    """SIGINT while refinement's starts are searched on threads: exit 130, one line on stderr, nothing
    written, and the process ends without finishing the searches (their budget here is minutes of work)."""
    import signal
    import time

    out = tmp_path / "p.json"
    proc = subprocess.Popen([sys.executable, "-c", "from pardnn.cli import main; main()", "-v", "partition",
                             str(SAMPLES / "tf_transformer_4l.json.gz"), "-k", "4", "--refine-evals", "400000",
                             "-o", str(out)], cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    seen = []
    for line in proc.stderr:        # the log names each pass as it ends: after 'seed', refinement runs
        seen.append(line)
        if "pass seed" in line:
            break
    time.sleep(0.5)
    t0 = time.perf_counter()
    proc.send_signal(signal.SIGINT)
    rest = proc.stderr.read()
    proc.wait(timeout=120)
    took = time.perf_counter() - t0
    assert any("pass seed" in x for x in seen), "".join(seen)
    assert proc.returncode == 130, (proc.returncode, rest)
    lines = rest.strip().splitlines()
    assert lines[-1] == "pardnn: interrupted" and "Traceback" not in rest, rest
    assert all(x.startswith("pardnn: ") and "error" not in x for x in lines), rest    # the rest: -v's log
    assert any("stopped after" in x for x in lines), rest
    assert not out.exists() and list(tmp_path.iterdir()) == []
    assert took < 10, took


@pytest.mark.parametrize("delay", [0.1, 0.25, 0.45])
def test_ctrl_c_while_the_program_loads_its_libraries_is_one_line_not_a_traceback(tmp_path, delay):
    """The ``pardnn`` program (`pardnn._entry`) loads numpy, numba and scipy (about a second here) before any
    command runs: SIGINT then, as later, ends with 'pardnn: interrupted' alone on stderr, exit 130 and no
    output (the program used to start in `pardnn.cli`, whose imports printed a KeyboardInterrupt traceback
    at these delays and died by the signal)."""
    import signal
    import time

    out = tmp_path / "p.json"
    proc = subprocess.Popen([sys.executable, "-c", "from pardnn._entry import main; main()", "partition", str(VGG),
                             "-k", "4", "-o", str(out)], cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    err = proc.stderr.read()
    proc.wait(timeout=120)
    assert (proc.returncode, err) == (130, "pardnn: interrupted\n")
    assert list(tmp_path.iterdir()) == []


_WRAPPED_CTRL_C = """
import importlib.abc, os, signal, sys

class Descriptor:
    def __set_name__(self, owner, name):    # Python 3.11 hands on what this raises as a RuntimeError
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):       # the handler runs at the next bytecode boundary, still in here
            pass

class Finder(importlib.abc.MetaPathFinder):    # runs as the program starts to load its command line
    def find_spec(self, name, path, target=None):
        if name == "pardnn.cli":
            sys.meta_path.remove(self)
            class Owner:
                field = Descriptor()
        return None

sys.meta_path.insert(0, Finder())
from pardnn._entry import main
main()
"""


def test_a_ctrl_c_that_python_hands_on_as_another_error_while_the_program_loads_is_still_one_line(tmp_path):
    """A Ctrl-C that lands while a class is made (in a field's ``__set_name__``, as every dataclass's fields
    have) reaches the program as ``RuntimeError: Error calling __set_name__`` with the KeyboardInterrupt as
    its cause (Python 3.11): it used to end in that traceback and exit 1 (seen once in 64 real SIGINTs at
    0.18-0.33 s). Now: 'pardnn: interrupted', exit 130, nothing written. The SIGINT here is real, sent from
    such a ``__set_name__`` as the command line starts to load."""
    (tmp_path / "v.json.gz").write_bytes(VGG.read_bytes())
    before = snapshot(tmp_path)
    r = subprocess.run([sys.executable, "-c", _WRAPPED_CTRL_C, "partition", "v.json.gz", "-k", "2", "-o", "p.json"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert (r.returncode, r.stderr, r.stdout) == (130, "pardnn: interrupted\n", ""), r
    assert snapshot(tmp_path) == before


_SWALLOWED_CTRL_C = """
import os, signal, sys
from pardnn.cli import info, main, partition, plan, report

class Finaliser:    # Python ignores an exception raised in a finaliser ("Exception ignored in ...")
    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):       # the handler runs at the next bytecode boundary, still in here
            pass

for command in (info, partition, plan, report):
    def read_input(*args, _read=command.read_input, **kwargs):
        Finaliser()
        return _read(*args, **kwargs)
    command.read_input = read_input
main(sys.argv[1:])
"""


@pytest.mark.parametrize("args", [
    ["partition", "v.json.gz", "-k", "2", "-o", "p.json"],
    ["partition", "v.json.gz", "-k", "2", "-o", "out/p.json", "--place", "p.place", "--report", "r.html"],
    ["partition", "v.json.gz", "-k", "2", "-o", "p.json", "--json"],
    ["simulate", "g.json", "g.place", "--json", "--trace", "new/dir/t.json"],
    ["report", "g.json", "g.place", "-o", "new/r.html"],
    ["plan", "g.json", "--devices", "1,2", "--json"],
    ["info", "g.json"],
])
def test_a_ctrl_c_that_a_callback_swallows_still_ends_the_command_with_nothing_written(tmp_path, args):
    """A Ctrl-C can land where Python ignores exceptions: a finaliser, or the callback through which
    llvmlite reports while numba compiles. The command then used to go on, write its outputs (or print its
    result) and exit 0, with an "Exception ignored" traceback. Now: one line, exit 130, no file, no
    directory made for one, nothing on stdout. Here the SIGINT is real, sent from a finaliser that runs
    while the command reads its input."""
    (tmp_path / "v.json.gz").write_bytes(VGG.read_bytes())
    (tmp_path / "g.json").write_text(graph_json([{"name": "a", "time_us": 1, "output_bytes": 8},
                                                 {"name": "b", "time_us": 2, "output_bytes": 8}], [("a", "b")]))
    (tmp_path / "g.place").write_text("a 0\nb 1\n")
    before = snapshot(tmp_path)
    r = subprocess.run([sys.executable, "-c", _SWALLOWED_CTRL_C, *args], cwd=tmp_path, capture_output=True,
                       text=True, timeout=300)
    assert (r.returncode, r.stderr, r.stdout) == (130, "pardnn: interrupted\n", ""), r
    assert snapshot(tmp_path) == before and sorted(p.name for p in tmp_path.iterdir()) == ["g.json", "g.place",
                                                                                            "v.json.gz"]


def test_an_output_transaction_puts_everything_back_when_a_ctrl_c_comes_during_its_renames(tmp_path):
    """The renames that end an output transaction: a Ctrl-C (raised, or swallowed by a finaliser and
    remembered) after some have landed puts every target back as it was, old contents included, and
    removes the rest and the directories made for them."""
    import signal

    from pardnn import fileio
    from pardnn.errors import watching_interrupts

    (tmp_path / "old.txt").write_text("old\n")
    real = os.replace
    for swallowed in (False, True):
        calls = []

        def replace(a, b, *rest):
            calls.append(b)
            real(a, b)
            if len(calls) == 3:     # a.txt in place, old.txt backed up and replaced
                if swallowed:
                    class Finaliser:
                        def __del__(self):
                            os.kill(os.getpid(), signal.SIGINT)
                            for _ in range(1000):
                                pass
                    Finaliser()
                else:
                    raise KeyboardInterrupt

        fileio.os.replace = replace
        try:
            with pytest.raises(KeyboardInterrupt), watching_interrupts():
                with fileio.output_transaction():
                    fileio.atomic_write(tmp_path / "made" / "a.txt", "a")
                    fileio.atomic_write(tmp_path / "old.txt", "new")
                    fileio.atomic_write(tmp_path / "b.txt", "b")
        finally:
            fileio.os.replace = real
        assert len(calls) >= 3
        assert sorted(p.name for p in tmp_path.iterdir()) == ["old.txt"], swallowed
        assert (tmp_path / "old.txt").read_text() == "old\n"


def test_importing_pardnn_loads_nothing_heavy_until_a_name_is_used():
    """``import pardnn`` (which the program's entry point does first) loads neither numpy nor numba; the public
    names load their modules on first use and are the API objects."""
    code = ("import sys, pardnn; heavy = [m for m in ('numpy', 'numba', 'scipy') if m in sys.modules]; "
            "f = pardnn.partition; from pardnn.api import partition; "
            "print(heavy, f is partition, 'numpy' in sys.modules, sorted(set(pardnn.__all__) - set(dir(pardnn))))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[] True True []", r.stdout + r.stderr
    # submodules are attributes after ``import pardnn`` alone, as when the package loaded them all at once
    code = ("import pardnn; from pardnn.machine import simulate; print(pardnn.machine.simulate is simulate); "
            "print(hasattr(pardnn, 'no_such_module'))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.split() == ["True", "False"], r.stdout + r.stderr
    from pardnn import _entry, errors

    assert _entry.EXIT_INTERRUPTED == errors.EXIT_INTERRUPTED
    # the passes load when a placement is made: the command line's modules and the methods' table do not
    # load them (a check of PardnnOptions' imported two of them, 35 ms more for every command)
    code = ("import sys, pardnn.cli, pardnn.methods; "
            "print(sorted(m for m in sys.modules if m.startswith('pardnn.passes.')))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]", r.stdout + r.stderr


def test_an_interrupt_inside_a_compiled_kernel_is_an_interrupt_not_a_failed_pass():
    """numba's dispatcher turns a Ctrl-C that lands while a kernel runs into ``SystemError: ... returned a
    result with an exception set``, the KeyboardInterrupt at the end of its causes: the pipeline raises it
    as the interrupt it is (the command line then says 'interrupted', exit 130), not as a failed pass."""
    from dataclasses import dataclass
    from typing import ClassVar

    from pardnn.cluster import Cluster
    from pardnn.errors import interrupted
    from pardnn.pipeline import Pipeline, PlanState

    from ..helpers import tiny

    def kernel_interrupted():
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as ki:
            raise SystemError("CPUDispatcher(<function simulate_kernel>) returned a result with an exception "
                              "set") from ki

    @dataclass(frozen=True)
    class Interrupted:
        name: ClassVar[str] = "interrupted"
        requires: ClassVar[tuple[str, ...]] = ()

        def __call__(self, g, cluster, state):
            kernel_interrupted()

    with pytest.raises(SystemError) as info:
        kernel_interrupted()
    assert interrupted(info.value) and not interrupted(SystemError("x")) and not interrupted(ValueError("y"))
    g = tiny([("a", 1), ("b", 1)], [("a", "b")])
    with pytest.raises(KeyboardInterrupt):
        Pipeline((Interrupted(),)).run(g, Cluster.homogeneous(2), PlanState())


def test_ctrl_c_is_remembered_only_while_a_command_runs_and_only_in_the_main_thread():
    """`watching_interrupts` (the ``pardnn`` program's): inside, SIGINT raises KeyboardInterrupt, a second one
    is ignored, and any failure counts as the interrupt; after it, the previous handler is back and a later
    failure is that failure again (a review found a second command in the same process exiting 130 on a
    missing file). `pardnn.cli.main` also runs outside the main thread, where no handler can be set."""
    import signal
    import threading

    from pardnn.cli import main
    from pardnn.errors import interrupted, watching_interrupts

    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        with watching_interrupts():
            try:
                os.kill(os.getpid(), signal.SIGINT)
                for _ in range(1000):       # the handler runs at the next bytecode boundary
                    pass
            except KeyboardInterrupt:
                os.kill(os.getpid(), signal.SIGINT)     # a second Ctrl-C: ignored
                for _ in range(1000):
                    pass
                assert interrupted(ValueError("any failure now"))
                raise
    assert signal.getsignal(signal.SIGINT) is before
    assert not interrupted(ValueError("a later failure")) and interrupted(KeyboardInterrupt())
    from pardnn.errors import interrupt_seen
    try:        # the program's own block: a Ctrl-C leaves SIGINT ignored (it exits next), but not remembered
        with pytest.raises(KeyboardInterrupt), watching_interrupts(for_good=True):
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):
                pass
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN and not interrupt_seen()
    finally:
        signal.signal(signal.SIGINT, before)
    codes = []

    def run():
        try:
            main(["--version"])
        except SystemExit as e:
            codes.append(e.code)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert codes == [0]
