"""Made-up integer inputs take the values the step accepts (token ids below the vocabulary, labels below the
class count), and a run says which updated variables its steps left unchanged."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from pardnn.backend import tf_run  # noqa: E402
from pardnn.cli.run import _updated_line  # noqa: E402
from pardnn.frontends.tensorflow import import_function, import_keras  # noqa: E402
from pardnn.frontends.tensorflow.inputs import index_ranges  # noqa: E402
from pardnn.frontends.tensorflow.profile import feed_values  # noqa: E402
from pardnn.frontends.tensorflow.shapes import import_graph, without_back_edges  # noqa: E402
from pardnn.placement import Placement  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def fresh_keras_names():
    """Keras numbers layer and optimizer names per process; leave the counters as other modules expect them."""
    keras.backend.clear_session()
    yield
    keras.backend.clear_session()


def _masked_lstm(batch: int = 4, seq: int = 6, vocab: int = 30, classes: int = 5):
    keras.utils.set_random_seed(0)
    tokens = keras.Input((seq,), batch_size=batch, dtype="int32")
    x = keras.layers.Embedding(vocab, 8, mask_zero=True, name="embed")(tokens)
    x = keras.layers.LSTM(4, name="lstm")(x)
    model = keras.Model(tokens, keras.layers.Dense(classes, name="head")(x))
    return model, keras.losses.SparseCategoricalCrossentropy(from_logits=True)


@pytest.fixture(scope="module")
def masked_lstm():
    model, loss = _masked_lstm()
    zeros = (np.zeros((4, 6), "int32"), np.zeros((4,), "int32"))
    return import_keras(model, loss, keras.optimizers.SGD(0.1), zeros)


def test_token_ids_and_labels_take_the_embedding_rows_and_the_classes(masked_lstm):
    m = masked_lstm.model
    graph = import_graph(without_back_edges(m.graph_def), where="lstm")
    ranges = index_ranges(graph, [f.name for f in m.feeds])
    tokens, labels = (f.name for f in m.feeds)
    assert ranges[tokens].high == 30 and "GatherV2" in ranges[tokens].why
    assert ranges[labels].high == 5 and "logits" in ranges[labels].why


def test_a_model_without_a_batch_draws_them_in_range_and_not_all_padding(masked_lstm):
    # a SavedModel or GraphDef has no batch: the run makes one up
    m = dataclasses.replace(masked_lstm.model, feed_values=None)
    values = feed_values(m, None)
    tokens, labels = (values[f.name] for f in m.feeds)
    assert tokens.dtype == np.int32 and tokens.min() >= 0 and tokens.max() < 30
    assert (tokens != 0).mean() > 0.5 and len(np.unique(tokens)) > 5
    assert labels.min() >= 0 and labels.max() < 5 and len(np.unique(labels)) > 1
    again = feed_values(m, None)
    assert all(np.array_equal(values[k], again[k]) for k in values)


def test_a_given_batch_is_fed_as_given(masked_lstm):
    values = feed_values(masked_lstm.model, None)
    assert all(not v.any() for v in values.values())


def test_an_integer_that_indexes_nothing_is_one():
    v = tf.Variable(np.ones(3, "float32"))

    def step(x, n):
        return tf.reduce_sum(v * x) * tf.cast(n, tf.float32)

    imp = import_function(tf.function(step), np.ones(3, "float32"), np.int32(2))
    m = dataclasses.replace(imp.model, feed_values=None)
    graph = import_graph(m.graph_def, where="step")
    assert index_ranges(graph, [f.name for f in m.feeds]) == {}
    assert feed_values(m, None)[m.feeds[1].name] == 1      # 0 would scale the whole step to nothing


def test_a_run_names_the_updated_variables_its_steps_left_unchanged(masked_lstm):
    # every token is padding (the batch given is all zeros): the LSTM's gradient is exactly zero
    g = masked_lstm.graph
    pl = Placement(g.unit % 2, ("/device:GPU:0", "/device:GPU:1"), g.name)
    r = tf_run.run_placed(masked_lstm, pl, steps=1, noise="off")
    assert r.ok
    # the LSTM's output is its zero initial state, so the head's kernel gets no gradient either: its bias does
    assert set(r.variables_unchanged) == {"embed/embeddings", "head/kernel", "lstm/lstm_cell/bias",
                                          "lstm/lstm_cell/kernel", "lstm/lstm_cell/recurrent_kernel"}
    assert r.variables_written > len(r.variables_unchanged)
    d = r.to_dict()
    assert d["variables_unchanged"] == list(r.variables_unchanged)
    assert d["variables_written"] == r.variables_written and d["variables_updated"] == r.variables_written - 5
    line = _updated_line(r)[0]
    assert line.startswith(f"variables updated    {r.variables_written - 5} of {r.variables_written} changed")
    assert "5 came out as they started" in line and "'embed/embeddings'" in line   # a weight, not a slot


def test_the_same_model_fed_real_tokens_changes_every_variable():
    model, loss = _masked_lstm()
    rng = np.random.default_rng(0)
    batch = (rng.integers(1, 30, (4, 6)).astype("int32"), rng.integers(0, 5, (4,)).astype("int32"))
    imp = import_keras(model, loss, keras.optimizers.SGD(0.1), batch)
    g = imp.graph
    r = tf_run.run_placed(imp, Placement(g.unit % 2, ("/device:GPU:0", "/device:GPU:1"), g.name), steps=1,
                          noise="off")
    assert r.ok and r.variables_updated == r.variables_written > 0 and r.variables_unchanged == ()


def test_cli_run_feeds_a_given_batch_file_and_checks_it(tmp_path):
    """A SavedModel has no batch: ``pardnn run`` draws one in range, or feeds ``--inputs`` (named by the
    signature's keys), whose faults are one line naming the file and the input."""
    from click.testing import CliRunner

    from pardnn.cli import cli
    from pardnn.errors import EXIT_INPUT
    from pardnn.frontends.tensorflow import import_tensorflow
    from pardnn.placement import save_placement

    from ..tf_models import save_keras_train_savedmodel

    def build(k):
        model, loss = _masked_lstm()
        return model, loss, (np.zeros((4, 6), "int32"), np.zeros((4,), "int32"))

    saved = save_keras_train_savedmodel(tf, keras, build, tmp_path / "sm")
    g = import_tensorflow(saved).graph
    placement = tmp_path / "p.json"
    save_placement(Placement(g.unit % 2, ("/device:GPU:0", "/device:GPU:1"), g.name), g, placement)
    runner = CliRunner()

    def run(*args):
        return runner.invoke(cli, ["-q", "run", str(saved), str(placement), "--steps", "1", *map(str, args)])

    drawn = run()
    assert drawn.exit_code == 0, drawn.output
    line = next(ln for ln in drawn.output.splitlines() if ln.startswith("variables updated"))
    n = int(line.split()[4])
    assert line == f"variables updated    {n} of {n} changed by the steps"
    zeros = tmp_path / "zeros.npz"
    np.savez(zeros, x=np.zeros((4, 6), "int32"), y=np.zeros(4, "int64"))     # int64 labels convert
    given = run("--inputs", zeros)
    assert given.exit_code == 0, given.output
    assert f"of {n} changed by the steps; " in given.output and "came out as they started" in given.output
    assert "(a zero update, e.g. 'adam/" not in given.output         # a weight is named, not an Adam slot
    bad = tmp_path / "bad.npz"
    for arrays, message in [({"x": np.zeros((4, 6), "int32")}, f"{bad}: no array for input 'y' (its inputs: 'x', 'y')"),
                            ({"x": np.zeros((4, 7), "int32"), "y": np.zeros(4, "int32")},
                             f"{bad}: input 'x' has shape (4, 7); the model takes (4, 6)"),
                            ({"x": np.zeros((4, 6), "float32"), "y": np.zeros(4, "int32")},
                             f"{bad}: input 'x' is float32; the model takes int32"),
                            ({"x": np.full((4, 6), 30, "int32"), "y": np.zeros(4, "int32")},
                             f"{bad}: input 'x' holds 30, but its values index 30 (the axis-0 size of the table")]:
        np.savez(bad, **arrays)
        r = run("--inputs", bad)
        errors = [ln for ln in r.output.splitlines() if ln.startswith("pardnn: error:")]
        assert r.exit_code == EXIT_INPUT and len(errors) == 1 and message in errors[0], r.output
    r = run("--inputs", tmp_path / "missing.npz")
    assert r.exit_code == EXIT_INPUT and "missing.npz: no such file" in r.output


def test_a_keras_files_inputs_go_by_their_keras_names_and_a_mask_keeps_every_token(tmp_path):
    from pardnn.backend.common import checked_inputs
    from pardnn.frontends.tensorflow.keras_file import read_keras_file

    keras.utils.set_random_seed(0)
    ids = keras.Input((6,), dtype="int32", name="ids")
    mask = keras.Input((6,), dtype="int32", name="mask")
    x = keras.layers.Embedding(40, 8, name="embed")(ids)
    x = x * keras.ops.expand_dims(keras.ops.cast(mask, "float32"), -1)
    model = keras.Model({"ids": ids, "mask": mask}, keras.layers.Dense(3, name="head")(keras.layers.Flatten()(x)))
    model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    path = tmp_path / "text.keras"
    model.save(path)
    m = read_keras_file(path, batch_size=4)
    by_arg = {f.arg: f.name for f in m.feeds if f.arg}
    assert set(by_arg) == {"ids", "mask"}
    assert m.feed_values[by_arg["mask"]].tolist() == [[1] * 6] * 4         # every token kept, not 0 or 1 at random
    drawn = m.feed_values[by_arg["ids"]]
    assert drawn.max() < 40 and len(np.unique(drawn)) > 5
    given = {"ids": np.zeros((4, 6), "int32"), "mask": np.ones((4, 6), "int32"), "y": np.zeros(4, "int32")}
    batch = checked_inputs(given, tf_run.feed_specs(m, 4), "b.npz", tf_run.feed_aliases(m))
    assert set(batch) == {f.name for f in m.feeds}
    assert np.array_equal(batch[by_arg["mask"]], given["mask"])
