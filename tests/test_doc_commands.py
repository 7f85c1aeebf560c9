"""Every ``pardnn`` command line in the docs parses, and every one that can run here runs.

Two checks, so that the docs cannot drift from the tool:

* **parse**: every line that starts with ``pardnn `` in any fenced block of
  ``README.md`` and ``docs/*.md`` is parsed by the real click command (its
  options, their types and choices), without running it. Synopsis words
  (``GRAPH``, ``INPUT``, ``MODEL``) stand for a shipped sample, and optional
  parts in brackets (``[--json]``) are included.
* **run**: each page's lines run in order, in a scratch directory that holds
  the files the docs name (`STAND_INS`: ``model_dir`` is a small Keras
  SavedModel with a ``train_step`` signature, ``model.keras`` a compiled
  Keras model, ``model.onnx`` the shipped tiny GPT, ``graph.pb`` a GraphDef
  with ``loss`` and ``train_op``, ``g.json`` a shipped graph; `PAGE_STAND_INS`
  for one page), each in a
  fresh ``pardnn`` process, and must exit 0 (or the ``# exits N`` the line
  ends with). Lines that cannot run on one machine without extras are in
  `NOT_RUN`, each with its reason; an entry no page holds any more fails the
  test, so the list stays honest. ``docs/guide.md`` and ``docs/keras.md`` are
  run by `tests/test_docs.py`, with their outputs checked.

The pages whose commands need TensorFlow are marked slow (``make test-all``):
their dozen TensorFlow processes take minutes on two cores.
"""

from __future__ import annotations

import gzip
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest

from .conftest import REPO, SAMPLES

FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
RUN_ELSEWHERE = {"guide.md", "keras.md"}          # tests/test_docs.py runs these and checks their outputs
PARSE_ONLY_PAGES = {"README.md": "the quick reference: each line is run on the page it links to"}
PLACEHOLDERS = {"GRAPH": str(SAMPLES / "tf_resnet14.json.gz"), "INPUT": str(SAMPLES / "tf_resnet14.json.gz"),
                "MODEL": str(SAMPLES / "onnx_mlp.onnx")}

NOT_RUN: dict[tuple[str, str], str] = {
    ("running.md", "pardnn run model_dir p.json --cluster-spec cluster.json"):
        "needs TensorFlow servers the user started with pardnn serve on other hosts",
    ("running.md", "pardnn calibrate --cluster-spec cluster.json -o c.json"):
        "needs TensorFlow servers the user started with pardnn serve on other hosts",
}
"""(page, the line's start) -> why it is not run here."""


def doc_lines(page: Path) -> list[str]:
    """The ``pardnn`` lines of every fenced block of ``page``, in order."""
    out = []
    for _, body in FENCE.findall(page.read_text(encoding="utf-8")):
        out += [ln.strip() for ln in body.splitlines() if ln.strip().startswith("pardnn ")]
    return out


def argv_of(line: str) -> tuple[list[str], int, str | None]:
    """``(arguments after 'pardnn', expected exit code, stdout file)``; brackets dropped, placeholders kept."""
    m = re.search(r"#\s*exits\s+(\d+)\s*$", line)
    code = int(m.group(1)) if m else 0
    words = [w.strip("[]") for w in shlex.split(line, comments=True)[1:]]
    words = [w for w in words if w and w != "..."]
    target = None
    if ">" in words:
        i = words.index(">")
        words, target = words[:i], words[i + 1]
    return words, code, target


def is_synopsis(words: list[str]) -> bool:
    return any(w in PLACEHOLDERS for w in words)


ALL_LINES = [(page.name, line) for page in PAGES for line in doc_lines(page)]


@pytest.mark.parametrize("page, line", ALL_LINES, ids=[f"{p}:{ln[:60]}" for p, ln in ALL_LINES])
def test_every_documented_command_parses(page, line):
    from pardnn.cli import cli

    words, _, _ = argv_of(line)
    words = [PLACEHOLDERS.get(w, w) for w in words]
    if "--help" in words:
        return            # run below, where it runs
    at = next(i for i, w in enumerate(words) if not w.startswith("-"))     # after the group's own flags (-q, -v)
    name, rest = words[at], words[at + 1:]
    assert name in cli.commands, f"{page}: `{line}`: no command {name!r}"
    try:
        cli.commands[name].make_context(name, list(rest))
    except click.UsageError as exc:
        pytest.fail(f"{page}: `{line}` does not parse: {exc.format_message()}")


def test_the_not_run_list_names_lines_the_docs_still_hold():
    lines = set(ALL_LINES)
    for page, start in NOT_RUN:
        assert any(p == page and ln.startswith(start) for p, ln in lines), (page, start)


# ---------------------------------------------------------------------------
# Running each page
# ---------------------------------------------------------------------------

def _needs_tf(page: str) -> bool:
    text = (REPO / "docs" / page).read_text(encoding="utf-8") if page != "README.md" else ""
    return any(w in text for w in ("model_dir", "model.keras", "graph.pb")) and any(
        ("model_dir" in ln or ".keras" in ln or "graph.pb" in ln) for ln in doc_lines(REPO / "docs" / page))


RUN_PAGES = [p.name for p in PAGES if p.name not in RUN_ELSEWHERE and p.name not in PARSE_ONLY_PAGES
             and doc_lines(p)]


PAGE_STAND_INS = {"pytorch.md": {"model.onnx": REPO / "tests" / "data" / "onnx" / "cnn_inference.onnx"}}
"""Stand-ins of one page: pytorch.md's ``model.onnx`` is the CNN its export recipe makes (the shipped fixture)."""


def _stand_ins(directory: Path, page: str) -> None:
    """The files the page's commands name, made or copied into ``directory``."""
    (directory / "sample_graphs").symlink_to(SAMPLES)
    (directory / "tests").symlink_to(REPO / "tests")          # the shipped fixtures, as the pages name them
    shutil.copy(PAGE_STAND_INS.get(page, {}).get("model.onnx", SAMPLES / "onnx_gpt_tiny.onnx"),
                directory / "model.onnx")
    with gzip.open(SAMPLES / "tf_resnet14.json.gz", "rb") as src:
        (directory / "g.json").write_bytes(src.read())
    if not _needs_tf(page):
        return
    tf = pytest.importorskip("tensorflow")
    keras = pytest.importorskip("keras")
    script = f"""
import sys
sys.path.insert(0, {str(REPO)!r})
import keras, tensorflow as tf
from tests import tf_models
tf_models.save_keras_train_savedmodel(tf, keras, tf_models.cnn, __import__("pathlib").Path("model_dir"))
keras.utils.set_random_seed(0)
m = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)])
m.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
m.save("model.keras")
g = tf.Graph()
with g.as_default():
    x = tf.compat.v1.placeholder(tf.float32, (None, 16), name="x")
    w = tf.compat.v1.get_variable("w", (16, 4), initializer=tf.compat.v1.ones_initializer(), use_resource=True)
    loss = tf.reduce_sum(tf.matmul(x, w), name="loss")
    train_op = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, name="train_op")
tf.io.write_graph(g.as_graph_def(), ".", "graph.pb", as_text=False)
"""
    del tf, keras
    r = subprocess.run([sys.executable, "-c", script], cwd=directory, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]


def _reason_not_run(page: str, line: str) -> str | None:
    for (p, start), why in NOT_RUN.items():
        if p == page and line.startswith(start):
            return why
    return None


def _run_page(page: str, directory: Path) -> list[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    ran = []
    for line in doc_lines(REPO / "docs" / page):
        words, code, target = argv_of(line)
        if is_synopsis(words) or _reason_not_run(page, line):
            continue
        if not importlib.util.find_spec("onnxruntime") and any(w.endswith(".onnx") for w in words):
            pytest.skip("the onnx extra is not installed")
        r = subprocess.run([sys.executable, "-c", "from pardnn.cli import main; main()", "-q", *words],
                           cwd=directory, env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == code, f"docs/{page}: `{line}` exited {r.returncode}:\n{r.stderr[-2000:]}"
        if target:
            (directory / target).write_text(r.stdout)
        ran.append(line)
    return ran


def _page_params():
    out = []
    for page in RUN_PAGES:
        marks = [pytest.mark.slow, pytest.mark.tf] if _needs_tf(page) else []
        out.append(pytest.param(page, marks=marks, id=page))
    return out


@pytest.mark.parametrize("page", _page_params())
def test_every_runnable_command_of_a_page_runs(page, tmp_path):
    _stand_ins(tmp_path, page)
    ran = _run_page(page, tmp_path)
    assert ran, f"docs/{page}: no command ran"
