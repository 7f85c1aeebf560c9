"""`pardnn.machine.Evaluator`: counted simulations, the kernel's makespan, the best plan remembered."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pardnn import Cluster, simulate
from pardnn.machine import Evaluator, run_kernel

from ..helpers import tiny
from ..baselines.test_baselines import graphs


@settings(max_examples=40, deadline=None)
@given(g=graphs(pins=False), k=st.integers(1, 4), seed=st.integers(0, 2 ** 16))
def test_quick_makespan_is_the_simulated_makespan_and_every_call_counts(g, k, seed):
    c = Cluster.homogeneous(k, latency_us=5.0, bandwidth_bytes_per_us=100.0)
    dev = np.random.default_rng(seed).integers(0, k, g.num_nodes)
    ev = Evaluator(g, c)
    quick = ev.quick_makespan(dev)
    full = ev.schedule(dev, memory=True)
    assert ev.evaluations == 2
    assert quick == full.makespan_us == simulate(g, c, dev).makespan_us == run_kernel(g, c, dev, False).makespan_us
    assert ev.makespan(dev) == quick and ev.evaluations == 3


def test_the_best_assignment_seen_is_remembered_as_a_copy():
    g = tiny([("a", 10, 100), ("b", 10, 100)], [])
    c = Cluster.homogeneous(2)
    ev = Evaluator(g, c)
    both = np.array([0, 0])
    ev.schedule(both)
    split = np.array([0, 1])
    ev.schedule(split)
    split[:] = 0                                   # the caller reuses its array: the remembered one stays
    assert ev.best_makespan == 10.0 and ev.best.tolist() == [0, 1]
    assert ev.quick_makespan(np.array([1, 1])) == 20.0 and ev.best.tolist() == [0, 1]   # quick ones are not kept


def test_a_memo_spares_repeated_simulations_but_not_their_count(monkeypatch):
    """With a memo, a quick makespan already seen (by any evaluator sharing the memo) is not simulated
    again, yet every call still counts: a search's budget, hence its plan, is the same with or without."""
    import pardnn.machine.evaluator as evaluator_mod
    from pardnn.machine.evaluator import new_memo

    g = tiny([("a", 10, 100), ("b", 20, 100), ("c", 5, 100)], [("a", "c"), ("b", "c")])
    c = Cluster.homogeneous(2, latency_us=3.0, bandwidth_bytes_per_us=10.0)
    runs = []
    real = evaluator_mod.run_kernel
    monkeypatch.setattr(evaluator_mod, "run_kernel", lambda *a: runs.append(1) or real(*a))
    memo = new_memo()
    ev, other = Evaluator(g, c, memo=memo), Evaluator(g, c, memo=memo)
    plans = [np.array(p) for p in ([0, 1, 0], [0, 0, 0], [0, 1, 0], [1, 0, 1], [0, 1, 0])]
    plain = [Evaluator(g, c).quick_makespan(p) for p in plans]
    runs.clear()
    got = [ev.quick_makespan(p) for p in plans]
    assert got == plain
    assert ev.evaluations == 5 and len(runs) == 3
    assert other.quick_makespan(np.array([0, 0, 0], dtype=np.int32)) == got[1]   # any integer dtype: one key
    assert other.evaluations == 1 and len(runs) == 3


def test_a_plain_dict_as_memo_is_refused_where_the_move_loop_is_compiled():
    """The compiled move loop updates the memo itself; a plain dict would fail deep inside it (numba cannot
    take one), so the evaluator says at once what to pass instead. Without numba any dict works."""
    from pardnn._jit import HAVE_NUMBA
    from pardnn.machine.evaluator import new_memo

    g = tiny([("a", 10, 100), ("b", 20, 100)], [("a", "b")])
    c = Cluster.homogeneous(2)
    if HAVE_NUMBA:
        with pytest.raises(TypeError, match="new_memo"):
            Evaluator(g, c, memo={})
    else:
        assert Evaluator(g, c, memo={}).quick_makespan(np.array([0, 1])) > 0
    ev = Evaluator(g, c, memo=new_memo())
    assert ev.first_shorter(np.array([0, 0]), (np.array([0, 1]), np.array([1]), np.array([1])), 0, 5,
                            np.inf)[0] == 0


def test_the_digest_tells_apart_assignments_onto_more_than_256_devices():
    from pardnn.machine.evaluator import digest

    a, b = np.array([1, 2, 300]), np.array([1, 2, 44])      # 300 and 44 share their low byte
    assert digest(a, 301) != digest(b, 301)
    assert digest(a, 301) == digest(a.astype(np.int32), 301)
    assert digest(np.array([1, 2, 3]), 4) == digest(np.array([1, 2, 3], dtype=np.int16), 4)


@settings(max_examples=60, deadline=None)
@given(g=graphs(pins=False), k=st.integers(2, 4), seed=st.integers(0, 2 ** 16), strands=st.integers(2, 3))
def test_strands_give_first_shorters_answer_and_count(g, k, seed, strands):
    """`first_shorter_strands` (moves dealt to strands on threads, each stopping behind another's find) gives
    `first_shorter`'s answer: the same move, count, makespan and place to go on from, at every limit and
    bar, from a memo that holds some moves already; what its strands simulated then answers as the
    simulator does."""
    from pardnn.machine.kernel import first_shorter, first_shorter_strands, new_memo
    from pardnn.passes._threads import run_strands

    c = Cluster.homogeneous(k, latency_us=5.0, bandwidth_bytes_per_us=100.0)
    rng = np.random.default_rng(seed)
    dev = rng.integers(0, k, g.num_nodes).astype(np.int64)
    here = run_kernel(g, c, dev, False).makespan_us
    for _ in range(6):
        m = int(rng.integers(1, 25))
        # a move lists each op once (as refinement's units do: a key is the plan's with each listed op's
        # device changed, so an op listed twice would change it back)
        moved = [rng.choice(g.num_nodes, size=min(g.num_nodes, int(rng.integers(1, 3))), replace=False)
                 for _ in range(m)]
        ptr = np.concatenate([[0], np.cumsum([len(x) for x in moved])]).astype(np.int64)
        ops = np.concatenate(moved).astype(np.int64)
        target = rng.integers(0, k, m).astype(np.int64)
        first, limit = int(rng.integers(0, m)), int(rng.integers(1, 30))
        bar = here * float(rng.choice([0.9, 0.99, 1.0, 1.01, 1.2]))
        seq, par = new_memo(), new_memo()
        pre = int(rng.integers(0, m))       # both memos hold the first moves' makespans
        first_shorter(g, c, dev, ptr, ops, target, 0, pre, -1.0, seq)
        first_shorter(g, c, dev, ptr, ops, target, 0, pre, -1.0, par)
        want = first_shorter(g, c, dev, ptr, ops, target, first, limit, bar, seq)
        got = first_shorter_strands(g, c, dev, ptr, ops, target, first, limit, bar, par, strands, run_strands)
        assert got[:4] == want[:4]
        # the strands' simulations, in the memo, give the same answers as simulating anew
        assert first_shorter(g, c, dev, ptr, ops, target, first, limit, bar, par)[:4] == want[:4]
        assert first_shorter(g, c, dev, ptr, ops, target, 0, m, here * 1.01, par)[:4] == \
            first_shorter(g, c, dev, ptr, ops, target, 0, m, here * 1.01, None)[:4]


def test_an_evaluator_with_strands_answers_and_counts_as_one_without():
    from pardnn.frontends.synthetic import transformer_training_graph
    from pardnn.machine.evaluator import new_memo
    from pardnn.passes._threads import run_strands

    g = transformer_training_graph(600, seed=1)
    c = Cluster.homogeneous(3, latency_us=5.0, bandwidth_bytes_per_us=100.0)
    rng = np.random.default_rng(7)
    dev = rng.integers(0, 3, g.num_nodes).astype(np.int64)
    ms = run_kernel(g, c, dev, False).makespan_us
    m = 200
    moves = (np.arange(m + 1, dtype=np.int64), rng.integers(0, g.num_nodes, m).astype(np.int64),
             rng.integers(0, 3, m).astype(np.int64))
    one, two = Evaluator(g, c, memo=new_memo()), Evaluator(g, c, memo=new_memo(), strands=2, run_on=run_strands)
    pos = 0
    while pos < m:
        a, b = one.first_shorter(dev, moves, pos, 50, ms * 0.999), two.first_shorter(dev, moves, pos, 50, ms * 0.999)
        assert a == b and one.evaluations == two.evaluations
        pos = a[2]
    assert two.simulations >= one.simulations > 0       # strands may try moves after the answer
    from pardnn.machine.kernel import first_shorter, first_shorter_strands
    for first in (m - 1, m, m + 2):     # at and past the end, as the one-thread kernel answers
        assert first_shorter_strands(g, c, dev, *moves, first, 5, ms * 2, None, 2, run_strands)[:4] == \
            first_shorter(g, c, dev, *moves, first, 5, ms * 2, None)[:4]
