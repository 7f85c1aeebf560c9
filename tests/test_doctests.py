"""Run the examples in the core modules' docstrings."""

import doctest
import importlib

import pytest

MODULES = ["pardnn.ir", "pardnn.analysis", "pardnn.units", "pardnn.cluster", "pardnn.placement", "pardnn.api",
           "pardnn.frontends.synthetic", "pardnn.frontends.common", "pardnn.frontends.roofline",
           "pardnn.report.timeline", "pardnn.report.summary", "pardnn.report.html", "pardnn.report.measured",
           "pardnn.calibration", "pardnn.cli.run", "pardnn.bounds", "pardnn.passes._cuts"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0 and result.failed == 0
