"""``pardnn plan MODEL --memory 16GiB [--devices 1..16]``: for each device count, does it fit, how little memory
per device does it need, and how fast is the step (`pardnn.plan`)."""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

import click

from ..errors import check_interrupt
from ..fileio import check_writable, refuse_overwrite
from ..frontends import input_files
from ..plan import DEFAULT_DEVICES, SEARCH_EFFORT, DevicePlan, PlanSettings, parse_device_counts, plan_devices
from ..units import format_bytes, format_time, parse_size
from .options import (OUTPUT_FILE, FiniteFloat, build_cluster, echo_json, echo_summary, frontend_options,
                      make_frontend_options, read_input)

PLOT_SUFFIXES = (".png", ".html", ".htm")


def _counts(_ctx: click.Context, _param: click.Parameter, value: str | None) -> tuple[int, ...] | None:
    if value is None:
        return None
    try:
        return parse_device_counts(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _memory(_ctx: click.Context, _param: click.Parameter, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return parse_size(value)
    except ValueError as exc:
        raise click.BadParameter(f"{exc} (one size for every device, e.g. 16GiB)") from None


def _speedup(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def plan_table(plan: DevicePlan, read_seconds: float | None = None, model: str | None = None) -> str:
    """The plan as the command prints it; ``read_seconds``: the time reading ``model`` took before the plan."""
    mem = plan.memory_text()
    fit_head = f"fits {mem}" if mem != "unlimited memory" else "fits"
    lines = [f"{plan.graph}: {plan.nodes:,} ops, {mem} per device, pardnn at --effort {plan.settings.effort}",
             f"one device: step {format_time(plan.single_step_us)}, peak {format_bytes(plan.single_peak_bytes)}"]
    rows = [("K", fit_head, "step time", "speedup", "at most", "smallest memory", "step there", "speedup there")]
    for r in plan.rows:
        at_most = _speedup(plan.speedup_bound(r))
        if not r.available:
            rows.append((str(r.k), "-", "-", "-", at_most, "-", "-", "-"))
            continue
        there = (None if r.min_memory_step_us is None or r.min_memory_step_us <= 0
                 else plan.single_step_us / r.min_memory_step_us)
        rows.append((str(r.k), "yes" if r.fits else "no",
                     "-" if r.step_us is None else format_time(r.step_us), _speedup(r.speedup), at_most,
                     "not found" if r.min_memory_bytes is None and plan.settings.search
                     else "-" if r.min_memory_bytes is None else format_bytes(r.min_memory_bytes),
                     "-" if r.min_memory_step_us is None else format_time(r.min_memory_step_us), _speedup(there)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    notes = {r.k: r.note for r in plan.rows}
    for i, row in enumerate(rows):
        cells = [row[0].rjust(widths[0]), row[1].ljust(widths[1])] + [c.rjust(w) for c, w in zip(row[2:], widths[2:])]
        note = notes.get(int(row[0])) if i else None
        lines.append("  ".join(cells) + (f"  ({note})" if note else ""))
    verdict = plan.verdict()
    if verdict is not None:
        lines.append(verdict)
    lines.append("at most: the speedup no placement on K devices beats, whatever its memory (a lower bound on "
                 "the step time)")
    if plan.settings.search:
        lines.append(f"smallest memory: bisection to {100 * plan.settings.rel_tol:g}% with --effort {SEARCH_EFFORT} "
                     f"probes; step there: a --effort {plan.settings.effort} placement at that memory")
    if read_seconds is None:
        lines.append(f"took {plan.seconds:.1f} s ({plan.placements} placements)")
    else:       # the whole command's time, as the user waits for it: reading a framework model can take a while
        lines.append(f"took {read_seconds + plan.seconds:.1f} s: {read_seconds:.1f} s reading {model}, "
                     f"{plan.seconds:.1f} s for {plan.placements} placements")
    return "\n".join(lines)


@click.command("plan")
@click.argument("model", type=click.Path(readable=False))
@click.option("--devices", "-k", "counts", callback=_counts, metavar="RANGE",
              help="Device counts to try: a range 1..16 or a list 1,2,4,8 [default: 1..8; with a --cluster of N "
                   "devices, 1..N up to 8].")
@click.option("--memory", "-m", callback=_memory,
              help="Memory per device, e.g. 16GiB (omitted: unlimited, or the --cluster file's).")
@click.option("--cluster", "cluster_path", type=click.Path(dir_okay=False, readable=False),
              help="A pardnn.cluster JSON file: K uses its first K devices, and its device count bounds K.")
@click.option("--speed", type=FiniteFloat(min=0, min_open=True),
              help="Relative speed of every device (default 1).")
@click.option("--bandwidth", help="Link bandwidth: 12GB/s, 100Gbit/s, ... (default 12GB/s).")
@click.option("--latency", help="Link latency: 25us, 0.01ms, ... (default 25us).")
@click.option("--effort", type=click.Choice(["fast", "default", "best"]), default="fast", show_default=True,
              help="The effort of the placement at --memory, which gives the step times (the memory search always "
                   "uses fast).")
@click.option("--tolerance", type=FiniteFloat(0.005, 0.5), default=0.05, show_default=True,
              help="Relative precision of the smallest memory per device.")
@click.option("--search/--no-search", default=True, show_default=True,
              help="Find the smallest memory per device for each K (several placements per K).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the table.")
@click.option("-o", "--plot", "plot_path", type=OUTPUT_FILE,
              help="Also draw memory per device and speedup against K: a .png image, or an .html page with the "
                   "table (needs matplotlib).")
@frontend_options
@click.pass_context
def plan_cmd(ctx: click.Context, model: str, counts, memory, cluster_path, speed, bandwidth, latency, effort: str,
             tolerance: float, search: bool, as_json: bool, plot_path, fmt, signature, profile_steps, batch_size, dims,
             device_profile, keep_unexecuted) -> None:
    """How many devices MODEL needs, and what each count buys.

    For each device count K: whether a placement fits --memory per device,
    its predicted step time and speedup over one device, and the smallest
    memory per device at which pardnn finds a fitting placement (a
    bisection; each K starts from the previous answer). MODEL is anything
    `pardnn partition` reads. Exit code 0 whether or not anything fits.

    \b
    Examples:
      pardnn plan sample_graphs/pardnn_vgg16.json.gz --memory 2GiB
      pardnn plan model.onnx --batch-size 32 --memory 16GiB --devices 1,2,4,8 -o plan.html
      pardnn plan sample_graphs/tf_resnet14.json.gz --memory 16MiB --devices 2..6 --json
    """
    if plot_path:
        if not plot_path.lower().endswith(PLOT_SUFFIXES):
            raise click.BadParameter(f"{plot_path}: give a .png or .html file", param_hint="-o/--plot")
        refuse_overwrite(plot_path, *input_files(model, fmt), cluster_path)
        check_writable(plot_path)
        from ..report.figures import has_matplotlib
        if not has_matplotlib():
            click.echo(f"pardnn: note: the plot needs matplotlib (pip install 'pardnn[bench]'); {plot_path} will not "
                       f"be written", err=True)
            plot_path = None
    if cluster_path:
        if speed is not None or bandwidth is not None or latency is not None:
            raise click.UsageError("--cluster cannot be combined with --speed/--bandwidth/--latency")
        cluster = build_cluster(cluster_path, None, None if memory is None else str(memory), None, None, None, None)
        if counts is None:
            counts = tuple(k for k in DEFAULT_DEVICES if k <= cluster.num_devices)
        elif max(counts) > cluster.num_devices:
            raise click.BadParameter(f"{cluster_path} has {cluster.num_devices} devices, fewer than {max(counts)}",
                                     param_hint="--devices")
    else:
        counts = counts or DEFAULT_DEVICES
        cluster = build_cluster(None, max(counts), None if memory is None else str(memory),
                                None if speed is None else str(speed), bandwidth, latency, None)
    progress = ctx.obj["progress"]
    t0 = time.perf_counter()
    with progress.stage(f"reading {model}"):
        g = read_input(model, fmt, make_frontend_options(None, signature, profile_steps, batch_size, dims,
                                                          device_profile, keep_unexecuted))
    read_seconds = time.perf_counter() - t0
    result = plan_devices(g, cluster, PlanSettings(counts=counts, effort=effort, rel_tol=tolerance, search=search),
                          progress=progress)
    check_interrupt()   # a Ctrl-C that something swallowed: no result printed (as no file written)
    if as_json:
        echo_json({**result.to_dict(), "read_seconds": read_seconds}, outputs=(plot_path,))
    else:
        echo_summary(plan_table(result, read_seconds, model), outputs=(plot_path,))
    if plot_path:
        # the command line, when this is the pardnn program (not the API or a test runner)
        command = ("pardnn " + " ".join(shlex.quote(a) for a in sys.argv[1:])
                   if Path(sys.argv[0]).name == "pardnn" else None)
        with progress.stage(f"writing {plot_path}"):
            from ..report.plan_page import write_plan_plot
            written = write_plan_plot(result, Path(plot_path), command=command)
        if as_json:
            click.echo(f"wrote {written}", err=True)
        else:
            echo_summary(f"wrote {written}", outputs=(plot_path,))
