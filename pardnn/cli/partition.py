"""``pardnn partition`` and ``pardnn simulate``: place a graph's ops, or simulate a placement, and print the table."""

from __future__ import annotations

import math
import time

import click
import numpy as np

from ..api import DEFAULT_METHOD, methods, partition as run_partition
from ..bounds import how_far_above, makespan_lower_bound
from ..cluster import Cluster
from ..errors import InfeasibleError, check_interrupt
from ..fileio import check_writable, output_transaction, refuse_overwrite, write_json
from ..frontends import input_files
from ..machine import simulate as run_sim
from ..passes import MAX_EVALS
from ..placement import (Placement, check_costs, check_place_names, costs_of, is_place_text, load_placement,
                         note_batch_size, save_placement)
from ..units import format_bytes, format_time, plural
from .options import (OUTPUT_FILE, build_cluster, check_report_path, cluster_options, distinct_outputs, echo_json,
                      echo_summary, frontend_options, make_frontend_options, placement_cluster, read_input,
                      write_placement_report)


MAX_LISTED = 10
"""Violations the summary lists; a line counts the rest."""


def _placement_table(g, cluster: Cluster, sched, *, title: str, lower_us: float,
                     seconds: float | None = None) -> str:
    serial = float(g.time_us.sum() / cluster.speed.max()) if g.num_nodes else 0.0
    counts = np.bincount(sched.device, minlength=cluster.num_devices)
    load = sched.compute_load_us()
    lines = [title]
    speedup = serial / sched.makespan_us if sched.makespan_us > 0 else 1.0
    lines.append(f"predicted step time  {format_time(sched.makespan_us)}  "
                 f"(speedup {speedup:.2f}x over all compute in series, {format_time(serial)})")
    lines.append(f"lower bound          {format_time(lower_us)}  (no placement on these devices is faster; "
                 f"this one {how_far_above(float(sched.makespan_us), lower_us)})")
    if seconds is not None:
        lines.append(f"placement time       {seconds:.2f} s")
    lines.append(f"transfers            {len(sched.transfers):,} ({format_bytes(sched.bytes_moved())})")
    name_w = max(len("device"), *(len(d.name) for d in cluster.devices))
    lines.append(f"{'device':<{name_w}}  {'ops':>8}  {'compute':>11}  {'peak memory':>11}  {'capacity':>11}  use")
    for d, dev in enumerate(cluster.devices):
        cap = cluster.capacity[d]
        use = f"{100 * sched.peak_bytes[d] / cap:5.1f}%" if math.isfinite(cap) and cap > 0 else "    -"
        flag = "  OVER" if sched.peak_bytes[d] > cap else ""
        lines.append(f"{dev.name:<{name_w}}  {counts[d]:>8,}  {format_time(load[d]):>11}  "
                     f"{format_bytes(sched.peak_bytes[d]):>11}  {format_bytes(cap):>11}  {use}{flag}")
    lines.append(f"feasible             {'yes' if sched.feasible else 'NO'}")
    for v in sched.violations[:MAX_LISTED]:
        lines.append(f"  - {v.message}")
    if len(sched.violations) > MAX_LISTED:      # a review: the rest were dropped without a word
        lines.append(f"  ... and {len(sched.violations) - MAX_LISTED:,} more, {len(sched.violations):,} in all "
                     "(simulate --json lists them; the table marks every device OVER)")
    return "\n".join(lines)


def _check_method(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """A usage error (exit 2) for a method that does not exist, as click reports a bad choice."""
    if value is None:
        return None
    known = methods()
    if value not in known:
        raise click.BadParameter(f"{value!r} is not one of {', '.join(known)}")
    return value


def _check_pipeline(spec: str | None) -> str | None:
    """A usage error (exit 2) for a pipeline spec that names an unknown pass or option."""
    if spec is None:
        return None
    from ..pipeline import parse_pipeline

    from ..pipeline import order_problem

    try:
        problem = order_problem(parse_pipeline(spec))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--pipeline") from None
    if problem:
        raise click.BadParameter(problem, param_hint="--pipeline")
    return spec


def _list_methods(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value:
        return
    click.echo("\n".join(methods()))
    ctx.exit()


def _echo_timings(time_passes: bool, timings: list) -> None:
    if time_passes and timings:
        from ..pipeline import format_timings
        click.echo(format_timings(timings), err=True)


@click.command()
@click.argument("input_path", metavar="INPUT", type=click.Path(readable=False))
@click.option("-o", "--output", required=True, type=OUTPUT_FILE,
              help="Where to write the pardnn.placement JSON (or .place text, by its name).")
@cluster_options
@click.option("--method", default=None, callback=_check_method,
              help="Placement method (default: the ParDNN pipeline). See --list-methods.")
@click.option("--list-methods", is_flag=True, is_eager=True, expose_value=False, callback=_list_methods,
              help="List the placement methods and exit.")
@click.option("--place", "place_path", type=OUTPUT_FILE,
              help="Also write ParDNN's plain 'name device' form here.")
@click.option("--allow-infeasible", is_flag=True,
              help="Write the placement even when it breaks a memory limit (exit code stays 4).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--time-passes", is_flag=True, help="Print each pipeline pass's time on stderr.")
@click.option("--memory-heuristic", type=click.Choice(["auto", "knapsack", "residual"]), default="auto",
              show_default=True, help="Step 2's heuristic: knapsack (ParDNN's I), residual (II), or by graph size.")
@click.option("--refine-evals", type=click.IntRange(min=0, max=MAX_EVALS), default=None,
              help="Simulations the refinement may spend in each of steps 1 and 2 (default: by graph size and "
                   "--effort: at the default effort 7.5e6 to 6e7 / (nodes + edges) for step 1 and 4e7 to 6e7 / "
                   "(nodes + edges) for step 2, up to 150k nodes plus edges; see docs/partitioner.md); fewer is "
                   "faster, more may place better. 0 skips refinement.")
@click.option("--effort", type=click.Choice(["fast", "default", "best"]), default="default", show_default=True,
              help="How hard the refinement searches: fast (a tenth of the simulations, no restarts), default, "
                   "or best (the most simulations, with a placement on half the devices and the default effort's "
                   "as starts, so never worse than default; slowest). Each is deterministic.")
@click.option("--pipeline", "pipeline_spec", metavar="SPEC", callback=lambda c, p, v: _check_pipeline(v),
              help="The pardnn method's passes, e.g. \"slice,map,refine{max_evals=400}\" (default: "
                   "slice,map,seed,refine,memory,refine-mem,best; see docs/partitioner.md). Replaces --memory-heuristic "
                   "--effort and --refine-evals.")
@click.option("--capacity-search/--no-capacity-search", default=True, show_default=True,
              help="When nothing fits, search for the smallest memory that would (several more placements).")
@click.option("--report", "report_path", type=OUTPUT_FILE,
              help="Also write an HTML report here: timeline, memory, communication (see `pardnn report`).")
@frontend_options
@click.pass_context
def partition(ctx: click.Context, input_path: str, output: str, cluster_path, devices, memory, speed, bandwidth,
              latency, device_prefix, method, place_path, allow_infeasible: bool, as_json: bool, time_passes: bool,
              memory_heuristic: str, refine_evals, effort: str, pipeline_spec, capacity_search: bool, report_path, fmt, signature,
              profile_steps, batch_size, dims, device_profile, keep_unexecuted) -> None:
    """Place INPUT's ops on the cluster's devices and write the placement.

    INPUT is a pardnn.graph file or anything `pardnn import` reads. The
    cluster comes from --cluster or from --devices/--memory/... flags.

    \b
    Examples:
      pardnn partition sample_graphs/pardnn_vgg16.json.gz --devices 4 --memory 2GiB -o vgg.placement.json
      pardnn partition graph.json --cluster cluster.json -o placement.json --place placement.place
      pardnn partition sample_graphs/tf_resnet14.json.gz -k 4 --memory 32MiB -o r.json --report r.html
    """
    method = method or DEFAULT_METHOD
    tuned = {"--pipeline": pipeline_spec is not None, "--refine-evals": refine_evals is not None,
             "--memory-heuristic": memory_heuristic != "auto", "--effort": effort != "default",
             "--time-passes": time_passes}
    if method != DEFAULT_METHOD and any(tuned.values()):
        raise click.UsageError(f"{next(k for k, v in tuned.items() if v)} applies to the {DEFAULT_METHOD} method "
                               f"only, not to {method}")
    if pipeline_spec is not None and (tuned["--refine-evals"] or tuned["--memory-heuristic"] or tuned["--effort"]):
        raise click.UsageError("--pipeline replaces --refine-evals, --effort and --memory-heuristic; give the "
                               "options in the spec (e.g. refine{max_evals=400,effort=best}, "
                               "memory{heuristic=residual})")
    if place_path and place_path.lower().endswith((".json", ".json.gz")):      # read back as JSON it would fail
        raise click.BadParameter(f"{place_path!r}: --place writes the plain 'name device' text; name it .place",
                                 param_hint="--place")
    for out in (output, place_path):
        if out:
            refuse_overwrite(out, *input_files(input_path, fmt), cluster_path)
    distinct_outputs(output, place_path, report_path)
    check_report_path(report_path, *input_files(input_path, fmt), cluster_path)
    check_writable(output, place_path, report_path)
    cluster = build_cluster(cluster_path, devices, memory, speed, bandwidth, latency, device_prefix)
    progress = ctx.obj["progress"]
    opts = make_frontend_options(None, signature, profile_steps, batch_size, dims, device_profile, keep_unexecuted)
    with progress.stage(f"reading {input_path}"):
        g = read_input(input_path, fmt, opts)
    for out, text in ((output, is_place_text(output)), (place_path, True)):
        if out and text:
            check_place_names(g, out)   # before the work
    t0 = time.perf_counter()
    timings: list = []
    with progress.stage(f"placing {g.num_nodes:,} ops with {method}"):
        from ..partitioner import PardnnOptions   # the passes load when a placement is made (start-up time)
        options = PardnnOptions(memory_heuristic=memory_heuristic, refine_evals=refine_evals, effort=effort,
                                pipeline=pipeline_spec) if method == DEFAULT_METHOD else None
        try:
            plan, sched = run_partition(g, cluster, method=method, require_feasible=not allow_infeasible,
                                        progress=progress, timings=timings, options=options,
                                        search_capacity=capacity_search, source=input_path)
        except InfeasibleError:     # the passes ran: their times still help (before the one-line error)
            _echo_timings(time_passes, timings)
            raise
    seconds = time.perf_counter() - t0
    _echo_timings(time_passes, timings)
    # the batch the graph was built for, as its frontend recorded it (a framework model read now, or a
    # pardnn.graph imported earlier): only where --batch-size sized the model (a model of fixed shapes
    # records none, and then a run takes the model's own shapes)
    batch = g.meta.get("batch_size")
    meta = dict(plan.meta)
    if batch is not None:        # pardnn run refuses another batch size for this placement
        meta["batch_size"] = batch
    costs = costs_of(g.meta)
    if costs is not None:        # pardnn run warns where it predicts with other op times
        meta["costs"] = costs
    if time_passes and timings:   # the times only when asked: otherwise the same input writes the same bytes
        meta["pass_seconds"] = {t.name: round(t.seconds, 6) for t in timings}
    plan = Placement(plan.assignment, plan.devices, plan.graph, plan.predicted, meta)
    with output_transaction():   # the placement, its .place form and the report appear together or not at all
        save_placement(plan, g, output)
        if place_path:          # the plain form whatever its name (--place x.txt wrote JSON)
            save_placement(plan, g, place_path, text=True)
        if report_path:
            write_placement_report(report_path, g, cluster, plan, sched, progress=progress, timings=timings)
    outputs = (output, place_path, report_path)
    lower_us = makespan_lower_bound(g, cluster).value_us
    if as_json:
        echo_json({"graph": g.name, "method": method, "devices": list(cluster.names), "output": output,
                    "placement_seconds": seconds, **sched.predicted(), "lower_bound_us": lower_us}, outputs=outputs)
    else:
        echo_summary(_placement_table(g, cluster, sched, seconds=seconds, lower_us=lower_us,
                                      title=f"{g.name}: {g.num_nodes:,} ops on {plural(cluster.num_devices, 'device')} "
                                            f"with {method}")
                     + f"\nwrote {output}" + "".join(f" and {p}" for p in (place_path, report_path) if p),
                     outputs=outputs)
    if not sched.feasible:
        raise InfeasibleError(f"{output}: the placement written breaks the machine model's constraints: "
                              + sched.violations[0].message, short_bytes=sched.memory_shortfall())


@click.command()
@click.argument("graph", type=click.Path(readable=False))
@click.argument("placement", type=click.Path(readable=False))
@cluster_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object: makespan_us, peak_bytes, feasible, ...")
@click.option("--trace", "trace_path", type=OUTPUT_FILE,
              help="Also write the simulated timeline here as Chrome trace-event JSON (Perfetto, chrome://tracing): "
                   "a track per device and per link.")
@frontend_options
@click.pass_context
def simulate(ctx: click.Context, graph: str, placement: str, cluster_path, devices, memory, speed, bandwidth, latency,
             device_prefix, as_json: bool, trace_path, fmt, signature, profile_steps, batch_size, dims,
             device_profile, keep_unexecuted) -> None:
    """Simulate one step of GRAPH under PLACEMENT (SPEC §1) and report the figures.

    Without cluster flags the cluster has as many devices as the placement,
    unlimited memory, 12 GB/s links and 25 us latency. A placement that
    breaks a memory limit (or a pin or colocation rule) is reported in full,
    then the command exits 4 with a one-line error naming the device and the
    bytes short.

    \b
    Example:
      pardnn simulate sample_graphs/pardnn_vgg16.json.gz vgg.placement.json --memory 2GiB --json
      pardnn simulate sample_graphs/pardnn_vgg16.json.gz vgg.placement.json --trace vgg.trace.json
    """
    if trace_path:
        refuse_overwrite(trace_path, *input_files(graph, fmt), placement, cluster_path)
        check_writable(trace_path)
    progress = ctx.obj["progress"]
    opts = make_frontend_options(None, signature, profile_steps, batch_size, dims, device_profile, keep_unexecuted)
    with progress.stage(f"reading {graph}"):
        g = read_input(graph, fmt, opts)
    pl = load_placement(placement, g)
    check_costs(pl.meta.get("costs"), g.meta, placement, doing="simulation")
    note_batch_size(pl.meta.get("batch_size"), g.meta, placement, doing="simulation")
    cluster, text_form = placement_cluster(placement, pl, cluster_path, devices, memory, speed, bandwidth, latency,
                                           device_prefix)
    with progress.stage(f"simulating {g.num_nodes:,} ops"):
        sched = run_sim(g, cluster, pl)
    lower_us = makespan_lower_bound(g, cluster).value_us
    if trace_path:
        from ..report.trace import schedule_events, trace_document
        write_json(trace_path, trace_document(schedule_events(g, sched, cluster.names),
                                              metadata={"graph": g.name, "placement": placement}))
    if as_json:
        out = sched.predicted()
        out.update({
            "graph": g.name,
            "devices": list(cluster.names),
            "capacity_bytes": [None if not math.isfinite(c) else int(c) for c in cluster.capacity],
            "peak_time_us": [float(t) for t in sched.peak_time_us],
            "compute_us": [float(x) for x in sched.compute_load_us()],
            "transfers": len(sched.transfers),
            "bytes_moved": sched.bytes_moved(),
            "violations": [v.message for v in sched.violations],
            "lower_bound_us": lower_us,
        })
        echo_json(out, outputs=(trace_path,))
    else:
        check_interrupt()
        echo_summary(_placement_table(g, cluster, sched, lower_us=lower_us,
                                      title=f"{g.name}: simulated on {plural(cluster.num_devices, 'device')}"),
                     outputs=(trace_path,))
    if not sched.feasible:
        raise InfeasibleError(f"{placement}: the placement breaks the machine model: {sched.violations[0].message}",
                              short_bytes=sched.memory_shortfall())
