"""What a new user's trial of the command line found (issue #24), each a regression test."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from placement.cli import main


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    pytest.importorskip("onnx")
    path = str(tmp_path_factory.mktemp("m") / "model.onnx")
    assert main(["example", path, "--layers", "2"]) == 0
    return path


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
    assert out.startswith("device  stage")  # the per-device table: one device per stage, as the note says
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
    assert len(table) == len(summary)
    for row in table:  # one rule: '-' in the table exactly where the JSON says null
        policy, util = row.split()[0], row.split()[-1]
        u = summary[policy]["utilisation"]
        assert util == ("-" if u is None else f"{100 * u:.0f}%"), row
    assert any(s["utilisation"] is not None for s in summary.values())
