"""Progress on stderr for long runs: a live line of nested stages, and bars over items.

`Progress` is passed down explicitly (library code never reads a global
flag). ``Progress.off()`` draws nothing; the CLI makes an enabled one unless
``-q`` was given. An enabled `Progress` draws only when stderr is a terminal:

* `Progress.stage` keeps one live line, redrawn in place, naming every stage
  now running from the outermost in, with the time spent so far, e.g.
  ``pardnn [0:41] placing 15,227 ops with pardnn > capacity search 3/10 (1.25x memory) > pass refine``;
  a background thread refreshes the clock about twice a second;
* `Progress.iterate` draws a tqdm bar over a sequence of items;
* `Progress.note` changes the innermost stage's text (``profiling step 3 of 5``).

Each finished stage is also logged at INFO level, so ``-v`` shows timings
in logs and CI. `stages_at_memory_error` names the stages (drawn or not) a
`MemoryError` left, which is what an out-of-memory message reports.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterable, Iterator, TypeVar

T = TypeVar("T")
log = logging.getLogger("pardnn")

REFRESH_S = 0.5
"""How often the live line's clock is redrawn."""


class _LiveLine:
    """The stages now running (all of them) and the one line that shows the drawn ones."""

    def __init__(self) -> None:
        self.stack: list[list] = []          # [text, start time, drawn]
        self.lock = threading.RLock()
        self.thread: threading.Thread | None = None
        self.visible = False

    def push(self, text: str, drawn: bool) -> None:
        with self.lock:
            self.stack.append([text, time.perf_counter(), drawn])
            if drawn:
                self._draw()
                self._start_clock()

    def pop(self) -> None:
        with self.lock:
            _, _, drawn = self.stack.pop()
            if drawn or self.visible:
                self._draw()

    def rename(self, text: str) -> None:
        with self.lock:
            if self.stack:
                self.stack[-1][0] = text
                if self.stack[-1][2]:
                    self._draw()

    def _draw(self) -> None:
        shown = [s for s in self.stack if s[2]]
        try:
            if not shown:
                if self.visible:
                    sys.stderr.write("\r\033[2K")
                    sys.stderr.flush()
                    self.visible = False
                return
            seconds = int(time.perf_counter() - shown[0][1])
            text = f"pardnn [{seconds // 60}:{seconds % 60:02d}] " + " > ".join(s[0] for s in shown)
            width = _terminal_width()
            if len(text) > width - 1:
                text = text[: max(10, width - 4)] + "..."
            sys.stderr.write("\r\033[2K" + text)
            sys.stderr.flush()
            self.visible = True
        except (OSError, ValueError):   # stderr closed or gone: drawing is best effort
            self.visible = False

    def _start_clock(self) -> None:
        if self.thread is not None and self.thread.is_alive():
            return
        self.thread = threading.Thread(target=self._tick, name="pardnn-progress", daemon=True)
        self.thread.start()

    def _tick(self) -> None:
        while True:
            time.sleep(REFRESH_S)
            with self.lock:
                if not any(s[2] for s in self.stack):
                    self.thread = None
                    return
                self._draw()


def _terminal_width() -> int:
    import shutil

    return shutil.get_terminal_size((100, 24)).columns


_LINE = _LiveLine()


_FAILED_IN: tuple[str, ...] = ()
"""The stages that were running where the last `MemoryError` was raised, outermost first."""


def stages_at_memory_error() -> tuple[str, ...]:
    """The stages that were running when a `MemoryError` last left a stage (outermost first), or ()."""
    return _FAILED_IN


def active_stages() -> tuple[str, ...]:
    """Every stage now running, outermost first."""
    with _LINE.lock:
        return tuple(s[0] for s in _LINE.stack)


def _remember_memory_error() -> None:
    """Keep the innermost stages a `MemoryError` passes through (each outer stage it leaves is a prefix)."""
    global _FAILED_IN
    stages = active_stages()
    if _FAILED_IN[:len(stages)] != stages:
        _FAILED_IN = stages


def _on_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


@dataclass(frozen=True)
class Progress:
    enabled: bool = True

    @classmethod
    def off(cls) -> "Progress":
        return cls(False)

    @property
    def drawn(self) -> bool:
        """Whether this progress draws anything (enabled, and stderr is a terminal)."""
        return self.enabled and _on_terminal()

    def iterate(self, items: Iterable[T], desc: str, total: int | None = None) -> Iterator[T]:
        """Yield ``items`` with a progress bar on stderr."""
        if not self.drawn:
            yield from items
            return
        from tqdm import tqdm

        yield from tqdm(items, desc=desc, total=total, file=sys.stderr, disable=None, leave=False,
                        dynamic_ncols=True)

    @contextmanager
    def stage(self, desc: str, *, log_time: bool = True) -> Iterator[None]:
        """Show ``desc`` on the live line while the block runs; log its duration (unless the caller logs its own),
        or, when the block fails or is interrupted, how long it ran."""
        t0 = time.perf_counter()
        try:
            with _running(desc, self.drawn):
                yield
        except BaseException:
            if log_time:
                log.info("%s: stopped after %.2f s", desc, time.perf_counter() - t0)
            raise
        if log_time:
            log.info("%s: %.2f s", desc, time.perf_counter() - t0)

    def note(self, desc: str) -> None:
        """Change the text of the innermost stage (it keeps its clock)."""
        note(desc)


@contextmanager
def _running(desc: str, drawn: bool) -> Iterator[None]:
    """``desc`` on the stage stack (and the live line when ``drawn``) while the block runs."""
    _LINE.push(desc, drawn)
    try:
        yield
    except MemoryError:
        _remember_memory_error()
        raise
    finally:
        _LINE.pop()


@contextmanager
def substage(desc: str) -> Iterator[None]:
    """A stage inside the one running now, drawn when that one is: for library code handed no `Progress`.

    Frontends use it for their long steps (``profiling 5 steps``), so the
    CLI's live line shows them under its own ``reading ...`` stage. Its
    duration is logged at INFO level with the stages around it.
    """
    with _LINE.lock:
        drawn = bool(_LINE.stack and _LINE.stack[-1][2])
    t0 = time.perf_counter()
    try:
        with _running(desc, drawn):
            yield
    finally:
        log.info("%s: %.2f s", " > ".join(active_stages() + (desc,)), time.perf_counter() - t0)


def note(desc: str) -> None:
    """Change the text of the innermost stage now running (``profiling step 3 of 5``)."""
    _LINE.rename(desc)
