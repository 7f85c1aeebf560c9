"""pyproject.toml installs every package, and ``frontends/`` only as ``pardnn.frontends``."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

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
