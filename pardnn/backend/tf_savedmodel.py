"""Write a placed step as a GraphDef or a SavedModel that users load themselves (needs TensorFlow).

`write_placed` picks the form from the output path:

* ``*.pb`` / ``*.pbtxt``: the flat GraphDef with ``node.device`` set on every
  node (`pardnn.backend.tf_rewrite`). Its variables are ``VarHandleOp``s
  without values; the feeds, fetches and targets are those the graph file
  records.
* a directory (for a SavedModel or a Keras model file input): a TF1-style SavedModel with one
  meta graph tagged ``train``, holding the placed graph with its devices
  (``clear_devices=False``) and the variables' values in ``variables/``, and
  a signature ``train_step`` whose inputs are the feeds (keyed by placeholder
  name) and whose outputs are the fetches, each run after every target op
  (the variable updates), so one call of the signature is one training step.

Load it in a session that has the devices::

    config = tf.compat.v1.ConfigProto(device_count={"CPU": 4})   # or real GPUs
    with tf.compat.v1.Session(graph=tf.Graph(), config=config) as sess:
        mg = tf.compat.v1.saved_model.load(sess, ["train"], "placed_model")
        sig = mg.signature_def["train_step"]
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Mapping

import numpy as np

from ..errors import InputError, OutputError, RuntimeFailure, check_interrupt
from ..fileio import check_new_directory, parents_made
from ..frontends.common import first_line
from ..frontends.tensorflow._tf import saved_model_pb2, tf
from ..frontends.tensorflow.model import TFModel, split_tensor_name
from .tf_devices import devices_needed, parse_device
from .tf_rewrite import write_graph_def
from .tf_run import build_program, session_config

SIGNATURE = "train_step"
TAGS = ("train",)


def _graph_with_saver(model: TFModel, placed_gd, values: Mapping[str, np.ndarray]):
    """The placed step (`tf_run.build_program`), its signature's tensors, and a saver of its variables."""
    program = build_program(model, placed_gd, values)
    graph = program.graph
    with graph.as_default():
        outputs = {}
        for i, name in enumerate(model.fetches):
            t = graph.get_tensor_by_name(name)
            with tf.device(t.op.device), tf.control_dependencies(list(program.targets)):
                key = split_tensor_name(name)[0].replace("/", "_") if len(model.fetches) > 1 else "output"
                outputs[key] = tf.identity(t, name=f"pardnn_step/output_{i}")
        inputs = {f.node: graph.get_tensor_by_name(f.name) for f in model.feeds}
        # the saver takes a resource variable's read, and a reference variable itself
        saved = {n: (t if t.op.type == "ReadVariableOp" else t.op.inputs[0]) for n, t in program.reads.items()}
        saver = tf.compat.v1.train.Saver(var_list=saved, sharded=False, allow_empty=True) if saved else None
    return graph, list(program.init_ops), dict(program.init_feeds), inputs, outputs, saver


def write_placed_savedmodel(model: TFModel, placed_gd, values: Mapping[str, np.ndarray], out_dir: str | Path
                            ) -> Path:
    """Write the placed step and its variables as a SavedModel (see the module docstring), atomically."""
    out = Path(out_dir)
    check_new_directory(out)
    placed_gd, cluster_names = _local_devices(placed_gd)
    graph, init_ops, init_feeds, inputs, outputs, saver = _graph_with_saver(model, placed_gd, values)
    cpus = max(devices_needed([n.device for n in placed_gd.node if n.device], "cpu").values(), default=1)
    # Soft placement only here: writing needs the variables, not the devices (a GPU placement is
    # written on a host without GPUs); the devices written into the graph are the requested ones.
    config = session_config(cpus=cpus, soft_placement=True)
    try:
        with parents_made(out.parent):
            _save(out, graph, init_ops, init_feeds, inputs, outputs, saver, config, cluster_names)
    except OSError as exc:
        raise OutputError(f"{out}: cannot write: {exc.strerror or type(exc).__name__}") from None
    return out


def _local_devices(placed_gd):
    """``placed_gd`` with each device of a cluster's task renamed to a CPU of this process, and the names back.

    A session of this process has no ``/job:worker`` devices, and soft placement does not move an op off a
    job it lacks, so the variables are initialised and saved on local CPUs, one per cluster device; the
    written graph gets the cluster's names back (`_name_devices`). A placement without tasks is kept."""
    named = {n.device for n in placed_gd.node if n.device}
    if not named or any(parse_device(d).job is None for d in named):
        return placed_gd, {}
    local = {d: f"/device:CPU:{i}" for i, d in enumerate(sorted(named))}
    gd = type(placed_gd)()
    gd.CopyFrom(placed_gd)
    for n in gd.node:
        if n.device:
            n.device = local[n.device]
    return gd, {v: k for k, v in local.items()}


def _name_devices(saved_model_pb: Path, names: Mapping[str, str]) -> None:
    """Rename the devices of the SavedModel file ``saved_model_pb`` by ``names`` (local CPU to cluster device)."""
    sm = saved_model_pb2.SavedModel()
    sm.ParseFromString(saved_model_pb.read_bytes())
    for mg in sm.meta_graphs:
        for n in mg.graph_def.node:
            if n.device:
                n.device = names.get(tf.DeviceSpec.from_string(n.device).to_string(), n.device)
    saved_model_pb.write_bytes(sm.SerializeToString())


def _save(out: Path, graph, init_ops, init_feeds, inputs, outputs, saver, config,
          cluster_names: Mapping[str, str]) -> None:
    """`write_placed_savedmodel`'s writing, into ``out``'s existing parent: staged in a temporary directory
    there, renamed into place at the end unless a Ctrl-C came (also one something swallowed)."""
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    except OSError as exc:
        raise OutputError(f"{out}: cannot write: {exc.strerror or type(exc).__name__}") from None
    staging = tmp / "model"
    tf_log = tf.get_logger()
    level = tf_log.level
    tf_log.setLevel(logging.ERROR)   # the TF1 SavedModel builder's deprecation notices
    try:
        with tf.compat.v1.Session(graph=graph, config=config) as sess:
            if init_ops:
                sess.run(init_ops, feed_dict=init_feeds)
            build = tf.compat.v1.saved_model.utils.build_tensor_info
            sig = tf.compat.v1.saved_model.signature_def_utils.build_signature_def(
                inputs={k: build(v) for k, v in inputs.items()}, outputs={k: build(v) for k, v in outputs.items()},
                method_name=SIGNATURE)
            builder = tf.compat.v1.saved_model.Builder(str(staging))
            builder.add_meta_graph_and_variables(sess, list(TAGS), signature_def_map={SIGNATURE: sig},
                                                 saver=saver, clear_devices=False, strip_default_attrs=True)
            builder.save()
        if cluster_names:
            _name_devices(staging / "saved_model.pb", cluster_names)
        check_interrupt()
        if out.exists():
            out.rmdir()
        os.replace(staging, out)
    except tf.errors.OpError as exc:
        raise RuntimeFailure(f"{out}: writing the placed SavedModel failed: {first_line(exc)}") from None
    except OSError as exc:
        raise OutputError(f"{out}: cannot write: {exc.strerror or type(exc).__name__}") from None
    finally:
        tf_log.setLevel(level)
        shutil.rmtree(tmp, ignore_errors=True)


def write_placed(model: TFModel, placed_gd, values: Mapping[str, np.ndarray] | None, out: str | Path) -> Path:
    """A ``.pb``/``.pbtxt`` GraphDef, or a SavedModel directory for a SavedModel input."""
    p = Path(out)
    if p.name.lower().endswith((".pb", ".pbtxt")):
        return write_graph_def(placed_gd, p)
    if model.source_format not in ("tensorflow-savedmodel", "keras"):
        raise InputError(f"{p}: a placed SavedModel is written for a SavedModel or Keras model input; name a .pb "
                         "or .pbtxt file to write the placed GraphDef")
    return write_placed_savedmodel(model, placed_gd, values or {}, p)
