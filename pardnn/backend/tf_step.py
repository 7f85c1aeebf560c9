"""Python users: run a Keras train step or a ``tf.function`` with a placement (needs TensorFlow).

::

    imp = import_keras(model, loss, optimizer, batch)          # or import_function(fn, *args)
    plan, _ = pardnn.partition(imp.graph, Cluster.homogeneous(4, memory_bytes=...))
    with place_step(imp, plan) as step:                        # a PlacedStep
        for x, y in batches:
            loss = step(x, y)
        step.write_back()                                      # the trained values into the Keras model

`place_step` writes the placement into the step's flat graph
(`pardnn.backend.tf_rewrite`) and opens a ``tf.compat.v1.Session`` on this
host's GPUs or logical CPU devices (or on a cluster's tasks) with
``allow_soft_placement=False``. Every variable is created on its placed
device (its ``VarHandleOp`` carries that device, so its buffer lives in that
device's resource manager) and starts from the model's current value.
Calling the step runs one training step with the placement and returns the
fetched values (the loss). `PlacedStep.variable_devices` says where each
variable lives; `PlacedStep.write_back` copies the placed variables' values
into the live Keras or ``tf.function`` variables.

For logical CPU devices in eager code as well, call `setup_logical_cpus` (or
``tf.config.set_logical_device_configuration``) before TensorFlow runs
anything; the placed step's session gets its devices either way.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ..errors import InputError, PlacementError
from ..frontends.tensorflow._tf import tf
from ..frontends.tensorflow.build import TFImport
from ..frontends.tensorflow.profile import feed_values
from ..frontends.tensorflow.shapes import with_batch
from ..placement import Placement
from .tf_devices import ClusterTarget, LocalTarget, devices_needed, map_devices
from .tf_rewrite import Assignment, assign_devices, check_placement_matches, placed_graph_def
from .tf_run import StepProgram, build_program, local_target, op_failure, session_config, starting_values


class PlacedStep:
    """One training step bound to a placement; call it with a batch. Use as a context manager (or `close`)."""

    def __init__(self, imp: TFImport, placement: Placement, *, target: LocalTarget | ClusterTarget | None = None,
                 session_target: str = "", batch_size: int | None = None, soft_placement: bool = False,
                 timeout_s: float | None = None):
        g, model = imp.graph, imp.model
        self.model = model
        self.graph = g
        where = model.source or model.name
        check_placement_matches(g, placement, model.graph_def, where=where)
        target = target or local_target(placement)
        self.devices: tuple[str, ...] = map_devices(placement.devices, target)
        self.assignment: Assignment = assign_devices(g, placement, self.devices)
        gd = with_batch(model.graph_def, model.feeds, batch_size)
        self.graph_def = placed_graph_def(gd, self.assignment)
        cpus = None
        if not isinstance(target, ClusterTarget) and target.kind == "cpu":
            cpus = max(devices_needed(self.devices, "cpu").get(0, 1), 1)
        self.program: StepProgram = build_program(model, self.graph_def, starting_values(model, batch_size))
        self._batch_size = batch_size
        self._what = f"{where}: the placed step"
        config = session_config(cpus=cpus, soft_placement=soft_placement, timeout_s=timeout_s,
                                isolate=isinstance(target, ClusterTarget))
        self._session = tf.compat.v1.Session(session_target, graph=self.program.graph, config=config)
        try:
            if self.program.init_ops:
                self._session.run(list(self.program.init_ops), feed_dict=dict(self.program.init_feeds))
        except tf.errors.OpError as exc:
            self.close()
            raise op_failure(exc, self._what) from None
        self._run_list = [list(self.program.fetches), list(self.program.targets)]

    # ---- running -------------------------------------------------------------
    def _feed(self, args, named) -> dict:
        feeds = self.program.feeds
        if named:
            values = named
        elif len(args) == 1 and isinstance(args[0], Mapping) and set(args[0]) <= {n for _, n in feeds}:
            values = args[0]
        elif args:
            flat = tf.nest.flatten(args)
            if len(flat) != len(feeds):
                raise InputError(f"{self._what} takes {len(feeds)} input(s) "
                                 f"({', '.join(n for _, n in feeds)}), got {len(flat)}")
            values = {name: v for (_, name), v in zip(feeds, flat)}
        else:
            values = feed_values(self.model, self._batch_size)
        missing = [n for _, n in feeds if n not in values]
        if missing:
            raise InputError(f"{self._what}: no value for input {missing[0]!r}")
        return {t: np.asarray(values[n]) for t, n in feeds}

    def __call__(self, *args, **named) -> Any:
        """Run one step on ``args`` (the batch, e.g. ``x, y``, or a dict by feed name); the fetched values.

        Without arguments the step reuses the batch it was traced with.
        """
        if self._session is None:
            raise InputError(f"{self._what}: the step is closed")
        try:
            out = self._session.run(self._run_list, feed_dict=self._feed(args, named))[0]
        except tf.errors.OpError as exc:
            raise op_failure(exc, self._what) from None
        return out[0] if len(out) == 1 else tuple(out)

    def run_traced(self, *args, **named):
        """Run one step with a full trace; ``(fetched values, RunMetadata)``."""
        meta = tf.compat.v1.RunMetadata()
        options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE,
                                          output_partition_graphs=True)
        try:
            out = self._session.run(self._run_list, feed_dict=self._feed(args, named), options=options,
                                    run_metadata=meta)[0]
        except tf.errors.OpError as exc:
            raise op_failure(exc, self._what) from None
        return (out[0] if len(out) == 1 else tuple(out)), meta

    # ---- variables -----------------------------------------------------------
    @property
    def variable_devices(self) -> dict[str, str]:
        """The device each variable was created on, by variable node name."""
        return {name: t.op.inputs[0].op.device for name, t in self.program.reads.items()}

    def variable_values(self) -> dict[str, np.ndarray]:
        """Every variable's current value, read on its device."""
        names = sorted(self.program.reads)
        try:
            values = self._session.run([self.program.reads[n] for n in names])
        except tf.errors.OpError as exc:
            raise op_failure(exc, self._what) from None
        return dict(zip(names, values))

    def write_back(self) -> int:
        """Assign the placed variables' values to the live variables of the model; how many were written."""
        objects = self.model.variable_objects
        if not objects:
            raise PlacementError(f"{self._what}: the model's own variables are not known (write_back needs a step "
                                 "imported with import_keras or import_function in this process)")
        values = self.variable_values()
        n = 0
        for name, var in objects.items():
            if name in values:
                var.assign(values[name])
                n += 1
        return n

    # ---- lifetime ------------------------------------------------------------
    def close(self) -> None:
        if getattr(self, "_session", None) is not None:
            self._session.close()
            self._session = None

    def __enter__(self) -> "PlacedStep":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def place_step(imp: TFImport, placement: Placement, **options) -> PlacedStep:
    """``imp``'s step bound to ``placement``: a callable that runs one placed training step.

    ``options`` are `PlacedStep`'s: ``target`` (default: this host's GPUs or
    logical CPUs), ``session_target`` (a cluster's ``grpc://`` address),
    ``batch_size``, ``soft_placement``, ``timeout_s``.
    """
    return PlacedStep(imp, placement, **options)
