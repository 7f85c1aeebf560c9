"""The documentation runs: the user guide's commands and the Keras walkthrough's code.

`docs/guide.md`: every line of its ``sh`` blocks that starts with ``pardnn``
runs through the CLI (a trailing ``# exits N`` expects that exit code; ``> f``
writes stdout to ``f``), then its ``python`` blocks, in a scratch directory
beside a link to ``sample_graphs/``. `docs/keras.md`: its ``python`` blocks
run in order as one script, in a fresh interpreter.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from .conftest import REPO, SAMPLES

DOCS = REPO / "docs"
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)


def blocks(path: Path, lang: str) -> list[str]:
    return [body for kind, body in FENCE.findall(path.read_text()) if kind == lang]


def guide_commands() -> list[tuple[list[str], int, str | None]]:
    """``(argv, expected exit code, stdout file)`` for each ``pardnn`` line of the guide's sh blocks."""
    out = []
    for body in blocks(DOCS / "guide.md", "sh"):
        for line in body.splitlines():
            line = line.strip()
            if not line.startswith("pardnn "):
                continue
            code = 0
            m = re.search(r"#\s*exits\s+(\d+)\s*$", line)
            if m:
                code = int(m.group(1))
            words = shlex.split(line, comments=True)[1:]
            target = None
            if ">" in words:
                i = words.index(">")
                words, target = words[:i], words[i + 1]
            out.append((words, code, target))
    return out


@pytest.fixture
def in_scratch(tmp_path):
    (tmp_path / "sample_graphs").symlink_to(SAMPLES)
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        yield tmp_path
    finally:
        os.chdir(old)


def test_the_guide_documents_every_command():
    from pardnn.cli import cli
    ran = {argv[0] for argv, _, _ in guide_commands()}
    assert set(cli.commands) <= ran


def test_guide_commands_and_python_run(in_scratch):
    pytest.importorskip("matplotlib")
    from pardnn.cli import cli

    has_onnx = importlib.util.find_spec("onnxruntime") is not None and importlib.util.find_spec("onnx") is not None
    runner = CliRunner()
    for argv, code, target in guide_commands():
        if not has_onnx and any("gpt" in w for w in argv):
            continue          # the ONNX example needs the onnx extra
        r = runner.invoke(cli, argv)
        assert r.exit_code == code, f"pardnn {' '.join(argv)}: exit {r.exit_code}\n{r.output}"
        if target:
            Path(target).write_text(r.stdout)
    for name in ("resnet.placement.json", "resnet.html", "resnet-report.html", "bench.html"):
        assert (in_scratch / name).stat().st_size > 0, name
    if has_onnx:
        assert "Predicted against measured" in (in_scratch / "gpt-run.html").read_text()
    for code in blocks(DOCS / "guide.md", "python"):
        exec(compile(code, "docs/guide.md", "exec"), {})


FOOTER = """
import json as _json
_json.dump({"peak": int(peak), "capacity": [float(x) for x in cluster.capacity],
            "feasible": bool(schedule.feasible), "makespan_us": float(schedule.makespan_us),
            "devices_used": sorted(set(schedule.device.tolist())),
            "phases": sorted({(x or {}).get("phase") or "" for x in g.node_extra})}, open("facts.json", "w"))
"""


@pytest.mark.tf
def test_keras_walkthrough(in_scratch):
    """The walkthrough's blocks, in order, as one script in a fresh interpreter (Keras names are process-global)."""
    pytest.importorskip("tensorflow")
    pytest.importorskip("matplotlib")
    from .report.test_report import Page, assert_self_contained

    script = "\n\n".join(blocks(DOCS / "keras.md", "python")) + FOOTER
    (in_scratch / "walkthrough.py").write_text(script)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    r = subprocess.run([sys.executable, "walkthrough.py"], cwd=in_scratch, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "predicted step time" in r.stdout
    facts = json.loads((in_scratch / "facts.json").read_text())
    assert facts["feasible"] and facts["peak"] > max(facts["capacity"])      # it needed the second device
    assert facts["devices_used"] == [0, 1]
    assert {"forward", "backward", "optimizer"} <= set(facts["phases"])
    text = (in_scratch / "keras_mlp_report.html").read_text()
    page = Page(text)
    assert_self_contained(text, page)
    assert float(page.values["makespan_us"]) == facts["makespan_us"]
    assert page.texts["speedup"].startswith("does not fit one device")
    assert (in_scratch / "keras_mlp.placement.json").exists() and (in_scratch / "keras_mlp.json.gz").exists()
    # section 6: the placed training steps ran, and the command lines it shows run the saved trainer
    losses = [float(x) for x in next(ln for ln in r.stdout.splitlines() if ln.startswith("losses ")).split()[1:]]
    assert len(losses) == 3 and losses[-1] < losses[0]
    commands = [ln for b in blocks(DOCS / "keras.md", "text") for ln in b.splitlines() if ln.startswith("pardnn ")
                and ("keras_mlp_trainer" in ln or "keras_mlp.keras" in ln)]
    assert [c.split()[1] for c in commands] == ["partition", "run", "rewrite", "partition", "run"]
    for cmd in commands:
        r = subprocess.run([sys.executable, "-c", "from pardnn.cli import main; main()", *cmd.split()[1:]],
                           cwd=in_scratch, env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, (cmd, r.stderr[-2000:])
        if cmd.split()[1] == "run":
            assert "results match        yes" in r.stdout and "peak memory, 1 dev" in r.stdout, cmd
    assert (in_scratch / "keras_mlp_placed" / "saved_model.pb").exists()
