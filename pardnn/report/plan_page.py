"""``pardnn plan``'s plot: a PNG, or one self-contained HTML page with the table and the figure."""

from __future__ import annotations

from pathlib import Path

from .. import __version__
from ..fileio import atomic_write
from ..units import format_bytes, format_time
from . import figures as F
from .html import Cell, page, para, png_img, section, table


def render_plan_report(plan, *, command: str | None = None) -> str:
    """The page: the figure, then the table (one row per device count), then how it was found."""
    png = F.plan_png(plan)
    rows = []
    for r in plan.rows:
        there = (None if r.min_memory_step_us is None or r.min_memory_step_us <= 0
                 else plan.single_step_us / r.min_memory_step_us)
        rows.append([r.k, "-" if not r.available else "yes" if r.fits else "no",
                     Cell("-" if r.step_us is None else format_time(r.step_us), key=f"step|{r.k}", value=r.step_us),
                     "-" if r.speedup is None else f"{r.speedup:.2f}x",
                     Cell("-" if plan.speedup_bound(r) is None else f"{plan.speedup_bound(r):.2f}x",
                          key=f"at_most|{r.k}", value=plan.speedup_bound(r)),
                     Cell("-" if r.min_memory_bytes is None else format_bytes(r.min_memory_bytes), key=f"min|{r.k}",
                          value=r.min_memory_bytes),
                     "-" if r.min_memory_step_us is None else format_time(r.min_memory_step_us),
                     "-" if there is None else f"{there:.2f}x", format_bytes(r.lower_bound_bytes), r.placements,
                     Cell(r.note, cls="l")])
    mem = plan.memory_text()
    how = (f"Each K uses the first K devices. The step time and speedup come from a pardnn placement at {mem} per "
           f"device (--effort {plan.settings.effort}); the speedup is over the whole graph on one device "
           f"({format_time(plan.single_step_us)}, peak {format_bytes(plan.single_peak_bytes)}); no placement on K "
           f"devices has a larger speedup than \"at most\" (a lower bound on the step time). The smallest memory "
           f"per device is found by bisection to {100 * plan.settings.rel_tol:g}% with fast-effort placements, "
           f"starting below from the memory lower bound and above from the previous K's answer. "
           f"It took {plan.seconds:.1f} s and {plan.placements} placements.")
    verdict = plan.verdict()
    body = section("plan", "Devices, memory and speedup",
                   para(verdict[0].upper() + verdict[1:] + ".", "good" if any(r.fits for r in plan.rows) else "bad")
                   if verdict else "",
                   png_img(png, "memory per device and speedup against K", fig_id="plan-plot"),
                   para(how), para(f"Regenerate with: {command}") if command else "",
                   table(["K", f"fits {mem}", "step time", "speedup", "at most", "smallest memory", "step there",
                          "speedup there", "memory lower bound", "placements", Cell("note", cls="l", header=True)], rows,
                         attrs=' id="plan-table"'))
    return page(f"pardnn plan: {plan.graph}", f"pardnn {__version__}: {plan.nodes:,} ops, {mem} per device.",
                [("plan", "Plan", body)])


def write_plan_plot(plan, path: Path, *, command: str | None = None) -> Path:
    """The figure as PNG when ``path`` ends in ``.png``, else the HTML page; written atomically."""
    if path.name.lower().endswith(".png"):
        return atomic_write(path, F.plan_png(plan))
    return atomic_write(path, render_plan_report(plan, command=command))
