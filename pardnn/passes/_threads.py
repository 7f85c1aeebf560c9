"""Running independent pieces of a pass on threads at once.

The compiled kernels (the simulator, the list schedulers, the move loop)
release Python's lock, so independent calls of them run in parallel on
threads. Each piece must be a pure function of its inputs: the results
are then collected in order, and a pass's plan is the same on any number
of threads.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Callable, Sequence, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity where the platform says, else the machine's)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


THREADS_UP_TO = 6e5
"""By default the passes run pieces on threads at once on graphs up to this many nodes plus edges (about 230k
ops), one after the other above it, where each piece holds tens of MB of schedules and kernel arrays. Up to
the fourteenth round this was 150k: at 200k ops, K=8, the map pass's threads took the command's peak RSS from
687 to 758 MB (0.2 s faster), and refinement's, at K=16 under tight memory, from 945 to 1,002 MB. Since the
memory pass keeps only its leading candidate's schedule, every pass on threads at 200k ops and K = 2 to 16
peaks under 900 MB (`benchmarks/partitioner_scaling.py --cli`)."""
THREADS_FROM = 2e4
"""Passes whose pieces each take about one simulation (map, seed) run them on threads by default only from
this many nodes plus edges on. Below it a piece takes a millisecond or less and threads gain nothing; and a
thread that runs out of memory can end the process without a word: under a 1 GiB address-space limit, the
map pass at K=4096 on VGG-16 (687 ops) died with "cannot allocate memory for thread-local data: ABORT"
(exit 127) where one thread reports the pass that ran out of memory (exit 8)."""


def workers_for(jobs: int, threads: int | None, g=None, *, smallest: float = 0.0) -> int:
    """Threads for ``jobs`` pieces: ``threads`` when given (1 or less: one after the other), else as many as
    there are pieces, at most the usable CPUs, and one on a graph ``g`` above `THREADS_UP_TO` nodes plus
    edges or below ``smallest``."""
    if threads is not None:
        return max(1, min(jobs, int(threads)))
    if g is not None and not smallest <= g.num_nodes + g.num_edges <= THREADS_UP_TO:
        return 1
    return max(1, min(jobs, usable_cpus()))


class Background:
    """``fn()`` begun on a thread of its own now, when ``threaded`` (else, or when no thread can be started,
    run when `result` is first asked for). Use as a context manager: on leaving, a job not begun is cancelled
    and a running one waited for, so no thread outlives the pass that made it; on leaving with an exception
    (Ctrl-C included) ``stop`` is set first, so a job that watches it ends at once."""

    def __init__(self, fn: Callable[[], R], threaded: bool, stop: threading.Event | None = None):
        self._fn = fn
        self._stop = stop
        self._pool = self._future = None
        self._done: list = []
        if threaded:
            pool = ThreadPoolExecutor(max_workers=1)
            try:
                self._future = pool.submit(fn)
                self._pool = pool
            except RuntimeError:        # "can't start new thread": the job runs inline instead
                pool.shutdown(wait=False)

    def result(self) -> R:
        if self._future is not None:
            return self._future.result()
        if not self._done:
            self._done.append(self._fn())
        return self._done[0]

    def __enter__(self) -> "Background":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if self._pool is not None:
            if exc_type is not None and self._stop is not None:
                self._stop.set()
            self._pool.shutdown(wait=True, cancel_futures=True)


def map_in_order(fn: Callable[[T], R], items: Sequence[T], workers: int,
                 stop: threading.Event | None = None) -> list[R]:
    """``[fn(x) for x in items]``, on ``workers`` threads at once when more than one. On an exception (Ctrl-C
    included) the pieces not begun are cancelled and ``stop``, when given, is set: running pieces that watch
    it end at once (refinement's searches do), the others finish."""
    if workers <= 1 or len(items) <= 1:
        return [fn(x) for x in items]
    pool = ThreadPoolExecutor(max_workers=workers)
    try:
        return list(pool.map(fn, items))
    except BaseException:
        if stop is not None:
            stop.set()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


_HELPERS: ThreadPoolExecutor | None = None
"""Helper threads for `run_strands`, kept for the process's life (`_HELPERS_SIZE` of them)."""
_HELPERS_SIZE = 0
_HELPERS_LOCK = threading.Lock()
STRANDS_FROM = THREADS_FROM
"""Searches try their moves on strands (`strands_for`) from this many nodes plus edges on. Below it a
simulation takes a millisecond or less: on an idle 2-core machine two strands still made the tuning
suite's slowest tight cases 5-15% faster, but beside one busy process 15-17% slower (pardnn/resnet K=4
2.78 s against 2.37-2.42 s), as a strand the scheduler has set aside holds up each short call; from
here on a call's simulations outweigh that (synthetic 10k and 50k ops, K=8, beside one busy process:
as fast as one strand)."""
STRANDS_UP_TO = 2e5
"""... and up to this many nodes plus edges (about 75k ops). On the 200k-op graph (528k), K=8, two strands
left the command's time as it was (the starts' searches already run on threads there and the search after
them spends little on quick simulations) and took its peak RSS from 779 to 816 MB."""
STRANDS = 2
"""Strands a search's moves are tried on at once (`pardnn.machine.kernel.first_shorter_strands`), at most:
most first-improvement calls end within a few moves, so more strands mostly try moves after the answer."""


def _helpers(count: int) -> ThreadPoolExecutor:
    """The helper threads (at least ``count``), made on first use."""
    global _HELPERS, _HELPERS_SIZE
    with _HELPERS_LOCK:
        if _HELPERS is None or _HELPERS_SIZE < count:
            if _HELPERS is not None:
                _HELPERS.shutdown(wait=False)
            _HELPERS_SIZE = max(count, STRANDS - 1)
            _HELPERS = ThreadPoolExecutor(max_workers=_HELPERS_SIZE, thread_name_prefix="pardnn-strand")
        return _HELPERS


def _drop_helpers(pool: ThreadPoolExecutor) -> None:
    """Forget ``pool``, cancelling what it queued: its ``submit`` queues a job before it starts the thread
    for it, so a job whose thread could not start would otherwise run, stale, at the next call."""
    global _HELPERS
    with _HELPERS_LOCK:
        pool.shutdown(wait=False, cancel_futures=True)
        if _HELPERS is pool:
            _HELPERS = None


def _join(futures: list) -> None:
    """Wait until every one of ``futures`` is done, even through Ctrl-C (raised after: a strand is short,
    and must not go on with its caller's arrays)."""
    interrupted = None
    while True:
        try:
            wait(futures)
            break
        except BaseException as e:     # Ctrl-C while waiting
            interrupted = interrupted or e
    if interrupted is not None:
        raise interrupted


def run_strands(fn: Callable[[int], R], count: int) -> list[R]:
    """``[fn(0), ..., fn(count - 1)]``: ``fn(0)`` on this thread, the others at once on helper threads that
    stay for the process's life (starting a thread per call would cost more than a small graph's
    simulation). Each ``fn(s)`` must release Python's lock (a compiled, nogil kernel) to run in parallel.
    Returns only when every strand has ended (an exception of strand 0 first, else the first strand's)."""
    if count <= 1:
        return [fn(s) for s in range(count)]
    pool = _helpers(count - 1)
    futures = []
    for s in range(1, count):
        try:
            futures.append(pool.submit(fn, s))
        except RuntimeError:        # "can't start new thread": the rest run here, after strand 0 (the same answer)
            _drop_helpers(pool)
            break
    rest = range(1 + len(futures), count)
    try:
        first = fn(0)
    finally:
        _join(futures)      # never leave a strand running on the caller's arrays
    return [first, *(f.result() for f in futures), *(fn(s) for s in rest)]


def strands_for(threads: int | None, g=None, num_devices: int = 1) -> int:
    """Strands for a search that runs alone (`run_strands`): ``threads`` when given (at most `STRANDS`;
    1 or less: one), else `STRANDS` when this process may use that many CPUs and ``g`` has from
    `STRANDS_FROM` to `STRANDS_UP_TO` nodes plus edges, and more than ``num_devices`` squared (a
    simulation's arrays grow with the K x K links: with more devices each strand would hold a copy of the
    largest allocation, and a thread started short of memory can end the process without a word; see
    `THREADS_FROM`); one otherwise."""
    if threads is not None:
        return max(1, min(STRANDS, int(threads)))
    if g is not None:
        size = g.num_nodes + g.num_edges
        if not STRANDS_FROM <= size <= STRANDS_UP_TO or num_devices * num_devices > size:
            return 1
    return max(1, min(STRANDS, usable_cpus()))
