"""`pardnn run --inputs FILE.npz`: the batch file is read and checked against the model's inputs before anything
runs, and every fault is one InputError naming the file and the input."""

from __future__ import annotations

import numpy as np
import pytest

from pardnn.backend.common import checked_inputs, read_inputs
from pardnn.errors import InputError

SPECS = [("tokens:0", np.int32, (None, 6)), ("labels:0", np.int64, (None,))]


def _batch(**over):
    b = {"tokens": np.ones((2, 6), "int64"), "labels": np.zeros(2, "int32")}
    b.update(over)
    return {k: v for k, v in b.items() if v is not None}


def test_a_batch_converts_to_the_inputs_dtypes_and_is_a_copy():
    given = _batch()
    out = checked_inputs(given, SPECS, "b.npz")
    assert list(out) == ["tokens:0", "labels:0"]
    assert out["tokens:0"].dtype == np.int32 and out["labels:0"].dtype == np.int64
    out["tokens:0"][0, 0] = 9
    assert given["tokens"][0, 0] == 1
    # the full name, or a signature's key for it, names the same input
    by_key = checked_inputs({"ids": given["tokens"], "labels:0": given["labels"]}, SPECS, "b.npz",
                            {"ids": "tokens:0"})
    assert np.array_equal(by_key["tokens:0"], given["tokens"]) and by_key["tokens:0"].dtype == np.int32


@pytest.mark.parametrize("batch, message", [
    (_batch(extra=np.zeros(2)), "b.npz: array 'extra' is no input of the model (its inputs: 'tokens:0', "
                                "'labels:0')"),
    (_batch(labels=None), "b.npz: no array for input 'labels:0'"),
    (_batch(tokens=np.ones((2, 6), "float32")), "b.npz: input 'tokens:0' is float32; the model takes int32"),
    (_batch(tokens=np.full((2, 6), 2**40)), "input 'tokens:0' holds int64 values outside int32's range"),
    (_batch(tokens=np.ones((2, 5), "int32")), "input 'tokens:0' has shape (2, 5); the model takes (?, 6)"),
    (_batch(labels=np.zeros((2, 1), "int64")), "input 'labels:0' has shape (2, 1); the model takes (?,)"),
])
def test_a_batch_that_does_not_fit_the_inputs_is_refused_naming_the_file_and_input(batch, message):
    with pytest.raises(InputError) as e:
        checked_inputs(batch, SPECS, "b.npz")
    assert message in str(e.value) and "\n" not in str(e.value)


def test_the_same_input_given_twice_is_refused():
    with pytest.raises(InputError, match="input 'tokens:0' is given twice, as 'tokens' and 'tokens:0'"):
        checked_inputs({"tokens": np.ones((1, 6)), "tokens:0": np.ones((1, 6))}, SPECS, "b.npz")


def test_the_file_must_be_a_npz_of_plain_arrays(tmp_path):
    good = tmp_path / "b.npz"
    np.savez(good, tokens=np.arange(6).reshape(1, 6), labels=np.zeros(1, "int64"))
    got = read_inputs(good)
    assert sorted(got) == ["labels", "tokens"] and got["tokens"].shape == (1, 6)
    with pytest.raises(InputError, match="missing.npz: no such file"):
        read_inputs(tmp_path / "missing.npz")
    text = tmp_path / "b.txt"
    text.write_text("1 2 3\n")
    with pytest.raises(InputError, match=r"b.txt: not a .npz file \(np.savez\)"):
        read_inputs(text)
    one = tmp_path / "one.npy"
    np.save(one, np.zeros(3))          # a lone array names no input
    with pytest.raises(InputError, match="one.npy: not a .npz file"):
        read_inputs(one)
    objects = tmp_path / "objects.npz"
    np.savez(objects, tokens=np.array([{"a": 1}], dtype=object))
    with pytest.raises(InputError, match="objects.npz: cannot read its arrays"):
        read_inputs(objects)


def test_an_index_at_or_past_the_rows_it_indexes_is_refused_but_not_a_negative_one():
    from types import SimpleNamespace    # a frontend's IndexRange: its high and why

    ranges = {"tokens:0": SimpleNamespace(high=50, why="the rows of 'embed'")}
    ok = checked_inputs(_batch(tokens=np.full((2, 6), 49), labels=np.full(2, -100)), SPECS, "b.npz", ranges=ranges)
    assert ok["tokens:0"].max() == 49 and ok["labels:0"].min() == -100      # -100: a loss's "ignore" label
    with pytest.raises(InputError, match=r"b.npz: input 'tokens:0' holds 50, but its values index 50 "
                                         r"\(the rows of 'embed'\): give values below 50"):
        checked_inputs(_batch(tokens=np.full((2, 6), 50)), SPECS, "b.npz", ranges=ranges)
