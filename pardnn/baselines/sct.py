"""SCT and m-SCT (Hanen & Munier 1995; Baechi, SoCC 2020): small communication times.

Step 1, the favourite-child LP (Hanen & Munier's relaxation, as Baechi
states it). For every edge ``i -> j`` a variable ``x_ij`` in [0, 1] (0: ``j``
is ``i``'s favourite child and runs on ``i``'s device, so the edge costs
nothing), a start time ``s_i >= 0`` per op and the makespan ``w``::

    minimise w  subject to
      s_i + p_i + c_ij * x_ij <= s_j      for every edge i -> j
      sum_j x_ij >= outdeg(i) - 1         (at most one favourite child)
      sum_i x_ij >= indeg(j) - 1          (at most one favourite parent)
      s_i + p_i <= w                      for every sink i

with ``p_i`` the op's time on a mean-speed device and ``c_ij`` the edge's
mean communication cost (parallel edges between two ops are one LP edge with
their bytes summed; a control edge costs latency). HiGHS solves it
(`scipy.optimize.linprog`, ``method="highs"``). Rounding: ``j`` is ``i``'s
favourite child when ``x_ij < 1/2``; the two degree constraints make that
choice unique on both sides.

Step 2, list scheduling (`pardnn.baselines.etf`'s engine): ETF, except that a
device whose last op ``i`` has a ready favourite child ``j`` that starts no
later on this device than anywhere else is *awake* for ``j``: it runs ``j``,
or an op that is already *urgent* (its inputs have arrived on every device)
if that can start no later; otherwise it waits. m-SCT skips devices without
memory room exactly as m-ETF does.

Size rule. HiGHS takes about 1 s for an LP of 25,000 variables (a 10k-op
graph) but about 15 s at 130,000 (50k ops) and about 4 minutes at 530,000
(200k ops), measured on this project's 2-core machine. Above
`LP_MAX_VARIABLES` variables the LP is therefore solved in pieces:

1. chains (an op whose only successor has it as only predecessor) are
   contracted into one LP node with the chain's time. This is exact: an
   interior chain edge can always be favourite (no degree constraint binds
   it), so it is, and every branching decision stays in the LP;
2. the contracted graph is cut into windows of consecutive ASAP levels of at
   most `LP_MAX_VARIABLES` variables each, and the LP of each window (the
   edges inside it) is solved on its own;
3. edges between windows are matched greedily afterwards, heaviest first,
   where neither end has a favourite yet.

On the 50k-op synthetic graph this picks the same favourite child as the
whole LP for 95% of ops, in a fifth of the time, and the simulated makespan
of m-SCT changes by under 4%. The `favourite_children` argument
``max_variables`` moves the cut-off.

Iteration limit (`favourites`, used by the seed pass, not by the baselines).
The iterations HiGHS needs depend on the graph's shape, not only its size:
DL training graphs need under 0.6 per variable, but a random layered graph
of 3,000 ops and 8,826 edges needs 14 (167k iterations, about a minute). An
LP may therefore be given up at a number of iterations per variable, and its
edges matched greedily, heaviest first, as the edges between windows are.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import sparse

from ..analysis import topological_levels
from ..cluster import Cluster
from ..ir import OpGraph
from ..placement import Placement
from ..machine import average_time_us
from .common import placement
from .etf import schedule

LP_MAX_VARIABLES = 30_000
"""Largest LP (edges + ops + 1) solved in one piece; larger graphs are contracted and windowed."""

MIN_ITERATION_LIMIT = 1_000
"""The smallest iteration limit `favourites` sets on an LP (small LPs need a few hundred)."""


def lp_edges(g: OpGraph, cluster: Cluster) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The LP's graph: ``(src, dst, c, p)``, parallel edges merged (bytes summed), self-free.

    ``p`` is each op's time on a mean-speed device, ``c`` each merged edge's
    mean communication cost.
    """
    V = g.num_nodes
    p = average_time_us(g, cluster)
    if g.num_edges == 0:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty, np.empty(0), p
    key = g.edge_src * V + g.edge_dst
    uniq, inv = np.unique(key, return_inverse=True)
    nbytes = np.zeros(uniq.size)
    np.add.at(nbytes, inv, np.where(g.edge_control, 0, g.edge_bytes).astype(np.float64))
    c = (cluster.mean_latency + nbytes * cluster.mean_inv_bandwidth) if cluster.num_devices > 1 \
        else np.zeros(uniq.size)
    return uniq // V, uniq % V, c, p


def solve_favourite_lp(src: np.ndarray, dst: np.ndarray, c: np.ndarray, p: np.ndarray,
                       max_iterations: int | None = None) -> tuple[np.ndarray, float] | None:
    """Solve the relaxation; return ``(x per edge, LP makespan)``, or None when HiGHS stops at
    ``max_iterations`` simplex iterations (None: no limit) before the optimum.

    A fork ``a -> b`` (c = 5), ``a -> c`` (c = 9), every op 1 us: ``x_ab + x_ac >= 1``
    and the two branches balance at ``5 (1 - t) = 9 t``, so ``t = 5/14`` and
    ``w = 2 + 45/14``; ``c`` (``x < 1/2``) is ``a``'s favourite child.

    >>> x, w = solve_favourite_lp(np.array([0, 0]), np.array([1, 2]), np.array([5.0, 9.0]),
    ...                           np.array([1.0, 1.0, 1.0]))
    >>> x.round(6).tolist(), round(w, 6), round(2 + 45 / 14, 6)
    ([0.642857, 0.357143], 5.214286, 5.214286)
    """
    n, m = p.size, src.size
    nvar = m + n + 1
    scale = max(float(p.max(initial=0.0)), float(c.max(initial=0.0))) or 1.0   # HiGHS prefers O(1) numbers
    p, c = p / scale, c / scale
    rows, cols, vals, rhs = [], [], [], []
    r = 0
    # s_i - s_j + c_ij x_ij <= -p_i
    idx = np.arange(m)
    rows += [idx, idx, idx]
    cols += [m + src, m + dst, idx]
    vals += [np.ones(m), -np.ones(m), c]
    rhs.append(-p[src])
    r += m
    for ends, other in ((src, dst), (dst, src)):
        deg = np.bincount(ends, minlength=n)
        many = np.flatnonzero(deg >= 2)
        row_of = np.full(n, -1)
        row_of[many] = r + np.arange(many.size)
        sel = np.flatnonzero(deg[ends] >= 2)
        rows.append(row_of[ends[sel]])
        cols.append(sel)
        vals.append(-np.ones(sel.size))
        rhs.append(1.0 - deg[many])
        r += many.size
    sinks = np.flatnonzero(np.bincount(src, minlength=n) == 0)
    k = np.arange(sinks.size)
    rows += [r + k, r + k]
    cols += [m + sinks, np.full(sinks.size, nvar - 1)]
    vals += [np.ones(sinks.size), -np.ones(sinks.size)]
    rhs.append(-p[sinks])
    r += sinks.size
    A = sparse.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(r, nvar))
    cost = np.zeros(nvar)
    cost[-1] = 1.0
    bounds = np.zeros((nvar, 2))
    bounds[:m, 1] = 1.0
    bounds[m:, 1] = np.inf
    from scipy.optimize import linprog     # loaded when an LP is solved (0.15 s of every start-up otherwise)

    options = {} if max_iterations is None else {"maxiter": int(max_iterations)}
    res = linprog(cost, A_ub=A, b_ub=np.concatenate(rhs).astype(np.float64), bounds=bounds, method="highs",
                  options=options)
    if res.status == 1 and max_iterations is not None:      # the iteration limit: no solution to round
        return None
    if res.status != 0:
        raise RuntimeError(f"the favourite-child LP failed: {res.message}")
    return res.x[:m], float(res.x[-1]) * scale


def round_favourites(src: np.ndarray, dst: np.ndarray, x: np.ndarray, n: int) -> np.ndarray:
    """Favourite child per node (-1 for none) from LP values: ``x < 1/2``, unique on both sides.

    Edges are taken in order of ``x`` (ties: edge order), so a node keeps the
    edge the LP liked most even if rounding noise let two through.
    """
    cand = np.flatnonzero(x < 0.5)
    return match_favourites(src, dst, cand[np.argsort(x[cand], kind="stable")], np.full(n, -1, dtype=np.int64))


def match_favourites(src: np.ndarray, dst: np.ndarray, order: np.ndarray, fav: np.ndarray) -> np.ndarray:
    """Add favourites to ``fav`` (a copy) from edges in ``order`` where both ends are still free."""
    fav = fav.copy()
    taken = np.zeros(fav.size, dtype=bool)
    taken[fav[fav >= 0]] = True
    for e in order.tolist():
        i, j = int(src[e]), int(dst[e])
        if fav[i] < 0 and not taken[j]:
            fav[i] = j
            taken[j] = True
    return fav


def chain_contraction(src: np.ndarray, dst: np.ndarray, n: int) -> np.ndarray:
    """A super-node id per node: maximal chains ``a -> b`` (a's only successor, b's only predecessor) merged.

    >>> chain_contraction(np.array([0, 1, 1, 2, 3]), np.array([1, 2, 3, 4, 4]), 5).tolist()
    [0, 0, 1, 2, 3]
    """
    outdeg = np.bincount(src, minlength=n)
    indeg = np.bincount(dst, minlength=n)
    link = (outdeg[src] == 1) & (indeg[dst] == 1)
    head = np.arange(n)
    head[dst[link]] = src[link]
    while True:                     # pointer jumping: O(log chain length) rounds
        nxt = head[head]
        if np.array_equal(nxt, head):
            break
        head = nxt
    return np.unique(head, return_inverse=True)[1].astype(np.int64)


def _windows(order_key: np.ndarray, src: np.ndarray, n: int, max_variables: int) -> np.ndarray:
    """A window id per node: consecutive runs (in ``order_key`` order) of at most ``max_variables`` LP variables."""
    order = np.argsort(order_key, kind="stable")
    weight = (1 + np.bincount(src, minlength=n))[order]       # a node's start time and its out-edges
    window = np.empty(n, dtype=np.int64)
    window[order] = np.cumsum(weight) // max(1, max_variables - 1)
    return window


def _costliest_first(edges: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``edges`` (ascending indices into ``c``) by communication cost, the most costly first (ties: index)."""
    return edges[np.lexsort((edges, -c[edges]))]


@dataclass(frozen=True)
class Favourites:
    """Each op's favourite child (-1 for none), and how the LP went: ``lps`` LPs set up (one, or one per window
    with edges), of which ``capped`` were given up at the iteration limit (their edges matched greedily)."""
    child: np.ndarray
    lps: int
    capped: int


def favourite_children(g: OpGraph, cluster: Cluster, *, max_variables: int = LP_MAX_VARIABLES) -> np.ndarray:
    """Each op's favourite child (-1 for none), from the LP (windowed when large; see the module docstring)."""
    return favourites(g, cluster, max_variables=max_variables).child


def favourites(g: OpGraph, cluster: Cluster, *, max_variables: int = LP_MAX_VARIABLES,
               iterations_per_variable: float | None = None) -> Favourites:
    """`favourite_children`, with an optional limit on each LP's simplex iterations: at most
    ``max(MIN_ITERATION_LIMIT, iterations_per_variable x its variables)`` (None: no limit). An LP not solved
    within it is given up, and its edges are matched greedily, most costly to cut first (mean communication
    time), where both ends are still free (as the edges between windows are). The limit counts iterations,
    not seconds, so with one SciPy (HiGHS) release the result is the same on any machine (scipy runs HiGHS's
    serial dual simplex; the count was the same on 1, 2 and 8 threads)."""
    V = g.num_nodes
    src, dst, c, p = lp_edges(g, cluster)

    def limit(nvar: int) -> int | None:      # HiGHS takes a 32-bit limit
        return None if iterations_per_variable is None else \
            int(min(2**31 - 1, max(MIN_ITERATION_LIMIT, iterations_per_variable * nvar)))

    if src.size + V + 1 <= max_variables:
        solved = solve_favourite_lp(src, dst, c, p, limit(src.size + V + 1))
        if solved is not None:
            return Favourites(round_favourites(src, dst, solved[0], V), 1, 0)
        return Favourites(match_favourites(src, dst, _costliest_first(np.arange(src.size), c),
                                           np.full(V, -1, dtype=np.int64)), 1, 1)
    # Exact reduction first: a chain's interior edges are favourite in some optimal solution.
    label = chain_contraction(src, dst, V)
    n2 = int(label.max()) + 1
    inner = label[src] == label[dst]
    fav = np.full(V, -1, dtype=np.int64)
    fav[src[inner]] = dst[inner]
    outer = np.flatnonzero(~inner)
    s2, d2 = label[src[outer]], label[dst[outer]]   # one outer edge per chain pair: tail -> head
    p2 = np.bincount(label, weights=p, minlength=n2)
    # Windows follow ASAP levels (ties: node order), which keeps most short edges inside one window.
    key = topological_levels(g) * V + np.arange(V)
    first = np.full(n2, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, label, key)
    window = _windows(first, s2, n2, max_variables)
    x = np.ones(outer.size)                  # edges between windows: matched greedily below
    same = window[s2] == window[d2]
    greedy = ~same
    by_window = np.argsort(window, kind="stable")
    bounds = np.searchsorted(window[by_window], np.arange(int(window.max()) + 2))
    edge_order = np.flatnonzero(same)[np.argsort(window[s2[same]], kind="stable")]
    edge_bounds = np.searchsorted(window[s2[edge_order]], np.arange(int(window.max()) + 2))
    local = np.empty(n2, dtype=np.int64)
    lps = capped = 0
    for w in range(int(window.max()) + 1):
        nodes = by_window[bounds[w]:bounds[w + 1]]
        if nodes.size == 0:
            continue
        edges = edge_order[edge_bounds[w]:edge_bounds[w + 1]]
        local[nodes] = np.arange(nodes.size)
        if edges.size:
            solved = solve_favourite_lp(local[s2[edges]], local[d2[edges]], c[outer[edges]], p2[nodes],
                                        limit(edges.size + nodes.size + 1))
            lps += 1
            if solved is None:
                capped += 1
                greedy[edges] = True
            else:
                x[edges] = solved[0]
    fav = np.maximum(fav, round_favourites(src[outer], dst[outer], x, V))
    # Edges between windows (and those of a window whose LP was given up): where both ends are still free,
    # the heaviest such edge becomes favourite.
    return Favourites(match_favourites(src[outer], dst[outer], _costliest_first(np.flatnonzero(greedy), c[outer]),
                                       fav), lps, capped)


def place(g: OpGraph, cluster: Cluster) -> Placement:
    """SCT: favourite children from the LP, then favourite-aware ETF; memory ignored."""
    fav = favourite_children(g, cluster)
    return placement(g, cluster, schedule(g, cluster, memory=False, favourite=fav.tolist()), "sct")


def place_m(g: OpGraph, cluster: Cluster) -> Placement:
    """m-SCT: SCT that skips devices without memory room (Baechi)."""
    fav = favourite_children(g, cluster)
    return placement(g, cluster, schedule(g, cluster, memory=True, favourite=fav.tolist()), "m-sct")
