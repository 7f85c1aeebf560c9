"""``pardnn run MODEL PLACEMENT``: run a placed model on the cluster's devices and check it.

The command dispatches on the model's format (`pardnn.inputs.detect_format`):
ONNX models go to `pardnn.backend.onnx_pipeline`; a format without a backend
yet is a one-line error. Registered on the main group at the end of
`pardnn.cli`.
"""

from __future__ import annotations

import json

import click

from .cli import build_cluster, cluster_options, frontend_options, make_frontend_options
from .errors import InputError, RuntimeFailure
from .units import format_time

#: Formats `pardnn run` can execute, with the backend module that does it.
RUNNABLE = {"onnx": "pardnn.backend.onnx_pipeline"}


def _table(report) -> str:
    lines = [f"{report.graph}: {len(report.stages)} stages on {len(report.devices)} devices "
             f"(costs: {report.cost_model})",
             f"predicted step time  {format_time(report.predicted_us)}  (machine model)",
             f"measured step time   {format_time(report.measured_us)}  (median of {report.steps} pipelined steps; "
             f"whole model in one session {format_time(report.whole_model_us)})",
             f"outputs match        {'yes' if report.outputs_match else 'NO'} "
             f"(max |difference| {report.max_abs_diff:.3g})"]
    w = max(len("device"), *(len(s.device_name) for s in report.stages))
    pw = max(len("provider"), *(len(s.provider) for s in report.stages))
    lines.append(f"{'stage':>5}  {'device':<{w}}  {'provider':<{pw}}  {'nodes':>6}  {'in':>4}  {'out':>4}  compute")
    for s in report.stages:
        lines.append(f"{s.index:>5}  {s.device_name:<{w}}  {s.provider:<{pw}}  {s.nodes:>6}  {s.inputs:>4}  "
                     f"{s.outputs:>4}  {format_time(s.compute_us)}")
    return "\n".join(lines)


@click.command(name="run")
@click.argument("model", type=click.Path())
@click.argument("placement", type=click.Path())
@cluster_options
@frontend_options
@click.option("--steps", type=click.IntRange(1), default=5, show_default=True,
              help="Timed steps (after one warm-up); the report gives the median.")
@click.option("--rtol", type=float, default=1e-4, show_default=True, help="Relative tolerance of the output check.")
@click.option("--atol", type=float, default=1e-5, show_default=True, help="Absolute tolerance of the output check.")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object: predicted_us, measured_us, outputs_match, max_abs_diff, stages, ...")
@click.pass_context
def run_cmd(ctx: click.Context, model: str, placement: str, cluster_path, devices, memory, speed, bandwidth, latency,
            device_prefix, fmt, signature, profile_steps, batch_size, dims, device_profile, keep_unexecuted,
            steps: int, rtol: float, atol: float, as_json: bool) -> None:
    """Run MODEL split along PLACEMENT on the cluster's devices; check it and time it.

    The model is cut into one sub-model per stage of the placement and run as
    a pipeline of sessions, one per device (CUDA on GPUs where onnxruntime
    has it, the CPU otherwise). Its outputs must equal the whole model's
    (within --rtol/--atol), and the measured step time is put beside the
    machine model's prediction. Give the same --dim/--batch-size/--profile
    flags as when the placement was made. Without cluster flags the cluster
    is the placement's devices. Outputs that differ exit with code 5.

    \b
    Examples:
      pardnn partition model.onnx --dim seq=16 --batch-size 2 --devices 2 -o p.json
      pardnn run model.onnx p.json --dim seq=16 --batch-size 2 --profile 5 --json
    """
    import importlib

    from .inputs import detect_format

    kind = fmt or detect_format(model)
    if kind not in RUNNABLE:
        what = "a pardnn.graph has no model to run" if kind == "pardnn" else f"running {kind} models"
        raise InputError(f"{model}: {what} is not supported yet; pardnn run supports: "
                         f"{', '.join(sorted(RUNNABLE))}")
    backend = importlib.import_module(RUNNABLE[kind])
    opts = make_frontend_options(None, signature, profile_steps, batch_size, dims, device_profile, keep_unexecuted)
    flags = (cluster_path, devices, memory, speed, bandwidth, latency)

    def cluster_for(pl):
        if all(x is None for x in flags):
            return backend.default_cluster(pl)
        return build_cluster(cluster_path, devices, memory, speed, bandwidth, latency, device_prefix,
                             default_devices=pl.num_devices)

    with ctx.obj["progress"].stage(f"running {model} along {placement}"):
        report = backend.run_placement(model, placement, cluster=cluster_for, options=opts, steps=steps,
                                       rtol=rtol, atol=atol)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        click.echo(_table(report))
    if not report.outputs_match:
        raise RuntimeFailure(f"the placed model's outputs differ from the whole model's "
                             f"(max |difference| {report.max_abs_diff:.3g}, rtol {rtol}, atol {atol})")
