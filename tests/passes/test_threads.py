"""`pardnn.passes._threads`: how many threads a pass's pieces get, and that the results keep their order."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from pardnn.passes._threads import THREADS_FROM, THREADS_UP_TO, Background, map_in_order, usable_cpus, workers_for


def graph(size: float):
    return SimpleNamespace(num_nodes=int(size) // 2, num_edges=int(size) - int(size) // 2)


def test_threads_by_graph_size_and_by_request():
    cpus = usable_cpus()
    assert workers_for(5, None) == min(5, cpus)
    assert workers_for(5, None, graph(THREADS_UP_TO + 1)) == 1                  # large graphs: one thread
    assert workers_for(5, None, graph(THREADS_FROM - 1), smallest=THREADS_FROM) == 1    # small pieces: one
    assert workers_for(5, None, graph(THREADS_FROM), smallest=THREADS_FROM) == min(5, cpus)
    assert workers_for(5, 3, graph(10)) == 3 and workers_for(2, 3) == 2        # asked for: as asked, per piece
    assert workers_for(5, 0) == 1 == workers_for(0, None)


def test_map_in_order_keeps_the_order_and_cancels_what_has_not_begun():
    assert map_in_order(lambda x: x * x, list(range(20)), 3) == [x * x for x in range(20)]
    began, lock = [], threading.Lock()

    def piece(x):
        with lock:
            began.append(x)
        if x == 0:
            raise KeyboardInterrupt
        time.sleep(0.2)
        return x

    with pytest.raises(KeyboardInterrupt):
        map_in_order(piece, list(range(50)), 2)
    assert 1 <= len(began) <= 4, began      # the rest were cancelled, not run


def test_a_background_job_runs_on_its_thread_at_once_or_inline_when_asked_and_never_outlives_its_block():
    where = []

    def job():
        where.append(threading.current_thread() is threading.main_thread())
        time.sleep(0.2)
        return 42

    with Background(job, threaded=False) as bg:
        assert where == []                      # not begun until asked for
        assert bg.result() == 42 and where == [True]
    where.clear()
    t0 = time.perf_counter()
    with Background(job, threaded=True) as bg:
        time.sleep(0.2)                         # the main thread's own work meanwhile
        assert bg.result() == 42 and where == [False]
    assert time.perf_counter() - t0 < 0.38      # the two waits overlapped (one after the other: 0.4 s)
    ended = []

    def slow():
        time.sleep(0.3)
        ended.append(True)
    with pytest.raises(KeyboardInterrupt):      # an interrupt in the block: the running job is waited for
        with Background(slow, threaded=True):
            raise KeyboardInterrupt
    assert ended == [True]
    stop = threading.Event()

    def watching():
        while not stop.wait(0.01):
            pass
        return "stopped"
    t0 = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):      # ... after its stop is set: a job that watches it ends at once
        with Background(watching, threaded=True, stop=stop):
            raise KeyboardInterrupt
    assert stop.is_set() and time.perf_counter() - t0 < 1.0
    calls = []
    inline = Background(lambda: calls.append(1) or len(calls), threaded=False)
    assert inline.result() == 1 == inline.result() and calls == [1]     # run once, then kept

    def fails():
        raise ValueError("the job's own error")
    with Background(fails, threaded=True) as bg, pytest.raises(ValueError, match="own error"):
        bg.result()


def test_strands_by_graph_size_devices_and_request():
    from pardnn.passes._threads import STRANDS, STRANDS_FROM, STRANDS_UP_TO, strands_for

    two = min(STRANDS, usable_cpus())
    assert strands_for(None, graph(STRANDS_FROM), 8) == two
    assert strands_for(None, graph(STRANDS_UP_TO), 8) == two
    assert strands_for(None, graph(STRANDS_FROM - 1), 2) == 1           # a simulation costs less than a hand-over
    assert strands_for(None, graph(STRANDS_UP_TO + 1), 8) == 1          # the 200k-op graph: RSS, no gain
    assert strands_for(None, graph(30000), 174) == 1                     # 174 x 174 links > 30k nodes plus edges
    assert strands_for(None, graph(30000), 173) == two
    assert strands_for(1, graph(30000), 8) == 1 == strands_for(0, graph(30000), 8)     # asked for: as asked
    assert strands_for(3, graph(10), 4096) == STRANDS


def test_run_strands_runs_every_strand_at_once_and_in_order_even_when_no_thread_starts(monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    from pardnn.passes import _threads

    seen, lock = set(), threading.Lock()
    both = threading.Barrier(2, timeout=10)     # strand 0 waits here for strand 1: they run at once

    def strand(s):
        with lock:
            seen.add(threading.current_thread().name)
        if both is not None:
            both.wait()
        return s * 10

    assert _threads.run_strands(strand, 2) == [0, 10]
    assert len(seen) == 2
    both = None

    class NoThreads(ThreadPoolExecutor):
        def submit(self, *a, **k):
            raise RuntimeError("can't start new thread")

    monkeypatch.setattr(_threads, "_helpers", lambda count: NoThreads(max_workers=1))
    seen.clear()
    assert _threads.run_strands(strand, 3) == [0, 10, 20]      # all on this thread, strand 0 first
    assert seen == {threading.current_thread().name}


def test_a_strand_whose_thread_did_not_start_never_runs_later(monkeypatch):
    """``submit`` queues a job before it starts the thread for it: when the start fails, the strand runs on
    the caller's thread, and the queued copy is cancelled rather than run, stale, at the next call."""
    from pardnn.passes import _threads

    monkeypatch.setattr(_threads, "_HELPERS", None)
    pool = _threads._helpers(1)
    real = threading.Thread.start
    calls = []

    def no_start(self):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", no_start)
    assert _threads.run_strands(lambda s: calls.append(("a", s)) or s, 2) == [0, 1]
    monkeypatch.setattr(threading.Thread, "start", real)
    assert _threads._HELPERS is not pool
    assert _threads.run_strands(lambda s: calls.append(("b", s)) or s, 2) == [0, 1]
    assert sorted(calls) == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]


def test_run_strands_returns_only_when_every_strand_has_ended():
    from pardnn.passes import _threads

    ended = threading.Event()

    def strand(s):
        if s == 0:
            raise ValueError("strand 0")
        time.sleep(0.2)
        ended.set()
        return s

    with pytest.raises(ValueError, match="strand 0"):
        _threads.run_strands(strand, 2)
    assert ended.is_set()
