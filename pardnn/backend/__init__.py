"""Backends: run a placed graph on real devices and compare with the machine model's prediction.

* `pardnn.backend.onnx_pipeline` (the ``onnx`` extra): split an ONNX model
  into one sub-model per stage of a placement and run the stages as a
  pipeline of onnxruntime sessions, one per device.
* TensorFlow (the ``tf`` extra; docs/running.md):

  - `tf_devices` (pure): a placement's devices as TensorFlow device names,
    on one host (GPUs or logical CPUs) or dealt to a cluster's tasks;
  - `tf_rewrite`: ``node.device`` on every node, colocation groups whole,
    host ops on the CPU of device 0's task; placed ``.pb``/``.pbtxt``;
  - `tf_savedmodel`: a placed SavedModel with the variables' values;
  - `tf_run`: run the placed step in a ``tf.compat.v1.Session`` (soft
    placement off) and check it: ops where placed (step stats), results
    equal to one device (within tolerance, or within rounding noise:
    `equivalence`, numpy only), measured vs predicted time,
    ``_Send``/``_Recv`` pairs vs simulated transfers (`tf_checks`);
  - `tf_step`: `place_step`, a callable placed Keras or ``tf.function`` step;
  - `tf_cluster`, `tf_server`: ``tf.distribute.Server`` tasks, a user's
    cluster spec or servers on 127.0.0.1 for testing;
  - `tf_backend`: what ``pardnn run`` and ``pardnn rewrite`` call.
* `common` (pure): what both share, such as the machine model's cluster
  when none is given (`default_cluster`).

Framework imports stay inside the submodules, so ``import pardnn`` (and
``import pardnn.backend``) never imports onnx or TensorFlow.
"""
