"""The results check of `pardnn run` (`pardnn.backend.equivalence`): numpy only, no TensorFlow.

A tensor matches when it is close elementwise, or else when its deviation
from the reference is at most ``factor`` times the spread of a noise
reference (plus ``atol * sqrt(n)``). The TensorFlow runs behind it are tested
in ``test_tf_backend.py``.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from pardnn.backend.equivalence import NOISE_FACTOR, NOISE_ULPS, check_tensor, compare_tensors, is_floating, \
    machine_epsilon, perturbed, stack_steps
from pardnn.cli.run import _criterion_line


def test_perturbed_moves_each_non_integral_float_by_a_few_ulps_and_nothing_else():
    rng = np.random.default_rng(0)
    values = {"w": rng.standard_normal((50, 20)).astype("float32"), "labels": np.arange(6, dtype="float32"),
              "mask": np.array([0.0, 1.0, -3.0, np.nan, np.inf, 0.25], "float64"), "step": np.arange(3),
              "half": np.array([0.3, 1.7], "float16")}
    p = perturbed(values)
    assert set(p) == set(values) and all(p[k].dtype == values[k].dtype for k in values)
    rel = (p["w"].astype(np.float64) - values["w"]) / values["w"]
    eps = machine_epsilon(np.float32)
    # 8 ulps of relative size 2^-20, up or down at random, rounded back to float32
    assert np.all(np.abs(np.abs(rel) - NOISE_ULPS * eps) <= eps) and 0.4 < np.mean(rel > 0) < 0.6
    np.testing.assert_array_equal(p["labels"], values["labels"])                # whole numbers stay
    np.testing.assert_array_equal(p["mask"][[0, 1, 2, 4]], values["mask"][[0, 1, 2, 4]])
    assert np.isnan(p["mask"][3]) and p["mask"][5] != 0.25
    np.testing.assert_array_equal(p["step"], values["step"])
    assert np.all(p["half"] != values["half"])                                   # float16: its own ulps
    again = perturbed(values)                                                     # the same in every process
    assert all(np.array_equal(again[k], p[k], equal_nan=True) for k in p)
    other = perturbed(values, seed=1)
    assert not np.array_equal(other["w"], p["w"])


def test_dtypes():
    assert is_floating(np.float32) and is_floating(np.complex64) and not is_floating(np.int64)
    assert machine_epsilon(np.float32) == 2.0 ** -23 and machine_epsilon(np.float64) == 2.0 ** -52
    ml_dtypes = pytest.importorskip("ml_dtypes")
    assert is_floating(ml_dtypes.bfloat16) and machine_epsilon(ml_dtypes.bfloat16) == 2.0 ** -7
    p = perturbed({"b": np.array([0.3, 2.0], ml_dtypes.bfloat16)})["b"]
    assert p[0] != np.array(0.3, ml_dtypes.bfloat16) and p[1] == 2.0


def _noise_like(ref, scale, seed):
    return ref + scale * np.random.default_rng(seed).standard_normal(ref.shape)


def test_close_tensors_pass_elementwise_without_a_noise_reference():
    ref = np.linspace(-1, 1, 100)
    c = check_tensor("w", ref + 1e-6, ref, rtol=1e-4, atol=1e-5)
    assert c.close and c.ok and not c.within_noise and c.spread is None and c.ratio is None
    assert c.max_abs_diff == pytest.approx(1e-6) and c.deviation == pytest.approx(1e-5)


def test_a_deviation_within_the_noise_spread_passes_and_one_far_beyond_it_fails():
    ref = np.zeros(16)
    ref[:] = 0.01                                  # an Adam-updated bias whose gradient is rounding noise
    placed, noise = _noise_like(ref, 3e-4, 1), _noise_like(ref, 3e-4, 2)
    c = check_tensor("conv2/bias", placed, ref, noise, rtol=1e-4, atol=1e-5)
    assert not c.close and c.within_noise and c.ok and 0 < c.ratio < NOISE_FACTOR
    assert c.ratio == pytest.approx((c.deviation - 1e-5 * 4) / c.spread)
    bug = ref + 0.01                               # a dropped update: every element off by a learning rate
    c = check_tensor("conv2/bias", bug, ref, noise, rtol=1e-4, atol=1e-5)
    assert not c.ok and c.ratio > NOISE_FACTOR
    # the factor is the limit, and 0 turns the noise criterion off
    assert check_tensor("b", placed, ref, noise, rtol=1e-4, atol=1e-5, factor=c.deviation / c.spread * 1.01).ok
    assert not check_tensor("b", placed, ref, noise, rtol=1e-4, atol=1e-5, factor=0).ok


def test_atol_times_sqrt_n_is_the_floor_where_the_noise_reference_does_not_move():
    ref = np.ones(100)
    placed = ref.copy()
    placed[0] += 5e-5                              # one element off by 5 atol: not close elementwise
    c = check_tensor("v", placed, ref, ref.copy(), rtol=0, atol=1e-5)
    assert not c.close and c.spread == 0 and c.within_noise and c.ratio == 0   # 5e-5 <= 1e-5 * sqrt(100)
    placed[:10] += 1e-3
    c = check_tensor("v", placed, ref, ref.copy(), rtol=0, atol=1e-5)
    assert not c.ok and c.ratio == math.inf and c.to_dict()["ratio"] == "inf"


def test_mismatches_fail_whatever_the_noise():
    ref = np.arange(6, dtype="float32")
    noise = ref * 2
    assert not check_tensor("s", ref.reshape(2, 3), ref, noise, rtol=1, atol=1).ok           # shape
    assert not check_tensor("d", ref.astype("float64"), ref, noise, rtol=1, atol=1).ok       # dtype
    nan = ref.copy()
    nan[2] = np.nan
    c = check_tensor("n", nan, ref, noise, rtol=1, atol=1)                                   # NaN where none was
    assert not c.ok and c.max_abs_diff == math.inf
    assert check_tensor("n", nan, nan.copy(), None, rtol=0, atol=0).ok                      # NaN in both: equal
    ints = np.arange(4)
    assert check_tensor("i", ints.copy(), ints, ints + 1, rtol=1, atol=1).ok                 # integers: exactly
    assert not check_tensor("i", ints + 1, ints, ints + 1, rtol=1, atol=1).ok


def test_compare_tensors_names_the_criterion_and_the_worst_tensor():
    ref = {"output loss": np.array([1.5, 1.2, 1.0]), "w": np.full(64, 0.1), "b": np.full(16, 0.01)}
    noise = {"output loss": ref["output loss"] + 1e-6, "w": ref["w"] + 1e-6, "b": _noise_like(ref["b"], 3e-4, 2)}
    same = compare_tensors({k: v.copy() for k, v in ref.items()}, ref, None, rtol=1e-4, atol=1e-5)
    assert same.ok and same.elementwise and same.criterion == "elementwise" and same.max_ratio is None
    assert same.worst is None and same.max_abs_diff == 0 and not same.noise
    placed = {**ref, "b": _noise_like(ref["b"], 3e-4, 1)}
    c = compare_tensors(placed, ref, noise, rtol=1e-4, atol=1e-5)
    assert c.ok and c.criterion == "rounding noise" and c.worst.name == "b" and c.max_ratio == c.worst.ratio
    broken = {**placed, "w": ref["w"] + 0.01}
    c = compare_tensors(broken, ref, noise, rtol=1e-4, atol=1e-5)
    assert not c.ok and c.criterion == "none" and [t.name for t in c.failed()] == ["w"] and c.worst.name == "w"
    missing = compare_tensors({"w": ref["w"]}, ref, noise, rtol=1e-4, atol=1e-5)
    assert {t.name for t in missing.failed()} == {"output loss", "b"}


def test_stack_steps_joins_each_output_over_the_steps():
    steps = [(np.float32(1.5), np.ones(3)), (np.float32(1.2), np.zeros(3))]
    out = stack_steps(steps, ["loss", "y"])
    assert out["loss"].tolist() == pytest.approx([1.5, 1.2]) and out["y"].shape == (2, 3)
    ragged = stack_steps([(np.ones(2),), (np.ones(3),)], ["y"])
    assert set(ragged) == {"y (step 0)", "y (step 1)"}


def _report(**kw):
    base = dict(rtol=1e-4, atol=1e-5, noise_factor=10.0, criterion="elementwise", max_output_ratio=None,
                max_variable_ratio=None, mismatched=0, mismatches=())
    return SimpleNamespace(**{**base, **kw})


def test_the_results_line_says_which_criterion_passed_or_what_failed():
    assert _criterion_line(_report()) == "elementwise within rtol 0.0001, atol 1e-05"
    line = _criterion_line(_report(criterion="rounding noise", max_variable_ratio=0.4))
    assert line.startswith("within rounding noise: deviation at most 0.4x the spread of a perturbed single-device "
                           "run (limit 10x)")
    bad = {"name": "conv2/kernel", "ratio": 1.2e5, "spread": 1e-7}
    line = _criterion_line(_report(criterion="none", mismatched=3, mismatches=(bad,)))
    assert line == ("3 tensor(s) differ beyond rounding noise, e.g. conv2/kernel: deviation 1.2e+05x the spread of "
                    "a perturbed single-device run (limit 10x)")
    line = _criterion_line(_report(criterion="none", mismatched=1, mismatches=({**bad, "ratio": "inf"},)))
    assert "conv2/kernel: it moved where a perturbed single-device run does not" in line
    line = _criterion_line(_report(criterion="none", mismatched=1, mismatches=({**bad, "spread": None},)))
    assert "differ beyond rtol 0.0001, atol 1e-05, e.g. conv2/kernel (no noise reference)" in line
