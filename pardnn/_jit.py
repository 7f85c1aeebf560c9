"""Compile hot loops with numba when it is installed; run them as plain Python otherwise.

Kernels are written in the subset of Python that numba compiles (numpy
arrays, scalars, loops). `njit` caches compiled code on disk so that only the
first run in a fresh checkout pays the compile time. Set ``PARDNN_NO_JIT=1``
to run the plain-Python versions (for debugging; they are much slower).
"""

from __future__ import annotations

import os

try:
    if os.environ.get("PARDNN_NO_JIT"):
        raise ImportError("disabled by PARDNN_NO_JIT")
    import numba as _numba

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover - exercised only without numba
    _numba = None
    HAVE_NUMBA = False


def njit(fn=None, **kwargs):
    """``numba.njit(cache=True)`` when numba is available, the identity otherwise."""
    def wrap(f):
        if not HAVE_NUMBA:
            return f
        return _numba.njit(cache=True, **kwargs)(f)

    return wrap(fn) if fn is not None else wrap


# numba's options for `leaf`, those this numba has: inline at the LLVM level, and compile without
# the runtime's reference counting (the private ``_nrt``)
try:
    _LEAF = {k: v for k, v in (("forceinline", True), ("_nrt", False))
             if hasattr(_numba.core.cpu.CPUTargetOptions, k)}
except AttributeError:  # pragma: no cover - without numba, or with one laid out otherwise
    _LEAF = {}


def leaf(fn):
    """`njit` for a small helper that a hot loop calls for every element or node. It takes arrays
    but allocates, keeps and returns none, so it is inlined into its callers and compiled without
    reference counting: a plain njit call costs the loop an out-of-line call (up to 60% of a
    slicing pass) and two atomic count updates per array argument (5-15% of the simulator).
    """
    return njit(fn, **_LEAF)
