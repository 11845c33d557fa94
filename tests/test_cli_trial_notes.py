"""What a new user's trial of the command line found (issue #24), each a regression test."""

from __future__ import annotations

import json

import pytest

from placement.cli import main


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
