"""``pardnn info GRAPH``: size, compute, critical path, memory and colocation groups of a graph."""

from __future__ import annotations

import shlex

import click
import numpy as np

from ..analysis import critical_path
from ..errors import check_interrupt
from ..machine import single_device_peak
from ..placement import costs_of
from ..units import format_bytes, format_time
from .options import echo_json, frontend_flags, frontend_options, make_frontend_options, read_input


@click.command()
@click.argument("graph", type=click.Path(readable=False))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
@click.option("--top", type=click.IntRange(0), default=5, show_default=True,
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
    with ctx.obj["progress"].stage(f"reading {graph}"):
        g = read_input(graph, fmt, make_frontend_options(None, signature, profile_steps, batch_size, dims,
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
        # what sized and costed the graph, where its frontend recorded it (a placement of it records the same)
        "batch_size": g.meta.get("batch_size"),
        "costs": costs_of(g.meta),
    }
    if as_json:
        echo_json(summary)
        return
    check_interrupt()   # a Ctrl-C that something swallowed: no result printed (as no file written)
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
    if summary["batch_size"] is not None:
        rows.append(("batch size", f"{summary['batch_size']} (it sized the model; a placement records it)"))
    if summary["costs"] is not None:
        rows.append(("op times", summary["costs"]))
    width = max(len(r[0]) for r in rows)
    for k, v in rows:
        click.echo(f"{k:<{width}}  {v}")
    if largest:
        click.echo("largest colocation groups:")
        for item in summary["largest_groups"]:
            click.echo(f"  {item['ops']:>6} ops  {format_bytes(item['persistent_bytes']):>11}  {item['name']}")
    # the same input flags, so that the line runs as printed (a .keras or ONNX model needs its --batch-size)
    # (a graph file takes none of the flags that size or cost a model: they would only be warned of again)
    from ..frontends.registry import FRONTENDS, input_format
    sized = FRONTENDS[input_format(graph, fmt)].keywords is None
    flags = frontend_flags(fmt, signature, profile_steps, batch_size, dims, device_profile, keep_unexecuted) \
        if sized else frontend_flags(fmt)
    same_input = " ".join(shlex.quote(w) for w in [graph, *flags])
    click.echo(f"next: pardnn plan {same_input} --memory SIZE: how many devices it needs, and the speedup of each "
               f"count")
