"""The ``pardnn`` program's entry point (``[project.scripts]``).

It loads the command line (`pardnn.cli`: numpy, numba, scipy, about a second) inside a guard, so that a
Ctrl-C while the libraries load, or before the command starts watching for it, ends as one during a command
does: ``pardnn: interrupted`` on stderr, exit 130, no traceback and no output. While they load, its own
SIGINT handler remembers the Ctrl-C, so one that lands where Python ignores exceptions (a callback, a
finaliser: "Exception ignored in ...") still ends the program. It imports nothing but the standard modules
every Python has loaded at start-up, so the guard begins at once.
"""

from __future__ import annotations

import signal
import sys

EXIT_INTERRUPTED = 130
"""`pardnn.errors.EXIT_INTERRUPTED` (not imported from there: that module loads threading first)."""


def main() -> None:
    seen: list[bool] = []

    def on_sigint(signum, frame):
        if not seen:        # a second Ctrl-C while the first is handled changes nothing
            seen.append(True)
            raise KeyboardInterrupt

    try:
        previous = None
        if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:     # (a background job keeps ignoring it)
            try:
                previous = signal.signal(signal.SIGINT, on_sigint)
            except ValueError:      # not the main thread: no handler can be set there
                previous = None
        try:
            from .cli import main as run_cli
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
        if seen:    # it came while the libraries loaded, and whatever it interrupted swallowed it
            raise KeyboardInterrupt
        run_cli()
    except KeyboardInterrupt:
        sys.stderr.write("pardnn: interrupted\n")
        raise SystemExit(EXIT_INTERRUPTED) from None
