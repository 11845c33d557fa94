"""What a new user's trial of the command line found (issue #24), each a regression test: an option that
moves an ONNX model from the stage model to one device per stage says so, naming it; a policy comparison's
utilisation follows one rule in the table and in the JSON; ``place``'s ``--time-limit`` is the whole
command's, reading the model included."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest

from placement.cli import main
from tests.tables import one_device_per_stage


@pytest.fixture(scope="module")
def model(example_onnx):
    return example_onnx


def _switch_notes(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("note:") and "one device per stage" in line]


# ---------------------------------------------------------------- one device per stage, said by name
@pytest.mark.parametrize("given, named", [
    ({"objective": "latency"}, "--objective latency"),
    ({"objective": "split-max", "training": True}, "--objective split-max"),
    ({"split": "split.json"}, "--split"),
    ({"split": "split.json", "solver": "expert"}, "--split"),  # the option, rather than the solver it needs
    ({"memory_limit": 2**30}, "--memory-limit"),
    ({"solver": "local-search"}, "--solver local-search"),  # no stage form
    ({"latency_slo": 5.0, "training": True}, None),  # inference only on either model: an error, no switch
    ({"latency_slo": 5.0}, None),  # the stage model takes a latency target
    ({"batch_size": "auto"}, None),
    ({"objective": "latency", "max_replicas": 1}, None),  # asked for in so many words
    ({}, None),
])
def test_one_rule_names_the_option_that_selects_one_device_per_stage(given, named):
    from placement.inputs import one_device_per_stage_by, takes_stage_model

    args = SimpleNamespace(**{"workload": "model.onnx", "solver": None, "objective": "max-load",
                              "latency_slo": None, "batch_size": None, "split": None, "memory_limit": None,
                              "max_replicas": None, "training": False, **given})
    assert one_device_per_stage_by(args) == named
    if named is not None:
        assert not takes_stage_model(args)


@pytest.mark.parametrize("flags, named", [
    (["--objective", "latency", "--time-limit", "5"], "--objective latency"),
    (["--solver", "local-search"], "--solver local-search"),
])
def test_an_option_that_selects_one_device_per_stage_says_so(model, capsys, flags, named):
    """--objective latency (and --split) moved an ONNX model to one device per stage without a word, where
    --memory-limit said so: every option that does gets the one note, naming it."""
    capsys.readouterr()
    assert main(["place", model, "--devices", "a100:2", *flags]) == 0
    out, err = capsys.readouterr()
    assert one_device_per_stage(out)  # one device per stage, as the note says
    notes = _switch_notes(err)
    assert len(notes) == 1 and notes[0].startswith(f"note: {named} "), err
    assert main(["place", model, "--devices", "a100:2", *flags, "--max-replicas", "1"]) == 0
    assert _switch_notes(capsys.readouterr().err) == []  # asked for: nothing to say


# ---------------------------------------------------------------- a cluster comparison's utilisation
def test_a_policy_under_which_a_job_never_runs_has_no_utilisation_in_the_json(tmp_path, capsys):
    """fifo's one allocation held leaves jobs waiting for good: the table shows '-' for its utilisation
    over the makespan, the JSON said 1.0 (its figure while the allocation holds, unlabelled)."""
    jobs, cache = str(tmp_path / "jobs.json"), str(tmp_path / "cache")
    assert main(["example", jobs]) == 0
    capsys.readouterr()
    assert main(["cluster", jobs, "--policy", "all", "--json", "--cache-dir", cache]) == 0
    summary = {r["policy"]: r["summary"] for r in json.loads(capsys.readouterr().out)["results"]}
    fifo = summary["fifo"]
    assert fifo["waiting"] > 0 and fifo["makespan"] is None
    assert fifo["utilisation"] is None and set(fifo["utilisation_per_kind"].values()) == {None}
    assert fifo["while_allocation_holds"]["utilisation"] == pytest.approx(1.0)  # said apart, labelled
    assert main(["cluster", jobs, "--policy", "all", "--cache-dir", cache]) == 0
    table = capsys.readouterr().out.split("utilisation over makespan\n")[1].splitlines()
    footnotes = [row for row in table if row.startswith("(bound): ")]  # what Synergy-OPT's row is
    table = [row for row in table if row not in footnotes]
    assert len(table) == len(summary) and len(footnotes) == 1
    for row in table:  # one rule: '-' in the table exactly where the JSON says null
        policy, util = row.split()[0], row.split()[-1]
        u = summary[policy]["utilisation"]
        assert util == ("-" if u is None else f"{100 * u:.0f}%"), row
    assert any(s["utilisation"] is not None for s in summary.values())


# ---------------------------------------------------------------- place's --time-limit is the command's
def _record_solves(monkeypatch, module) -> list:
    """The time limit each solve is given (``module.solve``, the registry's checked entry point)."""
    given = []
    solve = module.solve

    def recording(*args, options=None, **kw):
        given.append(options.time_limit)
        return solve(*args, options=options, **kw)

    monkeypatch.setattr(module, "solve", recording)
    return given


def _slow(monkeypatch, module, name: str, seconds: float) -> None:
    load = getattr(module, name)

    def slow_load(*args, **kw):
        time.sleep(seconds)  # a large model's reading
        return load(*args, **kw)

    monkeypatch.setattr(module, name, slow_load)


def test_place_time_limit_counts_reading_the_model(tmp_path, monkeypatch, capsys):
    """--time-limit 10 on a 24-layer model ran 13.8 s: the solve had all of it after the loading. Now the
    solve gets what the limit leaves (the loading took at least the 1 s slept here), and says so."""
    import placement.api
    import placement.load

    graph = str(tmp_path / "graph.json")
    assert main(["example", graph]) == 0
    _slow(monkeypatch, placement.load, "load_workload", 1.0)
    given = _record_solves(monkeypatch, placement.api)
    capsys.readouterr()
    assert main(["place", graph, "--solver", "dp", "--time-limit", "30"]) == 0
    assert len(given) == 1 and 0 < given[0] <= 29.0
    assert "--time-limit 30 s is the whole command's: reading the model" in capsys.readouterr().out


def test_place_time_limit_counts_reading_the_model_on_the_stage_model(model, monkeypatch, capsys):
    import placement.stages
    import solvers.registry

    _slow(monkeypatch, placement.stages, "load", 1.0)
    given = _record_solves(monkeypatch, solvers.registry)
    capsys.readouterr()
    assert main(["place", model, "--devices", "a100:2", "--time-limit", "30"]) == 0
    assert given and all(0 < t <= 29.0 for t in given), given  # the layer solve and its refinement
    assert "--time-limit 30 s is the whole command's" in capsys.readouterr().out


def test_place_help_says_the_time_limit_is_the_whole_commands(capsys):
    capsys.readouterr()
    assert main(["place", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--time-limit S seconds for the whole command from its first line" in text
    assert "importing, reading the model and loading the solver included" in text


def test_the_operator_refinement_ends_by_the_commands_deadline():
    """After the layer solve the operators' solve gets no more than the command's clock leaves."""
    from placement.stages import REFINE_MIN_S, solve_refined
    from tests.test_onnx_stages import _answer, _layers

    seen = []

    def solve_one(problem, time_limit):
        seen.append((problem, time_limit))
        return _answer(2.0 if problem == "L" else 1.5, time=0.01)

    # the limit was used up before (reading the model): the layer plan, and the refinement not tried
    w, sol = solve_refined(_layers("L", lambda: ("O", None)), solve_one, 60.0,
                           deadline=time.perf_counter() - 1)
    assert [p for p, _ in seen] == ["L"] and "not tried: no time left" in sol.message
    seen.clear()
    w, sol = solve_refined(_layers("L", lambda: ("O", None)), solve_one, 60.0,
                           deadline=time.perf_counter() + REFINE_MIN_S / 2)
    assert [p for p, _ in seen] == ["L", "O"] and 0 < seen[1][1] <= REFINE_MIN_S / 2
