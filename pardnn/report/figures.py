"""The report's figures, drawn with matplotlib (imported here only) and returned as PNG bytes.

Figures are built on `matplotlib.figure.Figure` directly (no pyplot, so no
global state), rendered by the Agg backend. Each function stays legible on
200,000-op graphs: per lane it draws one artist per category, never one per
op, and past `EXACT_LIMIT` intervals it draws each lane's busy fraction per
pixel-wide bin instead of the intervals themselves (`pardnn.report.timeline`).
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..errors import MissingDependencyError
from ..machine import Schedule
from ..units import format_bytes
from .timeline import busy_by_bin, max_envelope, merge_runs

PHASE_LABELS = ("forward", "backward", "optimizer", "phase unknown")
PHASE_COLORS = ("#4C72B0", "#DD8452", "#55A868", "#A0A0A0")
OP_COLOR = "#4C72B0"
TRANSFER_COLOR = "#8172B3"
CHAIN_COLOR = "#111111"
CAPACITY_COLOR = "#C44E52"

EXACT_LIMIT = 4000
"""Up to this many ops and transfers in all, each is drawn as its own rectangle."""
BINS = 1400
"""Time bins (about one per pixel) for aggregated lanes and memory curves."""
MAX_LINK_LANES = 16
"""At most this many device-to-device links get a lane of their own (the busiest by bytes)."""
MAX_CONNECTORS = 400
"""Cross-device hops of the critical chain drawn as connecting lines, at most."""
DPI = 100
MAX_DEVICES_DRAWN = 32
"""On a cluster of more devices, the timeline, the memory panels and the communication matrix show this many
(`devices_drawn`), and say so: one lane or panel per device made a 512-device report of a 3-op graph take
4 minutes and 20 MB."""


def devices_drawn(score: np.ndarray, first: np.ndarray | None = None, limit: int = MAX_DEVICES_DRAWN
                  ) -> tuple[np.ndarray, str]:
    """All devices when there are at most ``limit``; else the ``limit`` with the largest ``score`` (those in
    ``first`` before the rest; ties: the lower index), in device order, and a note saying so."""
    K = score.size
    if K <= limit:
        return np.arange(K), ""
    pri = np.zeros(K, dtype=bool) if first is None else np.isin(np.arange(K), first)
    keep = np.sort(np.lexsort((np.arange(K), -score, ~pri))[:limit])
    return keep, f"{limit} of the {K:,} devices are drawn"



def require_matplotlib():
    """The `matplotlib.figure.Figure` class, or `MissingDependencyError` (exit code 6)."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise MissingDependencyError("the HTML report needs matplotlib: pip install 'pardnn[bench]' "
                                     "(or 'pardnn[dev]')") from None
    return Figure


def has_matplotlib() -> bool:
    """Whether matplotlib can be imported (commands whose plot is optional check this first)."""
    try:
        require_matplotlib()
    except MissingDependencyError:
        return False
    return True


def png_bytes(fig) -> bytes:
    """The figure as PNG bytes, with no metadata (so the same figure gives the same bytes)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()


def _tight_layout(fig) -> None:
    """``fig.tight_layout()``, every text first made one matplotlib can measure: a graph, device or op type named
    with a lone surrogate (``"a\\ud800"``, valid JSON) made its font code raise a TypeError (an internal error);
    such a character is shown as its escape."""
    from matplotlib.text import Text
    from matplotlib.ticker import FixedFormatter, FuncFormatter

    def shown(text):
        return text.encode("utf-8", "backslashreplace").decode("utf-8") if isinstance(text, str) else text

    for t in fig.findobj(Text):
        if shown(t.get_text()) != t.get_text():
            t.set_text(shown(t.get_text()))
    for ax in fig.axes:     # tick labels (device names) are made again when drawn, by their formatter
        for axis in (ax.xaxis, ax.yaxis):
            fmt = axis.get_major_formatter()
            if isinstance(fmt, (FixedFormatter, FuncFormatter)):
                axis.set_major_formatter(FuncFormatter(lambda x, pos, fmt=fmt: shown(fmt(x, pos))))
    fig.tight_layout()


def time_unit(span_us: float) -> tuple[float, str]:
    """``(divisor, unit)`` to show times up to ``span_us`` readably."""
    if span_us >= 1e6:
        return 1e6, "s"
    if span_us >= 1e3:
        return 1e3, "ms"
    return 1.0, "us"


def byte_unit(n: float) -> tuple[float, str]:
    for unit, div in (("TiB", 2.0 ** 40), ("GiB", 2.0 ** 30), ("MiB", 2.0 ** 20), ("KiB", 2.0 ** 10)):
        if n >= div:
            return div, unit
    return 1.0, "B"


@dataclass(frozen=True)
class ChainMarks:
    """The critical chain as the Gantt chart marks it: ops, transfers and the hops between devices."""

    ops: np.ndarray            # node ids on the chain
    transfers: np.ndarray      # transfer rows on the chain
    hops: tuple[tuple[float, int, float, int], ...]   # (time from, device from, time to, device to)


def chain_marks(g, schedule: Schedule, chain) -> ChainMarks:
    """Which ops, transfers and cross-device hops a `pardnn.passes.refine.Chain` passes through."""
    s = schedule
    if len(chain) == 0:
        last = np.array([int(np.argmax(s.finish_us))]) if s.finish_us.size else np.zeros(0, np.int64)
        return ChainMarks(last, np.zeros(0, np.int64), ())
    ops = np.unique(np.concatenate([chain.src, chain.dst]))
    t = s.transfers
    by_key: dict[tuple[int, int], list[int]] = {}
    cross = [(int(u), int(v)) for u, v in zip(chain.src.tolist(), chain.dst.tolist()) if s.device[u] != s.device[v]]
    wanted = {(u, int(s.device[v])) for u, v in cross}
    if wanted and len(t):
        for row, key in enumerate(zip(t.src.tolist(), t.dst_dev.tolist())):
            if key in wanted:
                by_key.setdefault(key, []).append(row)
    rows, hops = [], []
    for u, v in cross:
        cands = [r for r in by_key.get((u, int(s.device[v])), []) if t.finish_us[r] <= s.start_us[v] + 1e-6]
        if cands:
            rows.append(max(cands, key=lambda r: (t.finish_us[r], -r)))
        hops.append((float(s.finish_us[u]), int(s.device[u]), float(s.start_us[v]), int(s.device[v])))
    return ChainMarks(ops, np.unique(np.asarray(rows, dtype=np.int64)), tuple(hops))


def _lane_bars(ax, y: float, h: float, start: np.ndarray, finish: np.ndarray, cat: np.ndarray, colors: Sequence[str],
               exact: bool, edges: np.ndarray, scale: float) -> None:
    if exact:
        for c, color in enumerate(colors):
            sel = (cat == c) & (finish > start)
            if sel.any():
                xr = np.column_stack([start[sel] / scale, (finish[sel] - start[sel]) / scale])
                ax.broken_barh(xr, (y - h / 2, h), facecolors=color, edgecolors="none", linewidth=0)
        return
    busy = busy_by_bin(start, finish, cat, len(colors), edges)
    frac = np.clip(busy / np.diff(edges)[:, None], 0.0, 1.0)
    lo = np.zeros(frac.shape[0])
    x = edges / scale
    for c, color in enumerate(colors):
        if not frac[:, c].any():
            continue
        hi = lo + frac[:, c]
        ax.fill_between(x, y - h / 2 + h * np.append(lo, lo[-1]), y - h / 2 + h * np.append(hi, hi[-1]),
                        step="post", facecolor=color, edgecolor="none", linewidth=0)
        lo = hi


def gantt_png(g, cluster, schedule: Schedule, marks: ChainMarks, phase: np.ndarray | None) -> tuple[bytes, list[str]]:
    """The per-device timeline with transfer lanes and the critical chain; returns PNG bytes and notes."""
    Figure = require_matplotlib()
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    s = schedule
    K = cluster.num_devices
    notes: list[str] = []
    span = max(float(s.makespan_us), 1e-9)
    scale, unit = time_unit(span)
    if phase is None:
        cat = np.zeros(g.num_nodes, dtype=np.int64)
        colors = (OP_COLOR,)
        legend = [(OP_COLOR, "op (the graph has no phase information)")]
    else:
        cat = np.asarray(phase, dtype=np.int64)
        present = np.bincount(cat, minlength=len(PHASE_COLORS)) > 0
        colors = PHASE_COLORS
        legend = [(c, lab) for c, lab, p in zip(PHASE_COLORS, PHASE_LABELS, present) if p]
    t = s.transfers
    nbytes = np.zeros((K, K), dtype=np.int64)
    np.add.at(nbytes, (t.src_dev, t.dst_dev), t.bytes)
    ncount = np.zeros((K, K), dtype=np.int64)
    np.add.at(ncount, (t.src_dev, t.dst_dev), 1)
    used = [(a, c) for a in range(K) for c in range(K) if ncount[a, c] > 0]
    if len(used) > MAX_LINK_LANES:
        on_chain = set(zip(t.src_dev[marks.transfers].tolist(), t.dst_dev[marks.transfers].tolist()))
        keep = sorted(used, key=lambda p: (p not in on_chain, -nbytes[p], p))[:MAX_LINK_LANES]
        notes.append(f"{len(used) - MAX_LINK_LANES:,} of {len(used):,} links in use are not drawn (those the critical "
                     f"chain crosses come first, then those carrying the most bytes).")
        used = sorted(keep)
    busy = np.bincount(s.device, weights=s.finish_us - s.start_us, minlength=K)
    shown, note = devices_drawn(busy, np.unique(s.device[marks.ops]))
    if note:
        notes.append(f"{note}: those the critical chain runs on, then the busiest.")
    lane_of_dev = {int(d): i for i, d in enumerate(shown)}
    D = len(shown)
    lanes = D + len(used)
    exact = g.num_nodes + len(t) <= EXACT_LIMIT
    if not exact:
        notes.append(f"{g.num_nodes:,} ops and {len(t):,} transfers: each lane shows, per pixel-wide slice of "
                     "time, the fraction it was busy, stacked by phase.")
    edges = np.linspace(0.0, span, BINS + 1)
    # lanes from the top: devices 1.0 apart, then (after a gap) links 0.55 apart
    link_step, gap = 0.55, (0.5 if used else 0.0)
    top = D + gap + link_step * len(used)
    ys_lane = [top - 0.5 - d for d in range(D)] + [top - D - gap - link_step * (i + 0.5) for i in range(len(used))]

    def ypos(i: int) -> float:
        return ys_lane[i]

    fig = Figure(figsize=(14, 1.5 + 0.42 * top))
    ax = fig.subplots()
    h = 0.78
    for i, d in enumerate(shown):
        sel = s.device == d
        _lane_bars(ax, ypos(i), h, s.start_us[sel], s.finish_us[sel], cat[sel], colors, exact, edges, scale)
    lane_of_link = {}
    for i, (a, c) in enumerate(used):
        lane_of_link[(a, c)] = D + i
        sel = (t.src_dev == a) & (t.dst_dev == c)
        _lane_bars(ax, ypos(D + i), link_step * 0.75, t.start_us[sel], t.finish_us[sel],
                   np.zeros(int(sel.sum()), np.int64), (TRANSFER_COLOR,), exact, edges, scale)
    # the critical chain: a bar along the top of each lane where the chain runs, and its hops
    tol = 0.0 if exact else span / BINS
    ys, x0, x1 = [], [], []
    for i, d in enumerate(shown):
        on = marks.ops[s.device[marks.ops] == d]
        a, b = merge_runs(s.start_us[on], s.finish_us[on], tol)
        ys += [ypos(i) + h / 2 + 0.06] * a.size
        x0 += (a / scale).tolist()
        x1 += (np.maximum(b, a + tol) / scale).tolist()
    for (a_dev, c_dev), lane in lane_of_link.items():
        rows = marks.transfers[(t.src_dev[marks.transfers] == a_dev) & (t.dst_dev[marks.transfers] == c_dev)]
        a, b = merge_runs(t.start_us[rows], t.finish_us[rows], tol)
        ys += [ypos(lane) + link_step * 0.375 + 0.05] * a.size
        x0 += (a / scale).tolist()
        x1 += (b / scale).tolist()
    if ys:
        ax.hlines(ys, x0, x1, colors=CHAIN_COLOR, linewidth=2.2)
    if marks.hops and len(marks.hops) <= MAX_CONNECTORS:
        from matplotlib.collections import LineCollection
        segs = [[(t0 / scale, ypos(lane_of_dev[d0]) + h / 2 + 0.06), (t1 / scale, ypos(lane_of_dev[d1]) + h / 2 + 0.06)]
                for t0, d0, t1, d1 in marks.hops if d0 in lane_of_dev and d1 in lane_of_dev]
        ax.add_collection(LineCollection(segs, colors=CHAIN_COLOR, linewidths=0.8, linestyles="dashed"))
    elif marks.hops:
        notes.append(f"the critical chain crosses devices {len(marks.hops):,} times; the crossings are not drawn.")
    names = [f"{d}: {cluster.devices[d].name}" for d in shown] + [f"link {a} \u2192 {c}" for a, c in used]
    ax.set_yticks([ypos(i) for i in range(lanes)])
    ax.set_yticklabels(names, fontsize=8)
    ax.set_ylim(-0.1, top + 0.45)
    ax.set_xlim(0, span / scale * 1.005)
    ax.set_xlabel(f"time ({unit})")
    ax.grid(axis="x", color="#e0e0e0", linewidth=0.6)
    ax.set_axisbelow(True)
    handles = [Patch(facecolor=c, label=lab) for c, lab in legend]
    if used:
        handles.append(Patch(facecolor=TRANSFER_COLOR, label="transfer"))
    handles.append(Line2D([0], [0], color=CHAIN_COLOR, linewidth=2.2, label="critical chain"))
    ax.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=len(handles), fontsize=8,
              frameon=False)
    _tight_layout(fig)
    return png_bytes(fig), notes


def memory_order(cluster, schedule: Schedule) -> tuple[np.ndarray, str]:
    """The devices the memory section shows (`devices_drawn`: the fullest, by peak over capacity, or by peak
    where memory is unlimited), and its note."""
    cap = cluster.capacity
    peak = schedule.peak_bytes.astype(np.float64)
    return devices_drawn(np.where(np.isfinite(cap), peak / np.maximum(cap, 1.0), peak / max(float(peak.max()), 1.0)))


def memory_png(cluster, schedule: Schedule, shown: np.ndarray | None = None) -> bytes:
    """Memory over the step, one panel per device (``shown``; default: every device), with its capacity and its
    peak marked."""
    Figure = require_matplotlib()
    s = schedule
    shown = np.arange(cluster.num_devices) if shown is None else shown
    K = len(shown)
    span = max(float(s.makespan_us), 1e-9)
    scale, unit = time_unit(span)
    cap = cluster.capacity
    top = max(float(s.peak_bytes[shown].max()) if K else 0.0,
              max((c for c in cap[shown] if math.isfinite(c)), default=0.0), 1.0)
    bdiv, bunit = byte_unit(top)
    ncols = 1 if K <= 8 else 2
    nrows = math.ceil(K / ncols)
    fig = Figure(figsize=(14, 0.7 + 1.75 * nrows))
    axes = fig.subplots(nrows, ncols, sharex=True, squeeze=False)
    edges = np.linspace(0.0, span, BINS + 1)
    for i, d in enumerate(int(x) for x in shown):
        ax = axes[i % nrows, i // nrows]
        t, b = s.timeline(d)
        if t.size > 2 * BINS:
            env = max_envelope(t, b, edges)
            x, y = edges, np.append(env, env[-1])
        else:
            x, y = np.append(t, span), np.append(b, b[-1])
        ax.fill_between(x / scale, 0, y / bdiv, step="post", facecolor="#4C72B0", alpha=0.25, linewidth=0)
        ax.step(x / scale, y / bdiv, where="post", color="#4C72B0", linewidth=1.0)
        if s.persistent_bytes[d]:
            ax.axhline(s.persistent_bytes[d] / bdiv, color="#777777", linewidth=0.8, linestyle=":")
        if math.isfinite(cap[d]):
            ax.axhline(cap[d] / bdiv, color=CAPACITY_COLOR, linewidth=1.2, linestyle="--")
        over = s.peak_bytes[d] > cap[d]
        ax.plot([s.peak_time_us[d] / scale], [s.peak_bytes[d] / bdiv], marker="v",
                color=CAPACITY_COLOR if over else "#222222", markersize=6)
        cap_txt = format_bytes(cap[d]) if math.isfinite(cap[d]) else "unlimited"
        ax.set_title(f"{d}: {cluster.devices[d].name}   peak {format_bytes(s.peak_bytes[d])} of {cap_txt}"
                     + ("  OVER CAPACITY" if over else ""), fontsize=9, loc="left",
                     color=CAPACITY_COLOR if over else "#222222")
        ax.set_ylim(0, top / bdiv * 1.08)
        ax.set_ylabel(bunit, fontsize=8)
        ax.tick_params(labelsize=8)
        ax.grid(color="#e8e8e8", linewidth=0.6)
    for i in range(K, nrows * ncols):
        axes[i % nrows, i // nrows].set_visible(False)
    for ax in axes[-1, :]:
        ax.set_xlabel(f"time ({unit})")
    ax0 = axes[0, 0]
    from matplotlib.lines import Line2D
    handles = [Line2D([0], [0], color="#4C72B0", label="memory in use"),
               Line2D([0], [0], color=CAPACITY_COLOR, linestyle="--", label="capacity"),
               Line2D([0], [0], color="#777777", linestyle=":", label="persistent (weights, optimizer state)"),
               Line2D([0], [0], marker="v", color="#222222", linestyle="none", label="peak")]
    ax0.legend(handles=handles, loc="lower right", bbox_to_anchor=(1.0, 1.12), ncol=4, fontsize=8, frameon=False)
    _tight_layout(fig)
    return png_bytes(fig)


def comm_png(index: Sequence[int], nbytes: np.ndarray, count: np.ndarray) -> bytes:
    """A heat map of bytes sent from each device (rows) to each device (columns), counts annotated; ``index``:
    the devices' numbers, in the matrices' order."""
    Figure = require_matplotlib()
    K = len(index)
    size = min(2.6 + 0.55 * K, 10.0)
    fig = Figure(figsize=(size + 1.4, size))
    ax = fig.subplots()
    div, unit = byte_unit(float(nbytes.max()) if nbytes.size else 0.0)
    shown = np.ma.masked_array(nbytes / div, mask=np.eye(K, dtype=bool))
    im = ax.imshow(shown, cmap="Blues", vmin=0)
    cb = fig.colorbar(im, ax=ax, shrink=0.8)
    cb.set_label(f"bytes sent ({unit})")
    if K <= 12:
        hi = float(nbytes.max()) if nbytes.size else 0.0
        for a in range(K):
            for c in range(K):
                if a == c:
                    continue
                dark = hi > 0 and nbytes[a, c] > 0.6 * hi
                ax.text(c, a, f"{format_bytes(nbytes[a, c])}\n{count[a, c]:,} tx", ha="center", va="center",
                        fontsize=8 if K <= 6 else 6.5, color="white" if dark else "#222222")
    ticks = [str(i) for i in index]
    ax.set_xticks(range(K))
    ax.set_xticklabels(ticks)
    ax.set_yticks(range(K))
    ax.set_yticklabels(ticks)
    ax.set_xlabel("to device")
    ax.set_ylabel("from device")
    ax.set_title("bytes (and transfers) from row device to column device", fontsize=9)
    _tight_layout(fig)
    return png_bytes(fig)


def measured_png(labels: Sequence[str], predicted_us: Sequence[float | None],
                 measured_us: Sequence[float | None]) -> bytes:
    """Paired horizontal bars: predicted against measured, one pair per label."""
    Figure = require_matplotlib()
    n = len(labels)
    fig = Figure(figsize=(10, 1.0 + 0.55 * n))
    ax = fig.subplots()
    vals = [v for v in list(predicted_us) + list(measured_us) if v is not None]
    scale, unit = time_unit(max(vals) if vals else 1.0)
    y = np.arange(n)[::-1]
    p = np.array([np.nan if v is None else v / scale for v in predicted_us])
    m = np.array([np.nan if v is None else v / scale for v in measured_us])
    ax.barh(y + 0.2, p, 0.38, color="#4C72B0", label="predicted (machine model)")
    ax.barh(y - 0.2, m, 0.38, color="#DD8452", label="measured")
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=8)
    ax.set_xlabel(f"time ({unit})")
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(axis="x", color="#e0e0e0", linewidth=0.6)
    ax.set_axisbelow(True)
    _tight_layout(fig)
    return png_bytes(fig)


@dataclass(frozen=True, eq=False)
class Lane:
    """One row of a timeline: a label and its intervals, each with a colour category."""

    label: str
    start_us: np.ndarray
    finish_us: np.ndarray
    category: np.ndarray


def timelines_png(panels: Sequence[tuple[str, Sequence[Lane]]], colors: Sequence[str],
                  legend: Sequence[tuple[str, str]], span_us: float) -> bytes:
    """Timelines stacked one panel under another on one time axis (0 to ``span_us``): the predicted step over the
    measured one. Each lane draws its intervals by category, or past `EXACT_LIMIT` intervals in a panel its busy
    fraction per pixel-wide bin, as `gantt_png` does."""
    Figure = require_matplotlib()
    from matplotlib.patches import Patch

    span = max(float(span_us), 1e-9)
    scale, unit = time_unit(span)
    edges = np.linspace(0.0, span, BINS + 1)
    heights = [max(len(lanes), 1) for _, lanes in panels]
    fig = Figure(figsize=(14, 1.4 + 0.42 * sum(heights) + 0.5 * len(panels)))
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False, gridspec_kw={"height_ratios": heights})[:, 0]
    h = 0.78
    for ax, (title, lanes) in zip(axes, panels):
        exact = sum(lane.start_us.size for lane in lanes) <= EXACT_LIMIT
        n = len(lanes)
        for i, lane in enumerate(lanes):
            _lane_bars(ax, n - 1 - i, h, lane.start_us, lane.finish_us, lane.category, colors, exact, edges, scale)
        ax.set_yticks(range(n))
        ax.set_yticklabels([lane.label for lane in reversed(lanes)], fontsize=8)
        ax.set_ylim(-0.6, n - 0.4)
        ax.set_title(title + ("" if exact else "  (busy fraction per pixel-wide slice of time)"), fontsize=9,
                     loc="left")
        ax.grid(axis="x", color="#e0e0e0", linewidth=0.6)
        ax.set_axisbelow(True)
    axes[-1].set_xlim(0, span / scale * 1.005)
    axes[-1].set_xlabel(f"time ({unit})")
    handles = [Patch(facecolor=c, label=lab) for c, lab in legend]
    axes[0].legend(handles=handles, loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=len(handles), fontsize=8,
                   frameon=False)
    _tight_layout(fig)
    return png_bytes(fig)


def plan_png(plan) -> bytes:
    """``pardnn plan``'s figure: memory per device against K (the smallest found, the lower bound and the given
    memory), and the speedup over one device against K (at the given memory, and at the smallest memory)."""
    Figure = require_matplotlib()
    rows = [r for r in plan.rows if r.available]
    ks = [r.k for r in rows]
    fig = Figure(figsize=(10, 4))
    ax_m, ax_s = fig.subplots(1, 2)
    given = sorted({m for m in plan.memory if m is not None})
    values = [r.min_memory_bytes or 0 for r in rows] + [r.lower_bound_bytes for r in rows] + given
    div, unit = byte_unit(max(values, default=0))
    found = [(r.k, r.min_memory_bytes / div) for r in rows if r.min_memory_bytes is not None]
    if found:
        ax_m.plot(*zip(*found), "o-", color=OP_COLOR, label="smallest memory pardnn fits")
    ax_m.plot(ks, [r.lower_bound_bytes / div for r in rows], "--", color="#888888", label="lower bound")
    for m in given:
        ax_m.axhline(m / div, color=CAPACITY_COLOR, lw=1, label=f"given memory ({format_bytes(m)})")
    ax_m.set_xlabel("devices (K)")
    ax_m.set_ylabel(f"memory per device ({unit})")
    ax_m.set_ylim(bottom=0)
    ax_m.legend(fontsize=8)
    at_given = [(r.k, r.speedup) for r in rows if r.speedup is not None]
    at_min = [(r.k, plan.single_step_us / r.min_memory_step_us) for r in rows
              if r.min_memory_step_us is not None and r.min_memory_step_us > 0]
    if at_given:
        ax_s.plot(*zip(*at_given), "o-", color=OP_COLOR, label="at the given memory")
    if at_min:
        ax_s.plot(*zip(*at_min), "s--", color=PHASE_COLORS[1], label="at the smallest memory")
    ax_s.axhline(1.0, color="#888888", lw=1)
    ax_s.set_xlabel("devices (K)")
    ax_s.set_ylabel("speedup over one device")
    ax_s.set_ylim(0, 1.15 * max([1.0] + [y for _, y in at_given + at_min]))
    if at_given or at_min:
        ax_s.legend(fontsize=8)
    for ax in (ax_m, ax_s):
        ax.set_xticks(ks)
        ax.grid(alpha=0.3)
    fig.suptitle(f"{plan.graph}: devices, memory and speedup", fontsize=10)
    _tight_layout(fig)
    return png_bytes(fig)
