"""What the commands share: the cluster and frontend flags, reading the input, the report file, printing JSON.

Every command module imports this one and the library, and nothing else of
`pardnn.cli`. The HTML report's modules (and matplotlib) load only when a
report is asked for.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
from pathlib import Path
from typing import Any, Sequence

import click

from ..cluster import (MAX_DEVICES, MAX_LATENCY_US, MIN_BANDWIDTH, SPEED_RANGE, Cluster, Device, load_cluster,
                       named_as)
from ..errors import check_interrupt
from ..fileio import check_writable, is_stream, names_stdout, refuse_overwrite
from ..frontends import FORMATS, FrontendOptions, load_input
from ..frontends.roofline import DEVICE_PROFILES
from ..ir import OpGraph
from ..units import parse_rate, parse_size, parse_time


class OutputFile(click.Path):
    """A file a command writes. ``-`` is stdout, as in click's and most tools' convention, written as
    ``/dev/stdout`` is (the summary then goes to stderr)."""

    def __init__(self) -> None:
        super().__init__(dir_okay=False, readable=False)

    def convert(self, value, param, ctx):
        if value == "-":
            return "/dev/stdout"
        text = os.fspath(value)
        if not text:
            self.fail("an empty name; give a file name", param, ctx)
        if text.endswith(("/", os.sep)) or os.path.basename(text) in (".", ".."):    # 'dir/', 'dir/.': a file
            self.fail(f"{text!r} names a directory; give a file name", param, ctx)  # named like the directory
        return super().convert(value, param, ctx)


OUTPUT_FILE = OutputFile()


class FiniteFloat(click.FloatRange):
    """click's `FloatRange` that also refuses ``nan``, ``inf`` and ``-inf`` (Python's float() reads them, and a
    NaN passes any range check: ``--tolerance nan`` bisected to nan%, ``--timeout inf`` crashed)."""

    def convert(self, value, param, ctx):
        v = super().convert(value, param, ctx)
        if not math.isfinite(v):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return v


def note_input(ctx: click.Context, g: OpGraph) -> None:
    """Remember the input's size for messages that need it (out of memory)."""
    ctx.find_root().obj["input_size"] = f"{g.num_nodes:,} nodes and {g.num_edges:,} edges ({g.name})"


def distinct_outputs(*paths: str | None) -> None:
    """Two outputs of one command may not name the same file (a device such as /dev/null may take several)."""
    seen: dict[str, str] = {}
    for p in paths:
        if not p or is_stream(Path(p)):
            continue
        key = os.path.realpath(p)       # (a loop of links is no error here: writing it is)
        if key in seen:
            raise click.UsageError(f"{p} is given for two outputs; choose a different path for each")
        seen[key] = p


def list_of(parse, text: str | None, what: str):
    """``text`` split at commas and parsed; a bad item is a usage error naming the flag ``what``."""
    if text is None:
        return None
    try:
        return [parse(x) for x in str(text).split(",")]
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=what) from None


def echo_json(obj: Any, *, outputs: Sequence[Any] = ()) -> None:
    check_interrupt()   # a Ctrl-C that something swallowed: no result printed (as no file written)
    echo_summary(json.dumps(obj, indent=2), outputs=outputs, asked=True)


def echo_summary(text: str, *, outputs: Sequence[Any] = (), asked: bool = False) -> None:
    """Print a command's summary on stdout; on stderr when one of ``outputs`` is stdout itself
    (`pardnn.fileio.names_stdout`: ``-o /dev/stdout``), so that stdout carries the output alone. There, with
    ``-q`` ("only errors on stderr"), a human summary is left out; one the user ``asked`` for (``--json``)
    is not."""
    if any(names_stdout(p) for p in outputs if p):
        ctx = click.get_current_context(silent=True)
        if not asked and ctx is not None and (ctx.find_root().obj or {}).get("quiet"):
            return
        click.echo(text, err=True)
    else:
        click.echo(text)


# ---------------------------------------------------------------------------
# the cluster
# ---------------------------------------------------------------------------

def cluster_options(f):
    """The cluster flags; a command given ``--cluster`` with any of the flags it replaces is a usage error
    before the command does anything (it came after a model's import)."""
    @functools.wraps(f)
    def checked(*args, **kwargs):
        check_cluster_flags(kwargs.get("cluster_path"), *(kwargs.get(k) for k in _FILE_REPLACES))
        return f(*args, **kwargs)

    options = [
        click.option("--cluster", "cluster_path", type=click.Path(dir_okay=False, readable=False),
                     help="A pardnn.cluster JSON file (instead of the flags below)."),
        click.option("--devices", "-k", type=click.IntRange(1, MAX_DEVICES), help="Number of devices."),
        click.option("--memory", "-m", help="Memory per device: 16GiB, 512MB, ... (a comma list gives one per "
                                            "device; omitted = unlimited)."),
        click.option("--speed", help="Relative speed per device (a number, or a comma list; default 1)."),
        click.option("--bandwidth", help="Link bandwidth: 12GB/s, 100Gbit/s, ... (default 12GB/s)."),
        click.option("--latency", help="Link latency: 25us, 0.01ms, ... (default 25us)."),
        click.option("--device-prefix", help="Device names are this prefix plus an index (default /device:GPU:; "
                                             "simulate and report: the placement's names)."),
    ]
    for opt in reversed(options):
        checked = opt(checked)
    return checked


def pin_options(f):
    """``--pin``, ``--cores-per-task``, ``--intra-op-threads``, ``--inter-op-threads`` (for ``--local-cluster``);
    `pinning_from` checks and reads them."""
    options = [
        click.option("--pin", is_flag=True,
                     help="With --local-cluster: pin each task to cores of its own (the usable cores split evenly, "
                          "or --cores-per-task), so the tasks are devices that really run side by side."),
        click.option("--cores-per-task", type=click.IntRange(1), metavar="C", help="With --pin: cores per task."),
        click.option("--intra-op-threads", type=click.IntRange(1), metavar="T",
                     help="With --pin: threads per op in each task [default: its cores]."),
        click.option("--inter-op-threads", type=click.IntRange(1), default=2, show_default=True, metavar="I",
                     help="With --pin: ops in flight in each task (1 blocks a task's partition: keep 2 or more)."),
    ]
    for opt in reversed(options):
        f = opt(f)
    return f


def pinning_from(local_cluster, pin: bool, cores_per_task, intra_op_threads, inter_op_threads: int):
    """The `pardnn.backend.tf_cluster.Pinning` of `pin_options` (None without ``--pin``); misuse is a usage error."""
    given = {"--pin": pin, "--cores-per-task": cores_per_task, "--intra-op-threads": intra_op_threads,
             "--inter-op-threads": inter_op_threads != 2}
    used = [k for k, v in given.items() if v]
    if used and not local_cluster:
        raise click.UsageError(f"{used[0]} applies to --local-cluster only")
    if used and not pin:
        raise click.UsageError(f"{used[0]} needs --pin")
    if not pin:
        return None
    from ..backend.tf_cluster import Pinning
    return Pinning(cores_per_task=cores_per_task or 0, intra_op_threads=intra_op_threads or 0,
                   inter_op_threads=inter_op_threads)


def _parsed(flag: str, parse, text: str | None):
    """``parse(text)`` (None when not given); a value it cannot read is a usage error naming ``flag``."""
    try:
        return parse(text) if text is not None else None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=flag) from None


_FILE_REPLACES = ("devices", "speed", "bandwidth", "latency", "device_prefix")
"""The flags a cluster file replaces (``--memory`` may still override its memory)."""


def check_cluster_flags(cluster_path: str | None, *flags: Any) -> None:
    """``--cluster`` with any of the flags of `_FILE_REPLACES` (in that order) is a usage error."""
    if cluster_path and any(x is not None for x in flags):
        raise click.UsageError("--cluster cannot be combined with --devices/--speed/--bandwidth/--latency/"
                               "--device-prefix")


def with_placement_names(cluster: Cluster, pl, cluster_path: str | None, device_prefix: str | None) -> Cluster:
    """A cluster made from flags takes the placement's device names, unless ``--device-prefix`` names them
    (`simulate`, `report` and `run` alike); a cluster file keeps its own."""
    if cluster_path or device_prefix is not None:
        return cluster
    return named_as(cluster, pl.devices)


DEFAULT_DEVICE_PREFIX = "/device:GPU:"
"""A cluster made from flags names its devices this plus an index, unless ``--device-prefix`` says otherwise."""


def build_cluster(cluster_path: str | None, devices: int | None, memory: str | None, speed: str | None,
                  bandwidth: str | None, latency: str | None, device_prefix: str | None,
                  default_devices: int | None = None) -> Cluster:
    """The cluster from ``--cluster`` or from the flags (`cluster_options` refuses a file mixed with the flags it
    replaces, before the command starts)."""
    if cluster_path:
        c = load_cluster(cluster_path)
        if memory is not None:
            mem = list_of(parse_size, memory, "--memory")
            c = c.with_memory(mem[0] if len(mem) == 1 else mem)
        return c
    mem = list_of(parse_size, memory, "--memory")
    spd = list_of(float, speed, "--speed")
    k = devices or default_devices or max(len(mem or []), len(spd or []), 1)
    for name, values in (("--memory", mem), ("--speed", spd)):
        if values is not None and len(values) not in (1, k):
            raise click.BadParameter(f"gives {len(values)} values for {k} devices", param_hint=name)
    mem = [None] * k if mem is None else (mem * k if len(mem) == 1 else mem)
    spd = [1.0] * k if spd is None else (spd * k if len(spd) == 1 else spd)
    for v in spd:
        if not math.isfinite(v):
            raise click.BadParameter(f"must be a finite positive number, got {v:g}", param_hint="--speed")
        if not v > 0:
            raise click.BadParameter(f"must be a positive number, got {v:g}", param_hint="--speed")
        if not SPEED_RANGE[0] <= v <= SPEED_RANGE[1]:
            raise click.BadParameter(f"must be from {SPEED_RANGE[0]:g} to {SPEED_RANGE[1]:g}, got {v:g}",
                                     param_hint="--speed")
    bw = _parsed("--bandwidth", parse_rate, bandwidth)
    lat = _parsed("--latency", parse_time, latency)
    if lat is not None and not math.isfinite(lat):
        raise click.BadParameter(f"must be a finite duration, got {latency!r}", param_hint="--latency")
    if lat is not None and not lat >= 0:
        raise click.BadParameter(f"must be zero or more, got {latency!r}", param_hint="--latency")
    if lat is not None and lat > MAX_LATENCY_US:
        raise click.BadParameter(f"{latency!r} is more than the largest allowed ({MAX_LATENCY_US:g} us)",
                                 param_hint="--latency")
    if bw is not None and not math.isfinite(bw):
        raise click.BadParameter(f"must be a finite rate, got {bandwidth!r}", param_hint="--bandwidth")
    if bw is not None and not bw > 0:
        raise click.BadParameter(f"must be positive, got {bandwidth!r}", param_hint="--bandwidth")
    if bw is not None and bw < MIN_BANDWIDTH:
        raise click.BadParameter(f"{bandwidth!r} is less than the smallest allowed ({MIN_BANDWIDTH:g} bytes/us)",
                                 param_hint="--bandwidth")
    kwargs: dict[str, Any] = {}
    if bw is not None:
        kwargs["bandwidth_bytes_per_us"] = bw
    if lat is not None:
        kwargs["latency_us"] = lat
    prefix = DEFAULT_DEVICE_PREFIX if device_prefix is None else device_prefix
    return Cluster(tuple(Device(f"{prefix}{i}", mem[i], spd[i]) for i in range(k)), **kwargs)


# ---------------------------------------------------------------------------
# the input
# ---------------------------------------------------------------------------

def frontend_options(f):
    """Flags that reach the frontends (TensorFlow, ONNX, peers) through `FrontendOptions`."""
    options = [
        click.option("--format", "fmt", type=click.Choice(list(FORMATS)), help="Input format (default: detected)."),
        click.option("--signature", help="SavedModel signature to import (default: the training step if there is "
                                         "one, else serving_default); for a GraphDef, the output node(s) to run, "
                                         "comma separated."),
        click.option("--profile", "profile_steps", type=click.IntRange(0), default=0, show_default=True,
                     help="Profile this many steps for real op times (0 = roofline estimate)."),
        click.option("--batch-size", type=click.IntRange(1), help="Value for unknown batch dimensions."),
        click.option("--dim", "dims", multiple=True, metavar="NAME=VALUE",
                     help="Value for a named dynamic dimension (repeatable)."),
        click.option("--device-profile", default="h100", show_default=True,
                     type=click.Choice(sorted(DEVICE_PROFILES), case_sensitive=False),
                     help="Device preset for estimated op times."),
        click.option("--keep-unexecuted", is_flag=True, help="ParDNN DOT input: keep ops a step never runs."),
    ]
    for opt in reversed(options):
        f = opt(f)
    return f


def frontend_flags(fmt=None, signature=None, profile_steps=0, batch_size=None, dims=(), device_profile="h100",
                   keep_unexecuted=False) -> list[str]:
    """The `frontend_options` flags given, as command-line words (for a command to suggest on the same input).

    >>> frontend_flags(batch_size=2, dims=("seq=32",))
    ['--batch-size', '2', '--dim', 'seq=32']
    """
    words: list[str] = []
    if fmt:
        words += ["--format", fmt]
    if signature:
        words += ["--signature", signature]
    if profile_steps:
        words += ["--profile", str(profile_steps)]
    if batch_size is not None:
        words += ["--batch-size", str(batch_size)]
    for d in dims:
        words += ["--dim", d]
    if device_profile != "h100":
        words += ["--device-profile", device_profile]
    if keep_unexecuted:
        words.append("--keep-unexecuted")
    return words


MAX_DIM = 2**31 - 1
"""The largest ``--dim`` value (a larger one made a tensor beyond `pardnn.ir.MAX_BYTES`, blamed on a node)."""


def make_frontend_options(name=None, signature=None, profile_steps=0, batch_size=None, dims=(),
                          device_profile="h100", keep_unexecuted=False) -> FrontendOptions:
    parsed = {}
    for item in dims:
        key, sep, value = item.partition("=")
        digits = value.strip().removeprefix("-")
        if not sep or not key or not (digits.isascii() and digits.isdigit()):   # not "²", "١"
            raise click.BadParameter(f"expected NAME=VALUE with an integer value, got {item!r}", param_hint="--dim")
        if int(value) < 1:
            raise click.BadParameter(f"a dimension must be at least 1, got {item!r}", param_hint="--dim")
        if int(value) > MAX_DIM:
            raise click.BadParameter(f"a dimension must be at most {MAX_DIM:,}, got {item!r}", param_hint="--dim")
        key = key.strip()
        if parsed.get(key, int(value)) != int(value):
            raise click.BadParameter(f"{key} is given twice, as {parsed[key]} and {int(value)}", param_hint="--dim")
        parsed[key] = int(value)
    return FrontendOptions(name=name, signature=signature, profile_steps=profile_steps, batch_size=batch_size,
                           dims=parsed, device_profile=device_profile, keep_unexecuted=keep_unexecuted)


def read_input(path: str, fmt: str | None = None, options: FrontendOptions | None = None) -> OpGraph:
    """The input as a graph (`pardnn.frontends.load_input`), its size noted for the out-of-memory message."""
    g = load_input(path, fmt=fmt, options=options)
    if g.num_nodes == 0:        # valid, and every figure of it is 0: likely not what was meant
        logging.getLogger("pardnn").warning("%s: the graph has no ops", path)
    ctx = click.get_current_context(silent=True)
    if ctx is not None and ctx.obj is not None:
        note_input(ctx, g)
    return g


# ---------------------------------------------------------------------------
# the HTML report (pardnn report, and --report of partition and bench)
# ---------------------------------------------------------------------------

def placement_cluster(placement_path: str, pl, cluster_path, devices, memory, speed, bandwidth, latency,
                      device_prefix) -> tuple[Cluster, bool]:
    """The cluster from the flags, with as many devices as the placement by default; and whether the placement
    file is the ``.place`` text form (which may name fewer devices than the cluster has)."""
    from ..errors import InputError

    cluster = build_cluster(cluster_path, devices, memory, speed, bandwidth, latency, device_prefix,
                            default_devices=pl.num_devices)
    text_form = Path(placement_path).name.endswith((".place", ".place.gz"))
    if pl.num_devices != cluster.num_devices and not (text_form and pl.num_devices < cluster.num_devices):
        raise InputError(f"{placement_path}: the placement is for {pl.num_devices} devices but the cluster has "
                         f"{cluster.num_devices}")
    if not text_form:   # the placement's own names (a SPEC trial: /job:worker/... devices were shown as GPUs)
        cluster = with_placement_names(cluster, pl, cluster_path, device_prefix)
    return cluster, text_form


def check_report_path(path: str | None, *inputs: str | None) -> None:
    """Fail early: the report needs matplotlib, and must not overwrite an input."""
    if not path:
        return
    from ..report.figures import require_matplotlib

    require_matplotlib()
    refuse_overwrite(path, *inputs)
    check_writable(path)


def write_placement_report(path: str, g, cluster, placement, schedule, *, progress, timings=None, measured=None,
                           title=None) -> Path:
    """Render the placement report and write it atomically to ``path``."""
    from ..report import render_report, save_report

    with progress.stage(f"writing the report {path}"):
        return save_report(render_report(g, cluster, placement, schedule, timings=timings, measured=measured,
                                         title=title), path)


def write_bench_report(path: str, result, *, progress, command: str | None = None) -> Path:
    from ..report import render_bench_report, save_report

    with progress.stage(f"writing the report {path}"):
        return save_report(render_bench_report(result, command=command), path)
