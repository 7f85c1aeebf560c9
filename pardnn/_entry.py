"""The ``pardnn`` program's entry point (``[project.scripts]``).

It loads the command line (`pardnn.cli`: numpy, numba, scipy, about a second) inside a guard, so that a
Ctrl-C while the libraries load, or before the command starts watching for it, ends as one during a command
does: ``pardnn: interrupted`` on stderr, exit 130, no traceback and no output. The libraries load within
`pardnn.errors.watching_interrupts`, so a Ctrl-C that lands where Python ignores exceptions (a callback, a
finaliser: "Exception ignored in ...") still ends the program. Nothing is imported outside the guard.
"""

from __future__ import annotations

EXIT_INTERRUPTED = 130
"""`pardnn.errors.EXIT_INTERRUPTED` (a Ctrl-C may come before that module has loaded)."""


def main() -> None:
    try:
        from .errors import interrupt_seen, interrupted, watching_interrupts

        with watching_interrupts():
            try:
                from .cli import main as run_cli
            except Exception as exc:
                # a Ctrl-C that Python handed on as another error (one raised in a class's ``__set_name__``
                # becomes a RuntimeError), or that left a module half imported for the next import to trip on
                if interrupted(exc):
                    raise KeyboardInterrupt from None
                raise
            if interrupt_seen():    # it came while the libraries loaded, and whatever it interrupted swallowed it
                raise KeyboardInterrupt
        run_cli()
    except KeyboardInterrupt:
        _interrupted()
    except Exception as exc:    # while `pardnn.errors` itself loaded, before its handler was set
        if not isinstance(exc.__cause__ or exc.__context__, KeyboardInterrupt):
            raise
        _interrupted()


def _interrupted() -> None:
    import sys

    sys.stderr.write("pardnn: interrupted\n")
    raise SystemExit(EXIT_INTERRUPTED) from None
