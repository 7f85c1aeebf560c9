"""``pardnn run``, ``pardnn rewrite`` and ``pardnn serve``: run a placed model on real devices and check it.

``pardnn run`` dispatches on the model's format (`pardnn.frontends.detect_format`):
ONNX models go to `pardnn.backend.onnx_pipeline`, TensorFlow SavedModels and
GraphDefs to `pardnn.backend.tf_backend`; a format without a backend is a
one-line error. ``pardnn rewrite`` writes a TensorFlow model with the
placement's devices; ``pardnn serve`` runs one task of a TensorFlow cluster.
The backends are imported when a command runs: they need the ``onnx`` or
``tf`` extra, and importing them is no part of ``pardnn --help``.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys

import click

from ..errors import InfeasibleError, InputError, MissingDependencyError, RuntimeFailure, check_interrupt
from ..fileio import check_new_directory, check_writable, refuse_overwrite, write_json
from ..frontends import input_files, input_format
from ..units import format_bytes, format_time, plural
from .options import (OUTPUT_FILE, FiniteFloat, build_cluster, cluster_options, distinct_outputs, echo_summary,
                      frontend_options, make_frontend_options, pin_options, pinning_from, with_placement_names)

#: Formats `pardnn run` can execute, with the backend module that does it.
RUNNABLE = {"onnx": "pardnn.backend.onnx_pipeline", "savedmodel": "pardnn.backend.tf_backend",
            "graphdef": "pardnn.backend.tf_backend", "keras": "pardnn.backend.tf_backend"}
TF_FORMATS = ("savedmodel", "graphdef", "keras")


def _table(report) -> str:
    on = _on_devices(report.ops_per_device, len(report.devices))
    lines = [f"{report.graph}: {plural(len(report.stages), 'stage')} on {on} (costs: {report.cost_model})",
             f"predicted step time  {format_time(report.predicted_us)}  (machine model)",
             f"measured step time   {format_time(report.measured_us)}  (median of "
             f"{plural(report.steps, 'pipelined step')}; whole model in one session "
             f"{format_time(report.whole_model_us)})",
             f"outputs match        {'yes' if report.outputs_match else 'NO'} "
             f"(max |difference| {report.max_abs_diff:.3g})",
             _fits_line(report)]
    w = max(len("device"), *(len(s.device_name) for s in report.stages))
    pw = max(len("provider"), *(len(s.provider) for s in report.stages))
    lines.append(f"{'stage':>5}  {'device':<{w}}  {'provider':<{pw}}  {'nodes':>6}  {'in':>4}  {'out':>4}  compute")
    for s in report.stages:
        lines.append(f"{s.index:>5}  {s.device_name:<{w}}  {s.provider:<{pw}}  {s.nodes:>6}  {s.inputs:>4}  "
                     f"{s.outputs:>4}  {format_time(s.compute_us)}")
    return "\n".join(lines)


def _on_devices(ops_per_device, num_devices: int) -> str:
    """"2 devices", or "1 of 3 devices" where some of the run's devices hold no op."""
    k = num_devices
    used = sum(1 for n in ops_per_device if n) if len(ops_per_device) == k else k
    return plural(k, "device") if used == k else f"{used} of {plural(k, 'device')}"


def _fits_line(report) -> str:
    """Whether the placement fits the machine model's cluster (memory, colocation), as `simulate` checks."""
    if not report.violations:
        return "fits the model       yes (memory and colocation on this cluster)"
    more = f" (and {len(report.violations) - 1} more)" if len(report.violations) > 1 else ""
    return f"fits the model       NO: {report.violations[0]}{more}"


_MODES = {"cpu": "logical CPU devices", "gpu": "GPUs", "cluster": "a TensorFlow cluster"}


def _tf_table(r) -> str:
    """The TensorFlow run's summary (a `pardnn.backend.tf_run.TFRunReport`)."""
    pc, sr = r.placement_check, r.send_recv
    where = f" at {r.session_target}" if r.session_target else ""
    lines = [
        f"{r.graph}: {plural(sum(r.ops_per_device), 'op')} on {_on_devices(r.ops_per_device, len(r.devices))} "
        f"({_MODES.get(r.mode, r.mode)}{where}); "
        f"costs: {r.cost_model or 'unknown'}",
        f"predicted step time  {format_time(r.predicted_us)}  (machine model)",
        f"measured step time   {format_time(r.measured_us)}  (median of {plural(len(r.samples_us), 'step')}; "
        f"every op on device 0: {format_time(r.reference_us)})",
        f"ops where placed     {'yes' if not pc.moved else 'NO'}: {pc.checked - len({m[0] for m in pc.moved})} of "
        f"{pc.checked} traced ops ({len({m[0] for m in pc.moved})} moved; {pc.untraced} never traced)",
        f"results match        {'yes' if r.outputs_match and r.variables_match else 'NO'}: {r.steps} steps' outputs "
        f"(max |difference| {r.max_output_diff:.3g}), {r.variables_compared} variables after them "
        f"(max |difference| {r.max_variable_diff:.3g})",
        f"{'':21}{_criterion_line(r)}",
        *_updated_line(r),
        _fits_line(r),
        f"transfers            simulated {r.simulated_transfers} ({r.simulated_feed_transfers} from feeds)",
        f"_Send/_Recv pairs    {sr.pairs}: {sr.data} data, {sr.feed} feed, {sr.fetch} fetch, {sr.control} control"
        + (f", {sr.forward} forwarded within a task" if sr.forward else "")
        + (f", {sr.other} other" if sr.other else ""),
        f"data transfers       {sr.data - r.transfers_only_tf} in both, {r.transfers_only_tf} only in TensorFlow, "
        f"{r.transfers_only_simulated} only in the simulator (feeds aside"
        + (f"; {r.transfers_fused} from ops TensorFlow's runtime fused" if r.transfers_fused else "") + ")",
    ]
    lines.extend(_memory_lines(r.memory))
    if r.losses:
        lines.append("losses               " + " ".join(f"{x:.6g}" for x in r.losses)
                     + ("" if r.finite else "  (NOT finite)"))
    if r.host_ops or r.regrouped:
        lines.append(f"host ops             {r.host_ops} on the CPU of device 0's task; {r.regrouped} op(s) moved to "
                     "keep colocation groups whole")
    w = max(len("device"), *(len(d) for d in r.devices))
    lines.append(f"{'device':<{w}}  {'ops':>6}")
    for d, n in zip(r.devices, r.ops_per_device):
        lines.append(f"{d:<{w}}  {n:>6}")
    for m in pc.moved[:5]:
        lines.append(f"moved: {m[0]} placed on {m[1]}, ran on {m[2]}")
    return "\n".join(lines)


def _updated_line(r) -> list[str]:
    """How many of the variables the step writes it changed; the ones it left as they started are named."""
    n, same = r.variables_written, r.variables_unchanged
    if not n:
        return []
    line = f"variables updated    {n - len(same)} of {n} changed by the steps"
    if same:
        line += (f"; {len(same)} came out as they started (a zero update, e.g. {same[0]!r}), so the match says "
                 "nothing about the ops behind their gradients (masked or unused inputs?)")
    return [line]


def _memory_lines(m) -> list[str]:
    """TensorFlow's measured allocator peaks beside the machine model's (`tf_run.memory_summary`)."""
    if not m:
        return []
    lines = [f"peak memory, 1 dev   predicted {format_bytes(m['predicted_single_device_peak_bytes'])}"]
    ref, placed = m["reference_peak_bytes"], m["measured_peak_bytes"]
    if not ref:
        lines[0] += f"; not measured: {m['note']}" if m["note"] else "; not measured"
        return lines
    ratio = m["measured_over_predicted"]
    lines[0] += (f", measured {format_bytes(sum(ref.values()))} (TensorFlow's allocator"
                 + (f"; {ratio:.3g}x the prediction)" if ratio is not None else ")"))
    if placed:
        what = "all devices, one shared allocator" if m["shared_allocator"] else "per allocator"
        got = ", ".join(f"{k} {format_bytes(v)}" for k, v in placed.items())
        lines.append(f"peak memory, placed  predicted {', '.join(format_bytes(x) for x in m['predicted_peak_bytes'])}"
                     f"; measured {got} ({what})")
    return lines


def _ratio(x: float) -> str:
    return f"{x:.3g}x"


def _criterion_line(r) -> str:
    """How the TensorFlow run's results matched the single-device run's (or the worst tensor that did not)."""
    tol = f"rtol {r.rtol:g}, atol {r.atol:g}"
    if r.criterion == "elementwise":
        return f"elementwise within {tol}"
    limit = f"the spread of a perturbed single-device run (limit {r.noise_factor:g}x)"
    if r.criterion == "rounding noise":
        ratios = [x for x in (r.max_output_ratio, r.max_variable_ratio) if x is not None]
        return f"within rounding noise: deviation at most {_ratio(max(ratios, default=0.0))} {limit}; elementwise {tol}"
    if not r.mismatches:
        return f"not within {tol}"
    m = r.mismatches[0]
    what = f"{r.mismatched} tensor(s)"
    if m.get("spread") is None:
        return f"{what} differ beyond {tol}, e.g. {m['name']} (no noise reference)"
    if m["ratio"] == "inf":
        return f"{what} differ beyond rounding noise, e.g. {m['name']}: it moved where a perturbed single-device " \
               "run does not"
    return f"{what} differ beyond rounding noise, e.g. {m['name']}: deviation {_ratio(m['ratio'])} {limit}"


@click.command(name="run")
@click.argument("model", type=click.Path(readable=False))
@click.argument("placement", type=click.Path(readable=False))
@cluster_options
@frontend_options
@click.option("--steps", type=click.IntRange(1), default=5, show_default=True,
              help="Timed steps (after one warm-up); the report gives the median.")
@click.option("--rtol", type=FiniteFloat(0), default=1e-4, show_default=True,
              help="Relative tolerance of the output check.")
@click.option("--atol", type=FiniteFloat(0), default=1e-5, show_default=True,
              help="Absolute tolerance of the output check.")
@click.option("--noise-factor", type=FiniteFloat(0), default=None, metavar="C",
              help="TensorFlow: a tensor not within --rtol/--atol still matches when its deviation is at most C times "
                   "the spread of a perturbed single-device run (float reassociation; docs/running.md). "
                   "[default: 10; 0: elementwise only]")
@click.option("--local-cluster", type=click.IntRange(1, 64), metavar="N",
              help="TensorFlow: start N servers (tasks) on 127.0.0.1 and run across them (for testing).")
@click.option("--cluster-spec", "cluster_spec", type=click.Path(dir_okay=False, readable=False),
              help="TensorFlow: run on the cluster in this JSON spec ({\"worker\": [\"host:port\", ...]}); "
                   "start each task with `pardnn serve`.")
@pin_options
@click.option("--device-kind", type=click.Choice(["auto", "gpu", "cpu"]), default="auto", show_default=True,
              help="TensorFlow: run on GPUs or logical CPU devices (auto: GPUs when there is one per device).")
@click.option("--soft-placement", is_flag=True,
              help="TensorFlow: let TensorFlow move ops it cannot run where placed (they are counted as moved).")
@click.option("--timeout", "timeout_s", type=FiniteFloat(1), default=600, show_default=True,
              help="TensorFlow: seconds a server may take to start and an op to run.")
@click.option("--write", "write_path", type=click.Path(readable=False),
              help="TensorFlow: also write the placed model here (.pb, .pbtxt, or a directory for a SavedModel).")
@click.option("--trace", "trace_path", type=OUTPUT_FILE,
              help="TensorFlow: also write the predicted and the measured (traced step) timelines here as Chrome "
                   "trace-event JSON (Perfetto, chrome://tracing): a track per device, and per link predicted.")
@click.option("--inputs", "inputs_path", type=click.Path(dir_okay=False, readable=False), metavar="FILE.npz",
              help="Feed this batch: a NumPy .npz (np.savez) with one array per model input, named as the input "
                   "(TensorFlow's 'x:0' may be 'x'). [default: the model's own batch, else made-up inputs: "
                   "normal floats, integers over the rows or classes they index]")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object: predicted_us, measured_us, outputs_match, ...")
@click.pass_context
def run_cmd(ctx: click.Context, model: str, placement: str, cluster_path, devices, memory, speed, bandwidth, latency,
            device_prefix, fmt, signature, profile_steps, batch_size, dims, device_profile, keep_unexecuted,
            steps: int, rtol: float, atol: float, noise_factor, local_cluster, cluster_spec, device_kind,
            soft_placement, timeout_s, write_path, trace_path, pin: bool, cores_per_task, intra_op_threads,
            inter_op_threads: int, inputs_path, as_json: bool) -> None:
    """Run MODEL along PLACEMENT on real devices; check it against one device and time it.

    \b
    TensorFlow (SavedModel directory, .pb/.pbtxt GraphDef): every node gets
    its placement device and the step runs in a tf.compat.v1.Session with
    soft placement off: on this host's GPUs when there is one per device,
    else on logical CPU devices; with --local-cluster N on N servers started
    on 127.0.0.1; with --cluster-spec on your servers (one per host). The
    report gives the measured step time beside the machine model's, whether
    every op ran where placed, whether the losses and variables equal an
    all-on-device-0 run (within --rtol/--atol, or else within the rounding
    noise of a perturbed all-on-device-0 run, --noise-factor), and
    TensorFlow's _Send/_Recv pairs beside the simulator's transfers.

    \b
    ONNX: the model is cut into one sub-model per stage of the placement and
    run as a pipeline of onnxruntime sessions; its outputs must equal the
    whole model's.

    Give the same --profile/--batch-size/--signature/--dim flags as when the
    placement was made. Without cluster flags the machine model's cluster is
    the placement's devices (unlimited memory). Results that differ, or ops
    that moved, exit with code 5; a device the placement names that does not
    exist, code 3; a placement that breaks the machine model on that cluster
    (memory, colocation), code 4 after the report.

    \b
    Examples:
      pardnn partition model_dir --devices 4 -o p.json
      pardnn run model_dir p.json
      pardnn run model_dir p.json --local-cluster 2 --json
      pardnn run model_dir p.json --local-cluster 2 --pin --steps 10
      pardnn run model_dir p.json --cluster-spec cluster.json --write placed_model/
      pardnn run model.onnx p.json --dim seq=16 --batch-size 2 --profile 5 --json
      pardnn run model_dir p.json --inputs batch.npz
    """
    if local_cluster and cluster_spec:
        raise click.UsageError("give either --local-cluster or --cluster-spec, not both")
    kind = input_format(model, fmt)
    if kind not in RUNNABLE:
        runnable = ", ".join(sorted(set(RUNNABLE)))
        if kind == "pardnn":
            raise InputError(f"{model}: a pardnn.graph holds no model to run; run the model it was imported from "
                             f"({runnable}; for Keras, the compiled model's .keras file: docs/keras.md)")
        raise InputError(f"{model}: pardnn run cannot run {kind} models; it runs {runnable}")
    tf_only = {"--local-cluster": local_cluster, "--cluster-spec": cluster_spec, "--soft-placement": soft_placement,
               "--write": write_path, "--device-kind": device_kind if device_kind != "auto" else None,
               "--noise-factor": noise_factor is not None, "--trace": trace_path}
    if kind not in TF_FORMATS:
        used = [k for k, v in tf_only.items() if v]
        if used:
            raise click.UsageError(f"{used[0]} applies to TensorFlow models only")
    pinning = pinning_from(local_cluster, pin, cores_per_task, intra_op_threads, inter_op_threads)
    if write_path:
        refuse_overwrite(write_path, *input_files(model), placement, inputs_path)
        check_writable(write_path, directory_ok=True)
        _check_new_directory(write_path)
    if trace_path:
        refuse_overwrite(trace_path, *input_files(model), placement, cluster_path, inputs_path)
        check_writable(trace_path)
        distinct_outputs(write_path, trace_path)
    _check_batch_size(placement, batch_size)
    backend = importlib.import_module(RUNNABLE[kind])
    opts = make_frontend_options(None, signature, profile_steps, batch_size, dims, device_profile, keep_unexecuted)

    def cluster_for(pl):
        """The flags' cluster, as many devices as the placement by default, named as simulate names them."""
        cl = build_cluster(cluster_path, devices, memory, speed, bandwidth, latency, device_prefix,
                           default_devices=pl.num_devices)
        return with_placement_names(cl, pl, cluster_path, device_prefix)

    extra = {}
    if kind in TF_FORMATS:
        extra = dict(local_cluster=local_cluster, cluster_spec=cluster_spec, device_kind=device_kind,
                     soft_placement=soft_placement, timeout_s=timeout_s, write=write_path, noise_factor=noise_factor,
                     trace=bool(trace_path), pinning=pinning)
    with ctx.obj["progress"].stage(f"running {model} along {placement}"):
        report = backend.run_placement(model, placement, cluster=cluster_for, options=opts, steps=steps,
                                       rtol=rtol, atol=atol, inputs=inputs_path, **extra)
    if trace_path:
        write_json(trace_path, report.trace)
    check_interrupt()   # a Ctrl-C that something swallowed: no result printed (as no file written)
    if as_json:
        echo_summary(run_json(report.to_dict()), outputs=(trace_path,), asked=True)
    else:
        echo_summary("\n".join([_tf_table(report) if kind in TF_FORMATS else _table(report)]
                               + [f"wrote {p}" for p in (write_path, trace_path) if p]), outputs=(trace_path,))
    if kind in TF_FORMATS:
        if not report.finite:
            raise RuntimeFailure("the step's outputs are not finite (NaN or inf), so matching the single-device "
                                 "run proves nothing; check the model, its inputs and its starting values")
        if not (report.outputs_match and report.variables_match):
            raise RuntimeFailure(f"the placed step's results differ from the single-device run's: "
                                 f"{_criterion_line(report)} (max |difference|: outputs {report.max_output_diff:.3g}, "
                                 f"variables {report.max_variable_diff:.3g})")
        if report.placement_check.moved and not soft_placement:
            m = report.placement_check.moved[0]
            raise RuntimeFailure(f"{len(report.placement_check.moved)} op(s) did not run where placed, e.g. "
                                 f"{m[0]!r} placed on {m[1]} ran on {m[2]}")
    elif not report.outputs_match:
        raise RuntimeFailure(f"the placed model's outputs differ from the whole model's "
                             f"(max |difference| {report.max_abs_diff:.3g}, rtol {rtol}, atol {atol})")
    if report.violations:   # it ran (this host's devices did not enforce the model's limits): as `simulate`, exit 4
        raise InfeasibleError(f"{placement}: the placement breaks the machine model: {report.violations[0]}",
                              short_bytes=report.short_bytes)


def run_json(d: dict) -> str:
    """``run --json``'s text: indented, but the measured timeline (an entry per op of the traced step) one compact
    line, so a 100,000-op step stays a few MB.

    >>> print(run_json({"measured_us": 1.5, "measured_timeline": {"devices": [{"device": 0, "ops": [["a", 0, 2]]}]}}))
    {
      "measured_us": 1.5,
      "measured_timeline": {"devices":[{"device":0,"ops":[["a",0,2]]}]}
    }
    """
    rest = {k: v for k, v in d.items() if k != "measured_timeline"}
    text = json.dumps(rest, indent=2)
    if "measured_timeline" not in d:
        return text
    head = text[:-2] + "," if rest else "{"
    return head + '\n  "measured_timeline": ' + json.dumps(d["measured_timeline"], separators=(",", ":")) + "\n}"


def _check_batch_size(placement: str, batch_size, doing: str = "run") -> None:
    """Fail fast, before the model's import: the backends check again after loading the placement."""
    from ..fileio import read_json
    from ..placement import check_batch_size
    try:
        made = read_json(placement).get("batch_size")
    except (OSError, ValueError, AttributeError, InputError):
        return          # an unreadable placement is reported by the backend, with its own message
    check_batch_size(made, batch_size, placement, doing)


@click.command(name="rewrite")
@click.argument("model", type=click.Path(readable=False))
@click.argument("placement", type=click.Path(readable=False))
@click.option("-o", "--output", required=True, type=click.Path(readable=False),
              help="The placed model: a .pb or .pbtxt GraphDef, or a directory (a SavedModel, for a SavedModel or "
                   ".keras input).")
@click.option("--device-kind", type=click.Choice(["as-named", "gpu", "cpu"]), default="as-named", show_default=True,
              help="Device names to write: the placement's own, or /device:GPU:i or /device:CPU:i by position.")
@click.option("--tasks", type=click.IntRange(1, 4096), help="Deal the devices to this many tasks of job 'worker' "
                                                             "(/job:worker/replica:0/task:i/device:...).")
@click.option("--cluster-spec", "cluster_spec", type=click.Path(dir_okay=False, readable=False),
              help="Deal the devices to the tasks of this cluster spec's job.")
@frontend_options
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.pass_context
def rewrite_cmd(ctx: click.Context, model: str, placement: str, output: str, device_kind: str, tasks, cluster_spec,
                fmt, signature, profile_steps, batch_size, dims, device_profile, keep_unexecuted,
                as_json: bool) -> None:
    """Write the TensorFlow MODEL with PLACEMENT's devices on every node, without running it.

    Colocation groups stay whole and host-only ops go to the CPU of device
    0's task. The output is a GraphDef (.pb binary, .pbtxt text) or, for a
    SavedModel or compiled Keras model (.keras) input, a SavedModel directory with the variables' values and
    a `train_step` signature (tag `train`); see docs/running.md to load it.

    \b
    Examples:
      pardnn rewrite model_dir p.json -o placed.pbtxt
      pardnn rewrite model_dir p.json -o placed_model/ --tasks 2
      pardnn rewrite model.keras p.json -o placed_model/ --batch-size 32
    """
    kind = input_format(model, fmt)
    if kind not in TF_FORMATS:
        raise InputError(f"{model}: pardnn rewrite writes TensorFlow models; this is a {kind} input")
    refuse_overwrite(output, model, placement)
    check_writable(output, directory_ok=True)
    _check_new_directory(output)
    if tasks and cluster_spec:
        raise click.UsageError("--tasks and --cluster-spec cannot be combined")
    _check_batch_size(placement, batch_size, "rewrite")
    if importlib.util.find_spec("tensorflow") is None:
        raise MissingDependencyError(f"{model}: pardnn rewrite needs the 'tf' extra (pip install 'pardnn[tf]')")
    from ..backend.tf_backend import rewrite

    opts = make_frontend_options(None, signature, profile_steps, batch_size, dims, device_profile, keep_unexecuted)
    with ctx.obj["progress"].stage(f"writing {model} placed along {placement}"):
        _, summary = rewrite(model, placement, output, options=opts, device_kind=device_kind, tasks=tasks,
                             cluster_spec=cluster_spec)
    check_interrupt()
    if as_json:
        echo_summary(json.dumps(summary, indent=2), outputs=(output,), asked=True)
        return
    echo_summary("\n".join([f"wrote {summary['output']}: graph {summary['graph']}, "
                            f"{sum(summary['ops_per_device'].values())} ops ({summary['host_ops']} host ops, "
                            f"{summary['regrouped']} moved to keep groups whole)"]
                           + [f"  {d}  {n}" for d, n in summary["ops_per_device"].items()]), outputs=(output,))


def _check_new_directory(output: str) -> None:
    """A SavedModel (any name but .pb or .pbtxt) goes into a new or empty directory: fail before the work."""
    if not output.lower().endswith((".pb", ".pbtxt")):
        check_new_directory(output)


def _usable_cores() -> set[int] | None:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def _core_ranges(cores: set[int]) -> str:
    """``{0, 1, 2, 5}`` -> ``"0-2,5"``."""
    out, run = [], []
    for c in sorted(cores):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [c]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


@click.command(name="serve")
@click.option("--cluster-spec", "cluster_spec", required=True, type=click.Path(dir_okay=False, readable=False),
              help="The cluster spec JSON ({\"worker\": [\"host0:2222\", \"host1:2222\"]}), the same on every host.")
@click.option("--task", type=click.IntRange(0), required=True, help="This host's task index in the spec.")
@click.option("--cpus", type=click.IntRange(0), default=0, show_default=True,
              help="Logical CPU devices for this task (for CPU-only hosts; 0 = one).")
@click.option("--lifetime", type=FiniteFloat(0), default=0, show_default=True,
              help="Stop after this many seconds (0 = until killed).")
@click.option("--cores", default="", metavar="LIST",
              help="Pin this task to these CPU cores, e.g. 0-3 (default: all the process may use).")
@click.option("--intra-op-threads", type=click.IntRange(0), default=0, show_default=True,
              help="Threads per op (0 = TensorFlow's default).")
@click.option("--inter-op-threads", type=click.IntRange(0), default=0, show_default=True,
              help="Ops in flight at once (0 = TensorFlow's default; keep it at 2 or more).")
def serve_cmd(cluster_spec: str, task: int, cpus: int, lifetime: float, cores: str, intra_op_threads: int,
              inter_op_threads: int) -> None:
    """Run task TASK of a TensorFlow cluster (a tf.distribute.Server) until killed.

    Start one on every host of the spec, then run the step from any machine
    with `pardnn run MODEL PLACEMENT --cluster-spec SPEC`. Prints
    `READY grpc://host:port` once it serves; a server that cannot start
    exits with code 5.

    \b
    Example (host 1 of 2):
      pardnn serve --cluster-spec cluster.json --task 1
    """
    from ..backend.tf_cluster import check_bindable, read_cluster_spec
    from ..backend.tf_server import parse_cores, serve

    try:
        core_list = parse_cores(cores)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--cores") from None
    usable = _usable_cores()
    if usable is not None and not set(core_list) <= usable:
        missing = sorted(set(core_list) - usable)
        raise click.BadParameter(f"core {missing[0]} is not one this process may use (it may use "
                                 f"{_core_ranges(usable)})", param_hint="--cores")
    spec = read_cluster_spec(cluster_spec)
    if task >= len(spec.tasks):
        raise InputError(f"{cluster_spec}: task {task} does not exist; job {spec.job!r} has {len(spec.tasks)} tasks")
    check_bindable(spec.tasks[task], task)
    code = serve(spec.to_dict(), spec.job, task, cpus=cpus, lifetime_s=lifetime, cores=core_list,
                 intra_op_threads=intra_op_threads, inter_op_threads=inter_op_threads)
    if code == 0:   # the lifetime is over; the gRPC server's threads never stop by themselves
        sys.stdout.flush()
        os._exit(0)
    if code == 6:
        raise MissingDependencyError("pardnn serve needs the 'tf' extra (pip install 'pardnn[tf]')")
    if code:
        raise RuntimeFailure(f"the server of task {task} ({spec.tasks[task]}) did not start")
