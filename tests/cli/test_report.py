"""`pardnn report`, `partition --report` and `bench --report` from the command line."""

from __future__ import annotations

import json
import sys

import pytest
from click.testing import CliRunner

pytest.importorskip("matplotlib")

from pardnn.cli import cli  # noqa: E402
from pardnn.errors import EXIT_DEPENDENCY, EXIT_INFEASIBLE, EXIT_INPUT  # noqa: E402

from ..conftest import SAMPLES  # noqa: E402
from ..report.test_report import Page, assert_self_contained  # noqa: E402

GNMT = SAMPLES / "pipedream_gnmt.json.gz"


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def test_partition_report_then_report_command_agree(tmp_path):
    p, r1, r2 = tmp_path / "p.json", tmp_path / "a.html", tmp_path / "b.html"
    r = run("partition", GNMT, "-k", 3, "--memory", "1GiB", "-o", p, "--report", r1, "--time-passes")
    assert r.exit_code == 0, r.output
    assert f"and {r1}" in r.stdout
    placement = json.loads(p.read_text())
    page1 = Page(r1.read_text())
    assert_self_contained(r1.read_text(), page1)
    assert float(page1.values["makespan_us"]) == pytest.approx(placement["predicted"]["makespan_us"], abs=1e-6)
    assert [int(page1.values[f"devices[{d}].peak_bytes"]) for d in range(3)] == placement["predicted"]["peak_bytes"]
    assert "pass.slice.seconds" in page1.values        # the pass timings of this run
    r = run("report", GNMT, p, "--memory", "1GiB", "-o", r2)
    assert r.exit_code == 0, r.output
    page2 = Page(r2.read_text())
    assert page2.values["makespan_us"] == page1.values["makespan_us"]
    assert page2.values["devices[2].capacity_bytes"] == str(2 ** 30)
    assert float(page2.values["pass.slice.seconds"]) == placement["pass_seconds"]["slice"]   # from the file


def test_the_same_partition_writes_the_same_bytes(tmp_path):
    """Found by a new user's trial: two identical runs wrote different files (each pass's seconds). Without
    --time-passes the file holds no times: the same bytes, which name the passes that ran."""
    files = []
    for i in range(2):
        files.append(tmp_path / f"p{i}.json")
        assert run("-q", "partition", GNMT, "-k", 3, "--memory", "1GiB", "-o", files[-1]).exit_code == 0
    assert files[0].read_bytes() == files[1].read_bytes()
    placement = json.loads(files[0].read_text())
    assert "pass_seconds" not in placement and placement["passes"][:2] == ["slice", "map"]
    r = run("report", GNMT, files[0], "--memory", "1GiB", "-o", tmp_path / "r.html")
    assert r.exit_code == 0 and "pass.slice.seconds" not in Page((tmp_path / "r.html").read_text()).values


def test_report_with_a_measured_run(tmp_path):
    p, out, m = tmp_path / "p.json", tmp_path / "r.html", tmp_path / "run.json"
    assert run("partition", GNMT, "-k", 2, "--method", "m-topo", "-o", p).exit_code == 0
    m.write_text(json.dumps({"measured_us": 123456.0, "predicted_us": 1.0, "steps": 3,
                             "stages": [{"device": 1, "device_name": "/device:GPU:1", "compute_us": 777.0}]}))
    r = run("report", GNMT, p, "--measured", m, "-o", out, "--title", "GNMT run")
    assert r.exit_code == 0, r.output
    page = Page(out.read_text())
    assert page.sections[-1] == "measured"
    assert float(page.values["measured_us"]) == 123456.0 and float(page.values["measured[1]"]) == 777.0
    assert float(page.values["run_predicted_us"]) == 1.0      # differs from this report's prediction: shown too
    assert "<title>GNMT run</title>" in out.read_text()
    # an ONNX run times stages, not ops: the page says so in one line and draws no measured timeline
    assert out.read_text().count("No measured timeline: the run is an ONNX pipeline") == 1
    assert "measured-timeline" not in page.images


def test_a_measured_run_of_another_placement_is_refused(tmp_path):
    """Found by a new user's trial: a 4-device run given to the report of a 2-device placement was paired
    device by device with it (one device 137x its prediction). A run that puts other counts of ops on the
    devices (TensorFlow's runs say) or times a stage on a device the cluster lacks is refused in one line;
    the run of this placement is taken."""
    p, out, m = tmp_path / "p.json", tmp_path / "r.html", tmp_path / "run.json"
    assert run("partition", GNMT, "-k", 2, "--method", "m-topo", "-o", p).exit_code == 0
    placed = json.loads(p.read_text())["assignment"]
    counts = [sum(1 for d in placed.values() if d == k) for k in (0, 1)]
    graph = json.loads(p.read_text())["graph"]
    cases = [
        ({"graph": graph, "ops_per_device": [counts[0] - 1, counts[1] + 1]},
         f"run.json: the run put {counts[0] - 1}, {counts[1] + 1} ops on its devices, but {p} puts "
         f"{counts[0]}, {counts[1]}; give --measured the run of {p}"),
        ({"ops_per_device": [1, 1, 1, sum(counts) - 3]}, "ops on its devices, but"),
        ({"stages": [{"device": 2, "compute_us": 5.0}]},
         f"run.json: the run used device 2, but the placement's cluster has 2 devices; give --measured the run of "
         f"{p}"),
        # a negative index (found by a bad-input trial: an internal error, exit 1, IndexError)
        ({"stages": [{"device": -3, "compute_us": 5.0}]}, "run.json: the run used device -3, but"),
        ({"per_device": [{"device": -1, "measured_us": 5.0}]}, "run.json: the run used device -1, but"),
        # a traced op on a device the cluster lacks, and negative times (the same trial: taken, and shown)
        ({"measured_timeline": {"devices": [{"device": 3, "ops": [["x", 0, 5]]}]}},
         "run.json: the run used device 3, but"),
        ({"per_device": [{"device": 0, "measured_us": -5.0}]},
         "run.json: per_device[0]'s time is -5 us; a measured time is never negative"),
        ({"stages": [{"device": 1, "compute_us": -2}]}, "run.json: stages[0].compute_us is -2 us;"),
        ({"whole_model_us": -1}, 'run.json: "whole_model_us" is -1 us;'),
    ]
    for extra, message in cases:
        m.write_text(json.dumps({"measured_us": 1000.0, **extra}))
        r = run("report", GNMT, p, "--measured", m, "-o", out)
        assert r.exit_code == EXIT_INPUT and r.stderr.count("\n") == 1 and message in r.stderr, (extra, r.stderr)
        assert not out.exists()
    m.write_text(json.dumps({"measured_us": 1000.0, "graph": graph, "ops_per_device": counts + [0, 0]}))
    assert run("report", GNMT, p, "--measured", m, "-o", out).exit_code == 0
    # the run names the model it ran, not the graph's name (a graph imported under --name): no refusal; nor for
    # a device past the placement's with nothing measured (a .place file names only the devices it uses)
    m.write_text(json.dumps({"measured_us": 1000.0, "graph": "imported-as-another-name", "ops_per_device": counts,
                             "per_device": [{"device": 0, "measured_us": 5.0}, {"device": 2, "measured_us": 0.0}]}))
    assert run("report", GNMT, p, "--measured", m, "-o", out).exit_code == 0
    # a .place file on a cluster of 3: a run that timed device 2 may be its run
    place = tmp_path / "p.place"
    place.write_text("".join(f"{name} {dev}\n" for name, dev in placed.items()))
    m.write_text(json.dumps({"measured_us": 1000.0, "stages": [{"device": 2, "compute_us": 5.0}]}))
    assert run("report", GNMT, place, "--measured", m, "--devices", 3, "-o", out).exit_code == 0
    assert run("report", GNMT, place, "--measured", m, "--devices", 2, "-o", out).exit_code == EXIT_INPUT
    # host ops run on device 0, and ops regrouped with their group elsewhere: that many may differ
    moved = {"ops_per_device": [counts[0] + 3, counts[1] - 3], "host_ops": 1, "regrouped": 2}
    m.write_text(json.dumps({"measured_us": 1000.0, "graph": graph, **moved}))
    assert run("report", GNMT, p, "--measured", m, "-o", out).exit_code == 0
    m.write_text(json.dumps({"measured_us": 1000.0, "graph": graph, **moved, "regrouped": 1}))
    assert run("report", GNMT, p, "--measured", m, "-o", out).exit_code == EXIT_INPUT


def test_report_errors_are_one_line_with_exit_codes(tmp_path, monkeypatch):
    p = tmp_path / "p.json"
    assert run("partition", GNMT, "-k", 2, "-o", p).exit_code == 0
    bad = tmp_path / "bad.json"
    bad.write_text('{"predicted_us": 1}')
    r = run("report", GNMT, p, "--measured", bad, "-o", tmp_path / "r.html")
    assert r.exit_code == EXIT_INPUT and "measured_us" in r.stderr and r.stderr.count("\n") == 1
    for t in (-5, 0):       # a step that took no time, or less: no run measured it (a ratio of -0.008 was shown)
        bad.write_text(json.dumps({"measured_us": t}))
        r = run("report", GNMT, p, "--measured", bad, "-o", tmp_path / "r.html")
        assert r.exit_code == EXIT_INPUT and r.stderr == f'pardnn: error: {bad}: "measured_us" is {t}; a measured ' \
            'step takes some time\n', r.stderr
    bad.write_text('{"measured_us": 1, "measured_timeline": {"devices": [{"device": 0, "ops": [["a", 0]]}]}}')
    r = run("report", GNMT, p, "--measured", bad, "-o", tmp_path / "r.html")
    assert r.exit_code == EXIT_INPUT and r.stderr.count("\n") == 1
    assert "bad.json: measured_timeline.devices[0].ops[0]: expected [name, start_us, dur_us]" in r.stderr
    r = run("report", GNMT, p, "-o", p)
    assert r.exit_code == EXIT_INPUT and "refusing to overwrite" in r.stderr
    r = run("report", GNMT, p, "--devices", 3, "-o", tmp_path / "r.html")
    assert r.exit_code == EXIT_INPUT and "is for 2 devices but the cluster has 3" in r.stderr
    assert not (tmp_path / "r.html").exists()
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    r = run("partition", GNMT, "-k", 2, "-o", tmp_path / "q.json", "--report", tmp_path / "q.html")
    assert r.exit_code == EXIT_DEPENDENCY and "matplotlib" in r.stderr
    assert not (tmp_path / "q.json").exists()           # failed before placing anything


def test_infeasible_placement_still_gets_its_report(tmp_path):
    out, rep = tmp_path / "p.json", tmp_path / "r.html"
    r = run("partition", GNMT, "-k", 2, "--memory", "500MiB", "--method", "m-topo", "--allow-infeasible",
            "-o", out, "--report", rep)
    assert r.exit_code == EXIT_INFEASIBLE, r.output
    page = Page(rep.read_text())
    assert page.values["feasible"] == "false" and "bytes short" in rep.read_text()


def test_bench_report(tmp_path):
    rep = tmp_path / "bench.html"
    r = run("bench", "--suite", "samples", "--max-nodes", 100, "--k", 2, "--regimes", "loose", "--no-scaling",
            "--methods", "pardnn,m-topo", "--no-tables", "-o", tmp_path / "out", "--report", rep)
    assert r.exit_code == 0, r.output
    text = rep.read_text()
    page = Page(text)
    assert_self_contained(text, page)
    assert page.sections[:3] == ["summary", "makespans", "cases"] and "makespan-plot" in page.images
    rows = json.loads((tmp_path / "out" / "results.json").read_text())["rows"]
    assert rows and all(r["graph"] == "pipedream_gnmt" for r in rows)
    for row in rows:
        assert float(page.values[f"pipedream_gnmt|2|loose|{row['method']}"]) == row["makespan_us"]


def test_bench_without_pardnn_scores_the_first_method_listed(tmp_path):
    """Two baselines alone: the first is scored against the second (it was reported as pardnn missing every case)."""
    r = run("bench", "--suite", "samples", "--max-nodes", 100, "--k", 2, "--regimes", "loose", "--no-scaling",
            "--methods", "m-topo,m-etf", "--no-tables", "-o", tmp_path / "out")
    assert r.exit_code == 0, r.output
    assert "'ours' below is m-topo" in r.stdout
    row = next(line.split() for line in r.stdout.splitlines() if line.startswith("loose") and " 2 " in line)
    assert row[1:7] == ["2", "1", "1", "1", "0", "0"], row     # K, cases, ours ok, base ok, only ours, missed
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    assert res["ours"] == "m-topo" and res["summary"][0]["ours_missed"] == 0


def test_quiet_silences_and_verbose_shows_stage_timings(tmp_path):
    p = tmp_path / "p.json"
    r = run("-v", "partition", GNMT, "-k", 2, "-o", p, "--report", tmp_path / "a.html")
    assert r.exit_code == 0
    err = r.stderr
    assert "pardnn: reading" in err and "pardnn: writing the report" in err
    assert err.count("pass slice") == 1          # one line per pass (with its makespan), not two
    r = run("-q", "report", GNMT, p, "-o", tmp_path / "b.html")
    assert r.exit_code == 0 and r.stderr == ""
    r = run("-v", "info", GNMT)
    assert "pardnn: reading" in r.stderr


def test_bench_scaling_runs_only_on_the_named_graphs(tmp_path):
    args = ("bench", "--suite", "samples", "--max-nodes", 100, "--k", 2, "--regimes", "tight",
            "--methods", "pardnn,m-topo", "--no-tables", "-o", tmp_path / "out")
    r = run(*args, "--scaling-graphs", "no_such_graph")
    assert r.exit_code == 2 and "no_such_graph" in r.output
    r = run(*args, "--scaling-graphs", "pipedream_gnmt")
    assert r.exit_code == 0, r.output
    scaling = json.loads((tmp_path / "out" / "results.json").read_text())["scaling"]
    assert sorted((s["graph"], s["method"]) for s in scaling) == [("pipedream_gnmt", "m-topo"),
                                                                  ("pipedream_gnmt", "pardnn")]
    # each answer lies inside the bisection's range (None: infeasible even at 2x the single-device peak)
    assert all(s["min_fraction"] is None or 0 < s["min_fraction"] <= 2.0 for s in scaling)


def test_report_prints_the_step_time_in_the_units_of_the_page(tmp_path):
    """Found by the report trial: `report` printed "predicted step time 0.766 ms" (and 2573.472 ms) where the page
    and `partition` say 766.2 us (and 2.573 s)."""
    from pardnn.ir import save_graph
    from pardnn.units import format_time

    from ..helpers import tiny

    g, p = tmp_path / "g.json", tmp_path / "p.json"
    save_graph(tiny([("a", 300, 100), ("b", 200, 100), ("c", 250, 100)], [("a", "b"), ("a", "c")]), g)
    assert run("-q", "partition", g, "-k", 2, "-o", p).exit_code == 0
    step = json.loads(p.read_text())["predicted"]["makespan_us"]
    assert step < 1000
    r = run("report", g, p, "-o", tmp_path / "r.html")
    assert r.exit_code == 0, r.output
    assert f"predicted step time {format_time(step)} on 2 devices" in r.output
    # one device is "1 device" (a report trial: "on 1 devices"), in the command's line and the page's title
    p.unlink()
    assert run("-q", "partition", g, "-k", 1, "-o", p).exit_code == 0
    r = run("report", g, p, "-o", tmp_path / "r1.html")
    assert r.exit_code == 0 and " on 1 device\n" in r.output + "\n", r.output
    assert " on 1 device</title>" in (tmp_path / "r1.html").read_text()
