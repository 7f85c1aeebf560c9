"""The HTML report: self-contained, the expected sections and images, numbers equal to the simulator's."""

from __future__ import annotations

import base64
import json
import math
import sys
from html.parser import HTMLParser

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("matplotlib")   # the dev extra; the report needs it

from pardnn.api import partition  # noqa: E402
from pardnn.cluster import Cluster, Device  # noqa: E402
from pardnn.errors import InputError, MissingDependencyError  # noqa: E402
from pardnn.ir import load_graph  # noqa: E402
from pardnn.machine import simulate  # noqa: E402
from pardnn.report import measured_from_dict, render_report, summarize, top_live  # noqa: E402
from pardnn.report.timeline import busy_by_bin, busy_time_until, max_envelope, merge_runs  # noqa: E402
from pardnn.units import format_bytes, format_time  # noqa: E402

from ..conftest import SAMPLES  # noqa: E402
from ..helpers import tiny  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class Page(HTMLParser):
    """What a test needs from a page: every tag's attributes, the cells' values and texts, section ids."""

    def __init__(self, text: str):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.values: dict[str, str] = {}
        self.texts: dict[str, str] = {}
        self.sections: list[str] = []
        self.images: dict[str, str] = {}
        self._key: str | None = None
        self._buf: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "section":
            self.sections.append(a.get("id"))
        if tag == "img":
            self.images[a.get("id") or f"img{len(self.images)}"] = a.get("src", "")
        if tag in ("td", "th") and "data-key" in a:
            self._key = a["data-key"]
            self._buf = []
            if "data-value" in a:
                self.values[self._key] = a["data-value"]

    def handle_data(self, data):
        if self._key is not None:
            self._buf.append(data)

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._key is not None:
            self.texts[self._key] = "".join(self._buf)
            self._key = None


def assert_self_contained(text: str, page: Page) -> None:
    for tag, attrs in page.tags:
        for name in ("src", "href", "srcset", "action", "data"):
            v = (attrs.get(name) or "").strip().lower()
            assert not v.startswith(("http:", "https:", "//", "ftp:", "file:")), f"<{tag} {name}={v[:60]!r}>"
        if tag == "link":
            raise AssertionError("a <link> tag loads an external resource")
        if tag == "script":
            raise AssertionError("the page must not need JavaScript")
    assert "http://" not in text and "https://" not in text
    assert "@import" not in text and "url(" not in text
    for ident, src in page.images.items():
        assert src.startswith("data:image/png;base64,"), ident
        assert base64.b64decode(src.split(",", 1)[1])[:8] == PNG_MAGIC, ident


def one_device_reference(g, cluster):
    """Step time and peak of the whole graph on the fastest device, simulated independently of the report."""
    d = int(np.argmax(cluster.speed))
    one = Cluster((Device("x", None, float(cluster.speed[d])),))
    s1 = simulate(g, one, np.zeros(g.num_nodes, dtype=np.int64))
    return float(s1.makespan_us), int(s1.peak_bytes[0])


CASES = {
    # name: (sample file, K, capacity as a fraction of the single-device peak, method)
    "gnmt-fits-one": ("pipedream_gnmt.json.gz", 3, 1.5, "pardnn"),
    "transformer-too-big-for-one": ("tf_transformer_4l.json.gz", 4, 0.5, "m-topo"),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def rendered(request):
    fname, k, frac, method = CASES[request.param]
    g = load_graph(SAMPLES / fname)
    _, peak1 = one_device_reference(g, Cluster.homogeneous(1))
    cluster = Cluster.homogeneous(k, memory_bytes=int(frac * peak1))
    timings: list = []
    plan, sched = partition(g, cluster, method=method, require_feasible=False, timings=timings)
    text = render_report(g, cluster, plan, sched, timings=timings)
    return g, cluster, plan, sched, timings, text, Page(text)


def test_report_is_self_contained_with_sections_and_images(rendered):
    *_, text, page = rendered
    assert text.startswith("<!DOCTYPE html>")
    assert_self_contained(text, page)
    assert page.sections == ["summary", "timeline", "memory", "communication"]
    assert {"gantt", "memory-plot", "comm-plot"} <= set(page.images)
    assert ("table", {"id": "devices"}) in [(t, {k: v for k, v in a.items() if k == "id"}) for t, a in page.tags]


def test_summary_numbers_equal_the_simulator(rendered):
    g, cluster, plan, sched, timings, text, page = rendered
    v, shown = page.values, page.texts
    assert float(v["makespan_us"]) == sched.makespan_us
    assert shown["makespan_us"] == format_time(sched.makespan_us)
    assert int(v["transfers"]) == len(sched.transfers)
    assert int(v["bytes_moved"]) == int(sched.transfers.bytes.sum())
    assert shown["bytes_moved"] == format_bytes(int(sched.transfers.bytes.sum()))
    assert v["feasible"] == ("true" if sched.feasible else "false")
    serial, peak1 = one_device_reference(g, cluster)
    assert int(v["single_device_peak_bytes"]) == peak1
    assert float(v["serial_us"]) == serial
    if peak1 > cluster.capacity.max():
        assert "speedup" not in v and shown["speedup"].startswith("does not fit one device")
    else:
        assert float(v["speedup"]) == pytest.approx(serial / sched.makespan_us, rel=1e-12)
        assert shown["speedup"] == f"{serial / sched.makespan_us:.2f}x"
    busy = np.bincount(sched.device, weights=sched.finish_us - sched.start_us, minlength=cluster.num_devices)
    ops = np.bincount(sched.device, minlength=cluster.num_devices)
    for d in range(cluster.num_devices):
        p = f"devices[{d}]."
        assert int(v[p + "ops"]) == ops[d]
        assert float(v[p + "compute_us"]) == pytest.approx(busy[d], rel=1e-12)
        assert int(v[p + "peak_bytes"]) == sched.peak_bytes[d]
        assert shown[p + "peak_bytes"] == format_bytes(sched.peak_bytes[d])
        assert int(v[p + "capacity_bytes"]) == cluster.capacity[d]
        assert float(v[p + "peak_time_us"]) == sched.peak_time_us[d]
        assert int(v[p + "persistent_bytes"]) == sched.persistent_bytes[d]
    for t in timings:
        assert float(v[f"pass.{t.name}.seconds"]) == t.seconds


def test_communication_matrix_counts_every_transfer(rendered):
    g, cluster, plan, sched, timings, text, page = rendered
    K = cluster.num_devices
    want = {(a, c): [0, 0] for a in range(K) for c in range(K)}
    for a, c, b in zip(sched.transfers.src_dev.tolist(), sched.transfers.dst_dev.tolist(),
                       sched.transfers.bytes.tolist()):
        want[(a, c)][0] += b
        want[(a, c)][1] += 1
    for a in range(K):
        for c in range(K):
            if a != c:
                assert page.values[f"comm[{a}][{c}]"] == f"{want[(a, c)][0]}/{want[(a, c)][1]}"


def test_memory_section_lists_the_largest_tensors_at_each_peak(rendered):
    g, cluster, plan, sched, timings, text, page = rendered
    for d in range(cluster.num_devices):
        items, n, total = top_live(g, sched, d)
        assert sched.persistent_bytes[d] + total == sched.peak_bytes[d]    # what is listed explains the peak
        assert [i.bytes for i in items] == sorted((i.bytes for i in items), reverse=True)
        if items:
            assert f">{items[0].name.replace('<', '&lt;')}</td>" in text


def test_top_live_on_a_hand_checked_graph():
    """
    a(2, 100 B) --> b(3, 50 B) --> c(1)        device 0: a, b;  device 1: c
    a ----------------------------> c          links: latency 10 us, 100 B/us

    a:0 crosses 2 -> 13; b:0 waits for the link and crosses 13 -> 23.5; c runs 23.5 -> 24.5.
    device 0 peaks at t=2 (a's and b's outputs, 150 B; a's lives until its transfer lands at 13);
    device 1 peaks at t=13 with both received copies (100 + 50).
    """
    g = tiny([("a", 2, 100), ("b", 3, 50), ("c", 1)], [("a", "b"), ("b", "c"), ("a", "c")])
    c = Cluster((Device("g0"), Device("g1")), latency_us=10.0, bandwidth_bytes_per_us=100.0)
    s = simulate(g, c, [0, 0, 1])
    items, n, total = top_live(g, s, 0)
    assert (n, total) == (2, 150) and [(i.name, i.bytes, i.kind) for i in items] == [("a:0", 100, "output"),
                                                                                     ("b:0", 50, "output")]
    items, n, total = top_live(g, s, 1)
    assert s.makespan_us == 24.5 and s.peak_time_us[1] == 13 and total == 150
    assert [i.name for i in items] == ["a:0 (received copy)", "b:0 (received copy)"]
    assert s.transfers.start_us.tolist() == [2, 13] and s.transfers.finish_us.tolist() == [13, 23.5]
    summ = summarize(g, c, s)
    assert summ.speedup == pytest.approx(6.0 / 24.5) and summ.transfers == 2 and summ.bytes_moved == 150
    from pardnn.machine import EDGE
    chain = s.critical_chain()          # c waited 18.5 us for b's tensor (8 of them queued behind a's)
    assert [(g.names[u], g.names[v]) for u, v in zip(chain.src, chain.dst)] == [("b", "c"), ("a", "b")]
    assert chain.kind.tolist() == [EDGE, EDGE] and chain.delay_us.tolist() == [18.5, 0.0]


def test_no_phases_and_one_device(tmp_path):
    g = tiny([("a", 5, 10), ("b", 5, 10)], [("a", "b")])
    c = Cluster.homogeneous(1)
    s = simulate(g, c, [0, 0])
    text = render_report(g, c, None, s, title="tiny <one>")
    page = Page(text)
    assert_self_contained(text, page)
    assert "<title>tiny &lt;one&gt;</title>" in text
    assert float(page.values["speedup"]) == 1.0 and page.values["transfers"] == "0"
    assert "comm-plot" not in page.images          # one device: nothing to draw


def test_aggregated_gantt_for_a_large_graph():
    from pardnn.frontends.synthetic import transformer_training_graph
    g = transformer_training_graph(30_000, seed=1)
    c = Cluster.homogeneous(4)
    plan, s = partition(g, c, method="m-topo")
    text = render_report(g, c, plan, s)
    page = Page(text)
    assert_self_contained(text, page)
    assert "the fraction it was busy" in text                    # drawn per pixel, not per op
    assert len(page.images["gantt"]) < 1_000_000                  # a bounded image, whatever the op count
    assert float(page.values["makespan_us"]) == s.makespan_us


def test_measured_run_section(rendered):
    g, cluster, plan, sched, timings, _, _ = rendered
    run = {"model": "m.onnx", "predicted_us": sched.makespan_us, "measured_us": 1.25 * sched.makespan_us,
           "whole_model_us": 2.0 * sched.makespan_us, "steps": 5, "outputs_match": True,
           "stages": [{"stage": i, "device": d, "device_name": cluster.devices[d].name, "compute_us": 10.0 * (i + 1)}
                      for i, d in enumerate([0, 1, 0])],
           "a_field_from_a_newer_backend": {"x": 1}}
    text = render_report(g, cluster, plan, sched, timings=timings, measured=run)
    page = Page(text)
    assert_self_contained(text, page)
    assert page.sections[-1] == "measured" and "measured-plot" in page.images
    assert float(page.values["measured_us"]) == 1.25 * sched.makespan_us
    assert float(page.values["measured_over_predicted"]) == pytest.approx(1.25)
    assert float(page.values["measured[0]"]) == 40.0 and float(page.values["measured[1]"]) == 20.0
    assert "run_predicted_us" not in page.values          # the run predicted what the report predicts


def test_measured_runs_are_read_tolerantly():
    run = measured_from_dict({"measured_us": 5})
    assert run.measured_us == 5.0 and run.devices == () and run.predicted_us is None
    run = measured_from_dict({"measured_us": 5, "devices": ["a", "b"],
                              "per_device": [{"device": 1, "busy_us": 3}, {"device": 0, "measured_us": 2}]})
    assert [(d.index, d.name, d.measured_us) for d in run.devices] == [(0, "a", 2.0), (1, "b", 3.0)]
    run = measured_from_dict({"measured_us": 5, "per_device": [1.5, 2.5], "steps": "x", "outputs_match": "yes"})
    assert [d.measured_us for d in run.devices] == [1.5, 2.5] and run.steps is None and run.outputs_match is None
    for bad in ([1, 2], {"predicted_us": 3}, {"measured_us": "fast"}, {"measured_us": float("nan")}):
        with pytest.raises(InputError, match="run.json: .*pardnn run --json"):
            measured_from_dict(bad, source="run.json")


def _timeline_of(g, s, stretch: float) -> dict:
    """A measured timeline made from the schedule: every op's start and duration times ``stretch``."""
    start, dur = (stretch * s.start_us).astype(int), (stretch * (s.finish_us - s.start_us)).astype(int)
    return {"devices": [{"device": d, "name": f"tf:{d}",
                         "ops": [[g.names[v], int(start[v]), int(dur[v])] for v in np.flatnonzero(s.device == d)]}
                        for d in range(int(s.device.max()) + 1)]}


def test_measured_timeline_beside_the_predicted_one(rendered):
    g, cluster, plan, sched, timings, _, _ = rendered
    tl = _timeline_of(g, sched, 2.0)
    slow = int(np.flatnonzero(sched.device == 0)[0])
    tl["devices"][0]["ops"][0][2] = int(10 * sched.makespan_us)       # one op takes far longer than predicted
    text = render_report(g, cluster, plan, sched, measured={"measured_us": 1.0, "measured_timeline": tl})
    page = Page(text)
    assert_self_contained(text, page)
    assert "measured-timeline" in page.images and "No measured timeline" not in text
    assert page.texts["departure[0].op"] == g.names[slow]
    assert float(page.values["departure[0].measured_us"]) == int(10 * sched.makespan_us)
    for d, lane in enumerate(tl["devices"]):
        on = np.flatnonzero(sched.device == d)
        assert int(page.values[f"measured_lane[{d}].ops"]) == on.size
        assert float(page.values[f"measured_lane[{d}].busy_us"]) == sum(op[2] for op in lane["ops"])
        end = max(op[1] + op[2] for op in lane["ops"])
        assert float(page.values[f"measured_lane[{d}].end_us"]) == end
        assert page.texts[f"measured_lane[{d}].last_op"] in {op[0] for op in lane["ops"] if op[1] + op[2] == end}


def test_measured_timeline_gaps_on_a_hand_checked_run():
    g = tiny([("a", 5, 10), ("b", 1, 10), ("c", 5, 10)], [("a", "b"), ("b", "c")])
    c = Cluster.homogeneous(1)
    s = simulate(g, c, [0, 0, 0])
    tl = {"devices": [{"device": 0, "name": "cpu", "ops": [["a", 0, 4], ["b", 10, 2], ["c", 30, 1], ["zz", 12, 3]]}]}
    page = Page(render_report(g, c, None, s, measured={"measured_us": 40.0, "measured_timeline": tl}))
    assert page.texts["measured_lane[0].longest_gap"] == "15.0 us at 15.0 us, after zz, before c"
    assert float(page.values["measured_lane[0].idle_us"]) == 31.0 - 10.0    # ops cover 0-4, 10-15, 30-31
    assert page.texts["measured_lane[0].last_op"] == "c"
    assert page.texts["departure[0].op"] == "b"          # 2 us measured, 1 us predicted; a and c ran faster
    assert "departure[1].op" not in page.texts           # only ops slower than predicted; zz is not in the graph


def test_runs_without_a_timeline_say_so_and_still_render():
    g = tiny([("a", 5, 10), ("b", 5, 10)], [("a", "b")])
    c = Cluster.homogeneous(2)
    s = simulate(g, c, [0, 1])
    for run, why in (({"measured_us": 5.0}, "run.json has no &quot;measured_timeline&quot; (a run written before"),
                     ({"measured_us": 5.0, "stages": [{"device": 0, "compute_us": 3.0}]}, "onnxruntime times each "
                                                                                        "stage, not each op")):
        text = render_report(g, c, None, s, measured=measured_from_dict(run, source="run.json"))
        page = Page(text)
        assert_self_contained(text, page)
        assert page.sections[-1] == "measured" and "measured-plot" in page.images
        assert "measured-timeline" not in page.images and "measured_lane[0].ops" not in page.values
        assert text.count("No measured timeline") == 1 and why in text


def test_malformed_measured_timelines_are_input_errors():
    ok = measured_from_dict({"measured_us": 5, "measured_timeline": {"devices": [
        {"device": 1, "name": "b", "ops": [["x", 2, 3], ["y", 0, 1]]}]}})
    (lane,) = ok.lanes
    assert lane.index == 1 and lane.ops == ("x", "y") and lane.finish_us.tolist() == [5.0, 1.0]
    for tl, where in (([], ": expected an object"), ({"devices": [{"ops": 3}]}, r"\.devices\[0\]: "),
                      ({"devices": [{"ops": [["x", 1]]}]}, r"\.devices\[0\]\.ops\[0\]: expected \[name"),
                      ({"devices": [{}, {"ops": [["x", 1, -2]]}]}, r"\.devices\[0\]: "),
                      ({"devices": [{"ops": [["x", 1, -2]]}]}, r"\.devices\[0\]\.ops\[0\]: .*got \['x', 1, -2\]"),
                      ({"devices": [{"ops": [[3, 1, 2]]}]}, r"\.devices\[0\]\.ops\[0\]: ")):
        with pytest.raises(InputError, match=rf"^run.json: measured_timeline{where}"):
            measured_from_dict({"measured_us": 5, "measured_timeline": tl}, source="run.json")
    assert measured_from_dict({"measured_us": 5, "measured_timeline": {"devices": []}}).no_lanes


def test_missing_matplotlib_is_exit_code_6(monkeypatch):
    g = tiny([("a", 1)], [])
    c = Cluster.homogeneous(1)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(MissingDependencyError, match="pip install 'pardnn\\[bench\\]'") as exc:
        render_report(g, c, None, simulate(g, c, [0]))
    assert exc.value.exit_code == 6


# ---------------------------------------------------------------------------
# the binning helpers, against brute force
# ---------------------------------------------------------------------------

intervals = st.lists(st.tuples(st.floats(0, 100, allow_nan=False), st.floats(0, 30, allow_nan=False),
                               st.integers(0, 2)), min_size=0, max_size=40)


@settings(max_examples=150, deadline=None)
@given(intervals, st.lists(st.floats(0, 140, allow_nan=False), min_size=2, max_size=12, unique=True))
def test_busy_by_bin_equals_brute_force(items, cuts):
    edges = np.array(sorted(cuts))
    s = np.array([x[0] for x in items])
    f = s + np.array([x[1] for x in items])
    cat = np.array([x[2] for x in items], dtype=np.int64)
    got = busy_by_bin(s, f, cat, 3, edges)
    want = np.zeros((edges.size - 1, 3))
    for a, b, c in zip(s.tolist(), f.tolist(), cat.tolist()):
        for i in range(edges.size - 1):
            want[i, c] += max(0.0, min(b, edges[i + 1]) - max(a, edges[i]))
    np.testing.assert_allclose(got, want, atol=1e-7)
    np.testing.assert_allclose(busy_time_until(s, f, np.array([1e9])), [float((f - s).sum())], atol=1e-7)


@settings(max_examples=150, deadline=None)
@given(intervals, st.floats(0, 5, allow_nan=False))
def test_merge_runs_covers_every_interval_and_separates_runs(items, tol):
    s = np.array([x[0] for x in items])
    f = s + np.array([x[1] for x in items])
    a, b = merge_runs(s, f, tol)
    assert np.all(a[1:] > b[:-1] + tol)                     # runs are more than tol apart
    for x, y in zip(s.tolist(), f.tolist()):               # and each interval lies inside one run
        assert np.any((a <= x) & (y <= b))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 100, allow_nan=False), st.integers(0, 1000)), min_size=1, max_size=40),
       st.integers(1, 9))
def test_max_envelope_keeps_every_peak(points, bins):
    points.sort(key=lambda p: p[0])
    t = np.array([p[0] for p in points])
    lv = np.array([p[1] for p in points])
    edges = np.linspace(0.0, 100.0, bins + 1)
    got = max_envelope(t, lv, edges)
    for i in range(bins):
        lo, hi = edges[i], edges[i + 1]
        inside = [v for x, v in points if lo <= x < hi or (i == bins - 1 and x == hi)]
        before = [v for x, v in points if x <= lo]
        want = max(inside + before[-1:]) if (inside or before) else lv[0]
        assert got[i] == want
    assert got.max() == lv.max()


def test_report_json_roundtrip_of_values_is_exact(rendered):
    """data-value holds repr(float): reading it back gives the same double."""
    *_, sched, _, _, page = rendered
    assert float(page.values["makespan_us"]) == sched.makespan_us
    assert json.loads(json.dumps(float(page.values["makespan_us"]))) == sched.makespan_us
    assert math.isfinite(float(page.values["serial_us"]))


def test_a_headless_browser_shows_the_embedded_figures(tmp_path):
    """Debian's chromium renders the page offline and the Gantt chart's blue bars reach the screen."""
    import shutil
    import subprocess
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    image = pytest.importorskip("PIL.Image")
    g = load_graph(SAMPLES / "pipedream_gnmt.json.gz")
    c = Cluster.homogeneous(2)
    plan, s = partition(g, c, method="m-topo")
    page = tmp_path / "r.html"
    page.write_text(render_report(g, c, plan, s))
    shot = tmp_path / "shot.png"
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync", "--no-first-run",
                    f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}", "--window-size=1400,1600",
                    page.as_uri()], check=True, capture_output=True, timeout=120)
    px = np.asarray(image.open(shot).convert("RGB")).astype(int)
    assert px.shape[:2] == (1600, 1400)
    blue = np.abs(px - np.array([0x4C, 0x72, 0xB0])).sum(axis=2) < 30      # the ops' colour in the Gantt chart
    assert blue.sum() > 5000


def test_a_report_on_many_devices_draws_the_busiest_and_says_so():
    """Found by a bad-input trial: a 512-device report of a 3-op graph took 4 minutes and wrote 20 MB (a lane,
    a memory panel and a matrix row per device). Past `MAX_DEVICES_DRAWN` devices the sections show that many:
    the timeline those the critical chain runs on, memory the fullest, communication the busiest links' ends."""
    from pardnn.report.figures import MAX_DEVICES_DRAWN

    g = tiny([("a", 1, 1000), ("b", 2, 1000), ("c", 3, 1000)], [("a", "b"), ("b", "c")])
    K = MAX_DEVICES_DRAWN + 8
    cluster = Cluster.homogeneous(K)
    dev = np.array([0, K - 1, 2])
    sched = simulate(g, cluster, dev)
    from pardnn.placement import Placement

    text = render_report(g, cluster, Placement(dev, cluster.names, g.name), sched)
    page = Page(text)
    assert text.count(f"{MAX_DEVICES_DRAWN} of the {K} devices are drawn") == 3
    assert page.values[f"comm[0][{K - 1}]"] == "1000/1" and page.values[f"comm[{K - 1}][2]"] == "1000/1"
    assert sum(1 for k in page.values if k.startswith("comm[")) == MAX_DEVICES_DRAWN * (MAX_DEVICES_DRAWN - 1)
    small = render_report(g, Cluster.homogeneous(8), Placement(dev % 8, Cluster.homogeneous(8).names, g.name),
                          simulate(g, Cluster.homogeneous(8), dev % 8))
    assert "devices are drawn" not in small and sum(1 for k in Page(small).values if k.startswith("comm[")) == 56


def test_an_infeasible_report_counts_the_violations_it_does_not_list():
    """Found by the report trial: a 64-device placement over 100 KiB each broke the model 34 times; the summary
    listed 20 and said nothing of the other 14, so it read as if 20 devices were over."""
    from pardnn.placement import Placement
    from pardnn.report.render import MAX_VIOLATIONS

    K = MAX_VIOLATIONS + 5
    g = tiny([(f"n{i}", 1, 1000) for i in range(K)], [])
    cluster = Cluster.homogeneous(K, memory_bytes=100)
    dev = np.arange(K)
    sched = simulate(g, cluster, dev)
    assert len(sched.violations) == K
    text = render_report(g, cluster, Placement(dev, cluster.names, g.name), sched)
    assert text.count("bytes short</li>") == MAX_VIOLATIONS
    assert f"... and 5 more violations, {K} in all" in text
    few = Cluster.homogeneous(2, memory_bytes=100)
    text = render_report(g, few, Placement(dev % 2, few.names, g.name), simulate(g, few, dev % 2))
    assert "more violations" not in text and text.count("bytes short</li>") == 2
