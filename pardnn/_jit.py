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


# numba's (private) option to compile a function without the runtime's reference counting
try:
    _NO_REFCOUNT = {"_nrt": False} if hasattr(_numba.core.cpu.CPUTargetOptions, "_nrt") else {}
except AttributeError:  # pragma: no cover - without numba, or with one laid out otherwise
    _NO_REFCOUNT = {}


def leaf(fn):
    """`njit` for a small helper that a hot loop calls for every element: it takes arrays but
    allocates, keeps and returns none, so it is compiled without reference counting. A call then
    costs no atomic count updates (two per array argument otherwise: 5-15% of the simulator's loop).
    """
    return njit(fn, **_NO_REFCOUNT)
