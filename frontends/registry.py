"""Turn whatever the user points at into an `OpGraph`: the table of input formats and their loaders.

`detect_format` tells the format from the path:

* ``*.json`` / ``*.json.gz`` with ``"format": "pardnn.graph"``: our own format;
* an MSR device-placement JSON (``maxSizePerFPGA`` header);
* a PipeDream profile ``graph.txt``;
* a ParDNN ``.dot`` edge list (with its size and duration files beside it);
* a TensorFlow SavedModel directory or ``.pb``/``.pbtxt`` GraphDef (the ``tf`` extra);
* a compiled Keras model file, ``.keras`` or legacy ``.h5`` (the ``tf`` extra): its training step;
* an ``.onnx`` model (the ``onnx`` extra).

`load_input` looks the format up in `FRONTENDS` and imports its loader's
module on first use, so reading a ``pardnn.graph`` never imports TensorFlow
or onnx, and a missing extra is a `MissingDependencyError` (exit code 6)
naming it. The dependency points one way: the command line imports this
registry, the registry imports the importers (lazily), and the importers
import only `pardnn.frontends.options` and the core, never this module.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass
from pathlib import Path

from pardnn.errors import InputError, MissingDependencyError
from pardnn.fileio import read_head, read_json
from pardnn.ir import GRAPH_FORMAT, OpGraph, graph_from_dict
from pardnn.progress import substage

from .options import FrontendOptions


@dataclass(frozen=True)
class Frontend:
    """Where one input format's loader lives; its module is imported when the format is first read."""

    module: str
    """The module that holds the loader."""
    loader: str
    """The loader's name: ``loader(path, options)``, or ``loader(path, **keywords)`` when `keywords` is a tuple."""
    keywords: tuple[str, ...] | None = None
    """The `FrontendOptions` fields the loader takes as keywords, each passed when set; None: the options."""
    extra: str | None = None
    """The pip extra the module needs (``pip install 'pardnn[EXTRA]'``); None: it is always installed."""
    reads: str = ""
    """What it reads, for the message when the extra is missing ("TensorFlow models")."""


FRONTENDS: dict[str, Frontend] = {
    "pardnn": Frontend(__name__, "load_pardnn_graph", keywords=()),
    "msr": Frontend("pardnn.frontends.peers.msr", "load_msr", keywords=("name",)),
    "pipedream": Frontend("pardnn.frontends.peers.pipedream", "load_pipedream", keywords=("name",)),
    "pardnn-dot": Frontend("pardnn.frontends.peers.pardnn_text", "load_pardnn_dot",
                           keywords=("keep_unexecuted", "name")),
    "savedmodel": Frontend("pardnn.frontends.tensorflow", "load_tensorflow", extra="tf", reads="TensorFlow models"),
    "graphdef": Frontend("pardnn.frontends.tensorflow", "load_tensorflow", extra="tf", reads="TensorFlow models"),
    "keras": Frontend("pardnn.frontends.tensorflow", "load_tensorflow", extra="tf", reads="Keras models"),
    "onnx": Frontend("pardnn.frontends.onnx", "load_onnx", extra="onnx", reads="ONNX models"),
}
"""Format name -> its loader (the ``--format`` choices, in this order)."""

FORMATS: tuple[str, ...] = tuple(FRONTENDS)
_TF_KINDS = {"savedmodel": "a SavedModel directory", "graphdef": "a GraphDef file (.pb, .pbtxt)",
             "keras": "a Keras model file (.keras, .h5)"}


def detect_format(path: str | Path) -> str:
    """One of ``pardnn``, ``msr``, ``pipedream``, ``pardnn-dot``, ``savedmodel``, ``graphdef``, ``keras``, ``onnx``."""
    p = Path(path)
    try:
        return _detect_format(p)
    except PermissionError as exc:      # a directory on the way that may not be searched (``is_dir`` raises)
        raise InputError(f"{p}: cannot read: {exc.strerror or exc}") from None


def _is_msr(head: str) -> bool:
    """Whether a JSON file's first KiBs are an MSR device-placement graph's."""
    return '"maxSizePerFPGA"' in head or '"maxFPGAs"' in head


def _detect_format(p: Path) -> str:
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
    if name.endswith((".keras", ".h5", ".hdf5")):
        return "keras"
    if name.endswith((".dot", ".dot.gz")):
        return "pardnn-dot"
    if name.endswith((".json", ".json.gz")):
        if not p.is_file():     # a FIFO: what is read to tell would be gone for the reader (--format msr)
            return "pardnn"
        head = read_head(p, 4096).decode("utf-8", "replace")
        if '"pardnn.graph"' in head[:200]:
            return "pardnn"
        return "msr" if _is_msr(head) else "pardnn"
    if p.is_file():     # a PipeDream graph.txt, or another name told from the form, as SPEC §5 has it
        head = read_head(p, 4096).decode("utf-8", "replace")
        json = head.lstrip().startswith("{")
        if json and '"pardnn.graph"' in head:
            return "pardnn"
        if json and _is_msr(head):
            return "msr"
        if " -- " in head and "forward_compute_time=" in head:
            return "pipedream"
    raise InputError(f"{p}: cannot tell the format from the name nor the contents (give --format); expected a "
                     "pardnn.graph .json[.gz], a SavedModel directory, a .pb/.pbtxt GraphDef, a .keras model, "
                     "an .onnx model, a PipeDream graph.txt, an MSR .json or a ParDNN .dot")


def input_files(path: str | Path | None, fmt: str | None = None) -> list[Path]:
    """The files reading ``path`` would read: the path, and for a ParDNN ``.dot`` the size, timeline and
    duration files found beside it (`peers.pardnn_text.side_files`), so that no output overwrites one."""
    if path is None:
        return []
    p = Path(path)
    if fmt == "pardnn-dot" or (fmt is None and p.name.lower().endswith((".dot", ".dot.gz"))):
        from .peers.pardnn_text import side_files

        sizes, timelines, durations = side_files(p)
        return [p, *(f for f in (sizes, *timelines, durations) if f is not None)]
    return [p]


def load_input(path: str | Path, *, fmt: str | None = None, options: FrontendOptions | None = None) -> OpGraph:
    """Load ``path`` as a graph, with the frontend chosen by ``fmt`` or detected from the path."""
    fmt = input_format(path, fmt)
    _check_readable(Path(path))
    opts = options or FrontendOptions()
    frontend = FRONTENDS.get(fmt)
    if frontend is None:
        raise InputError(f"{path}: unknown input format {fmt!r}")
    try:
        with substage(f"loading the reader of {frontend.reads or fmt}"):    # TensorFlow takes seconds to import
            module = importlib.import_module(frontend.module)
    except ImportError as exc:
        if frontend.extra is None:
            raise
        raise MissingDependencyError(f"{path}: reading {frontend.reads} needs the {frontend.extra!r} extra "
                                     f"(pip install 'pardnn[{frontend.extra}]'): {exc}") from None
    loader = getattr(module, frontend.loader)
    if frontend.keywords is None:
        return loader(path, opts)
    g = loader(path, **{k: getattr(opts, k) for k in frontend.keywords if getattr(opts, k)})
    _check_unused(path, fmt, frontend, opts, g)
    return g


def _check_readable(p: Path) -> None:
    """A file the frontend will read must open: its reader would say something else (that a ``.keras`` file
    is no zip archive)."""
    if not p.is_file():
        return
    try:
        open(p, "rb").close()   # noqa: SIM115
    except OSError as exc:
        raise InputError(f"{p}: cannot read: {exc.strerror or exc}") from None


# the flag of each `FrontendOptions` field (`pardnn.cli.options.frontend_options`)
_FLAGS = {"name": "--name", "signature": "--signature", "profile_steps": "--profile", "batch_size": "--batch-size",
          "dims": "--dim", "device_profile": "--device-profile", "keep_unexecuted": "--keep-unexecuted"}


def _check_unused(path, fmt: str, frontend: Frontend, opts: FrontendOptions, g: OpGraph) -> None:
    """A graph file's shapes and costs are fixed: a flag that would size or cost a model it cannot take is named
    (it was ignored without a word). A ``--batch-size`` or ``--dim`` other than the graph was imported with is an
    `InputError`; the same one says nothing."""
    default = FrontendOptions()
    unused = [f for f in _FLAGS if f not in frontend.keywords and getattr(opts, f) != getattr(default, f)]
    recorded = g.meta.get("batch_size")
    if "batch_size" in unused and recorded is not None:
        if recorded != opts.batch_size:
            raise InputError(f"{path}: the graph was imported with --batch-size {recorded}, and its shapes are "
                             f"fixed: --batch-size {opts.batch_size} cannot resize it (import the model again "
                             f"with --batch-size {opts.batch_size})")
        unused.remove("batch_size")
    dims = g.meta.get("dims")
    if "dims" in unused and isinstance(dims, dict) and all(k in dims for k in opts.dims):
        for k, v in opts.dims.items():
            if dims[k] != v:
                raise InputError(f"{path}: the graph was imported with --dim {k}={dims[k]}, and its shapes are "
                                 f"fixed: --dim {k}={v} cannot resize it (import the model again with it)")
        unused.remove("dims")
    what = "a pardnn.graph" if fmt == "pardnn" else f"a {fmt} graph"
    log = logging.getLogger("pardnn")
    if "name" in unused:
        unused.remove("name")
        log.warning("%s: --name is ignored: %s keeps the name it was made with (%r)", path, what, g.name)
    if unused:
        flags = ", ".join(_FLAGS[f] for f in unused)
        log.warning("%s: %s ignored: %s is read as it is (its shapes and op times were fixed when it was made)",
                    path, flags + (" is" if len(unused) == 1 else " are"), what)



def input_format(path: str | Path, fmt: str | None = None) -> str:
    """The format to read ``path`` as: ``fmt`` (``--format``) when given, else `detect_format`'s.

    One reader serves the three TensorFlow formats and goes by what the path is, so a TensorFlow ``fmt`` that
    contradicts it (``--format graphdef`` on a ``.keras`` file) is an `InputError` naming both, not ignored."""
    if fmt is None:
        return detect_format(path)
    if fmt in _TF_KINDS:
        try:
            found = detect_format(path)
        except InputError:
            found = None
        if found in _TF_KINDS and found != fmt:
            raise InputError(f"{path}: --format {fmt}, but this is {_TF_KINDS[found]}; use --format {found}, "
                             "or leave --format out")
    return fmt


def load_pardnn_graph(path: str | Path) -> OpGraph:
    """Read a ``pardnn.graph`` file, refusing a JSON file that names another format."""
    d = read_json(path)
    if isinstance(d, dict) and d.get("format") not in (None, GRAPH_FORMAT) and "nodes" not in d:
        raise InputError(f"{path}: \"format\" is {d.get('format')!r}, expected {GRAPH_FORMAT!r}")
    return graph_from_dict(d, source=str(path))
