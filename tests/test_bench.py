"""`pardnn.bench` itself: regimes, the run over a suite, ratios against the best baseline, the outputs."""

from __future__ import annotations

import json
import math

import pytest

from pardnn import single_device_peak
from pardnn.bench import (GraphSource, bench_cluster, markdown_report, min_feasible_fraction, minimum_need,
                          regime_capacity, run_bench, summary_table, write_outputs)

from .helpers import tiny


def chain_and_branch():
    """w (group g, 4000 B persistent) -> a(10) -> b(30), a -> c(30); b, c -> d(5); outputs 1000 B."""
    return tiny([("w", 1, 0, {"persistent_bytes": 4000, "colocation": "g"}), ("a", 10, 1000), ("b", 30, 1000),
                 ("c", 30, 1000), ("d", 5, 1000)], [("w", "a"), ("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")])


def test_regimes_follow_the_documented_formula():
    assert regime_capacity("loose", 1000, 4, 10) == 2000
    assert regime_capacity("tight", 1000, 4, 10) == math.ceil(1.25 * 1000 / 4)
    assert regime_capacity("tight", 1000, 4, 900) == 900             # never below what the largest unit needs
    with pytest.raises(ValueError):
        regime_capacity("roomy", 1, 1, 1)
    g = chain_and_branch()
    assert minimum_need(g) == 4000 + 1000          # the group's bytes plus the largest op's output
    c = bench_cluster(3, 5000)
    assert c.num_devices == 3 and c.capacity.tolist() == [5000] * 3


def test_a_run_compares_ours_with_the_best_feasible_baseline(tmp_path):
    g = chain_and_branch()
    src = GraphSource("tiny", "sample", "tests", lambda: g)
    dup = GraphSource("tiny-again", "sample", "tests", lambda: g)       # the same graph twice is run once
    res = run_bench([src, dup], methods=["pardnn", "m-topo", "single"], ks=[2], regimes=["loose", "tight"],
                    ours="pardnn", scaling=True)
    assert [x["graph"] for x in res.graphs] == ["tiny"]
    assert len(res.rows) == 2 * 3 and {r.method for r in res.rows} == {"pardnn", "m-topo", "single"}
    for (graph, k, regime), (ratio, best) in res.ratios().items():
        rows = {r.method: r for r in res.rows if (r.graph, r.k, r.regime) == (graph, k, regime)}
        base = min(r.makespan_us for m, r in rows.items() if m != "pardnn" and r.feasible)
        assert ratio == pytest.approx(rows["pardnn"].makespan_us / base)
        assert rows[best].makespan_us == base
    scal = {r.method: r for r in res.scaling}
    assert set(scal) == {"pardnn", "m-topo", "single"}
    peak1 = single_device_peak(g)
    frac, ms = min_feasible_fraction(g, "single", 2, peak1, lo=min(max(minimum_need(g) / peak1, 1 / 2), 2.0))
    assert frac is not None and frac >= 1.0                # one device holds everything: about the whole peak
    assert (frac, ms) == (scal["single"].min_fraction, scal["single"].makespan_us)
    assert "loose" in summary_table(res)
    md = markdown_report(res, command="pardnn bench --test")
    assert "pardnn bench --test" in md and "| regime |" in md
    paths = write_outputs(res, tmp_path / "out")
    assert {p.name for p in paths} >= {"results.csv", "results.json", "scaling.csv"}
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    assert len(data["rows"]) == 6


def test_the_makespan_plot_gives_each_method_its_own_colour_and_keeps_its_legend_off_the_bars():
    """Found by the report trial: with the 15 methods of `--list-methods` the default cycle of ten colours gave
    m-sct pardnn's blue and m-topo cpop's orange, and the legend sat inside the axes, over the bars clipped at 2x."""
    pytest.importorskip("matplotlib")
    from matplotlib.colors import to_hex

    from pardnn.bench import BenchResult, Row, makespan_figure
    from pardnn.methods import method_names

    methods = sorted(method_names())
    assert len(methods) > 10
    rows = [Row("g", "sample", 5, 2, regime, 1000, m, 100.0 * (1 + i / 10), True, 0.5, 0.1)
            for regime in ("loose", "tight") for i, m in enumerate(methods)]
    fig = makespan_figure(BenchResult(rows, [], "pardnn", [{"graph": "g"}]))
    try:
        fig.canvas.draw()
        for ax in fig.axes:
            colours = {}
            for bars in ax.containers:
                colours[bars.get_label()] = to_hex(bars.patches[0].get_facecolor())
            assert set(colours) == set(methods) and len(set(colours.values())) == len(methods)
            legend = ax.get_legend().get_window_extent()
            assert not legend.overlaps(ax.get_window_extent())
    finally:
        import matplotlib.pyplot as plt
        plt.close(fig)
