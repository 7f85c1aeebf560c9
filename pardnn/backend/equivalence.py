"""Whether a placed run computed the same thing as a single-device run: float reassociation vs a real bug (numpy only).

Placing ops on other devices changes the order in which TensorFlow adds up
partial results (and, on another CPU or with other kernels, which kernels do
the adding), so a placed step and the same step on one device agree only up
to rounding. A training step can amplify that rounding far beyond the
elementwise tolerance: Adam divides by ``sqrt(v)``, so an element whose
gradient is rounding noise (a bias just before a batch norm, a key bias of an
attention layer) moves by about the learning rate, in a direction rounding
chooses. The check therefore compares every tensor two ways
(`compare_tensors`):

1. **elementwise**: ``np.allclose(placed, reference, rtol, atol)``; equal or
   tightly equal results pass here at once;
2. **within rounding noise**: otherwise, against a *noise reference*, a
   second single-device run from the same starting values and batch with
   every non-integral floating-point element moved by `NOISE_ULPS` units of
   its dtype's machine epsilon (seeded random signs; `perturbed`). The
   tensor passes when

   ``||placed - reference||_2 <= factor * ||noise - reference||_2 + atol * sqrt(n)``

   (``factor`` is `NOISE_FACTOR` unless told). A floating-point sum in any
   order is the exact sum of its terms each perturbed by a relative amount
   of at most ``(n-1)u`` (Higham, *Accuracy and Stability of Numerical
   Algorithms*, 4.2), so a different reduction order acts like a
   rounding-size perturbation of intermediate values, and the spread
   ``||noise - reference||`` measures how strongly this step, on this
   machine, amplifies rounding-size perturbations. A real placement bug (a
   swapped input, a dropped update) moves a tensor by amounts of the order
   of its values or its update, far above that spread.

docs/running.md gives the constants' reasons and measured figures. Each
fetched output is judged over all steps at once (the loss of every step is
one vector), each variable after the last step on its own. Non-floating
dtypes must be equal; non-finite values must sit in the same places.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

#: The noise reference moves each perturbed element by this many units of its dtype's machine epsilon
#: (relative 2^-20 ~ 9.5e-7 for float32), each with a random sign.
NOISE_ULPS = 8
#: A tensor is within rounding noise when its deviation from the reference is at most this many times the
#: noise reference's (plus ``atol * sqrt(n)``).
NOISE_FACTOR = 10.0
#: Seed of the random signs of `perturbed`.
NOISE_SEED = 20


def is_floating(dtype: Any) -> bool:
    """Floating-point or complex, numpy's own or ml_dtypes' (``bfloat16``, ``float8_*``)."""
    dtype = np.dtype(dtype)
    return dtype.kind in "fc" or dtype.name.startswith(("bfloat", "float8"))


def machine_epsilon(dtype: Any) -> float:
    """The machine epsilon of a floating dtype (of its components, for complex)."""
    dtype = np.dtype(dtype)
    try:
        return float(np.finfo(dtype).eps)
    except (TypeError, ValueError):
        import ml_dtypes   # bfloat16 and float8 types: TensorFlow depends on ml_dtypes

        return float(ml_dtypes.finfo(dtype).eps)


def perturbed(values: Mapping[str, np.ndarray], *, ulps: float = NOISE_ULPS, seed: int = NOISE_SEED
              ) -> dict[str, np.ndarray]:
    """``values`` with every floating-point element that is not a whole number scaled by ``1 +/- ulps * eps``.

    Signs come from one generator seeded with ``seed``, drawn in sorted-name
    order, so the perturbation is the same in every process. Whole numbers
    (zeros, ones, labels, masks, counters stored as floats) and non-finite
    values stay as they are, so that no cast, index or comparison of a
    perturbed value changes; other dtypes are copied.
    """
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for name in sorted(values):
        x = np.asarray(values[name])
        if not is_floating(x.dtype) or x.size == 0:
            out[name] = x.copy()
            continue
        wide = x.astype(np.complex128 if x.dtype.kind == "c" else np.float64)
        whole = (wide.real == np.round(wide.real)) & (wide.imag == np.round(wide.imag))
        move = np.isfinite(wide) & ~whole
        signs = rng.choice(np.array([-1.0, 1.0]), size=x.shape)
        factor = np.where(move, 1.0 + signs * ulps * machine_epsilon(x.dtype), 1.0)
        out[name] = (wide * factor).astype(x.dtype)
    return out


@dataclass(frozen=True)
class TensorCheck:
    """One tensor of the placed run against the reference and the noise reference."""

    name: str
    size: int
    max_abs_diff: float
    """Largest elementwise |placed - reference| (inf for a shape, dtype or non-finite mismatch)."""
    deviation: float
    """``||placed - reference||_2`` over the finite elements (inf for a mismatch)."""
    spread: float | None
    """``||noise - reference||_2``; None without a noise reference (or for a non-floating dtype)."""
    close: bool
    """Equal within ``rtol``/``atol`` elementwise (equal, for non-floating dtypes)."""
    within_noise: bool
    """Not close, but within ``factor * spread + atol * sqrt(n)``."""
    atol: float = 0.0

    @property
    def ok(self) -> bool:
        return self.close or self.within_noise

    @property
    def ratio(self) -> float | None:
        """The deviation beyond ``atol * sqrt(n)`` in units of the spread: within noise iff at most ``factor``.

        0 when the deviation is under ``atol * sqrt(n)``; inf when the spread
        is 0 and the deviation is not under it; None without a spread.
        """
        if self.spread is None:
            return None
        excess = max(self.deviation - self.atol * math.sqrt(self.size), 0.0)
        if self.spread > 0:
            return excess / self.spread
        return 0.0 if excess == 0 else math.inf

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: an infinite figure is the string ``"inf"``."""
        return {"name": self.name, "size": self.size, "max_abs_diff": _finite_or_str(self.max_abs_diff),
                "deviation": _finite_or_str(self.deviation), "spread": _finite_or_str(self.spread),
                "ratio": _finite_or_str(self.ratio), "close": self.close, "within_noise": self.within_noise,
                "ok": self.ok}


def _finite_or_str(x: float | None) -> float | str | None:
    return x if x is None or math.isfinite(x) else "inf"


@dataclass(frozen=True)
class Comparison:
    """A set of tensors (a run's outputs, or its variables) checked against the reference."""

    checks: tuple[TensorCheck, ...]
    rtol: float
    atol: float
    factor: float
    noise: bool
    """Whether a noise reference was given."""

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def elementwise(self) -> bool:
        """Every tensor is close elementwise (no noise reference needed)."""
        return all(c.close for c in self.checks)

    @property
    def criterion(self) -> str:
        """``elementwise``, ``rounding noise`` (some tensor needed it) or ``none`` (no match)."""
        return "none" if not self.ok else "elementwise" if self.elementwise else "rounding noise"

    @property
    def max_abs_diff(self) -> float:
        return max((c.max_abs_diff for c in self.checks), default=0.0)

    @property
    def max_ratio(self) -> float | None:
        """The largest `TensorCheck.ratio` of the tensors the noise reference judged (those not close elementwise).

        None when every tensor is close, or without a noise reference.
        """
        ratios = [c.ratio for c in self.checks if not c.close and c.ratio is not None]
        return max(ratios) if ratios else None

    @property
    def worst(self) -> TensorCheck | None:
        """The tensor that failed by the most (else the one of the largest ratio); None when all are close."""
        judged = [c for c in self.checks if not c.close]
        if not judged:
            return None
        return max(judged, key=lambda c: (not c.ok, c.ratio if c.ratio is not None else math.inf, c.max_abs_diff))

    def failed(self) -> tuple[TensorCheck, ...]:
        return tuple(c for c in self.checks if not c.ok)


def _mismatch(name: str, size: int, spread: float | None, atol: float) -> TensorCheck:
    return TensorCheck(name, size, math.inf, math.inf, spread, False, False, atol)


def _norm(x: np.ndarray) -> float:
    return float(np.sqrt(np.sum(np.abs(x) ** 2))) if x.size else 0.0


def _finite_diff(a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """``a - b`` in float64/complex128 over the finite elements; None when the non-finite values differ."""
    wide = np.complex128 if a.dtype.kind == "c" or b.dtype.kind == "c" else np.float64
    a, b = a.astype(wide), b.astype(wide)
    fa, fb = np.isfinite(a), np.isfinite(b)
    if not np.array_equal(fa, fb) or not np.array_equal(a[~fa], b[~fb], equal_nan=True):
        return None
    return a[fa] - b[fb]


def check_tensor(name: str, placed: np.ndarray, reference: np.ndarray, noise: np.ndarray | None = None, *,
                 rtol: float, atol: float, factor: float = NOISE_FACTOR) -> TensorCheck:
    """One tensor: close elementwise, else within ``factor`` times the noise reference's spread (module docstring)."""
    p, r = np.asarray(placed), np.asarray(reference)
    if p.shape != r.shape or p.dtype != r.dtype:
        return _mismatch(name, int(r.size), None, atol)
    if not is_floating(r.dtype):
        same = bool(np.array_equal(p, r))
        return TensorCheck(name, int(r.size), 0.0 if same else math.inf, 0.0 if same else math.inf, None, same, False,
                           atol)
    diff = _finite_diff(p, r)
    spread = None
    if noise is not None:
        n = np.asarray(noise)
        nd = _finite_diff(n, r) if n.shape == r.shape else None
        spread = _norm(nd) if nd is not None else None
    if diff is None:
        return _mismatch(name, int(r.size), spread, atol)
    max_abs = float(np.max(np.abs(diff))) if diff.size else 0.0
    wide = np.complex128 if r.dtype.kind == "c" else np.float64
    close = bool(np.allclose(p.astype(wide), r.astype(wide), rtol=rtol, atol=atol, equal_nan=True))
    deviation = _norm(diff)
    within = (not close and spread is not None and factor > 0
              and deviation <= factor * spread + atol * math.sqrt(r.size))
    return TensorCheck(name, int(r.size), max_abs, deviation, spread, close, bool(within), atol)


def compare_tensors(placed: Mapping[str, np.ndarray], reference: Mapping[str, np.ndarray],
                    noise: Mapping[str, np.ndarray] | None = None, *, rtol: float, atol: float,
                    factor: float = NOISE_FACTOR) -> Comparison:
    """Every tensor of ``reference`` (by name, in its order) against ``placed`` and, when given, ``noise``.

    A tensor missing from ``placed`` fails; with ``factor`` 0 only the
    elementwise test counts.
    """
    checks = []
    for name, r in reference.items():
        r = np.asarray(r)
        if name not in placed:
            checks.append(_mismatch(name, int(r.size), None, atol))
            continue
        checks.append(check_tensor(name, placed[name], r, None if noise is None else noise.get(name),
                                   rtol=rtol, atol=atol, factor=factor))
    return Comparison(tuple(checks), rtol, atol, factor, noise is not None)


def stack_steps(outputs: Sequence[Sequence[np.ndarray]], names: Sequence[str]) -> dict[str, np.ndarray]:
    """Each fetched output over all steps as one array (step first), by name; a ragged output stays per step."""
    out: dict[str, np.ndarray] = {}
    for j, name in enumerate(names):
        values = [np.asarray(step[j]) for step in outputs if j < len(step)]
        if len({(v.shape, v.dtype) for v in values}) <= 1 and len(values) == len(outputs):
            out[name] = np.stack(values) if values else np.zeros((0,))
        else:
            out.update({f"{name} (step {i})": v for i, v in enumerate(values)})
    return out
