"""A compiled Keras model saved as ``.keras``: import, partition, run and rewrite it from the command line.

The step pardnn builds from the file must be the one ``model.fit`` runs: the
first placed step's loss is checked against Keras's own ``train_on_batch`` on
the same batch, and the placed SavedModel that ``pardnn rewrite`` writes is
loaded and run like a user would.
"""

from __future__ import annotations

import re

import json
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from pardnn.cli import cli  # noqa: E402
from pardnn.errors import EXIT_INFEASIBLE, EXIT_INPUT  # noqa: E402
from pardnn.frontends import detect_format  # noqa: E402
from pardnn.frontends.tensorflow.keras_file import read_keras_file, synthetic_batch  # noqa: E402
from pardnn.ir import load_graph  # noqa: E402
from pardnn.fileio import read_json  # noqa: E402

pytestmark = pytest.mark.tf

BATCH = 16


def _mlp(compiled: bool = True):
    keras.utils.set_random_seed(0)
    m = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu", name="fc1"),
                          keras.layers.Dense(64, activation="relu", name="fc2"), keras.layers.Dense(10, name="logits")])
    if compiled:
        m.compile(optimizer=keras.optimizers.Adam(1e-2),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return m


@pytest.fixture(scope="module", autouse=True)
def fresh_keras_names():
    """Keras numbers layer and optimizer names per process; leave the counters as other modules expect them
    (tests/frontends/test_tensorflow.py names ``adam/...`` slots, and fails after this module without it)."""
    keras.backend.clear_session()
    yield
    keras.backend.clear_session()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("keras")
    _mlp().save(d / "mlp.keras")
    _mlp(compiled=False).save(d / "uncompiled.keras")
    keras.utils.set_random_seed(0)
    feat, tok = keras.Input((6,), name="feat"), keras.Input((4,), dtype="int32", name="tok")
    h = keras.layers.Concatenate()([feat, keras.layers.Flatten()(keras.layers.Embedding(50, 3)(tok))])
    h = keras.layers.Dense(16, activation="relu")(h)
    two = keras.Model([feat, tok], [keras.layers.Dense(5, activation="softmax", name="cls")(h),
                                    keras.layers.Dense(1, activation="sigmoid", name="flag")(h)])
    two.compile(optimizer="sgd", loss={"cls": "categorical_crossentropy", "flag": "binary_crossentropy"},
                loss_weights={"cls": 1.0, "flag": 0.5})
    two.save(d / "two.keras")
    return d


def _pardnn(*args, timeout=300):
    cmd = [sys.executable, "-c", "from pardnn.cli import main; main()", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def test_a_keras_file_is_detected_and_its_step_is_what_fit_runs(files):
    path = files / "mlp.keras"
    assert detect_format(path) == "keras"
    tfm = read_keras_file(path, batch_size=BATCH)
    ops = {n.op for n in tfm.graph_def.node}
    assert {"MatMul", "ReluGrad", "SparseSoftmaxCrossEntropyWithLogits"} <= ops
    assert any(op.startswith("ResourceApplyAdam") for op in ops) or "AssignSubVariableOp" in ops
    assert [f.shape for f in tfm.feeds] == [(BATCH, 32), (BATCH,)]
    # six weights and Adam's two slots of each, plus its counter and learning rate: all variables of the step
    kernels = [n for n in tfm.variable_values() if n.endswith("kernel")]
    assert len(kernels) == 3
    # the batch is deterministic and valid for the loss: class indices below the 10 logits
    model = keras.saving.load_model(path)
    x, y = synthetic_batch(model, model.loss, BATCH, where="t")
    x2, y2 = synthetic_batch(model, model.loss, BATCH, where="t")
    np.testing.assert_array_equal(x, x2)
    assert y.dtype == np.int32 and y.shape == (BATCH,) and 0 <= y.min() and y.max() < 10


def test_a_legacy_h5_file_gives_the_same_step_as_the_keras_file(files, tmp_path):
    """Found by a new user's trial: a legacy ``.h5`` file's optimizer comes back built for no variables,
    and every ``.h5`` import ended in an internal error. Saved before and after a step of training, it now
    gives the step the ``.keras`` file gives: the same ops, variables of the same shapes."""
    import warnings
    from collections import Counter

    def ops(tfm):
        return Counter(n.op for n in tfm.graph_def.node)

    want = read_keras_file(files / "mlp.keras", batch_size=BATCH)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")      # Keras calls .h5 legacy
        fresh = _mlp()
        fresh.save(tmp_path / "fresh.h5")
        trained = _mlp()
        x, y = synthetic_batch(trained, trained.loss, BATCH, where="t")
        trained.train_on_batch(x, y)
        trained.save(tmp_path / "trained.h5")
    for name in ("fresh.h5", "trained.h5"):
        got = read_keras_file(tmp_path / name, batch_size=BATCH)
        assert ops(got) == ops(want), name
        shapes = [sorted(np.shape(v) for v in t.variable_values().values()) for t in (got, want)]
        assert shapes[0] == shapes[1], name    # (names differ: Keras numbers optimizers per process)
    r = _pardnn("info", tmp_path / "trained.h5", "--batch-size", BATCH)
    assert r.returncode == 0 and "optimizer" in r.stdout, r.stderr


@pytest.fixture(scope="module")
def fit_loss(files):
    """Keras's own training step (``train_on_batch``) on the batch pardnn makes, from the saved weights."""
    model = keras.saving.load_model(files / "mlp.keras")
    x, y = synthetic_batch(model, model.loss, BATCH, where="t")
    return float(model.train_on_batch(x, y))


def test_partition_run_and_rewrite_a_keras_file(files, fit_loss, tmp_path):
    path = files / "mlp.keras"
    placement = tmp_path / "p.json"
    res = CliRunner().invoke(cli, ["-q", "partition", str(path), "--batch-size", str(BATCH), "--devices", "2",
                                   "-o", str(placement)])
    assert res.exit_code == 0, res.output
    assert read_json(placement)["batch_size"] == BATCH
    proc = _pardnn("-q", "run", path, placement, "--batch-size", BATCH, "--steps", 3, "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["ok"] and report["outputs_match"] and report["variables_match"] and report["ops_moved"] == 0
    assert all(n > 0 for n in report["ops_per_device"])
    # ``steps``: the timed steps asked for, as on ONNX; ``steps_compared`` adds the warm-up and the traced step
    assert report["steps"] == 3 and report["steps_compared"] == 5
    assert report["feasible"] is True and report["violations"] == []
    losses = report["losses"]
    assert len(losses) >= 3 and losses[-1] < losses[0]
    np.testing.assert_allclose(losses[0], fit_loss, rtol=1e-4)     # the step is the one model.fit runs

    # a cluster the placement does not fit: the run still reports, then exits 4 naming the device (as simulate)
    proc = _pardnn("-q", "run", path, placement, "--batch-size", BATCH, "--steps", 1, "--json", "--memory", "1KiB")
    assert proc.returncode == EXIT_INFEASIBLE, proc.stderr[-2000:]
    bad = json.loads(proc.stdout)
    assert bad["outputs_match"] and bad["feasible"] is False and bad["violations"][0].startswith("device ")
    # naming the device the step ran on, a logical CPU here, not the machine model's default /device:GPU:0
    v = bad["violations"][0]
    assert any(f"({d}) needs" in v for d in bad["devices"]) and "CPU" in v and "GPU" not in v, v
    assert proc.stderr.strip().count("\n") == 0 and "the placement breaks the machine model: device" in proc.stderr

    out = tmp_path / "placed"
    res = CliRunner().invoke(cli, ["-q", "rewrite", str(path), str(placement), "-o", str(out), "--batch-size",
                                   str(BATCH), "--device-kind", "cpu", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["devices"] == ["/device:CPU:0", "/device:CPU:1"]
    tfm = read_keras_file(path, batch_size=BATCH)
    config = tf.compat.v1.ConfigProto(device_count={"CPU": 2}, allow_soft_placement=False)
    with tf.compat.v1.Session(graph=tf.Graph(), config=config) as sess:
        mg = tf.compat.v1.saved_model.load(sess, ["train"], str(out))
        sig = mg.signature_def["train_step"]
        graph = sess.graph
        devices = {op.device for op in graph.get_operations() if op.type == "VarHandleOp"}
        assert devices == {"/device:CPU:0", "/device:CPU:1"}
        feeds = {graph.get_tensor_by_name(sig.inputs[f.node].name): tfm.feed_values[f.name] for f in tfm.feeds}
        (out_key,) = sig.outputs
        placed = [float(sess.run(sig.outputs[out_key].name, feeds)) for _ in range(3)]
    np.testing.assert_allclose(placed, losses[:3], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("command", ["run", "rewrite"])
@pytest.mark.parametrize("given", [None, BATCH // 2])
def test_run_and_rewrite_refuse_another_batch_size(files, tmp_path, command, given):
    """A placement made at one --batch-size is refused by run and by rewrite at another: one line naming both,
    exit 3, and nothing written."""
    path, placement, out = files / "mlp.keras", tmp_path / "p.json", tmp_path / "placed"
    res = CliRunner().invoke(cli, ["-q", "partition", str(path), "--batch-size", str(BATCH), "--devices", "2",
                                   "-o", str(placement)])
    assert res.exit_code == 0, res.output
    args = [command, path, placement] + (["-o", out] if command == "rewrite" else ["--steps", 1])
    if given is not None:
        args += ["--batch-size", given]
    proc = _pardnn(*args)
    assert proc.returncode == EXIT_INPUT, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    has = f"--batch-size {given}" if given is not None else "no --batch-size"
    assert len(lines) == 1 and lines[0] == (
        f"pardnn: error: {placement}: the placement was made with --batch-size {BATCH}, but this {command} has "
        f"{has}; {command} with --batch-size {BATCH}, or partition again for the batch you want"), proc.stderr
    assert proc.stdout == "" and not out.exists()


def test_a_model_with_two_inputs_and_two_weighted_losses(files, tmp_path):
    out = tmp_path / "two.json.gz"
    res = CliRunner().invoke(cli, ["-q", "import", str(files / "two.keras"), "--batch-size", "4", "-o", str(out)])
    assert res.exit_code == 0, res.output
    g = load_graph(out)
    assert g.meta["source_format"] == "keras" and g.meta["keras_file"] == "two.keras"
    tfm = read_keras_file(files / "two.keras", batch_size=4)
    shapes = {f.name.split(":")[0]: f.shape for f in tfm.feeds}
    assert sorted(shapes.values()) == [(4, 1), (4, 4), (4, 5), (4, 6)]
    labels = [v for k, v in tfm.feed_values.items() if v.shape == (4, 5)]
    assert len(labels) == 1 and (labels[0].sum(axis=1) == 1).all()        # categorical: one-hot labels


def test_a_model_with_a_string_input(tmp_path):
    """Found by a new user's trial: a model that reads strings (a Hashing layer) ended in an internal error,
    `data type 'string' not understood`, where the batch is drawn. Its strings are now "0" and "1"."""
    keras.utils.set_random_seed(0)
    words = keras.Input((2,), dtype="string", name="words")
    h = keras.layers.Flatten()(keras.layers.Embedding(16, 4)(keras.layers.Hashing(num_bins=16)(words)))
    m = keras.Model(words, keras.layers.Dense(1)(h))
    m.compile(optimizer="adam", loss="mse")
    m.save(tmp_path / "words.keras")
    out = tmp_path / "words.json.gz"
    res = CliRunner().invoke(cli, ["-q", "import", str(tmp_path / "words.keras"), "--batch-size", "4", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "StringToHashBucketFast" in load_graph(out).ops
    tfm = read_keras_file(tmp_path / "words.keras", batch_size=4)
    x = tfm.feed_values[next(f.name for f in tfm.feeds if f.dtype == "string")]
    assert x.shape == (4, 2) and set(x.ravel()) <= {"0", "1"}


def test_a_model_of_named_inputs_and_outputs_gets_its_batch_as_dicts(tmp_path):
    """Found by a new user's trial: a model built on dicts ({"b": b, "a": a} in, {"reg": .., "cls": ..} out) ended
    in an internal error of many lines (Keras: "The structure of `inputs` doesn't match the expected structure"):
    the batch was a list. It now has the model's structure, and the step is the one ``train_on_batch`` runs."""
    keras.utils.set_random_seed(0)
    a, b = keras.Input((6,), name="a"), keras.Input((3,), name="b")
    h = keras.layers.Concatenate()([keras.layers.Dense(4)(b), keras.layers.Dense(4)(a)])
    m = keras.Model({"b": b, "a": a}, {"reg": keras.layers.Dense(1, name="reg")(h),
                                       "cls": keras.layers.Dense(3, name="cls")(h)})
    m.compile(optimizer="sgd", loss={"cls": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                                     "reg": "mse"})
    path = tmp_path / "dicts.keras"
    m.save(path)
    placement = tmp_path / "p.json"
    res = CliRunner().invoke(cli, ["-q", "partition", str(path), "--batch-size", "4", "-k", "2", "-o", str(placement)])
    assert res.exit_code == 0, res.output
    proc = _pardnn("-q", "run", path, placement, "--batch-size", 4, "--steps", 1, "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    model = keras.saving.load_model(path)
    x, y = synthetic_batch(model, model.loss, 4, where="t")
    assert sorted(x) == ["a", "b"] and x["a"].shape == (4, 6) and sorted(y) == ["cls", "reg"]
    assert y["cls"].shape == (4,) and y["cls"].dtype == np.int32 and y["reg"].shape == (4, 1)
    np.testing.assert_allclose(json.loads(proc.stdout)["losses"][0], model.train_on_batch(x, y, return_dict=True)["loss"], rtol=1e-4)


def _save_with_own_layer(tmp_path, class_name: str):
    """A compiled model with an unregistered layer class of the user's own, named ``class_name``, saved."""
    def build(self, shape):
        self.w = self.add_weight(shape=(shape[-1], 2))

    own = type(class_name, (keras.layers.Layer,), {"build": build, "call": lambda self, x: x @ self.w})
    m = keras.Sequential([keras.Input((3,), batch_size=4), own()])
    m.compile("adam", "mse")
    m.save(tmp_path / "own.keras")
    return tmp_path / "own.keras"


@pytest.mark.parametrize("case, expect", [
    ("uncompiled", "saved without an optimizer and a loss"),
    ("no batch", "has no fixed batch size; give --batch-size"),
    ("not keras", "not a loadable Keras model (a .keras file is a zip archive; this is not one)"),
    ("custom layer", "the Keras model uses 'PardnnTestOwnDense', a class or function of its own code that Keras "
                     "cannot rebuild without it; load the model in Python with that code imported and give it "
                     "to pardnn.frontends.tensorflow.import_keras"),
    ("damaged config", "not a loadable Keras model (its config names Keras's 'Sequential' without the module Keras "
                       "reads it from: the file is damaged, or not written by Keras)"),
    ("own layer of a Keras name", "the Keras model uses 'Attention', a class or function of its own code"),
    ("lookup table", "lookup.keras: the train step captures a resource"),
    # Keras's own advice ("pass `safe_mode=False` to the loading function") is none a command-line user can take
    ("lambda", "lambda.keras: the Keras model holds Python code (a Lambda layer) that Keras loads only with "
               "safe_mode=False; if you trust the file, load it in Python with keras.saving.load_model(path, "
               "safe_mode=False) and give the model to pardnn.frontends.tensorflow.import_keras"),
])
def test_keras_file_errors_are_one_line(files, tmp_path, case, expect):
    if case in ("custom layer", "own layer of a Keras name"):
        # a layer of the user's own code: a new user's trial met Keras's own message, which names the model only;
        # one named as a Keras class (Attention) is still the user's (a second review)
        args = [_save_with_own_layer(tmp_path, "PardnnTestOwnDense" if case == "custom layer" else "Attention")]
    elif case == "uncompiled":
        args = [files / "uncompiled.keras", "--batch-size", "4"]
    elif case == "lookup table":    # a new user's trial: the line began "keras:", named no file and no cause
        words = keras.Input((1,), dtype="string")
        ids = keras.layers.StringLookup(vocabulary=["a", "b"])(words)
        m = keras.Model(words, keras.layers.Dense(1)(keras.layers.Flatten()(keras.layers.Embedding(4, 2)(ids))))
        m.compile("adam", "mse")
        m.save(tmp_path / "lookup.keras")
        args = [tmp_path / "lookup.keras", "--batch-size", "4"]
    elif case == "lambda":
        m = keras.Sequential([keras.Input((3,), batch_size=4), keras.layers.Lambda(lambda x: x * 2.0),
                              keras.layers.Dense(1)])
        m.compile("adam", "mse")
        m.save(tmp_path / "lambda.keras")
        args = [tmp_path / "lambda.keras"]
    elif case == "no batch":
        args = [files / "mlp.keras"]
    elif case == "damaged config":      # a built-in class said to be the user's own code (a review)
        import zipfile
        with zipfile.ZipFile(tmp_path / "damaged.keras", "w") as z:
            z.writestr("config.json", '{"class_name": "Sequential", "config": {}}')
        args = [tmp_path / "damaged.keras", "--batch-size", "4"]
    else:
        bad = tmp_path / "bad.keras"
        bad.write_bytes(b"not a zip file")
        args = [bad, "--batch-size", "4"]
    out = tmp_path / "g.json.gz"
    res = CliRunner().invoke(cli, ["-q", "import", *map(str, args), "-o", str(out)])
    assert res.exit_code == EXIT_INPUT, res.output
    lines = [ln for ln in res.output.strip().splitlines() if ln.startswith("pardnn: error")]
    assert len(lines) == 1 and expect in lines[0], res.output
    if case == "no batch":      # Keras numbers its layers per process: input_layer, input_layer_5, ...
        assert re.search(r"input 'input_layer(_\d+)?' has no fixed", lines[0]), lines[0]
    if case == "lookup table":
        assert "not a variable of the model or optimizer: a lookup table (StringLookup" in lines[0], lines[0]
    assert not out.exists()


def test_only_a_batch_size_that_fills_the_models_batch_is_recorded(files, tmp_path):
    """``--batch-size`` is recorded where it filled the model's open batch dimension (so that a run of a
    placement builds the same step); a model that fixes its batch records none, with the flag or without."""
    keras.utils.set_random_seed(0)
    fixed = keras.Sequential([keras.Input((5,), batch_size=6), keras.layers.Dense(3)])
    fixed.compile("sgd", "mse")
    fixed.save(tmp_path / "fixed.keras")
    for path, args, want in ((files / "mlp.keras", ["--batch-size", "4"], 4),
                             (tmp_path / "fixed.keras", ["--batch-size", "6"], None),
                             (tmp_path / "fixed.keras", [], None)):
        out = tmp_path / "g.json.gz"
        res = CliRunner().invoke(cli, ["-q", "import", str(path), *args, "-o", str(out)])
        assert res.exit_code == 0, res.output
        assert load_graph(out).meta.get("batch_size") == want, (path, args)
        assert "sizes nothing" not in res.output


def test_importing_a_keras_file_reports_its_stages(files, tmp_path):
    """The import of a Keras model takes seconds to a minute: each stage is on the live line on a terminal and,
    with -v, in the log with its time."""
    proc = _pardnn("-v", "import", files / "mlp.keras", "--batch-size", 4, "-o", tmp_path / "g.json.gz")
    assert proc.returncode == 0, proc.stderr[-2000:]
    for stage in ("loading the reader of Keras models", "loading the Keras model mlp.keras",
                  "building the training step > tracing", "building the training step > inlining functions",
                  "weighing"):
        assert any(stage in line and line.rstrip().endswith(" s") for line in proc.stderr.splitlines()), stage
