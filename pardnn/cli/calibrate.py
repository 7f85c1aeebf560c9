"""``pardnn calibrate``: measure the devices and links a run would use and write them as a ``pardnn.cluster``."""

from __future__ import annotations

import click

from ..errors import InputError, MissingDependencyError
from ..fileio import check_writable, refuse_overwrite, write_json
from ..units import format_time, parse_size
from .options import OUTPUT_FILE, FiniteFloat, echo_json, echo_summary, list_of, pin_options, pinning_from


def _rate(bytes_per_us: float) -> str:
    gbs = bytes_per_us * 1e6 / 1e9
    return "free (no measurable cost)" if bytes_per_us >= 1e9 else f"{gbs:.3g} GB/s"


@click.command(name="calibrate")
@click.option("-o", "--output", required=True, type=OUTPUT_FILE,
              help="Write the measured cluster (pardnn.cluster JSON) here.")
@click.option("-k", "--devices", type=click.IntRange(1, 64), metavar="K",
              help="Devices on this host: its GPUs when it has K, else K logical CPU devices [default: 2, or one "
                   "per task with --local-cluster / --cluster-spec].")
@click.option("--local-cluster", type=click.IntRange(1, 64), metavar="N",
              help="Start N TensorFlow servers on 127.0.0.1 and measure their devices (one per task by default).")
@pin_options
@click.option("--cluster-spec", "cluster_spec", type=click.Path(dir_okay=False, readable=False),
              help="Measure the cluster in this JSON spec (tasks started with `pardnn serve`).")
@click.option("--device-kind", type=click.Choice(["auto", "gpu", "cpu"]), default="auto", show_default=True)
@click.option("--memory", metavar="SIZE", help="Memory per device to write into the cluster [default: unlimited].")
@click.option("--sizes", default="4B,4KiB,256KiB,2MiB,8MiB", show_default=True, metavar="LIST",
              help="Transfer sizes to time on each link (at least two).")
@click.option("--repeats", type=click.IntRange(1), default=7, show_default=True,
              help="Timed steps per measurement (the median is used).")
@click.option("--timeout", "timeout_s", type=FiniteFloat(1), default=600, show_default=True,
              help="Seconds a server may take to start and a step to run.")
@click.option("--json", "as_json", is_flag=True, help="Print the measurements and fits as one JSON object.")
@click.pass_context
def calibrate_cmd(ctx: click.Context, output: str, devices, local_cluster, pin: bool, cores_per_task,
                  intra_op_threads, inter_op_threads: int, cluster_spec, device_kind: str, memory, sizes: str,
                  repeats: int, timeout_s: float, as_json: bool) -> None:
    """Measure each device's speed and each link's latency and bandwidth; write a pardnn.cluster.

    Speed: a fixed set of ops timed on every device, relative to device 0, in
    five rounds; a device within the rounds' spread (or 5%) of device 0 gets
    speed 1.
    Links: for each ordered pair, steps moving 1 and 4 tensors of each of
    --sizes, less the same steps kept on one device, fitted by least
    squares to overhead + count x (latency + bytes / bandwidth). The fit
    and its residuals are printed. partition, simulate and run take the
    file with --cluster.

    \b
    Examples:
      pardnn calibrate -k 2 -o cpus.json                       # 2 logical CPU devices
      pardnn calibrate --local-cluster 2 --pin -o pinned.json  # 2 pinned servers on this host
      pardnn calibrate --cluster-spec cluster.json -o c.json   # your servers (pardnn serve)
    """
    if local_cluster and cluster_spec:
        raise click.UsageError("give either --local-cluster or --cluster-spec, not both")
    pinning = pinning_from(local_cluster, pin, cores_per_task, intra_op_threads, inter_op_threads)
    size_list = list_of(parse_size, sizes, "--sizes")
    if len(set(size_list)) < 2 or min(size_list) < 4:
        raise click.BadParameter("give at least two different sizes of 4 bytes or more", param_hint="--sizes")
    try:
        mem = parse_size(memory) if memory else None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--memory") from None
    refuse_overwrite(output, cluster_spec)
    check_writable(output)
    try:
        from ..backend import tf_run
        from ..backend.tf_calibrate import calibrate
    except ImportError as exc:
        raise MissingDependencyError(f"pardnn calibrate needs the 'tf' extra (pip install 'pardnn[tf]'): {exc}") \
            from None
    progress = ctx.obj["progress"]
    kw = dict(sizes=size_list, repeats=repeats, progress=progress.note)
    with progress.stage("calibrating"):
        if local_cluster or cluster_spec:
            cal = _on_cluster(local_cluster, cluster_spec, devices, device_kind, mem, kw, pinning, timeout_s)
        else:
            k = devices or 2
            gpus = tf_run.local_gpus() if device_kind != "cpu" else 0
            kind = "gpu" if device_kind == "gpu" or (device_kind == "auto" and gpus >= k) else "cpu"
            if kind == "gpu" and gpus < k:
                raise InputError(f"--device-kind gpu with {k} devices needs {k} GPUs, but this host has {gpus}")
            if kind == "cpu":
                tf_run.setup_logical_cpus(k)
            names = tuple(f"/device:{kind.upper()}:{i}" for i in range(k))
            cal = calibrate(names, config=tf_run.session_config(cpus=k if kind == "cpu" else None, timeout_s=timeout_s),
                            memory_bytes=[mem] * k, **kw)
    write_json(output, cal.cluster.to_dict(), indent=2)
    if as_json:
        echo_json({**cal.to_dict(), "output": output}, outputs=(output,))
        return
    echo_summary(_table(cal) + f"\nwrote {output}", outputs=(output,))


def _on_cluster(local_cluster, cluster_spec, devices, device_kind, mem, kw, pinning, timeout_s):
    from ..backend.tf_backend import cluster_target
    from ..backend.tf_calibrate import calibrate, process_cpu_s
    from ..backend.tf_cluster import LocalCluster, check_reachable, read_cluster_spec
    from ..backend.tf_devices import map_devices, parse_device
    from ..backend.tf_run import session_config
    from ..placement import Placement
    import numpy as np

    def run(spec, pids=None):
        k = devices or len(spec.tasks)
        dummy = Placement(np.zeros(1, dtype=np.int64), tuple(f"/device:GPU:{i}" for i in range(k)), "calibrate")
        check_reachable(spec)
        target = cluster_target(spec, dummy, device_kind)
        names = map_devices(dummy.devices, target)
        cpu_seconds = None
        if pids is not None:            # a local cluster: each device's server process is known
            owner = [pids[parse_device(n).task or 0] for n in names]
            cpu_seconds = lambda: [process_cpu_s(p) for p in owner]    # noqa: E731
        return calibrate(names, session_target=spec.target, config=session_config(isolate=True, timeout_s=timeout_s),
                         memory_bytes=[mem] * k, cpu_seconds=cpu_seconds, **kw)

    if cluster_spec:
        return run(read_cluster_spec(cluster_spec))
    k = devices or local_cluster
    per_task = -(-k // local_cluster)
    with LocalCluster(local_cluster, cpus_per_task=per_task, pinning=pinning, start_timeout_s=min(timeout_s, 180.0),
                      lifetime_s=timeout_s * 3) as lc:
        return run(lc.spec, [p.pid for p in lc.processes])


def _table(cal) -> str:
    c = cal.cluster
    w = max(len("device"), *(len(d) for d in cal.devices))
    lines = [f"calibrated {len(cal.devices)} device(s) in {cal.seconds:.1f} s",
             f"{'device':<{w}}  {'op set':>10}  speed  measured"]
    sf = cal.speed_fit
    for i, (d, t, dev) in enumerate(zip(cal.devices, cal.device_times_us, c.devices)):
        how = ""
        if sf is not None and i:
            how = (f"  {sf.measured[i]:.3f} +- {sf.noise[i]:.3f}" +
                   (": device 0's speed within the noise" if sf.same[i] else ""))
        lines.append(f"{d:<{w}}  {format_time(t):>10}  {dev.speed:.3f}{how}")
    pairs = [(a, b, f) for a, row in enumerate(cal.links) for b, f in enumerate(row) if f is not None]
    if pairs:
        lines.append("link (a -> b)    latency    bandwidth              step overhead  max residual")
        for a, b, f in pairs:
            lines.append(f"{a} -> {b}  {format_time(f.latency_us):>14}  {_rate(f.bandwidth_bytes_per_us):<22} "
                         f"{format_time(f.overhead_us):>13}  {format_time(f.max_residual_us):>12} "
                         f"({100 * f.relative_residual:.0f}% of the largest time)")
        cpu = [(a, b) for a, b, _ in pairs if c.links and c.links[a][b] and c.links[a][b].transfer_cpu_us is not None]
        if cpu:
            lines.append("links between CPU tasks run on their cores: each end of a transfer takes "
                         + ("the CPU time measured in the tasks' processes" if cal.cpu_links is not None
                            else "half the fitted time") + ", over a free link")
            for a, b in cpu:
                link = c.links[a][b]
                per_byte = (f" + bytes at {_rate(link.transfer_cpu_bytes_per_us)}"
                            if link.transfer_cpu_bytes_per_us else "")
                lines.append(f"{a} -> {b}  {format_time(link.transfer_cpu_us)}{per_byte} on each end")
        else:
            lines.append(f"cluster-wide (medians): latency {format_time(c.latency_us)}, bandwidth "
                         f"{_rate(c.bandwidth_bytes_per_us)}")
    return "\n".join(lines)
