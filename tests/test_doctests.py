"""Run the examples in every module's docstrings.

The modules are found, not listed: a list missed new examples (a review found those of `pardnn.bench` and
`pardnn.backend.tf_server` never ran). A module that needs an extra that is not installed (TensorFlow, onnx,
onnxruntime) is skipped.
"""

import doctest
import importlib

import pytest

from .conftest import REPO

#: Where each package's sources are (``frontends/`` installs as ``pardnn.frontends``).
ROOTS = {"pardnn": REPO / "pardnn", "pardnn.frontends": REPO / "frontends"}
EXTRAS = {"tensorflow", "keras", "onnx", "onnxruntime"}


def modules_with_examples() -> list[str]:
    names = set()
    for package, root in ROOTS.items():
        for path in root.rglob("*.py"):
            if "__pycache__" in path.parts or ">>> " not in path.read_text(encoding="utf-8"):
                continue
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            names.add(".".join((package, *parts)))
    return sorted(names)


def test_the_search_finds_the_modules_it_should():
    found = modules_with_examples()
    assert {"pardnn.ir", "pardnn.bench", "pardnn.backend.tf_server", "pardnn.frontends.common",
            "pardnn.frontends.tensorflow", "pardnn.frontends.onnx.shapes"} <= set(found), found


@pytest.mark.parametrize("name", modules_with_examples())
def test_docstring_examples(name):
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] in EXTRAS:
            pytest.skip(f"{name} needs {exc.name}, which is not installed")
        raise
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
