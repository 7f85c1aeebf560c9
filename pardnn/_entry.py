"""The ``pardnn`` program's entry point (``[project.scripts]``).

It loads the command line (`pardnn.cli`: numpy, numba, scipy, about a second) inside a guard, so that a
Ctrl-C while the libraries load, or before the command starts watching for it, ends as one during a command
does: ``pardnn: interrupted`` on stderr, exit 130, no traceback and no output.
"""

from __future__ import annotations

import sys


def main() -> None:
    from .errors import EXIT_INTERRUPTED     # (pardnn.errors loads nothing heavy)

    try:
        from .cli import main as run_cli

        run_cli()
    except KeyboardInterrupt:
        sys.stderr.write("pardnn: interrupted\n")
        raise SystemExit(EXIT_INTERRUPTED) from None
