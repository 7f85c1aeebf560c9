"""Made-up integer inputs of an ONNX model take the values it accepts: token ids below the vocabulary, labels
below the class count; an integer nothing indexes is 1 (an attention mask that keeps every token)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from pardnn.frontends.onnx import zoo  # noqa: E402
from pardnn.frontends.onnx.model import prepare  # noqa: E402
from pardnn.frontends.onnx.runtime import feeds_for  # noqa: E402

from ..conftest import REPO  # noqa: E402
from ..onnx_models import make_model, save  # noqa: E402


def test_gpt_token_ids_take_the_embedding_rows(tmp_path):
    pm = prepare(save(zoo.gpt(vocab=100, layers=1), tmp_path / "gpt.onnx"), dims={"batch": 2, "seq": 16})
    ranges = pm.index_ranges()
    assert ranges["input_ids"].high == 100 and "/wte/Gather" in ranges["input_ids"].why
    ids = feeds_for(pm.model, pm.tensors, ranges=ranges)["input_ids"]
    assert ids.dtype == np.int64 and ids.shape == (2, 16)
    assert ids.min() >= 0 and ids.max() < 100 and len(np.unique(ids)) > 10
    assert np.array_equal(ids, feeds_for(pm.model, pm.tensors, ranges=pm.index_ranges())["input_ids"])


def test_training_labels_take_the_loss_classes():
    pm = prepare(REPO / "tests/data/onnx/cnn_training/training_model.onnx", batch_size=3)
    ranges = pm.index_ranges()
    assert set(ranges) == {"labels"} and ranges["labels"].high == 10
    labels = feeds_for(pm.model, pm.tensors, ranges=ranges)["labels"]
    assert labels.min() >= 0 and labels.max() < 10 and len(np.unique(labels)) > 1


def test_the_smallest_limit_wins_and_an_integer_that_indexes_nothing_is_one(tmp_path):
    # ids index a 7-row table after a Cast and a Reshape, and a 4-row one directly; n only scales
    nodes = [helper.make_node("Cast", ["ids"], ["c"], to=TensorProto.INT64, name="cast"),
             helper.make_node("Reshape", ["c", "flat"], ["r"], name="reshape"),
             helper.make_node("Gather", ["big", "r"], ["g1"], axis=0, name="big_gather"),
             helper.make_node("Gather", ["small", "ids"], ["g2"], axis=0, name="small_gather"),
             helper.make_node("ReduceSum", ["g1"], ["s1"], keepdims=0, name="s1"),
             helper.make_node("ReduceSum", ["g2"], ["s2"], keepdims=0, name="s2"),
             helper.make_node("Cast", ["n"], ["nf"], to=TensorProto.FLOAT, name="ncast"),
             helper.make_node("Add", ["s1", "s2"], ["s"], name="add"),
             helper.make_node("Mul", ["s", "nf"], ["y"], name="mul")]
    inits = [numpy_helper.from_array(np.ones((7, 2), np.float32), "big"),
             numpy_helper.from_array(np.ones((4, 2), np.float32), "small"),
             numpy_helper.from_array(np.array([-1], np.int64), "flat")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("ids", TensorProto.INT32, [3, 2]),
                                           helper.make_tensor_value_info("n", TensorProto.INT64, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])], initializer=inits)
    pm = prepare(save(make_model(graph), tmp_path / "g.onnx"))
    ranges = pm.index_ranges()
    assert set(ranges) == {"ids"} and ranges["ids"].high == 4 and "small_gather" in ranges["ids"].why
    feeds = feeds_for(pm.model, pm.tensors, ranges=ranges)
    assert feeds["ids"].dtype == np.int32 and feeds["ids"].max() < 4 and feeds["n"] == 1


def test_cli_run_feeds_a_given_batch_and_refuses_token_ids_past_the_vocabulary(tmp_path):
    pytest.importorskip("onnxruntime")
    import json

    from click.testing import CliRunner

    from pardnn.cli import cli
    from pardnn.errors import EXIT_INPUT

    model = save(zoo.gpt(vocab=100, layers=1), tmp_path / "gpt.onnx")
    flags = ["--dim", "batch=2", "--dim", "seq=8"]
    placement = tmp_path / "p.json"
    runner = CliRunner()
    r = runner.invoke(cli, ["-q", "partition", str(model), "--devices", "2", "-o", str(placement), *flags])
    assert r.exit_code == 0, r.output
    ids = tmp_path / "ids.npz"
    np.savez(ids, input_ids=np.arange(16, dtype=np.int32).reshape(2, 8) * 6)      # int32 ids for an int64 input
    r = runner.invoke(cli, ["-q", "run", str(model), str(placement), *flags, "--inputs", str(ids), "--json",
                            "--steps", "1"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["outputs_match"] is True
    np.savez(ids, input_ids=np.full((2, 8), 100, np.int64))
    r = runner.invoke(cli, ["-q", "run", str(model), str(placement), *flags, "--inputs", str(ids)])
    errors = [ln for ln in r.output.splitlines() if ln.startswith("pardnn: error:")]
    assert r.exit_code == EXIT_INPUT and len(errors) == 1, r.output
    assert f"{ids}: input 'input_ids' holds 100, but its values index 100 (" in errors[0]


def test_a_run_logs_each_draw(tmp_path, caplog):
    import logging

    from pardnn.frontends.onnx.inputs import logged

    pm = prepare(save(zoo.gpt(vocab=100, layers=1), tmp_path / "gpt.onnx"), dims={"batch": 2, "seq": 16})
    with caplog.at_level(logging.INFO, logger="pardnn.frontends.onnx"):
        assert logged(pm.index_ranges(), "gpt.onnx") == pm.index_ranges()
    assert "gpt.onnx: input 'input_ids' drawn in [0, 100): " in caplog.text
