"""Synergy's allocations (proportional, tune, opt) on a cluster with other than one accelerator kind:
``--policy all`` failed there after computing every curve, with a message that counted two kinds but
listed three (the host CPUs too) and named no file. Now ``all`` runs the policies that apply and says
which it left out and why (table and JSON); a Synergy policy named alone is refused before any curve."""

import json

import pytest

from graphs.errors import InputError
from placement.cli import main
from placement.cluster.policies import Capacity
from placement.cluster.synergy import _kinds, unfit_for_synergy

TABLE = {"accelerators": 1, "points": [[1, 0, 100], [4, 0, 400]]}
TWO_KINDS = {"cluster": {"devices": "a100:2,t4:2,cpu:4"},
             "jobs": [{"name": "a", "samples": 1000, "accelerator": "a100", "throughput": TABLE},
                      {"name": "b", "samples": 1000, "arrival": 5, "accelerator": "t4", "throughput": TABLE}]}


def _write(tmp_path, doc) -> str:
    p = tmp_path / "two.json"
    p.write_text(json.dumps(doc))
    return str(p)


@pytest.mark.parametrize("mode", [[], ["simulate"]])
def test_all_runs_the_policies_that_apply_and_says_which_it_left_out(tmp_path, capsys, mode):
    path = _write(tmp_path, TWO_KINDS)
    # before: exit 2, "error: Synergy's allocation needs ... this one has 2 (a100, t4, cpu)"
    assert main(["cluster", *mode, path, "--policy", "all", "--no-cache"]) == 0
    out = capsys.readouterr().out
    assert "left out: proportional, tune, opt:" in out
    assert "exactly one accelerator kind" in out and "2 (a100, t4)" in out
    assert main(["cluster", *mode, path, "--policy", "all", "--no-cache", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in doc["results"]] == ["ftf", "joint", "even", "fifo"]
    assert [s["policy"] for s in doc["skipped"]] == ["proportional", "tune", "opt"]
    assert all("2 (a100, t4)" in s["reason"] for s in doc["skipped"])


def test_all_on_one_accelerator_kind_leaves_nothing_out(tmp_path, capsys):
    doc = {"cluster": {"devices": "a100:2,cpu:4"},
           "jobs": [{"name": j["name"], "samples": 1000, "throughput": TABLE} for j in TWO_KINDS["jobs"]]}
    assert main(["cluster", _write(tmp_path, doc), "--policy", "all", "--no-cache", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "skipped" not in doc and len(doc["results"]) == 7


@pytest.mark.parametrize("policy", ["proportional", "tune", "opt"])
def test_a_synergy_policy_alone_is_refused_before_any_curve(tmp_path, capsys, monkeypatch, policy):
    def no_curves(*a, **k):
        raise AssertionError("a curve was computed before the refusal")

    monkeypatch.setattr("placement.cluster.inputs.job_rates", no_curves)
    path = _write(tmp_path, TWO_KINDS)
    assert main(["cluster", "simulate", path, "--policy", policy, "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and path in err and f"--policy {policy}" in err
    assert "2 (a100, t4)" in err and "a100, t4, cpu" not in err


def test_the_library_message_lists_accelerator_kinds_only():
    assert unfit_for_synergy(("a100", "cpu"), (False, True)) == ""
    assert "none" in unfit_for_synergy(("cpu",), (True,))
    # an accelerator kind of count 0 is no GPU (cluster simulate --policy all failed on a100:0,cpu:4 with
    # "job 'A' needs 1 GPUs, the cluster has 0", where the Synergy policies are now left out)
    assert "none with devices (a100: 0)" in unfit_for_synergy(("a100", "cpu"), (False, True), (0, 4))
    assert unfit_for_synergy(("a100", "t4", "cpu"), (False, False, True), (4, 0, 4)) == ""
    with pytest.raises(InputError, match=r"has 2 \(a100, t4\), host CPU cores not counted"):
        _kinds(Capacity(("a100", "t4", "cpu"), (2, 2, 4), (False, False, True)))
