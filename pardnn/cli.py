"""The ``pardnn`` command line: parse, call the API, print. Nothing more.

Errors the tool can explain are `PardnnError`s; `_Group.invoke` maps them to
one line on stderr and their documented exit code, in one place.
"""

from __future__ import annotations

import json
import logging
import math
import sys
import time
from pathlib import Path
from typing import Any

import click
import numpy as np

from . import __version__
from .cluster import Cluster, Device, load_cluster
from .errors import (EXIT_DEPENDENCY, EXIT_INFEASIBLE, EXIT_INPUT, EXIT_INTERNAL, EXIT_MEMORY, EXIT_OUTPUT,
                     EXIT_RUNTIME, EXIT_USAGE, InputError, OutOfMemory, PardnnError)
from .fileio import check_writable, output_transaction, refuse_overwrite
from .units import format_bytes, format_time, parse_rate, parse_size, parse_time

log = logging.getLogger("pardnn")

EXIT_CODES_HELP = f"""\b
Exit codes:
  0  success
  {EXIT_INTERNAL}  internal error (a bug; run with --debug and report it)
  {EXIT_USAGE}  usage error (bad flags or arguments)
  {EXIT_INPUT}  invalid input: unreadable or malformed graph, cluster, placement or model
  {EXIT_INFEASIBLE}  infeasible: no placement meets the memory limits (the message says by how much)
  {EXIT_RUNTIME}  runtime failure: a device, server or framework run failed
  {EXIT_DEPENDENCY}  an optional dependency is missing (e.g. pip install 'pardnn[tf]')
  {EXIT_OUTPUT}  an output cannot be written (the message names the path and why)
  {EXIT_MEMORY}  out of memory (the message names the stage and the input's size)
"""


class _Failure(click.ClickException):
    """A `PardnnError` on its way out: one line on stderr, its own exit code."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code

    def show(self, file: Any = None) -> None:
        click.echo(f"pardnn: error: {self.message}", err=True)


def _silence_stdout() -> None:
    import os
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except PardnnError as exc:
            raise _Failure(str(exc), exc.exit_code) from None
        except (click.ClickException, click.exceptions.Exit, click.Abort, KeyboardInterrupt):
            raise
        except BrokenPipeError:  # the reader went away (`pardnn info x | head`): not an error
            _silence_stdout()
            raise click.exceptions.Exit(0) from None
        except MemoryError:
            raise _Failure(str(_out_of_memory()), EXIT_MEMORY) from None
        except RecursionError as exc:  # only malformed input nests this deep; readers name the file when they can
            if ctx.obj and ctx.obj.get("debug"):
                raise
            raise _Failure(f"input nested too deeply to read ({exc})", EXIT_INPUT) from None
        except Exception as exc:  # a bug: say so in one line unless --debug
            if ctx.obj and ctx.obj.get("debug"):
                raise
            raise _Failure(f"internal error: {type(exc).__name__}: {exc} "
                           "(run with --debug for the traceback, and please report it)", EXIT_INTERNAL) from None


def _out_of_memory() -> OutOfMemory:
    """What ran out, where and on how large an input (the stage now running, the input's size, peak RSS)."""
    import resource

    from .progress import active_stages, stages_at_memory_error

    stages = stages_at_memory_error() or active_stages()
    where = f" while {' > '.join(stages)}" if stages else ""
    ctx = click.get_current_context(silent=True)
    size = (ctx.obj or {}).get("input_size") if ctx else None
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return OutOfMemory(f"out of memory{where}" + (f" on {size}" if size else "")
                       + f" (peak resident memory {peak_mib:,.0f} MiB); free memory, or try a smaller input "
                         "or fewer devices")


def _note_input(ctx: click.Context, g) -> None:
    """Remember the input's size for messages that need it (out of memory)."""
    ctx.find_root().obj["input_size"] = f"{g.num_nodes:,} nodes and {g.num_edges:,} edges ({g.name})"


def _quiet_native_logs(verbose: int) -> None:
    """Keep TensorFlow's C++ logging (and that of servers this process starts) off stderr unless ``-vv``.

    Native libraries write to file descriptor 2 directly, before and beside
    pardnn's own one-line messages. Below ``-vv`` the descriptor is pointed
    at a discarded temporary file, while Python's ``sys.stderr`` (pardnn's
    messages, logs and progress) keeps writing to the real stderr through a
    duplicate. Child processes inherit the quiet descriptor. With ``-vv``,
    TensorFlow logs everything (``TF_CPP_MIN_LOG_LEVEL=0`` unless set).
    Only `main` (the ``pardnn`` program) does this, and only when
    ``sys.stderr`` is the process's own descriptor 2.
    """
    import os
    import tempfile

    if verbose >= 2:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "0")
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    try:
        if sys.stderr.fileno() != 2:
            return
    except (AttributeError, OSError, ValueError):
        return
    sys.stderr.flush()
    keep = os.dup(2)
    sink = tempfile.TemporaryFile(prefix="pardnn-native-log.")
    os.dup2(sink.fileno(), 2)
    sink.close()
    sys.stderr = open(keep, "w", buffering=1, encoding=sys.stderr.encoding or "utf-8",  # noqa: SIM115
                      errors="backslashreplace", closefd=True)


def _setup_logging(quiet: bool, verbose: int) -> None:
    level = logging.ERROR if quiet else logging.DEBUG if verbose > 1 else logging.INFO if verbose else logging.WARNING
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("pardnn: %(message)s"))
    root = logging.getLogger("pardnn")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False
    for name in ("pardnn.frontends",):
        sub = logging.getLogger(name)
        sub.handlers[:] = []
        sub.propagate = True


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
             epilog=EXIT_CODES_HELP)
@click.option("-q", "--quiet", is_flag=True, help="Only errors on stderr; no progress.")
@click.option("-v", "--verbose", count=True, help="More detail on stderr (-vv for debug).")
@click.option("--debug", is_flag=True, help="Show the traceback of internal errors.")
@click.version_option(__version__, prog_name="pardnn")
@click.pass_context
def cli(ctx: click.Context, quiet: bool, verbose: int, debug: bool) -> None:
    """pardnn: place the ops of a deep-learning training step on several devices.

    It reads a graph (pardnn.graph JSON, a TensorFlow SavedModel or GraphDef,
    an ONNX model, or a peer project's format), decides which device runs each
    op so the step finishes early and every device stays within its memory,
    and writes the placement.

    \b
    Examples:
      pardnn info sample_graphs/pardnn_vgg16.json.gz
      pardnn partition sample_graphs/pardnn_vgg16.json.gz --devices 4 --memory 2GiB -o vgg.placement.json
      pardnn simulate sample_graphs/pardnn_vgg16.json.gz vgg.placement.json --memory 2GiB --json
    """
    from .progress import Progress

    ctx.ensure_object(dict)
    ctx.obj.update(quiet=quiet, verbose=verbose, debug=debug, progress=Progress(enabled=not quiet))
    _setup_logging(quiet, verbose)


# ---------------------------------------------------------------------------
# Shared options
# ---------------------------------------------------------------------------

def _distinct_outputs(*paths: str | None) -> None:
    """Two outputs of one command may not name the same file."""
    seen: dict[Path, str] = {}
    for p in paths:
        if not p:
            continue
        key = Path(p).resolve()
        if key in seen:
            raise click.UsageError(f"{p} is given for two outputs; choose a different path for each")
        seen[key] = p


def _list_of(parse, text: str | None, what: str):
    if text is None:
        return None
    try:
        return [parse(x) for x in str(text).split(",")]
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=what) from None


def cluster_options(f):
    options = [
        click.option("--cluster", "cluster_path", type=click.Path(dir_okay=False),
                     help="A pardnn.cluster JSON file (instead of the flags below)."),
        click.option("--devices", "-k", type=click.IntRange(1, 4096), help="Number of devices."),
        click.option("--memory", "-m", help="Memory per device: 16GiB, 512MB, ... (a comma list gives one per "
                                            "device; omitted = unlimited)."),
        click.option("--speed", help="Relative speed per device (a number, or a comma list; default 1)."),
        click.option("--bandwidth", help="Link bandwidth: 12GB/s, 100Gbit/s, ... (default 12GB/s)."),
        click.option("--latency", help="Link latency: 25us, 0.01ms, ... (default 25us)."),
        click.option("--device-prefix", default="/device:GPU:", show_default=True,
                     help="Device names are this prefix plus an index."),
    ]
    for opt in reversed(options):
        f = opt(f)
    return f


def build_cluster(cluster_path: str | None, devices: int | None, memory: str | None, speed: str | None,
                  bandwidth: str | None, latency: str | None, device_prefix: str,
                  default_devices: int | None = None) -> Cluster:
    """The cluster from ``--cluster`` or from the flags (flags may not be mixed with a file)."""
    if cluster_path:
        if devices is not None or speed is not None or bandwidth is not None or latency is not None:
            raise click.UsageError("--cluster cannot be combined with --devices/--speed/--bandwidth/--latency")
        c = load_cluster(cluster_path)
        if memory is not None:
            mem = _list_of(parse_size, memory, "--memory")
            c = c.with_memory(mem[0] if len(mem) == 1 else mem)
        return c
    mem = _list_of(parse_size, memory, "--memory")
    spd = _list_of(float, speed, "--speed")
    k = devices or default_devices or max(len(mem or []), len(spd or []), 1)
    for name, values in (("--memory", mem), ("--speed", spd)):
        if values is not None and len(values) not in (1, k):
            raise click.BadParameter(f"gives {len(values)} values for {k} devices", param_hint=name)
    mem = [None] * k if mem is None else (mem * k if len(mem) == 1 else mem)
    spd = [1.0] * k if spd is None else (spd * k if len(spd) == 1 else spd)
    try:
        bw = parse_rate(bandwidth) if bandwidth is not None else None
        lat = parse_time(latency) if latency is not None else None
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    kwargs: dict[str, Any] = {}
    if bw is not None:
        kwargs["bandwidth_bytes_per_us"] = bw
    if lat is not None:
        kwargs["latency_us"] = lat
    return Cluster(tuple(Device(f"{device_prefix}{i}", mem[i], spd[i]) for i in range(k)), **kwargs)


def frontend_options(f):
    """Flags that reach the frontends (TensorFlow, ONNX, peers) through `FrontendOptions`."""
    options = [
        click.option("--format", "fmt", type=click.Choice(FORMATS), help="Input format (default: detected)."),
        click.option("--signature", help="SavedModel signature to import (default: the training step if there is "
                                         "one, else serving_default); for a GraphDef, the output node(s) to run, "
                                         "comma separated."),
        click.option("--profile", "profile_steps", type=click.IntRange(0), default=0, show_default=True,
                     help="Profile this many steps for real op times (0 = roofline estimate)."),
        click.option("--batch-size", type=click.IntRange(1), help="Value for unknown batch dimensions."),
        click.option("--dim", "dims", multiple=True, metavar="NAME=VALUE",
                     help="Value for a named dynamic dimension (repeatable)."),
        click.option("--device-profile", default="h100", show_default=True,
                     help="Device preset for estimated op times: h100, a100, v100, t4, cpu."),
        click.option("--keep-unexecuted", is_flag=True, help="ParDNN DOT input: keep ops a step never runs."),
    ]
    for opt in reversed(options):
        f = opt(f)
    return f


FORMATS = ["pardnn", "msr", "pipedream", "pardnn-dot", "savedmodel", "graphdef", "onnx"]


def make_frontend_options(name=None, signature=None, profile_steps=0, batch_size=None, dims=(),
                          device_profile="h100", keep_unexecuted=False):
    from .frontends import FrontendOptions

    parsed = {}
    for item in dims:
        key, sep, value = item.partition("=")
        if not sep or not key or not value.strip().isdigit():
            raise click.BadParameter(f"expected NAME=VALUE with an integer value, got {item!r}", param_hint="--dim")
        parsed[key.strip()] = int(value)
    return FrontendOptions(name=name, signature=signature, profile_steps=profile_steps, batch_size=batch_size,
                           dims=parsed, device_profile=device_profile, keep_unexecuted=keep_unexecuted)


def _load_graph(path: str, fmt: str | None = None, options=None):
    from .frontends import load_input
    g = load_input(path, fmt=fmt, options=options)
    ctx = click.get_current_context(silent=True)
    if ctx is not None and ctx.obj is not None:
        _note_input(ctx, g)
    return g


def _echo_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2))


# ---------------------------------------------------------------------------
# info
# ---------------------------------------------------------------------------

@cli.command()
@click.argument("graph", type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
@click.option("--top", default=5, show_default=True,
              help="How many colocation groups to list (those holding the most persistent memory).")
@frontend_options
@click.pass_context
def info(ctx: click.Context, graph: str, as_json: bool, top: int, fmt, signature, profile_steps, batch_size, dims,
         device_profile, keep_unexecuted) -> None:
    """Summarise a graph: size, compute, critical path, memory, colocation groups.

    \b
    Example:
      pardnn info sample_graphs/msr_bert_l3_training.json.gz
    """
    from .analysis import critical_path
    from .machine import single_device_peak

    with ctx.obj["progress"].stage(f"reading {graph}"):
        g = _load_graph(graph, fmt, make_frontend_options(None, signature, profile_steps, batch_size, dims,
                                                          device_profile, keep_unexecuted))
    cp_len, cp = critical_path(g)
    group_sizes = [len(m) for m in g.groups]
    group_pers = np.bincount(g.colocation[g.colocation >= 0], weights=g.persistent_bytes[g.colocation >= 0],
                             minlength=len(g.group_names)) if g.group_names else np.zeros(0)
    largest = sorted(range(len(g.group_names)), key=lambda i: (-group_pers[i], -group_sizes[i], i))[:top]
    phases: dict[str, int] = {}
    for x in (g.node_extra or ()):
        if x and x.get("phase"):
            phases[x["phase"]] = phases.get(x["phase"], 0) + 1
    summary = {
        "name": g.name,
        "nodes": g.num_nodes,
        "edges": g.num_edges,
        "control_edges": int(g.edge_control.sum()),
        "total_time_us": float(g.time_us.sum()),
        "critical_path_us": cp_len,
        "critical_path_ops": len(cp),
        "parallelism": float(g.time_us.sum() / cp_len) if cp_len > 0 else 1.0,
        "persistent_bytes": int(g.persistent_bytes.sum()),
        "output_bytes": int(g.port_bytes.sum()),
        "max_temp_bytes": int(g.temp_bytes.max()) if g.num_nodes else 0,
        "single_device_peak_bytes": single_device_peak(g),
        "colocation_groups": len(g.group_names),
        "largest_groups": [{"name": g.group_names[i], "ops": group_sizes[i],
                            "persistent_bytes": int(group_pers[i])} for i in largest],
        "pinned_ops": int((g.pinned >= 0).sum()),
        "phases": phases,
    }
    if as_json:
        _echo_json(summary)
        return
    rows = [
        ("graph", g.name),
        ("nodes", f"{g.num_nodes:,}"),
        ("edges", f"{g.num_edges:,} ({summary['control_edges']:,} control)"),
        ("total compute", format_time(summary["total_time_us"])),
        ("critical path", f"{format_time(cp_len)} over {len(cp):,} ops "
                          f"(average parallelism {summary['parallelism']:.2f})"),
        ("persistent memory", format_bytes(summary["persistent_bytes"])),
        ("all outputs", format_bytes(summary["output_bytes"])),
        ("largest temp", format_bytes(summary["max_temp_bytes"])),
        ("single-device peak", format_bytes(summary["single_device_peak_bytes"])),
        ("colocation groups", f"{len(g.group_names):,}"),
        ("pinned ops", f"{summary['pinned_ops']:,}"),
    ]
    if phases:
        rows.append(("phases", ", ".join(f"{k} {v:,}" for k, v in sorted(phases.items()))))
    width = max(len(r[0]) for r in rows)
    for k, v in rows:
        click.echo(f"{k:<{width}}  {v}")
    if largest:
        click.echo("largest colocation groups:")
        for item in summary["largest_groups"]:
            click.echo(f"  {item['ops']:>6} ops  {format_bytes(item['persistent_bytes']):>11}  {item['name']}")


# ---------------------------------------------------------------------------
# partition / simulate
# ---------------------------------------------------------------------------

def _placement_table(g, cluster: Cluster, sched, *, title: str, seconds: float | None = None) -> str:
    serial = float(g.time_us.sum() / cluster.speed.max()) if g.num_nodes else 0.0
    counts = np.bincount(sched.device, minlength=cluster.num_devices)
    load = sched.compute_load_us()
    lines = [title]
    speedup = serial / sched.makespan_us if sched.makespan_us > 0 else 1.0
    lines.append(f"predicted step time  {format_time(sched.makespan_us)}  "
                 f"(speedup {speedup:.2f}x over all compute in series, {format_time(serial)})")
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
    for v in sched.violations[:10]:
        lines.append(f"  - {v.message}")
    return "\n".join(lines)


def _check_method(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """A usage error (exit 2) for a method that does not exist, as click reports a bad choice."""
    if value is None:
        return None
    from .api import methods

    known = methods()
    if value not in known:
        raise click.BadParameter(f"{value!r} is not one of {', '.join(known)}")
    return value


def _list_methods(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value:
        return
    from .api import methods
    click.echo("\n".join(methods()))
    ctx.exit()


@cli.command()
@click.argument("input_path", metavar="INPUT", type=click.Path())
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="Where to write the pardnn.placement JSON (or .place text, by its name).")
@cluster_options
@click.option("--method", default=None, callback=_check_method,
              help="Placement method (default: the ParDNN pipeline). See --list-methods.")
@click.option("--list-methods", is_flag=True, is_eager=True, expose_value=False, callback=_list_methods,
              help="List the placement methods and exit.")
@click.option("--place", "place_path", type=click.Path(dir_okay=False),
              help="Also write ParDNN's plain 'name device' form here.")
@click.option("--allow-infeasible", is_flag=True,
              help="Write the placement even when it breaks a memory limit (exit code stays 4).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--time-passes", is_flag=True, help="Print each pipeline pass's time on stderr.")
@click.option("--memory-heuristic", type=click.Choice(["auto", "knapsack", "residual"]), default="auto",
              show_default=True, help="Step 2's heuristic: knapsack (ParDNN's I), residual (II), or by graph size.")
@click.option("--refine-evals", type=click.IntRange(min=0), default=None,
              help="Simulations the refinement may spend in each of steps 1 and 2 (default: by graph size, "
                   "about 6e7 / (nodes + edges)); fewer is faster, more may place better. 0 skips refinement.")
@click.option("--capacity-search/--no-capacity-search", default=True, show_default=True,
              help="When nothing fits, search for the smallest memory that would (several more placements).")
@click.option("--report", "report_path", type=click.Path(dir_okay=False),
              help="Also write an HTML report here: timeline, memory, communication (see `pardnn report`).")
@frontend_options
@click.pass_context
def partition(ctx: click.Context, input_path: str, output: str, cluster_path, devices, memory, speed, bandwidth,
              latency, device_prefix, method, place_path, allow_infeasible: bool, as_json: bool, time_passes: bool,
              memory_heuristic: str, refine_evals, capacity_search: bool, report_path, fmt, signature,
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
    from .api import DEFAULT_METHOD, partition as run_partition
    from .cli_report import check_report_path, write_placement_report
    from .errors import InfeasibleError
    from .placement import save_placement

    for out in (output, place_path):
        if out:
            refuse_overwrite(out, input_path, cluster_path)
    check_report_path(report_path, input_path, cluster_path, output, place_path)
    _distinct_outputs(output, place_path, report_path)
    check_writable(output, place_path, report_path)
    cluster = build_cluster(cluster_path, devices, memory, speed, bandwidth, latency, device_prefix)
    progress = ctx.obj["progress"]
    opts = make_frontend_options(None, signature, profile_steps, batch_size, dims, device_profile, keep_unexecuted)
    with progress.stage(f"reading {input_path}"):
        g = _load_graph(input_path, fmt, opts)
    t0 = time.perf_counter()
    method = method or DEFAULT_METHOD
    timings: list = []
    with progress.stage(f"placing {g.num_nodes:,} ops with {method}"):
        from .partitioner import PardnnOptions
        plan, sched = run_partition(g, cluster, method=method, require_feasible=not allow_infeasible,
                                    progress=progress, timings=timings,
                                    options=PardnnOptions(memory_heuristic=memory_heuristic,
                                                          refine_evals=refine_evals),
                                    search_capacity=capacity_search)
    seconds = time.perf_counter() - t0
    if time_passes and timings:
        from .pipeline import format_timings
        click.echo(format_timings(timings), err=True)
    with output_transaction():   # the placement, its .place form and the report appear together or not at all
        save_placement(plan, g, output)
        if place_path:
            save_placement(plan, g, place_path)
        if report_path:
            write_placement_report(report_path, g, cluster, plan, sched, progress=progress, timings=timings)
    if as_json:
        _echo_json({"graph": g.name, "method": method, "devices": list(cluster.names), "output": output,
                    "placement_seconds": seconds, **sched.predicted()})
    else:
        click.echo(_placement_table(g, cluster, sched, seconds=seconds,
                                    title=f"{g.name}: {g.num_nodes:,} ops on {cluster.num_devices} devices "
                                          f"with {method}"))
        click.echo(f"wrote {output}" + "".join(f" and {p}" for p in (place_path, report_path) if p))
    if not sched.feasible:
        raise InfeasibleError("the placement written breaks the machine model's constraints: "
                              + sched.violations[0].message, short_bytes=sched.memory_shortfall())


@cli.command()
@click.argument("graph", type=click.Path())
@click.argument("placement", type=click.Path())
@cluster_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object: makespan_us, peak_bytes, feasible, ...")
@click.pass_context
def simulate(ctx: click.Context, graph: str, placement: str, cluster_path, devices, memory, speed, bandwidth, latency,
             device_prefix, as_json: bool) -> None:
    """Simulate one step of GRAPH under PLACEMENT (SPEC §1) and report the figures.

    Without cluster flags the cluster has as many devices as the placement,
    unlimited memory, 12 GB/s links and 25 us latency.

    \b
    Example:
      pardnn simulate sample_graphs/pardnn_vgg16.json.gz vgg.placement.json --memory 2GiB --json
    """
    from .machine import simulate as run_sim
    from .placement import load_placement

    progress = ctx.obj["progress"]
    with progress.stage(f"reading {graph}"):
        g = _load_graph(graph)
    pl = load_placement(placement, g)
    cluster = build_cluster(cluster_path, devices, memory, speed, bandwidth, latency, device_prefix,
                            default_devices=pl.num_devices)
    text_form = Path(placement).name.endswith((".place", ".place.gz"))
    if pl.num_devices != cluster.num_devices and not (text_form and pl.num_devices < cluster.num_devices):
        raise InputError(f"{placement}: the placement is for {pl.num_devices} devices but the cluster has "
                         f"{cluster.num_devices}")
    with progress.stage(f"simulating {g.num_nodes:,} ops"):
        sched = run_sim(g, cluster, pl)
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
        })
        _echo_json(out)
        return
    click.echo(_placement_table(g, cluster, sched, title=f"{g.name}: simulated on {cluster.num_devices} devices"))


# ---------------------------------------------------------------------------
# import
# ---------------------------------------------------------------------------

@cli.command(name="import")
@click.argument("model", type=click.Path())
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="Where to write the pardnn.graph (.json or .json.gz).")
@click.option("--name", help="Graph name to record (default: from the file name).")
@frontend_options
@click.pass_context
def import_cmd(ctx: click.Context, model: str, output: str, name: str | None, fmt, signature, profile_steps,
               batch_size, dims, device_profile, keep_unexecuted) -> None:
    """Convert MODEL to a pardnn.graph file.

    \b
    Examples:
      pardnn import ../shared/data/pipedream/vgg16/graph.txt -o vgg16.json.gz
      pardnn import ../shared/data/pardnn_v1/vgg/vgg_dot.dot -o vgg.json.gz
      pardnn import saved_model_dir --signature train_step --profile 5 -o model.json.gz
    """
    from .ir import save_graph

    refuse_overwrite(output, model)
    check_writable(output)
    opts = make_frontend_options(name, signature, profile_steps, batch_size, dims, device_profile, keep_unexecuted)
    with ctx.obj["progress"].stage(f"importing {model}"):
        g = _load_graph(model, fmt, opts)
    save_graph(g, output)
    click.echo(f"wrote {output}: {g.num_nodes:,} ops, {g.num_edges:,} edges, "
               f"{format_time(float(g.time_us.sum()))} of compute, {len(g.group_names):,} colocation groups")


def _default_data_dir() -> Path | None:
    here = Path(__file__).resolve().parent.parent
    for c in (Path.cwd() / ".." / "shared" / "data", here.parent / "shared" / "data"):
        if (c / "README.md").exists():
            return c.resolve()
    return None


@cli.command()
@click.option("--suite", default="quick", show_default=True,
              type=click.Choice(["quick", "samples", "real", "synthetic", "full"]),
              help="quick: the samples and a 10k synthetic graph; full: every real graph, the samples and "
                   "synthetic 10k/50k/200k graphs.")
@click.option("--data", "data_dir", type=click.Path(file_okay=False), help="The peer data directory "
              "(default: ../shared/data).")
@click.option("--methods", help="Comma list of methods (default: all; see partition --list-methods).")
@click.option("--k", "ks", default="2,4,8", show_default=True, help="Device counts.")
@click.option("--regimes", default="loose,tight", show_default=True, help="Memory regimes.")
@click.option("--synthetic-sizes", default="10000,50000,200000", show_default=True)
@click.option("--max-nodes", type=int, help="Skip graphs larger than this.")
@click.option("--scaling/--no-scaling", default=True, show_default=True,
              help="Also find each method's smallest feasible memory capacity by bisection.")
@click.option("--scaling-max-nodes", default=20000, show_default=True,
              help="Only run the memory-scaling bisection on graphs up to this size.")
@click.option("--scaling-graphs", help="Only run the memory-scaling bisection on these graphs (comma list of names "
              "as the tables print them, e.g. msr/op/bert_l-6_training,pipedream/resnet50).")
@click.option("-o", "--output", "outdir", default="bench-out", show_default=True, type=click.Path(file_okay=False),
              help="Directory for results.csv, results.json, scaling.csv and makespan.png.")
@click.option("--markdown", type=click.Path(dir_okay=False), help="Also write the tables as Markdown here "
              "(e.g. benchmarks/RESULTS.md).")
@click.option("--tables/--no-tables", default=True, show_default=True, help="Print one table per case.")
@click.option("--report", "report_path", type=click.Path(dir_okay=False),
              help="Also write the tables and plots as one HTML page here.")
@click.pass_context
def bench(ctx: click.Context, suite: str, data_dir, methods, ks, regimes, synthetic_sizes, max_nodes, scaling,
          scaling_max_nodes, scaling_graphs, outdir, markdown, tables, report_path) -> None:
    """Run every placer on a suite of graphs and compare them with the machine model.

    Prints a table per case (makespan, feasibility, peak memory against
    capacity, placement time, ours / the best feasible baseline), then a
    summary; writes CSV, JSON and a plot.

    \b
    Examples:
      pardnn bench                               # quick: samples + a 10k synthetic graph
      pardnn bench --suite full --markdown benchmarks/RESULTS.md
      pardnn bench --suite samples --k 4 --report bench.html
    """
    import shlex
    import sys as _sys

    from . import bench as B
    from .api import DEFAULT_METHOD, all_methods
    from .cli_report import check_report_path, write_bench_report

    check_report_path(report_path)
    check_writable(Path(outdir) / "results.json", markdown)

    registry = all_methods()
    names = sorted(registry) if not methods else [m.strip() for m in methods.split(",") if m.strip()]
    unknown = [m for m in names if m not in registry]
    if unknown:
        raise click.BadParameter(f"unknown method(s) {', '.join(unknown)}", param_hint="--methods")
    k_list = _list_of(int, ks, "--k")
    regime_list = [r.strip() for r in regimes.split(",")]
    for r in regime_list:
        if r not in B.REGIMES:
            raise click.BadParameter(f"unknown regime {r!r}", param_hint="--regimes")
    data = Path(data_dir) if data_dir else _default_data_dir()
    samples_dir = Path(__file__).resolve().parent.parent / "sample_graphs"
    sources = B.suite(suite, data_dir=data, samples_dir=samples_dir,
                      synthetic_sizes=_list_of(int, synthetic_sizes, "--synthetic-sizes"))
    if scaling_graphs:
        missing = sorted(set(x.strip() for x in scaling_graphs.split(",")) - {src.name for src in sources})
        if missing:
            raise click.BadParameter(f"no graph named {', '.join(missing)} in the {suite!r} suite",
                                     param_hint="--scaling-graphs")
    result = B.run_bench(sources, methods=names, ks=k_list, regimes=regime_list, ours=DEFAULT_METHOD,
                         scaling=scaling, scaling_max_nodes=scaling_max_nodes, max_nodes=max_nodes,
                         scaling_graphs=[x.strip() for x in scaling_graphs.split(",")] if scaling_graphs else None,
                         progress=ctx.obj["progress"])
    if tables:
        click.echo(B.case_tables(result))
    click.echo(B.summary_table(result))
    command = "pardnn " + " ".join(shlex.quote(a) for a in _sys.argv[1:]) if len(_sys.argv) > 2 else "pardnn bench"
    with output_transaction():   # every file of the run appears together or not at all
        paths = B.write_outputs(result, Path(outdir))
        if markdown:
            from .fileio import atomic_write
            atomic_write(markdown, B.markdown_report(result, command=command))
            paths.append(Path(markdown))
        if report_path:
            paths.append(write_bench_report(report_path, result, progress=ctx.obj["progress"], command=command))
    click.echo("wrote " + ", ".join(str(p) for p in paths))


from .cli_report import report_cmd  # noqa: E402  (pardnn report lives in its own module)
from .cli_run import rewrite_cmd, run_cmd, serve_cmd  # noqa: E402  (run, rewrite, serve too)

cli.add_command(run_cmd)
cli.add_command(rewrite_cmd)
cli.add_command(serve_cmd)
cli.add_command(report_cmd)


def _verbosity(argv: list[str]) -> int:
    """How many ``-v`` the global options before the command ask for (read before click parses them)."""
    count = 0
    for arg in argv:
        if not arg.startswith("-"):
            break
        if arg == "--verbose":
            count += 1
        elif arg.startswith("-") and not arg.startswith("--") and set(arg[1:]) <= {"v", "q"}:
            count += arg.count("v")
    return count


def main(argv: list[str] | None = None) -> None:
    """The ``pardnn`` program: quiets native logging for this process and its children, then runs the CLI."""
    args = list(sys.argv[1:] if argv is None else argv)
    _quiet_native_logs(_verbosity(args))
    cli.main(args=args, prog_name="pardnn")

