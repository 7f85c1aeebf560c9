"""The ``pardnn`` command line: parse, call the API, print. Nothing more.

Errors the tool can explain are `PardnnError`s; `_Group.invoke` maps them to
one line on stderr and their documented exit code, in one place.

The package holds the group (here), the options and helpers the commands
share (`pardnn.cli.options`) and one module per command or family of
commands: `info`, `plan`, `partition` (partition, simulate), `importing` (import),
`bench`, `report`, `run` (run, rewrite, serve) and `calibrate`. The command modules
import `options` and the library, never this module; the group collects
their commands at the end of this one, so nothing imports in a circle.
"""

from __future__ import annotations

import logging
import os
import resource
import sys
import tempfile
from typing import Any

import click

from .. import __version__
from ..errors import (EXIT_DEPENDENCY, EXIT_INFEASIBLE, EXIT_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_MEMORY,
                      EXIT_OUTPUT, EXIT_RUNTIME, EXIT_USAGE, OutOfMemory, PardnnError, check_interrupt, interrupted,
                      watching_interrupts)
from ..fileio import moved_descriptor
from ..progress import Progress, stages_at_memory_error

EXIT_CODES_HELP = f"""\b
Exit codes:
  0  success
  {EXIT_INTERNAL}  internal error (a bug; run with --debug and report it)
  {EXIT_USAGE}  usage error (bad flags or arguments)
  {EXIT_INPUT}  invalid input: unreadable or malformed graph, cluster, placement or model
  {EXIT_INFEASIBLE}  infeasible: no placement meets the memory limits, or the one simulated or run breaks them (the message says by how much)
  {EXIT_RUNTIME}  runtime failure: a device, server or framework run failed
  {EXIT_DEPENDENCY}  an optional dependency is missing (e.g. pip install 'pardnn[tf]')
  {EXIT_OUTPUT}  an output cannot be written (the message names the path and why)
  {EXIT_MEMORY}  out of memory (the message names the stage and the input's size)
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C); nothing is written
"""


class _Failure(click.ClickException):
    """A `PardnnError` on its way out: one line on stderr, its own exit code."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code

    def show(self, file: Any = None) -> None:
        click.echo(f"pardnn: error: {self.message}", err=True)


class _Interrupted(click.ClickException):
    """Ctrl-C: one line on stderr, exit 130 (128 + SIGINT, as shells report it); nothing was written."""

    exit_code = EXIT_INTERRUPTED

    def __init__(self) -> None:
        super().__init__("interrupted")

    def show(self, file: Any = None) -> None:
        click.echo("pardnn: interrupted", err=True)


def _silence_stdout() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            result = super().invoke(ctx)
            check_interrupt()   # a Ctrl-C that something swallowed (a callback, a finaliser): exit 130 all the same
            return result
        except PardnnError as exc:
            if interrupted(exc):    # a failure Ctrl-C caused (in a pass, a compiled kernel)
                raise _Interrupted() from None
            raise _Failure(str(exc), exc.exit_code) from None
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except KeyboardInterrupt:
            raise _Interrupted() from None
        except BrokenPipeError:  # the reader went away (`pardnn info x | head`): not an error
            _silence_stdout()
            raise click.exceptions.Exit(0) from None
        except MemoryError:
            raise _Failure(str(_out_of_memory()), EXIT_MEMORY) from None
        except Exception as exc:  # a bug: say so in one line unless --debug
            if interrupted(exc):    # Ctrl-C inside a compiled kernel (numba reports it as a SystemError)
                raise _Interrupted() from None
            if ctx.obj and ctx.obj.get("debug"):
                raise
            raise _Failure(f"internal error: {type(exc).__name__}: {exc} "
                           "(run with --debug for the traceback, and please report it)", EXIT_INTERNAL) from None


def _out_of_memory() -> OutOfMemory:
    """What ran out, where and on how large an input (the stages it left, the input's size, peak RSS)."""
    stages = stages_at_memory_error()
    where = f" while {' > '.join(stages)}" if stages else ""
    ctx = click.get_current_context(silent=True)
    size = (ctx.obj or {}).get("input_size") if ctx else None
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return OutOfMemory(f"out of memory{where}" + (f" on {size}" if size else "")
                       + f" (peak resident memory {peak_mib:,.0f} MiB); free memory, or try a smaller input "
                         "or fewer devices")


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
    moved_descriptor(2, keep)       # -o /dev/stderr writes where stderr really goes
    sys.stderr = open(keep, "w", buffering=1, encoding=sys.stderr.encoding or "utf-8",  # noqa: SIM115
                      errors="backslashreplace", closefd=True)


def _printable_stdout() -> None:
    """Let stdout print what UTF-8 cannot encode as stderr does (``errors="backslashreplace"``): a graph or device
    named with a lone surrogate (``"\\ud800"`` in JSON, which is valid there) made the summary an internal
    error, after its outputs were written."""
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if reconfigure is not None:
        try:
            reconfigure(errors="backslashreplace")
        except (OSError, ValueError):
            pass


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
    Start with `pardnn plan`: how many devices the step needs, how much memory
    each, and the step time and speedup at each count.

    \b
    Examples:
      pardnn info sample_graphs/pardnn_vgg16.json.gz
      pardnn plan sample_graphs/pardnn_vgg16.json.gz --memory 2GiB
      pardnn partition sample_graphs/pardnn_vgg16.json.gz --devices 4 --memory 2GiB -o vgg.placement.json
      pardnn simulate sample_graphs/pardnn_vgg16.json.gz vgg.placement.json --memory 2GiB --json
    """
    ctx.ensure_object(dict)
    ctx.obj.update(quiet=quiet, verbose=verbose, debug=debug, progress=Progress(enabled=not quiet))
    _setup_logging(quiet, verbose)


def _verbosity(argv: list[str]) -> int:
    """How many ``-v`` the global options before the command ask for (read before click parses them)."""
    count = 0
    for arg in argv:
        if not arg.startswith("-"):
            break
        if arg == "--verbose":
            count += 1
        elif not arg.startswith("--") and set(arg[1:]) <= {"v", "q"}:
            count += arg.count("v")
    return count


def main(argv: list[str] | None = None) -> None:
    """The ``pardnn`` program: quiets native logging for this process and its children, then runs the CLI."""
    args = list(sys.argv[1:] if argv is None else argv)
    with watching_interrupts(for_good=argv is None):    # run as the program (no argv): it exits next
        _quiet_native_logs(_verbosity(args))
        _printable_stdout()
        cli.main(args=args, prog_name="pardnn")


# The commands, each defined in its own module without reference to the group, join it here.
from . import bench, calibrate, importing, info, partition, plan, report, run  # noqa: E402

for _command in (info.info, plan.plan_cmd, partition.partition, partition.simulate, importing.import_cmd, bench.bench,
                 report.report_cmd, run.run_cmd, run.rewrite_cmd, run.serve_cmd, calibrate.calibrate_cmd):
    cli.add_command(_command)
