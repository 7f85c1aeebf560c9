"""Typed errors, each with the exit code the command line reports for it.

The hierarchy is shallow on purpose: callers catch `PardnnError` to handle
anything the tool can explain, and the CLI maps `exit_code` to the process
exit status in one place (`pardnn.cli`).

Exit codes (also listed in ``pardnn --help``):

====  =====================================================================
0     success
1     internal error (a bug: please report it)
2     usage error (bad flags or arguments)
3     invalid input: unreadable or malformed graph, cluster, placement or model
4     infeasible: no placement meets the memory limits, or the one simulated breaks them (the message says by how much)
5     runtime failure: a device, server or framework run failed
6     a needed optional dependency is not installed (e.g. the `tf` extra)
7     an output cannot be written (the message names the path and the reason)
8     out of memory: the message says what ran out, and on how large an input
130   interrupted (Ctrl-C, SIGINT): no output is written
====  =====================================================================
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from typing import Iterator

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_USAGE = 2
EXIT_INPUT = 3
EXIT_INFEASIBLE = 4
EXIT_RUNTIME = 5
EXIT_DEPENDENCY = 6
EXIT_OUTPUT = 7
EXIT_MEMORY = 8
EXIT_INTERRUPTED = 130


_SIGINT_SEEN: list[bool] = []


@contextlib.contextmanager
def watching_interrupts(*, for_good: bool = False) -> Iterator[None]:
    """While the block runs, SIGINT (Ctrl-C) raises KeyboardInterrupt, as Python's own handler does, and is
    remembered for `interrupted` and `check_interrupt` (also where a callback or finaliser swallowed the
    KeyboardInterrupt, which is then not shown as "Exception ignored in ..."); a second one while the first
    is handled is ignored (the command is already ending: it would only print a traceback from its exit
    handlers). After the block nothing is remembered and the previous handler is back, unless ``for_good``
    (the ``pardnn`` program, which exits next, keeps ignoring a second Ctrl-C once one came). Outside the
    main thread, where no handler can be set, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        if _SIGINT_SEEN:
            return
        _SIGINT_SEEN.append(True)
        raise KeyboardInterrupt

    previous_hook = sys.unraisablehook

    def unraisable(info):    # a Ctrl-C that a finaliser or callback swallowed: remembered already, not shown
        if not (_SIGINT_SEEN and isinstance(info.exc_value, KeyboardInterrupt)):
            previous_hook(info)

    _SIGINT_SEEN.clear()
    previous = signal.signal(signal.SIGINT, handler)
    sys.unraisablehook = unraisable
    try:
        yield
    finally:
        sys.unraisablehook = previous_hook
        if for_good and _SIGINT_SEEN:       # the program ends now: a second Ctrl-C changes nothing
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        else:
            signal.signal(signal.SIGINT, previous)
        _SIGINT_SEEN.clear()    # (a caller that catches the program's SystemExit writes again)


def check_interrupt() -> None:
    """Raise KeyboardInterrupt if SIGINT came within `watching_interrupts`, even where whatever it
    interrupted swallowed it. Called before an output lands, so that such a Ctrl-C still leaves nothing
    written."""
    if _SIGINT_SEEN:
        raise KeyboardInterrupt


def interrupt_seen() -> bool:
    """Whether SIGINT came within `watching_interrupts` (even where whatever it interrupted swallowed the
    KeyboardInterrupt, as Python does in callbacks and finalisers: "Exception ignored in ...")."""
    return bool(_SIGINT_SEEN)


def interrupted(exc: BaseException) -> bool:
    """Whether ``exc`` is, or was caused by, a KeyboardInterrupt, or SIGINT came (within
    `watching_interrupts`). A Ctrl-C that lands while a compiled kernel runs reaches Python as ``SystemError:
    CPUDispatcher(...) returned a result with an exception set`` (numba's dispatcher), with the
    KeyboardInterrupt at the end of its chain of causes; one that lands while numba unboxes an argument, as
    ``TypeError: can't unbox ...``, with no trace of it at all."""
    if interrupt_seen():
        return True
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        if isinstance(e, KeyboardInterrupt):
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return False


class PardnnError(Exception):
    """Base of every error pardnn can explain in one line."""

    exit_code: int = EXIT_INTERNAL


def naming(source, exc: PardnnError) -> PardnnError:
    """``exc`` (same class) with its one line led by ``source`` (a file), unless it already names it."""
    text, where = str(exc), str(source)
    if where in text:
        return exc
    new = type(exc)(f"{where}: {text}")
    new.__dict__.update(exc.__dict__)
    return new


class InputError(PardnnError):
    """An input file or model is unreadable or malformed."""

    exit_code = EXIT_INPUT


class GraphError(InputError):
    """The graph violates the IR's invariants (cycle, dangling edge, ...)."""


class ClusterError(InputError):
    """The cluster description is malformed."""


class PlacementError(InputError):
    """A placement does not match its graph or cluster."""


class InfeasibleError(PardnnError):
    """No placement meets the memory limits.

    ``short_bytes`` is how many bytes the worst device is over its capacity,
    when known; ``min_capacity_bytes`` the smallest capacity that would fit,
    when a search found one.
    """

    exit_code = EXIT_INFEASIBLE

    def __init__(self, message: str, *, short_bytes: int | None = None,
                 min_capacity_bytes: int | None = None):
        super().__init__(message)
        self.short_bytes = short_bytes
        self.min_capacity_bytes = min_capacity_bytes


class RuntimeFailure(PardnnError):
    """Running a placed graph failed (missing device, server, framework error)."""

    exit_code = EXIT_RUNTIME


class MissingDependencyError(PardnnError):
    """An optional extra (TensorFlow, ONNX, ...) is needed but not installed."""

    exit_code = EXIT_DEPENDENCY


class OutputError(PardnnError):
    """An output file or directory cannot be written (its parent is a file, a read-only place, a full disk)."""

    exit_code = EXIT_OUTPUT


class OutOfMemory(PardnnError):
    """The process ran out of memory; the message names the stage and the input's size."""

    exit_code = EXIT_MEMORY


class PassError(PardnnError):
    """A pipeline pass failed; the message names the pass and those before it."""

    exit_code = EXIT_INTERNAL
