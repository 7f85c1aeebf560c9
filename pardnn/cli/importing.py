"""``pardnn import MODEL -o graph.json.gz``: any input the frontends read, written as a ``pardnn.graph`` file."""

from __future__ import annotations

from pathlib import Path

import click

from ..fileio import check_writable, is_stream, refuse_overwrite
from ..frontends import input_files
from ..ir import save_graph
from ..units import format_time
from .options import OUTPUT_FILE, echo_summary, frontend_options, make_frontend_options, read_input


@click.command(name="import")
@click.argument("model", type=click.Path(readable=False))
@click.option("-o", "--output", required=True, type=OUTPUT_FILE,
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
    # another suffix would be read back as another format (a device such as /dev/stdout is not read back)
    if not output.lower().endswith((".json", ".json.gz")) and not is_stream(Path(output)):
        raise click.BadParameter(f"a pardnn.graph is JSON: name it .json or .json.gz, got {output!r}",
                                 param_hint="-o/--output")
    refuse_overwrite(output, *input_files(model, fmt))
    check_writable(output)
    opts = make_frontend_options(name, signature, profile_steps, batch_size, dims, device_profile, keep_unexecuted)
    with ctx.obj["progress"].stage(f"importing {model}"):
        g = read_input(model, fmt, opts)
    save_graph(g, output)
    echo_summary(f"wrote {output}: {g.num_nodes:,} ops, {g.num_edges:,} edges, "
                 f"{format_time(float(g.time_us.sum()))} of compute, {len(g.group_names):,} colocation groups",
                 outputs=(output,))
