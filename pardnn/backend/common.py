"""What every backend shares, without a framework: the machine model's cluster when none is given.

The TensorFlow modules import it from here rather than from one another, so
`tf_backend` (what ``pardnn run`` and ``pardnn rewrite`` call) sits above
`tf_run` and `tf_savedmodel` and nothing below imports it back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ..cluster import Cluster
from ..errors import InputError, PlacementError
from ..fileio import read_json
from ..ir import OpGraph
from ..placement import Placement


def default_cluster(placement: Placement) -> Cluster:
    """The machine model's cluster when none is given: the placement's devices, unlimited memory, default links."""
    return Cluster.homogeneous(placement.num_devices).renamed(placement.devices)


def placement_device_count(path: str | Path) -> int | None:
    """The number of devices a placement file lists, read without the graph (None when unknown)."""
    p = Path(path)
    if p.name.endswith((".place", ".place.gz")):
        return None
    try:
        d = read_json(p)
    except InputError:
        return None
    devices = d.get("devices") if isinstance(d, dict) else None
    return len(devices) if isinstance(devices, list) and devices else None


def check_devices(g: OpGraph, placement: Placement, cluster: Cluster, source: str | None = None) -> None:
    """Every used device must exist in the cluster; raises `PlacementError` naming the node (and ``source``,
    the placement's file, first)."""
    K = cluster.num_devices
    bad = np.flatnonzero(placement.assignment >= K)
    if bad.size:
        v = int(bad[0])
        d = int(placement.assignment[v])
        name = placement.devices[d] if d < len(placement.devices) else str(d)
        raise PlacementError(f"{source + ': ' if source else ''}node {g.names[v]!r} is placed on device {d} "
                             f"({name}), which is not in the cluster ({K} device{'s' if K != 1 else ''}: "
                             f"{', '.join(cluster.names)})")


def read_inputs(path: str | Path) -> dict[str, np.ndarray]:
    """The arrays of a NumPy ``.npz`` file (``np.savez``), by name: a batch for ``pardnn run --inputs``."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: no such file")
    bad = f"{p}: not a .npz file (np.savez) of arrays named after the model's inputs"
    try:
        z = np.load(p, allow_pickle=False)
    except OSError as exc:
        raise InputError(f"{p}: cannot read it: {exc.strerror or exc}") from None
    except (ValueError, EOFError):     # neither a zip nor a .npy (NumPy then talks of pickles)
        raise InputError(bad) from None
    if not isinstance(z, np.lib.npyio.NpzFile):
        raise InputError(bad)
    try:
        with z:
            return {name: z[name] for name in z.files}
    except (OSError, ValueError, EOFError, KeyError) as exc:   # an object array (pickles refused), a bad member
        text = " ".join(str(exc).split()) or type(exc).__name__
        raise InputError(f"{p}: cannot read its arrays: {text[:200]}") from None


def checked_inputs(given: Mapping[str, np.ndarray], specs: Sequence[tuple[str, Any, Sequence[int | None] | None]],
                   where: str, aliases: Mapping[str, str] | None = None,
                   ranges: Mapping[str, Any] | None = None) -> dict[str, np.ndarray]:
    """``given`` (by input name; a TensorFlow input ``x:0`` may be called ``x``, and any input by its name in
    ``aliases``, such as a SavedModel signature's key) checked against ``specs``, ``(name, numpy dtype,
    shape)`` with None for a dimension the model leaves open.

    Every input needs an array, and every array an input; an array converts to its input's dtype where NumPy's
    ``same_kind`` casting allows and integers keep their values; known dimensions must match. Raises
    `InputError` naming ``where`` (the file) and the input. ``ranges``: per input, the values it may take
    (an ``IndexRange`` of the frontend: ``high`` and ``why``, such as the rows of the table it indexes); a
    value at or past ``high`` is refused (below 0 is left to the model: ONNX takes negative indices and
    loss labels such as -100 to ignore). Returns new arrays (``given`` is not changed).

    >>> checked_inputs({"x": np.zeros((2, 3))}, [("x:0", np.float32, (None, 3))], "b.npz")["x:0"].dtype.name
    'float32'
    """
    names = [s[0] for s in specs]
    alias = {n.rsplit(":", 1)[0]: n for n in names if n.endswith(":0")}
    alias.update({k: v for k, v in (aliases or {}).items() if k and k not in names})
    by_name = {v: k for k, v in (aliases or {}).items() if k}
    shown = {n: by_name.get(n, n) for n in names}        # an input as its user calls it
    listed = ", ".join(repr(shown[n]) for n in names)
    out: dict[str, np.ndarray] = {}
    given_as: dict[str, str] = {}
    for key, value in given.items():
        name = key if key in names else alias.get(key)
        if name is None:
            raise InputError(f"{where}: array {key!r} is no input of the model (its inputs: {listed})")
        if name in out:
            raise InputError(f"{where}: input {shown[name]!r} is given twice, as {given_as[name]!r} and {key!r}")
        out[name], given_as[name] = np.asarray(value), key
    for name, dtype, shape in specs:
        if name not in out:
            raise InputError(f"{where}: no array for input {shown[name]!r} (its inputs: {listed})")
        a, want = out[name], np.dtype(dtype)
        if a.dtype != want:
            if not np.can_cast(a.dtype, want, "same_kind"):
                raise InputError(f"{where}: input {shown[name]!r} is {a.dtype.name}; the model takes {want.name}")
            if np.issubdtype(want, np.integer) and np.issubdtype(a.dtype, np.integer) and a.size:
                info = np.iinfo(want)
                if a.min() < info.min or a.max() > info.max:
                    raise InputError(f"{where}: input {shown[name]!r} holds {a.dtype.name} values outside "
                                     f"{want.name}'s range, which the model takes")
            a = a.astype(want)
        if shape is not None:
            dims = tuple(shape)
            if a.ndim != len(dims) or any(d is not None and d >= 0 and d != n for d, n in zip(dims, a.shape)):
                parts = ["?" if d is None or d < 0 else str(d) for d in dims]
                want_shape = "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"   # as a tuple reads
                raise InputError(f"{where}: input {shown[name]!r} has shape {tuple(a.shape)}; the model takes {want_shape}")
        r = (ranges or {}).get(name)
        if r is not None and a.size and np.issubdtype(a.dtype, np.integer) and int(a.max()) >= r.high:
            raise InputError(f"{where}: input {shown[name]!r} holds {int(a.max())}, but its values index "
                             f"{r.high} ({r.why}): give values below {r.high}")
        out[name] = np.array(a, copy=True)
    return {name: out[name] for name in names}
