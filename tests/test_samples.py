"""The shipped sample graphs: they load, simulate, and tell the truth about where they come from."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from pardnn.cli import cli
from pardnn.cluster import Cluster
from pardnn.ir import load_graph
from pardnn.machine import simulate

from .conftest import SAMPLES
from .helpers import reference_simulate


def test_there_are_real_samples_with_a_readme(samples):
    assert len(samples) >= 3
    readme = (SAMPLES / "README.md").read_text()
    for s in samples:
        assert s.name in readme, f"{s.name} is not described in sample_graphs/README.md"


@pytest.mark.parametrize("name", sorted(p.name for p in SAMPLES.glob("*.json.gz")))
def test_simulate_each_sample_on_one_device(name, tmp_path):
    """On one device the step is serial: the makespan is the sum of all op times."""
    path = SAMPLES / name
    g = load_graph(path)
    r = CliRunner().invoke(cli, ["partition", str(path), "-k", "1", "-o", str(tmp_path / "p.json"), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["makespan_us"] == pytest.approx(float(g.time_us.sum()), rel=1e-9)


@pytest.mark.parametrize("name", sorted(p.name for p in SAMPLES.glob("*.json.gz")))
def test_each_sample_agrees_with_the_reference_simulator(name):
    g = load_graph(SAMPLES / name)
    if g.num_nodes > 700:
        pytest.skip("the reference simulator is quadratic; the property tests cover small graphs")
    c = Cluster.homogeneous(3)
    dev = (np.arange(g.num_nodes) * 3 // g.num_nodes).tolist()
    s = simulate(g, c, dev)
    makespan, start, finish, _, peaks = reference_simulate(g, c, dev)
    assert s.makespan_us == pytest.approx(makespan)
    assert s.finish_us.tolist() == pytest.approx(finish)
    assert s.peak_bytes.tolist() == peaks


def test_sample_regeneration_is_exact(data_dir, tmp_path):
    """Rebuilding the samples from ../shared/data gives byte-identical JSON.

    The gzip streams themselves are not compared: zlib builds (zlib vs
    zlib-ng) compress the same bytes differently.
    """
    import gzip
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_samples", SAMPLES / "make_samples.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    from pardnn.frontends import load_input
    from pardnn.ir import save_graph

    for out, (rel, name) in mod.SAMPLES.items():
        g = load_input(data_dir / rel).with_costs(name=name)
        fresh = gzip.decompress(save_graph(g, tmp_path / out).read_bytes())
        assert fresh == gzip.decompress((SAMPLES / out).read_bytes()), out
