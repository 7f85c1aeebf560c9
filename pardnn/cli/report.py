"""``pardnn report GRAPH PLACEMENT -o report.html``: the HTML report of a placement.

The page itself is `pardnn.report`; this module parses flags, loads the
inputs and writes the file (`pardnn.cli.options.write_placement_report`,
which the ``--report`` of partition and bench use too).
"""

from __future__ import annotations


import click

from ..frontends import input_files
from ..machine import simulate
from ..placement import check_costs, load_placement, note_batch_size
from ..units import format_time, plural
from .options import (OUTPUT_FILE, check_report_path, cluster_options, echo_summary, frontend_options,
                      make_frontend_options, placement_cluster, read_input, write_placement_report)


@click.command(name="report")
@click.argument("graph", type=click.Path(readable=False))
@click.argument("placement", type=click.Path(readable=False))
@click.option("-o", "--output", required=True, type=OUTPUT_FILE,
              help="Where to write the HTML report (one self-contained file).")
@click.option("--measured", "measured_path", type=click.Path(dir_okay=False, readable=False),
              help="A measured run (the JSON `pardnn run --json` prints) to put beside the prediction.")
@click.option("--title", help="Page title (default: the graph's name and the device count).")
@cluster_options
@frontend_options
@click.pass_context
def report_cmd(ctx: click.Context, graph: str, placement: str, output: str, measured_path: str | None,
               title: str | None, cluster_path, devices, memory, speed, bandwidth, latency, device_prefix, fmt,
               signature, profile_steps, batch_size, dims, device_profile, keep_unexecuted) -> None:
    """Write an HTML report of PLACEMENT on GRAPH: timeline, memory, communication.

    The page holds a summary table (step time, speedup over one device, load
    and peak memory per device, bytes moved, pass timings), a Gantt chart of
    every device and link with the critical chain marked, memory over time
    against each capacity with the largest tensors at each peak, and the
    communication matrix. With --measured, predicted against measured step
    time and busy time per device, and, for a TensorFlow `pardnn run --json`,
    the traced step's timeline under the predicted one. Every other figure
    comes from the machine model (`pardnn simulate`).
    Without cluster flags the cluster is the placement's devices with
    unlimited memory; give the flags used for partition to see capacities.
    Needs matplotlib (pip install 'pardnn[bench]').

    \b
    Examples:
      pardnn report sample_graphs/pardnn_vgg16.json.gz vgg.placement.json --memory 2GiB -o vgg.html
      pardnn report model.onnx p.json --dim seq=16 --batch-size 2 --measured run.json -o run.html
    """
    from ..report import load_measured   # the report's modules load when one is written (start-up time)

    check_report_path(output, *input_files(graph, fmt), placement, cluster_path, measured_path)
    progress = ctx.obj["progress"]
    opts = make_frontend_options(None, signature, profile_steps, batch_size, dims, device_profile, keep_unexecuted)
    with progress.stage(f"reading {graph}"):
        g = read_input(graph, fmt, opts)
    pl = load_placement(placement, g)
    check_costs(pl.meta.get("costs"), g.meta, placement, doing="report")
    note_batch_size(pl.meta.get("batch_size"), g.meta, placement, doing="report")
    measured = load_measured(measured_path) if measured_path else None
    cluster, text_form = placement_cluster(placement, pl, cluster_path, devices, memory, speed, bandwidth, latency,
                                           device_prefix)
    if measured is not None:
        measured.check_matches(pl, placement, cluster.num_devices)
    with progress.stage(f"simulating {g.num_nodes:,} ops"):
        sched = simulate(g, cluster, pl)
    write_placement_report(output, g, cluster, pl, sched, progress=progress, measured=measured, title=title)
    over = "" if sched.feasible else f" (INFEASIBLE: {sched.violations[0].message})"
    echo_summary(f"wrote {output}: predicted step time {format_time(sched.makespan_us)} on "
                 f"{plural(cluster.num_devices, 'device')}{over}",
                 outputs=(output,))
