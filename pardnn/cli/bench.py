"""``pardnn bench``: every placer on a suite of graphs, compared with the machine model (`pardnn.bench`)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click

from ..api import DEFAULT_METHOD, all_methods
from ..errors import check_interrupt
from ..fileio import atomic_write, check_writable, output_transaction
from .options import OUTPUT_FILE, check_report_path, echo_summary, list_of, write_bench_report

_REPO = Path(__file__).resolve().parents[2]
"""The checkout this module runs from: the samples are in its sample_graphs/, the peer data beside it."""


def _default_data_dir() -> Path | None:
    for c in (Path.cwd() / ".." / "shared" / "data", _REPO.parent / "shared" / "data"):
        if (c / "README.md").exists():
            return c.resolve()
    return None


@click.command()
@click.option("--suite", default="quick", show_default=True,
              type=click.Choice(["quick", "samples", "real", "synthetic", "full"]),
              help="quick: the samples and a 10k synthetic graph; full: every real graph, the samples and "
                   "synthetic 10k/50k/200k graphs.")
@click.option("--data", "data_dir", type=click.Path(file_okay=False), help="The peer data directory "
              "(default: ../shared/data).")
@click.option("--methods", help="Comma list of methods (default: all; see partition --list-methods). The summary "
                                "scores pardnn against the others; without pardnn, the first method listed.")
@click.option("--k", "ks", default="2,4,8", show_default=True, help="Device counts.")
@click.option("--regimes", default="loose,tight", show_default=True, help="Memory regimes.")
@click.option("--synthetic-sizes", default="10000,50000,200000", show_default=True)
@click.option("--max-nodes", type=click.IntRange(0), help="Skip graphs larger than this.")
@click.option("--scaling/--no-scaling", default=True, show_default=True,
              help="Also find each method's smallest feasible memory capacity by bisection.")
@click.option("--scaling-max-nodes", type=click.IntRange(0), default=20000, show_default=True,
              help="Only run the memory-scaling bisection on graphs up to this size.")
@click.option("--scaling-graphs", help="Only run the memory-scaling bisection on these graphs (comma list of names "
              "as the tables print them, e.g. msr/op/bert_l-6_training,pipedream/resnet50).")
@click.option("-o", "--output", "outdir", default="bench-out", show_default=True,
              type=click.Path(file_okay=False, readable=False),
              help="Directory for results.csv, results.json, scaling.csv and makespan.png.")
@click.option("--markdown", type=OUTPUT_FILE, help="Also write the tables as Markdown here "
              "(e.g. benchmarks/RESULTS.md).")
@click.option("--tables/--no-tables", default=True, show_default=True, help="Print one table per case.")
@click.option("--report", "report_path", type=OUTPUT_FILE,
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
    from .. import bench as B   # the benchmark harness loads when it runs (start-up time)

    check_report_path(report_path)
    check_writable(Path(outdir) / "results.json", markdown)

    registry = all_methods()
    names = sorted(registry) if methods is None else [m.strip() for m in methods.split(",") if m.strip()]
    if not names:
        raise click.BadParameter(f"{methods!r} names no method", param_hint="--methods")
    unknown = [m for m in names if m not in registry]
    if unknown:
        raise click.BadParameter(f"unknown method(s) {', '.join(unknown)}", param_hint="--methods")
    k_list = list_of(int, ks, "--k")
    if any(k < 1 for k in k_list):
        raise click.BadParameter(f"device counts are at least 1, got {ks!r}", param_hint="--k")
    regime_list = [r.strip() for r in regimes.split(",")]
    for r in regime_list:
        if r not in B.REGIMES:
            raise click.BadParameter(f"unknown regime {r!r}", param_hint="--regimes")
    sizes = list_of(int, synthetic_sizes, "--synthetic-sizes")
    if any(n < 1 for n in sizes):
        raise click.BadParameter(f"graph sizes are at least 1 op, got {synthetic_sizes!r}",
                                 param_hint="--synthetic-sizes")
    data = Path(data_dir) if data_dir else _default_data_dir()
    sources = B.suite(suite, data_dir=data, samples_dir=_REPO / "sample_graphs", synthetic_sizes=sizes)
    if scaling_graphs:
        missing = sorted(set(x.strip() for x in scaling_graphs.split(",")) - {src.name for src in sources})
        if missing:
            raise click.BadParameter(f"no graph named {', '.join(missing)} in the {suite!r} suite",
                                     param_hint="--scaling-graphs")
    # the method the summary scores against the others: pardnn, or the first listed when pardnn is not
    ours = DEFAULT_METHOD if DEFAULT_METHOD in names else names[0]
    result = B.run_bench(sources, methods=names, ks=k_list, regimes=regime_list, ours=ours,
                         scaling=scaling, scaling_max_nodes=scaling_max_nodes, max_nodes=max_nodes,
                         scaling_graphs=[x.strip() for x in scaling_graphs.split(",")] if scaling_graphs else None,
                         progress=ctx.obj["progress"])
    check_interrupt()   # a Ctrl-C that something swallowed: no result printed (as no file written)
    if not result.rows:     # (nothing written: the last run's files stay as they were, together)
        raise click.BadParameter(f"no graph of the {suite!r} suite has at most {max_nodes:,} ops", param_hint=
                                 "--max-nodes") if max_nodes is not None else click.UsageError("no case to run")
    text = ([B.case_tables(result)] if tables else []) + (
        [f"{DEFAULT_METHOD} is not among --methods: 'ours' below is {ours}, against the best of the others"]
        if ours != DEFAULT_METHOD else []) + [B.summary_table(result)]
    echo_summary("\n".join(text), outputs=(markdown, report_path))
    command = "pardnn " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if len(sys.argv) > 2 else "pardnn bench"
    with output_transaction():   # every file of the run appears together or not at all
        paths = B.write_outputs(result, Path(outdir))
        if markdown:
            atomic_write(markdown, B.markdown_report(result, command=command))
            paths.append(Path(markdown))
        if report_path:
            paths.append(write_bench_report(report_path, result, progress=ctx.obj["progress"], command=command))
    echo_summary("wrote " + ", ".join(str(p) for p in paths), outputs=(markdown, report_path))
