"""The input registry: one table of formats, loaders imported on first use, missing extras named."""

from __future__ import annotations

import importlib
import importlib.util
import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from pardnn.cli import cli
from pardnn.errors import EXIT_DEPENDENCY, InputError, MissingDependencyError
from pardnn.frontends import FORMATS, FRONTENDS, FrontendOptions, detect_format, load_input

from ..conftest import REPO, SAMPLES
from .test_peers import PIPEDREAM_EXCERPT


def test_formats_in_cli_order():
    assert FORMATS == ("pardnn", "msr", "pipedream", "pardnn-dot", "savedmodel", "graphdef", "keras", "onnx")


@pytest.mark.parametrize("options, match", [
    ({"batch_size": 0}, "batch_size must be a whole number at least 1 or None, got 0"),
    ({"batch_size": -1}, "batch_size must be a whole number at least 1 or None, got -1"),
    ({"batch_size": 2.5}, "batch_size must be"),
    ({"profile_steps": -3}, "profile_steps must be a whole number at least 0, got -3"),
    ({"dims": {"seq": 0}}, r"dims\['seq'\] must be a whole number at least 1, got 0"),
])
def test_options_made_in_python_are_checked_as_the_flags_are(options, match):
    """A library trial: ``FrontendOptions(batch_size=-1)`` reached the ONNX import, which failed much later
    ("negative dimensions are not allowed"); ``batch_size=0`` imported a graph of empty tensors."""
    with pytest.raises(ValueError, match=match):
        FrontendOptions(**options)
    assert FrontendOptions(batch_size=1, profile_steps=0, dims={"seq": 32}).dims == {"seq": 32}


def test_options_take_numpy_integers_as_python_ones():
    """``FrontendOptions(batch_size=np.int64(4))`` was refused ("must be a whole number"), where `GraphBuilder`,
    `Placement` and `Cluster` take numpy's integers; they are kept as Python's, which JSON can write."""
    import numpy as np
    o = FrontendOptions(batch_size=np.int64(4), profile_steps=np.int32(2), dims={"seq": np.int16(8)})
    assert (o.batch_size, o.profile_steps, o.dims) == (4, 2, {"seq": 8})
    assert json.dumps([o.batch_size, o.profile_steps, o.dims]) == '[4, 2, {"seq": 8}]'
    with pytest.raises(ValueError, match="batch_size must be"):
        FrontendOptions(batch_size=np.bool_(True))


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_loader_exists(fmt):
    frontend = FRONTENDS[fmt]
    framework = {"tf": "tensorflow", "onnx": "onnx"}.get(frontend.extra)
    if framework and importlib.util.find_spec(framework) is None:
        pytest.skip(f"the {frontend.extra!r} extra is not installed")
    assert callable(getattr(importlib.import_module(frontend.module), frontend.loader))


def test_options_reach_the_peer_loaders(tmp_path):
    path = tmp_path / "graph.txt"
    path.write_text(PIPEDREAM_EXCERPT)
    assert detect_format(path) == "pipedream"
    assert load_input(path).name == load_input(path, options=FrontendOptions(name="")).name != "mine"
    assert load_input(path, options=FrontendOptions(name="mine")).name == "pipedream-mine"


def test_a_graph_named_otherwise_is_told_by_its_form(tmp_path):
    """A SPEC trial: SPEC §5 detects the format "from its form", but a pardnn.graph named g.txt, or with no
    suffix, was "cannot tell the format from the name". The name comes first; the contents then."""
    import gzip
    text = gzip.decompress((SAMPLES / "pipedream_gnmt.json.gz").read_bytes())
    for name, data in (("g.txt", text), ("g", text), ("g.bin", gzip.compress(text))):
        (tmp_path / name).write_bytes(data)
        assert detect_format(tmp_path / name) == "pardnn" and load_input(tmp_path / name).num_nodes == 93
    (tmp_path / "p.txt").write_text(PIPEDREAM_EXCERPT)
    (tmp_path / "p").write_text(PIPEDREAM_EXCERPT)
    assert detect_format(tmp_path / "p") == detect_format(tmp_path / "p.txt") == "pipedream"
    (tmp_path / "h.txt").write_text("hello")
    with pytest.raises(InputError, match="cannot tell the format from the name nor the contents"):
        detect_format(tmp_path / "h.txt")


def test_a_graph_file_that_is_a_fifo_is_read_once(tmp_path):
    """Found by a bad-input trial: telling the format read the whole file (and gunzipped it) before the
    reader read it again, so a FIFO named g.json left `pardnn info` waiting for a second writer forever."""
    import gzip
    import os
    import threading

    text = (SAMPLES / "pardnn_vgg16.json.gz").read_bytes()
    for name, data in (("g.json", gzip.decompress(text)), ("g.json.gz", text)):
        fifo = tmp_path / name
        os.mkfifo(fifo)
        writer = threading.Thread(target=fifo.write_bytes, args=(data,), daemon=True)
        writer.start()
        result = subprocess.run([sys.executable, "-c", "from pardnn.cli import main; main()", "info", "--json",
                                 str(fifo)], capture_output=True, text=True, timeout=60)
        writer.join(timeout=1)
        assert result.returncode == 0 and '"nodes": 687' in result.stdout, result.stderr


def test_unknown_format():
    path = SAMPLES / "pardnn_vgg16.json.gz"
    with pytest.raises(InputError, match=r"pardnn_vgg16.json.gz: unknown input format 'caffe'$"):
        load_input(path, fmt="caffe")


@pytest.mark.parametrize("name, given, found", [("m.keras", "graphdef", "keras"), ("g.pbtxt", "keras", "graphdef"),
                                                 ("w.h5", "savedmodel", "keras")])
def test_a_tensorflow_format_that_contradicts_the_file_is_refused(tmp_path, name, given, found):
    """Found by a new user's trial: one reader serves the three TensorFlow formats and goes by what the path
    is, so ``--format graphdef`` on a ``.keras`` file was read as Keras without a word. Now it is an input
    error naming the file and the format it is (before any framework is imported, the file unread)."""
    path = tmp_path / name
    path.write_bytes(b"never read")
    with pytest.raises(InputError, match=rf"{name}: --format {given}, but this is .*; use --format {found}, or "
                                         r"leave --format out$"):
        load_input(path, fmt=given)
    r = CliRunner().invoke(cli, ["-q", "info", str(path), "--format", given])
    assert r.exit_code == 3 and f"use --format {found}" in r.output
    # run and rewrite read TensorFlow models through the backend, not `load_input`: the same check, before any work
    (tmp_path / "p.json").write_text("{}")
    for args in (["run", str(path), str(tmp_path / "p.json")],
                 ["rewrite", str(path), str(tmp_path / "p.json"), "-o", str(tmp_path / "out")]):
        r = CliRunner().invoke(cli, ["-q", *args, "--format", given])
        assert r.exit_code == 3 and f"use --format {found}" in r.output, (args, r.output)
    assert not (tmp_path / "out").exists()
    sm = tmp_path / "sm"
    sm.mkdir()
    (sm / "saved_model.pb").write_bytes(b"")
    with pytest.raises(InputError, match=r"sm: --format keras, but this is a SavedModel directory"):
        load_input(sm, fmt="keras")


def test_a_missing_extra_is_named(monkeypatch):
    """The loader's import fails: a MissingDependencyError naming the extra, exit code 6 on the command line."""
    monkeypatch.setitem(sys.modules, "pardnn.frontends.onnx", None)   # makes `import pardnn.frontends.onnx` fail
    path = SAMPLES / "onnx_mlp.onnx"
    with pytest.raises(MissingDependencyError, match=r"onnx_mlp.onnx: reading ONNX models needs the 'onnx' extra "
                                                     r"\(pip install 'pardnn\[onnx\]'\): "):
        load_input(path)
    r = CliRunner().invoke(cli, ["-q", "info", str(path)])
    assert r.exit_code == EXIT_DEPENDENCY
    assert "reading ONNX models needs the 'onnx' extra" in r.output


def test_reading_a_pardnn_graph_imports_no_importer():
    code = ("import sys; from pardnn.frontends import load_input; load_input('sample_graphs/pardnn_vgg16.json.gz'); "
            "loaded = sorted(m for m in sys.modules if m.startswith('pardnn.frontends.')); "
            "assert loaded == ['pardnn.frontends.options', 'pardnn.frontends.registry'], loaded; "
            "assert not {'tensorflow', 'onnx'} & set(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
