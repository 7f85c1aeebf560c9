"""Human units for sizes, rates and durations.

Binary prefixes (KiB, MiB, GiB, TiB) are powers of 1024; decimal ones (kB,
MB, GB, TB) powers of 1000. A bare single letter (``16G``) is binary, as
accelerator memory is sold in binary units. A bare number is taken in the
file formats' own unit: bytes, bytes per microsecond, microseconds.

>>> parse_size("16GiB")
17179869184
>>> parse_rate("12GB/s")
12000.0
>>> parse_time("25us")
25.0
>>> format_bytes(3 * 2**30)
'3.00 GiB'
"""

from __future__ import annotations

import math
import re

import numpy as np

_SIZE_UNITS = {
    "": 1, "b": 1, "byte": 1, "bytes": 1,
    "k": 2**10, "kib": 2**10, "kb": 10**3,
    "m": 2**20, "mib": 2**20, "mb": 10**6,
    "g": 2**30, "gib": 2**30, "gb": 10**9,
    "t": 2**40, "tib": 2**40, "tb": 10**12,
}
_TIME_UNITS = {"": 1.0, "us": 1.0, "µs": 1.0, "μs": 1.0, "ns": 1e-3, "ms": 1e3, "s": 1e6}
_NUMBER = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-zµμ/]*)\s*$")


def _split(text: str, what: str) -> tuple[float, str]:
    m = _NUMBER.match(str(text))
    if not m:
        raise ValueError(f"cannot read {text!r} as a {what}")
    return float(m.group(1)), m.group(2)


def parse_size(text: str | int | float) -> int:
    """Bytes from ``"16GiB"``, ``"512MB"``, ``"16G"`` or a bare number of bytes."""
    if isinstance(text, (int, float)):
        if not math.isfinite(text):
            raise ValueError(f"a size must be a finite number of bytes, got {text!r}")
        return int(text)
    value, unit = _split(text, "size")
    if not math.isfinite(value):        # 1e400 reads as inf
        raise ValueError(f"a size must be a finite number of bytes, got {text!r}")
    factor = _SIZE_UNITS.get(unit.lower())
    if factor is None:
        raise ValueError(f"unknown size unit {unit!r} in {text!r} (use B, KiB, MiB, GiB, TiB, kB, MB, GB, TB)")
    return int(round(value * factor))


def parse_rate(text: str | int | float) -> float:
    """Bytes per microsecond from ``"12GB/s"``, ``"12GiB/s"``, ``"12GBps"``, ``"100Gbit/s"``, ``"100Gb/s"``,
    ``"25Gbps"`` or a bare number.

    As network rates are written, a capital ``B`` is bytes and a small ``b`` bits (``12Gb/s`` is 1,500 bytes per
    us, ``12GB/s`` 12,000); ``byte`` and ``bit`` are spelt out in any case. Link rates are decimal by
    convention, so a bare prefix (``12G/s``) is decimal here, and bytes.

    >>> parse_rate("12Gb/s"), parse_rate("12GBps"), parse_rate("12G/s")
    (1500.0, 12000.0, 12000.0)
    """
    if isinstance(text, (int, float)):
        return float(text)
    value, unit = _split(text, "rate")
    if unit == "":
        return value
    m = re.fullmatch(r"([kmgtKMGT]?)([iI]?)(B|b|[bB][yY][tT][eE][sS]?|[bB][iI][tT][sS]?|Bps|bps|)(/[sS])?", unit)
    if not m or (m.group(3) in ("bps", "Bps")) == bool(m.group(4)):     # "/s", or "ps", not both
        raise ValueError(f"unknown rate unit {unit!r} in {text!r} (use e.g. 12GB/s, 12GiB/s, 100Gb/s, 25Gbps)")
    prefix, binary, kind = m.group(1).lower(), m.group(2), m.group(3)
    exponent = " kmgt".index(prefix) if prefix else 0
    factor = (1024 if binary else 1000) ** exponent
    bits = kind in ("b", "bps") or kind.lower().startswith("bit")
    return value * factor / (8.0 if bits else 1.0) / 1e6


def parse_time(text: str | int | float) -> float:
    """Microseconds from ``"25us"``, ``"0.5ms"``, ``"100ns"``, ``"1s"`` or a bare number."""
    if isinstance(text, (int, float)):
        return float(text)
    value, unit = _split(text, "duration")
    factor = _TIME_UNITS.get(unit.lower() if unit not in ("µs", "μs") else unit)
    if factor is None:
        raise ValueError(f"unknown time unit {unit!r} in {text!r} (use ns, us, ms, s)")
    return value * factor


def format_bytes(n: float) -> str:
    """Binary units with two decimals; ``inf`` prints as ``unlimited``."""
    if n is None or math.isinf(n):
        return "unlimited"
    sign = "-" if n < 0 else ""
    n = abs(float(n))
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{sign}{n:.0f} B" if unit == "B" else f"{sign}{n:.2f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def format_time(us: float) -> str:
    """Microseconds in the most readable unit."""
    if us < 1e3:
        return f"{us:.1f} us"
    if us < 1e6:
        return f"{us / 1e3:.3f} ms"
    return f"{us / 1e6:.3f} s"


def plural(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1, with thousands separators.

    >>> plural(1, "device"), plural(1364, "link")
    ('1 device', '1,364 links')
    """
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def is_whole(value: object) -> bool:
    """An integer, Python's or numpy's, and not a bool (``True == 1``, so a flag would pass as a count)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def is_number(value: object) -> bool:
    """An integer (`is_whole`) or a float, Python's or numpy's: what a field of bytes, times or weights takes."""
    return is_whole(value) or isinstance(value, (float, np.floating))
