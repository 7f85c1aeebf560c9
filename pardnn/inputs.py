"""Turn whatever the user points at into an `OpGraph`, detected from its form.

* ``*.json`` / ``*.json.gz`` with ``"format": "pardnn.graph"``: our own format;
* an MSR device-placement JSON (``maxSizePerFPGA`` header);
* a PipeDream profile ``graph.txt``;
* a ParDNN ``.dot`` edge list (with its size and duration files beside it);
* a TensorFlow SavedModel directory or ``.pb``/``.pbtxt`` GraphDef (the ``tf`` extra);
* an ``.onnx`` model (the ``onnx`` extra).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from .errors import InputError, MissingDependencyError
from .fileio import read_bytes, read_json
from .ir import GRAPH_FORMAT, OpGraph, graph_from_dict


@dataclass(frozen=True)
class FrontendOptions:
    """What a user can tell a frontend (the ``pardnn import`` / ``partition`` flags).

    Each frontend reads the fields that concern it and ignores the rest.
    """

    name: str | None = None
    """Graph name to record (default: from the file name)."""
    signature: str | None = None
    """SavedModel signature to import (TensorFlow)."""
    profile_steps: int = 0
    """Run this many profiled steps for op times; 0 = the roofline estimate."""
    batch_size: int | None = None
    """Value for unknown batch dimensions (never silently 1)."""
    dims: Mapping[str, int] = field(default_factory=dict)
    """Values for named dynamic dimensions (ONNX ``--dim name=value``)."""
    device_profile: str = "h100"
    """Roofline device preset for estimated op times (see pardnn.frontends.roofline)."""
    keep_unexecuted: bool = False
    """ParDNN DOT: keep ops a training step never runs."""


def detect_format(path: str | Path) -> str:
    """One of ``pardnn``, ``msr``, ``pipedream``, ``pardnn-dot``, ``savedmodel``, ``graphdef``, ``onnx``."""
    p = Path(path)
    if p.is_dir():
        if (p / "saved_model.pb").exists() or (p / "saved_model.pbtxt").exists():
            return "savedmodel"
        if (p / "training_model.onnx").exists():   # onnxruntime-training artifacts
            return "onnx"
        raise InputError(f"{p}: a directory, but not a TensorFlow SavedModel (no saved_model.pb inside) nor "
                         "onnxruntime-training artifacts (no training_model.onnx inside)")
    if not p.exists():
        raise InputError(f"{p}: no such file or directory")
    name = p.name.lower()
    if name.endswith(".onnx"):
        return "onnx"
    if name.endswith((".pb", ".pbtxt")):
        return "graphdef"
    if name.endswith((".dot", ".dot.gz")):
        return "pardnn-dot"
    if name.endswith((".json", ".json.gz")):
        head = read_bytes(p)[:4096].decode("utf-8", "replace")
        if '"pardnn.graph"' in head[:200]:
            return "pardnn"
        if '"maxSizePerFPGA"' in head or '"maxFPGAs"' in head:
            return "msr"
        return "pardnn"
    if name.endswith((".txt", ".txt.gz")):
        head = read_bytes(p)[:2048].decode("utf-8", "replace")
        if " -- " in head and "forward_compute_time=" in head:
            return "pipedream"
    raise InputError(f"{p}: cannot tell the format from the name; expected a pardnn.graph .json[.gz], "
                     "a SavedModel directory, a .pb/.pbtxt GraphDef, an .onnx model, a PipeDream graph.txt, "
                     "an MSR .json or a ParDNN .dot")


def load_input(path: str | Path, *, fmt: str | None = None, options: FrontendOptions | None = None) -> OpGraph:
    """Load ``path`` as a graph, with the frontend chosen by ``fmt`` or detected from the path."""
    fmt = fmt or detect_format(path)
    opts = options or FrontendOptions()
    named = {"name": opts.name} if opts.name else {}
    if fmt == "pardnn":
        d = read_json(path)
        if isinstance(d, dict) and d.get("format") not in (None, GRAPH_FORMAT) and "nodes" not in d:
            raise InputError(f"{path}: \"format\" is {d.get('format')!r}, expected {GRAPH_FORMAT!r}")
        return graph_from_dict(d, source=str(path))
    if fmt == "msr":
        from .frontends.peers.msr import load_msr
        return load_msr(path, **named)
    if fmt == "pipedream":
        from .frontends.peers.pipedream import load_pipedream
        return load_pipedream(path, **named)
    if fmt == "pardnn-dot":
        from .frontends.peers.pardnn_text import load_pardnn_dot
        return load_pardnn_dot(path, keep_unexecuted=opts.keep_unexecuted, **named)
    if fmt in ("savedmodel", "graphdef"):
        try:
            from .frontends.tensorflow import load_tensorflow
        except ImportError as exc:
            raise MissingDependencyError(f"{path}: reading TensorFlow models needs the 'tf' extra "
                                         f"(pip install 'pardnn[tf]'): {exc}") from None
        return load_tensorflow(path, opts)
    if fmt == "onnx":
        try:
            from .frontends.onnx import load_onnx
        except ImportError as exc:
            raise MissingDependencyError(f"{path}: reading ONNX models needs the 'onnx' extra "
                                         f"(pip install 'pardnn[onnx]'): {exc}") from None
        return load_onnx(path, opts)
    raise InputError(f"{path}: unknown input format {fmt!r}")


def json_dumps(obj: Any) -> str:
    return json.dumps(obj, indent=2, sort_keys=False)
