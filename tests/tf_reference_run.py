"""Run the test models' training steps on one device in this process and save the results (needs TensorFlow).

``python -m tests.tf_reference_run OUT.npz MODEL...`` (from the repository
root) runs each model of `tests.tf_models` (``cnn``, ``transformer``) for 4
steps (`pardnn.backend.tf_run.run_program` with 2 timed steps) from its
starting values and batch, all on one CPU device, then again from
`pardnn.backend.equivalence.perturbed` values and batch (the noise
reference), and writes every fetched output over the steps and every
variable as ``MODEL/run/NAME`` and ``MODEL/noise/NAME``. A test runs it in
fresh interpreters under different settings (``TF_ENABLE_ONEDNN_OPTS``),
which TensorFlow reads once, when it starts.
"""

from __future__ import annotations

import sys

import numpy as np

STEPS = 2


def reference_runs(name: str) -> dict[str, np.ndarray]:
    """``run/NAME`` and ``noise/NAME`` arrays of one model (outputs as ``output FETCH``, stacked over steps)."""
    import keras

    from pardnn.backend import tf_run
    from pardnn.backend.equivalence import NOISE_SEED, perturbed, stack_steps
    from pardnn.frontends.tensorflow import import_keras

    from . import tf_models

    model, loss, batch = getattr(tf_models, name)(keras)
    imp = import_keras(model, loss, keras.optimizers.Adam(1e-2), batch)
    m = imp.model
    values, feeds = tf_run.starting_values(m), tf_run.feed_values(m, None)
    config = tf_run.session_config(cpus=1)
    out: dict[str, np.ndarray] = {}
    for kind, vals, batch_values in (("run", values, feeds),
                                     ("noise", perturbed(values), perturbed(feeds, seed=NOISE_SEED + 1))):
        run = tf_run.run_program(tf_run.build_program(m, m.graph_def, vals), batch_values, steps=STEPS,
                                 config=config, trace=False)
        tensors = {**stack_steps(run.outputs, [f"output {t}" for t in m.fetches]), **run.variables}
        out.update({f"{kind}/{k}": np.asarray(v) for k, v in tensors.items()})
    return out


def main(argv: list[str]) -> None:
    path, names = argv[0], argv[1:]
    arrays = {}
    for name in names:
        arrays.update({f"{name}/{k}": v for k, v in reference_runs(name).items()})
    np.savez(path, **arrays)


if __name__ == "__main__":
    main(sys.argv[1:])
