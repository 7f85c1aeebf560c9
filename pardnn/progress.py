"""Progress on stderr for long runs: a bar over named stages or items.

`Progress` is passed down explicitly (library code never reads a global
flag). ``Progress.off()`` is silent; the CLI makes an enabled one unless
``-q`` was given. Bars only draw on a terminal (tqdm's ``disable=None``), and
each finished stage is also logged at INFO level, so ``-v`` shows timings in
logs and CI.
"""

from __future__ import annotations

import logging
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterable, Iterator, TypeVar

T = TypeVar("T")
log = logging.getLogger("pardnn")


@dataclass(frozen=True)
class Progress:
    enabled: bool = True

    @classmethod
    def off(cls) -> "Progress":
        return cls(False)

    def iterate(self, items: Iterable[T], desc: str, total: int | None = None) -> Iterator[T]:
        """Yield ``items`` with a progress bar on stderr."""
        if not self.enabled:
            yield from items
            return
        from tqdm import tqdm

        yield from tqdm(items, desc=desc, total=total, file=sys.stderr, disable=None, leave=False,
                        dynamic_ncols=True)

    @contextmanager
    def stage(self, desc: str, *, log_time: bool = True) -> Iterator[None]:
        """Announce a stage on stderr (on a terminal) and log its duration (unless the caller logs its own)."""
        t0 = time.perf_counter()
        shown = self.enabled and sys.stderr.isatty()
        if shown:
            sys.stderr.write(f"pardnn: {desc} ...\r")
            sys.stderr.flush()
        try:
            yield
        finally:
            dt = time.perf_counter() - t0
            if shown:
                sys.stderr.write("\033[2K\r")
                sys.stderr.flush()
            if log_time:
                log.info("%s: %.2f s", desc, dt)
