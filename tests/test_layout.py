"""The repository's layout: pyproject.toml installs every package, ``frontends/`` only as ``pardnn.frontends``,
and imports point one way (benchmarks/import_graph.py reads them from the source)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def _source_packages() -> set[str]:
    """Each directory of ``pardnn/`` and ``frontends/`` that holds Python files, named as it is imported."""
    roots = {"pardnn": ROOT / "pardnn", **{k: ROOT / v for k, v in SETUPTOOLS["package-dir"].items()}}
    out = set()
    for name, base in roots.items():
        for d in [base, *(p for p in base.rglob("*") if p.is_dir() and p.name != "__pycache__")]:
            if any(d.glob("*.py")):
                out.add(".".join([name, *d.relative_to(base).parts]))
    return out


def test_every_package_is_listed():
    assert set(SETUPTOOLS["packages"]) == _source_packages()


def test_frontends_install_inside_pardnn():
    assert SETUPTOOLS["package-dir"] == {"pardnn.frontends": "frontends"}
    assert not any(p == "frontends" or p.startswith("frontends.") for p in SETUPTOOLS["packages"])


def test_installed_layout(tmp_path):
    """Away from the checkout, ``pardnn.frontends`` imports (from ``frontends/`` in an editable install) and
    ``frontends`` does not."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = ("import importlib.util, pardnn.frontends.peers.msr as m; print(m.__file__); "
            "print(importlib.util.find_spec('frontends'))")
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    path, spec = p.stdout.split()
    assert Path(path).parts[-3:] == ("frontends", "peers", "msr.py")
    assert spec == "None"


@pytest.fixture(scope="module")
def modules():
    spec = importlib.util.spec_from_file_location("import_graph", ROOT / "benchmarks" / "import_graph.py")
    ig = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = ig          # its dataclasses look their module up while it runs
    try:
        spec.loader.exec_module(ig)
    finally:
        del sys.modules[spec.name]
    mods = ig.discover(ig.package_roots(ROOT))
    for m in mods.values():
        ig.scan(m, mods)
    return mods, ig.strongly_connected(mods)


def test_no_import_cycle_through_the_cli_frontends_or_backends(modules):
    mods, components = modules
    assert "pardnn.cli" in mods and "pardnn.frontends.registry" in mods and "frontends" not in mods
    cycles = [c for c in components if len(c) > 1
              and any(m.startswith(("pardnn.cli", "pardnn.frontends", "pardnn.backend")) for m in c)]
    assert cycles == []


def test_only_the_command_line_backends_and_bench_import_frontends(modules):
    """The IR, the simulator, the placers and the report never import a frontend (bench reads its suites)."""
    mods, _ = modules
    upward = sorted(f"{m.name} -> {t}" for m in mods.values() for t in m.edges
                    if t.startswith("pardnn.frontends")
                    and not m.name.startswith(("pardnn.frontends", "pardnn.cli", "pardnn.backend", "pardnn.bench")))
    assert upward == []
