"""``pardnn plan`` through the command line, on a shipped sample: the table, the JSON, the plot, usage errors."""

from __future__ import annotations

import json
import re
import shlex
import sys

import pytest
from click.testing import CliRunner

from pardnn.cli import cli
from pardnn.cluster import Cluster, save_cluster
from pardnn.errors import EXIT_USAGE

from ..conftest import SAMPLES

GNMT = SAMPLES / "pipedream_gnmt.json.gz"      # 93 ops, single-device peak 1.26 GiB
GIB = 1 << 30


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.fixture(scope="module")
def gnmt_plan():
    r = run("plan", GNMT, "--memory", "1GiB", "--devices", "1..4", "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_plan_json(gnmt_plan):
    d = gnmt_plan
    assert d["graph"] == "pipedream-gnmt" and d["memory_bytes"] == [GIB] * 4 and d["search_effort"] == "fast"
    rows = d["rows"]
    assert [r["k"] for r in rows] == [1, 2, 3, 4]
    one = rows[0]
    # one device: the whole graph, which needs its single-device peak (more than 1 GiB)
    assert one["min_memory_bytes"] == d["single_device_peak_bytes"] > GIB and one["fits"] is False
    assert one["min_memory_step_us"] == d["single_device_step_us"] and one["placements"] == 0
    for r in rows[1:]:
        assert r["lower_bound_bytes"] <= r["min_memory_bytes"]
        # the fit at --memory and the search place at the same effort, so they agree
        assert r["fits"] == (r["min_memory_bytes"] <= GIB)
        if r["fits"]:
            assert r["speedup"] == pytest.approx(d["single_device_step_us"] / r["step_us"])
        # no placement beats the step-time lower bound, the fit's nor the search's
        assert r["step_lower_bound_us"] <= min(x for x in (r["step_us"], r["min_memory_step_us"]) if x)
    assert rows[0]["step_lower_bound_us"] == pytest.approx(d["single_device_step_us"])   # one device: the work
    # more devices never need more memory per device; each search starts from the previous count's answer
    mins = [r["min_memory_bytes"] for r in rows]
    assert mins == sorted(mins, reverse=True) and mins[-1] < mins[0] / 2
    for prev, r in zip(rows[1:], rows[2:]):
        assert r["search_upper_bytes"] <= prev["min_memory_bytes"]
        assert r["search_lower_bytes"] >= r["lower_bound_bytes"]
    assert d["placements"] == sum(r["placements"] for r in rows) and d["seconds"] > 0 and d["read_seconds"] > 0


def test_the_smallest_memory_found_fits_with_partition(tmp_path, gnmt_plan):
    """What plan reports is a memory at which `pardnn partition` (at the same effort) fits."""
    row = gnmt_plan["rows"][2]
    r = run("partition", GNMT, "-k", 3, "--memory", row["min_memory_bytes"], "--effort", "fast",
            "-o", tmp_path / "p.json", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["feasible"] is True


def test_plan_table_fit_and_no_fit():
    # 600 MiB: one device (1.26 GiB) and two do not fit, the search finds less for more devices
    r = run("plan", GNMT, "--memory", "600MiB", "--devices", "1,2,4")
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0] == "pipedream-gnmt: 93 ops, 600.00 MiB per device, pardnn at --effort fast"
    table = {ln.split()[0]: ln.split() for ln in lines if ln[:1].isdigit()}
    assert list(table) == ["1", "2", "4"]
    assert table["1"][1] == "no" and table["2"][1] == "no" and table["4"][1] == "yes"
    assert "fewest devices that fit: K=4" in r.stdout
    # the whole command's time, reading the input included (a framework model takes seconds to read)
    assert re.fullmatch(rf"took [0-9.]+ s: [0-9.]+ s reading {re.escape(str(GNMT))}, [0-9.]+ s for \d+ placements",
                        lines[-1]), lines[-1]
    total, read, placing = (float(x) for x in re.findall(r"([0-9.]+) s", lines[-1]))
    assert total == pytest.approx(read + placing, abs=0.11)
    # 100 MiB is under every count's lower bound: nothing fits, and it says what the least memory is
    r = run("plan", GNMT, "--memory", "100MiB", "--devices", "2", "--no-search", "--json")
    assert r.exit_code == 0, r.output
    row = json.loads(r.stdout)["rows"][0]
    assert row["fits"] is False and row["placements"] == 0 and "below the lower bound" in row["note"]
    # without --json, the answer line says so too (with --no-search it printed none when nothing fit)
    r = run("plan", GNMT, "--memory", "100MiB", "--devices", "1..2", "--no-search")
    assert r.exit_code == 0, r.output
    assert "no device count fits 100.00 MiB; leave out --no-search for the least memory that does" in r.output


def test_plot_png_and_html(tmp_path):
    pytest.importorskip("matplotlib")
    png, page = tmp_path / "plan.png", tmp_path / "plan.html"
    r = run("plan", GNMT, "--memory", "1GiB", "--devices", "1..3", "--no-search", "-o", png)
    assert r.exit_code == 0, r.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    r = run("plan", GNMT, "--memory", "1GiB", "--devices", "1..3", "--no-search", "--plot", page)
    assert r.exit_code == 0, r.output
    text = page.read_text()
    assert 'id="plan-table"' in text and 'id="plan-plot"' in text and "data:image/png;base64," in text


def test_without_matplotlib_the_table_prints_and_the_plot_is_skipped(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    out = tmp_path / "plan.png"
    r = run("plan", GNMT, "--devices", "1..2", "--no-search", "-o", out)
    assert r.exit_code == 0, r.output
    assert "fits" in r.stdout and not out.exists()
    assert "the plot needs matplotlib" in r.stderr and "pardnn[bench]" in r.stderr


def test_cluster_file_bounds_the_device_counts(tmp_path):
    path = save_cluster(Cluster.homogeneous(2, memory_bytes=GIB), tmp_path / "c.json")
    r = run("plan", GNMT, "--cluster", path, "--no-search", "--json")
    assert r.exit_code == 0, r.output
    assert [x["k"] for x in json.loads(r.stdout)["rows"]] == [1, 2]
    r = run("plan", GNMT, "--cluster", path, "--devices", "1..4")
    assert r.exit_code == EXIT_USAGE and "has 2 devices, fewer than 4" in r.stderr


@pytest.mark.parametrize("args, message", [
    (["--devices", "0..4"], "device counts start at 1"),
    (["--devices", "4..2"], "runs backwards"),
    (["--devices", "two"], "a range such as 1..16"),
    (["--memory", "lots"], "--memory"),
    (["--memory", "1GiB,2GiB"], "one size for every device"),
    (["-o", "plan.txt"], "give a .png or .html file"),
    (["--tolerance", "0"], "--tolerance"),
])
def test_usage_errors(args, message):
    r = run("plan", GNMT, *args)
    assert r.exit_code == EXIT_USAGE, r.output
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("Error:")]   # click's usage lines, then one
    assert len(errors) == 1 and message in errors[0], r.stderr
    assert "Traceback" not in r.output and r.stdout == ""


def test_info_points_to_plan():
    r = run("info", GNMT)
    assert r.exit_code == 0
    assert r.stdout.splitlines()[-1].startswith(f"next: pardnn plan {GNMT} --memory SIZE")


def test_the_plan_info_suggests_runs_as_printed():
    """A model with dynamic dimensions needs its input flags again: the suggested line keeps them, and runs."""
    pytest.importorskip("onnx")
    model = SAMPLES / "onnx_gpt_tiny.onnx"
    r = run("info", model, "--batch-size", "2", "--dim", "seq=32")
    assert r.exit_code == 0, r.output
    last = r.stdout.splitlines()[-1]
    assert last.startswith(f"next: pardnn plan {model} --batch-size 2 --dim seq=32 --memory SIZE:"), last
    argv = shlex.split(last.removeprefix("next: pardnn ").split(":")[0].replace("SIZE", "1GiB"))
    r = run(*argv, "--devices", "1..2", "--no-search")
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("gpt-tiny: ")


def test_a_chain_gains_from_no_count_and_the_table_says_so(tmp_path):
    """A chain of ops has nothing to run side by side: no count is called fastest when none beats one device."""
    from pardnn.ir import save_graph

    from ..helpers import tiny

    g = tiny([(f"n{i}", 100, 10**6) for i in range(8)], [(f"n{i}", f"n{i + 1}") for i in range(7)])
    path = save_graph(g, tmp_path / "chain.json")
    r = run("plan", path, "--devices", "1..3", "--no-search")
    assert r.exit_code == 0, r.output
    assert "no count is faster than one device" in r.stdout and "fastest:" not in r.stdout
    # and no placement could be: the chain's critical path is all its work (columns: K yes 800.0 us 1.00x 1.00x ...)
    at_most = {ln.split()[0]: ln.split()[5] for ln in r.stdout.splitlines() if ln[:1].isdigit()}
    assert at_most == {"1": "1.00x", "2": "1.00x", "3": "1.00x"}


def test_the_plan_of_an_empty_graph_needs_no_memory_at_any_count(tmp_path):
    """A review: "smallest memory" was 0 B at K=1 and 1 B from K=2 on (the bisection never probed 0)."""
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"format": "pardnn.graph", "version": 1, "name": "empty", "nodes": [], "edges": []}))
    r = run("plan", empty, "--devices", "1..3", "--json")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)["rows"]
    assert [(row["k"], row["min_memory_bytes"]) for row in rows] == [(1, 0), (2, 0), (3, 0)]


def test_the_plan_page_gives_the_answer_the_command_prints(tmp_path):
    """Found by the report trial: the page had the table and the figure but not the command's answer, neither
    "fewest devices that fit: K=2 ..." nor, where no count fits, "no device count fits 16.00 MiB; the least
    memory found is 29.19 MiB per device"."""
    pytest.importorskip("matplotlib")
    for memory, devices, answer in (("600MiB", "1,2,4", "fewest devices that fit: K=4"),
                                    ("300MiB", "1,2", "no device count fits 300.00 MiB; the least memory found is")):
        page = tmp_path / f"plan-{memory}.html"
        r = run("plan", GNMT, "--memory", memory, "--devices", devices, "-o", page)
        assert r.exit_code == 0, r.output
        line = next(ln for ln in r.stdout.splitlines() if ln.startswith(answer))
        text = page.read_text()
        assert f'<p class="{"good" if "fewest" in answer else "bad"}">{line[0].upper() + line[1:]}.</p>' in text
