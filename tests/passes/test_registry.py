"""The pass registry and pipeline specs: docs/partitioner.md's "Adding a pass" example, run as written."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from pardnn import Cluster, partition
from pardnn.errors import PassError
from pardnn.partitioner import PardnnOptions, default_pipeline, default_spec
from pardnn.passes import PASSES, PassEntry, make_pass
from pardnn.pipeline import PlanState, parse_pipeline

from ..helpers import tiny

DOC = Path(__file__).resolve().parents[2] / "docs" / "partitioner.md"


@pytest.fixture
def evict_registered(monkeypatch):
    """The documented pass module and its registry line, exactly as docs/partitioner.md shows them."""
    text = DOC.read_text()
    module_src = re.search(r"```python\n# pardnn/passes/evict.py\n(.*?)```", text, re.S).group(1)
    line = re.search(r'^\s*("evict": PassEntry\(.*\)),$', text, re.M).group(1)
    mod = types.ModuleType("pardnn.passes.evict")
    mod.__package__ = "pardnn.passes"
    monkeypatch.setitem(sys.modules, "pardnn.passes.evict", mod)
    exec(compile(module_src, "docs/partitioner.md (evict)", "exec"), mod.__dict__)
    entry = eval(line.split(":", 1)[1], {"PassEntry": PassEntry})
    monkeypatch.setitem(PASSES, "evict", entry)
    return mod


def four_chains():
    """Four independent chains of two ops: mapping spreads them over 4 devices."""
    nodes = [(f"{c}{i}", 10 + 5 * "abcd".index(c), 100) for c in "abcd" for i in range(2)]
    edges = [(f"{c}0", f"{c}1") for c in "abcd"]
    return tiny(nodes, edges)


def test_the_documented_pass_runs_from_a_spec_and_from_options(evict_registered):
    g, c = four_chains(), Cluster.homogeneous(3)
    pipeline = parse_pipeline("slice,map,evict")
    state, timings = pipeline.run(g, c, PlanState())
    assert [t.name for t in timings] == ["slice", "map", "evict"]
    mapped, _ = parse_pipeline("slice,map").run(g, c, PlanState())
    load = np.bincount(mapped.assignment, weights=g.time_us, minlength=3)
    assert (mapped.assignment == int(np.argmin(load))).any()              # the light device had ops
    assert not (state.assignment == int(np.argmin(load))).any()           # evict emptied it
    assert state.stats["evict"]["moved"] >= 1
    plan, sched = partition(g, c, options=PardnnOptions(pipeline="slice,map,evict,refine"))
    assert sched.feasible and plan.meta["passes"] == ["slice", "map", "evict", "refine"]
    assert str(parse_pipeline("slice,evict{keep_pins=false}")) == "slice,evict{keep_pins=false}"


def test_requires_is_checked_before_a_pass_runs(evict_registered):
    with pytest.raises(PassError, match=r"pass 'evict' needs assignment in the plan, which no pass before it made"):
        parse_pipeline("slice,evict").run(four_chains(), Cluster.homogeneous(2), PlanState())


def test_the_default_spec_is_the_default_pipeline_and_round_trips():
    assert default_spec() == "slice,map,seed,refine,memory,refine-mem,best"
    assert str(default_pipeline()) == default_spec()
    spec = default_spec(PardnnOptions(refine_evals=50, memory_heuristic="residual", comm_weight=0.5))
    assert spec == ("slice,map{comm_weight=0.5},seed,refine{max_evals=50},memory{heuristic=residual},"
                    "refine-mem{max_evals=50},best")
    assert str(parse_pipeline(spec)) == spec
    assert default_spec(PardnnOptions(refine_evals=0)) == "slice,map,seed,memory,best"
    # refine-mem is refine with presets
    rm = make_pass("refine-mem")
    assert type(rm).__name__ == "Refine" and rm.respect_memory is True and rm.only_if_changed is True


@pytest.mark.parametrize("spec, message", [
    ("slice,nope", r"unknown pass 'nope'; known passes: slice, map, seed, refine, memory, refine-mem"),
    ("refine{bogus=1}", r"pass 'refine' has no option 'bogus'; its options: .*max_evals"),
    ("refine{overflow_share=abc}", r"pass 'refine': option 'overflow_share' takes float, got 'abc'"),
    ("refine{max_evals=lots}", r"pass 'refine': option 'max_evals' takes int \| None, got 'lots'"),
    ("refine{kicks=maybe}", r"pass 'refine': option 'kicks' takes bool, got 'maybe'"),
    ("refine{max_evals=3", r"unbalanced '\{'"),
    ("slice,,map", r"empty pass name"),
    ("refine{max_evals=4,max-evals=10}", r"pass 'refine': option 'max_evals' is given twice"),     # the last won
    # option values the pass itself rejects, found before anything runs
    ("seed{schedulers=heft+sjf}", r"seed: unknown scheduler 'sjf'; known: heft, etf"),
    ("seed{contention=maybe}", r"seed: contention must be true, false or both, got 'maybe'"),
    ("refine-mem{effort=hard}", r"pass 'refine-mem': unknown effort 'hard'; choose fast, default, best"),
    ("memory{heuristic=greedy}", r"pass 'memory': unknown memory heuristic 'greedy'"),
    # what PardnnOptions refuses, in the passes' own words (these ran with some weight or budget)
    ("map{comm_weight=nan}", r"pass 'map': comm_weight must be a finite number, 0 or more, got nan"),
    ("map{comm_weight=-1}", r"pass 'map': comm_weight must be a finite number, 0 or more, got -1"),
    ("map{comm_weight=inf}", r"pass 'map': comm_weight must be a finite number"),
    ("refine{max_evals=-1}", r"pass 'refine': max_evals must be a whole number of simulations, 0 to 1e\+12, or None"),
    ("refine{max_evals=2.5}", r"pass 'refine': max_evals must be a whole number .*got 2.5"),
    ("refine-mem{max_evals=true}", r"pass 'refine-mem': max_evals must be a whole number .*got True"),
    # every option by its field's type (round 31: these ran with a negative count or factor)
    ("refine{patience=-1}", r"pass 'refine': patience must be a whole number, 0 or more, got -1"),
    ("refine-mem{min_evals=-5}", r"pass 'refine-mem': min_evals must be a whole number, 0 or more, or none"),
    ("refine{max_rounds=2.5}", r"pass 'refine': max_rounds must be a whole number, 0 or more, got 2.5"),
    ("refine{kicks=2}", r"pass 'refine': kicks must be true or false, got 2"),
    ("refine{respect_memory=maybe}", r"pass 'refine': respect_memory must be true, false or auto"),
    ("map{merge_factor=-2}", r"pass 'map': merge_factor must be a finite number, 0 or more, got -2"),
    ("map{alternatives=none}", r"pass 'map': alternatives must be a whole number, 0 or more, got None"),
    ("seed{keep_within=nan}", r"pass 'seed': keep_within must be a finite number, 0 or more, got nan"),
    ("memory{max_iterations=1e400}", r"pass 'memory': max_iterations must be a whole number, 0 or more, got inf"),
])
def test_bad_specs_say_what_exists(spec, message):
    with pytest.raises(ValueError, match=message):
        parse_pipeline(spec)


def test_a_whole_budget_written_as_a_float_is_taken_as_an_int():
    """A review: ``refine{max_evals=1e3}`` (which the spec reads as the float 1000.0) was refused once budgets
    were checked; it is 1000 simulations, as it was before."""
    assert parse_pipeline("slice,map,refine{max_evals=1e3}").passes[-1].max_evals == 1000
    assert type(parse_pipeline("slice,map,refine{max_evals=1e3}").passes[-1].max_evals) is int


def test_option_values_the_field_admits_are_taken_in_its_own_type():
    """The checks by field type keep what ran before: a whole float is the int, 0 and 1 are the bools, numpy
    numbers are Python's, ``threads`` may be -1 (one after the other), and none where the field allows it."""
    import numpy as np

    from pardnn.passes.mapping import Map
    from pardnn.passes.refine import Refine

    r = parse_pipeline("refine{patience=1e1,kicks=0,threads=-1,boost=none}").passes[0]
    assert (r.patience, r.kicks, r.threads, r.boost) == (10, False, -1, None)
    assert type(r.patience) is int and type(r.kicks) is bool
    assert type(Refine(patience=np.int64(3)).patience) is int
    assert type(Map(merge_factor=np.float32(2)).merge_factor) is float
    with pytest.raises(ValueError, match="top_links must be a whole number, 0 or more, got -4"):
        Refine(top_links=-4)        # from the API too, not only from a spec


def test_refine_mem_runs_only_when_the_pass_before_it_changed_the_plan():
    g, c = four_chains(), Cluster.homogeneous(2)          # unlimited memory: the memory pass changes nothing
    state, timings = parse_pipeline("slice,map,memory,refine-mem").run(g, c, PlanState())
    assert state.changed is False and state.stats["refine-mem"]["skipped"] == "the pass before it changed nothing"
    assert "refine" not in state.stats                    # filed under its own name
    # after step 1's refinement, the second entry's figures are its own, not merged into step 1's
    state, _ = parse_pipeline("slice,map,refine,memory,refine-mem").run(g, c, PlanState())
    assert state.stats["refine-mem"] == {"skipped": "the pass before it changed nothing"}
    assert "evaluations" in state.stats["refine"] and "skipped" not in state.stats["refine"]


def test_the_command_line_runs_a_pipeline_spec(evict_registered, tmp_path):
    import json

    from click.testing import CliRunner

    from pardnn import save_graph
    from pardnn.cli import cli

    save_graph(four_chains(), tmp_path / "g.json")
    args = ["partition", str(tmp_path / "g.json"), "-k", "3", "-o", str(tmp_path / "p.json")]
    r = CliRunner().invoke(cli, args + ["--pipeline", "slice,map,evict{keep_pins=false}"])
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "p.json").read_text())["passes"] == ["slice", "map", "evict"]
    for extra, words in ((["--pipeline", "slice,mop"], "unknown pass 'mop'"),
                         (["--pipeline", "slice,map,seed{contention=maybe}"], "contention must be"),
                         (["--pipeline", "slice,map,refine{first_share=0}"], "first_share must be a number in (0, 1]"),
                         (["--pipeline", "slice,map,refine{wide_patience=0}"], "wide_patience must be a positive"),
                         (["--pipeline", "slice,map{comm_weight=nan}"], "comm_weight must be a finite number"),
                         (["--pipeline", "slice,map,refine{max_evals=-1}"], "max_evals must be a whole number"),
                         (["--pipeline", "slice,map", "--refine-evals", "3"], "--pipeline replaces"),
                         (["--method", "heft", "--pipeline", "slice,map"], "applies to the pardnn method only")):
        r = CliRunner().invoke(cli, args + extra)
        assert r.exit_code == 2 and words in r.output, r.output


def test_the_command_line_takes_an_effort(tmp_path):
    import json

    from click.testing import CliRunner

    from pardnn import save_graph
    from pardnn.cli import cli

    save_graph(four_chains(), tmp_path / "g.json")
    args = ["partition", str(tmp_path / "g.json"), "-k", "3", "-o", str(tmp_path / "p.json")]
    r = CliRunner().invoke(cli, args + ["--effort", "fast"])
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "p.json").read_text())["passes"] == \
        ["slice", "map", "seed", "refine", "memory", "refine-mem", "best"]
    for extra, words in ((["--effort", "hard"], "'hard' is not one of"),
                         (["--pipeline", "slice,map", "--effort", "best"], "--pipeline replaces"),
                         (["--method", "heft", "--effort", "best"], "applies to the pardnn method only"),
                         # a baseline has no passes to time (it was ignored without a word: a second trial)
                         (["--method", "heft", "--time-passes"], "--time-passes applies to the pardnn method only")):
        r = CliRunner().invoke(cli, args + extra)
        assert r.exit_code == 2 and words in r.output, r.output
