"""Helpers shared by the importers: robust averaging of profiled samples, an error's text on one line."""

from __future__ import annotations

from typing import Sequence

import numpy as np


def robust_average(samples: Sequence[float]) -> float:
    """ParDNN's robust average of profiled durations.

    With five or more samples, drop the two lowest and two highest, then
    take (mean + median) / 2 of the rest. With fewer, the median.

    >>> round(robust_average([10, 11, 12, 13, 100, 1, 12]), 4)   # keeps 11, 12, 12
    11.8333
    >>> robust_average([4.0, 6.0])
    5.0
    """
    x = np.sort(np.asarray(samples, dtype=np.float64))
    if x.size == 0:
        raise ValueError("no samples")
    if x.size >= 5:
        x = x[2:-2]
        return float((x.mean() + np.median(x)) / 2)
    return float(np.median(x))


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message (TensorFlow's and Keras's run on with context and stack lines);
    its type's name when it has none.

    >>> first_line(ValueError("Shapes (2, 3) and (4,) are incompatible\\n  In call to ..."))
    'Shapes (2, 3) and (4,) are incompatible'
    >>> first_line(KeyError())
    'KeyError'
    """
    text = (getattr(exc, "message", None) or str(exc)).strip().splitlines()
    return text[0] if text else type(exc).__name__


def one_line(exc: BaseException, limit: int = 300) -> str:
    """``exc``'s whole message on one line: its lines joined (onnx's checker breaks a sentence over three, the
    node's name on the second), cut at ``limit`` characters; its type's name when it has none.

    >>> one_line(ValueError("Field 'type' of 'attribute' is required but missing\\n  of node:\\n  n3"))
    "Field 'type' of 'attribute' is required but missing of node: n3"
    """
    text = " ".join(str(exc).split())
    if len(text) > limit:
        text = text[:limit - 3].rstrip() + "..."
    return text or type(exc).__name__
