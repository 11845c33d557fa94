"""Regressions from the second cluster review: a non-finite lease, requests beyond the cluster, the
first-allocation columns, statuses in the JSON, --no-cache with --cache-dir, the progress bar on Ctrl-C."""

import json
import math

import pytest

from graphs.errors import InputError
from placement.cli import main
from placement.cluster.policies import Capacity
from placement.cluster.simulate import SimJob, simulate
from tests.test_cluster_policies import linear

CAP2 = Capacity(("acc", "cpu"), (2, 0), (False, True))

TWO_JOBS = {"cluster": {"devices": "a100:4,cpu:12", "host_memory_gb": 64},
            "jobs": [{"name": "a", "samples": 1000, "arrival": 0,
                      "throughput": {"accelerators": 1, "points": [[1, 0, 100], [6, 0, 400]]}},
                     {"name": "b", "samples": 1000, "arrival": 0,
                      "throughput": {"accelerators": 2, "points": [[1, 0, 100], [6, 0, 800]]}}]}


def _write(tmp_path, doc, name="jobs.json"):
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return str(p)


@pytest.mark.parametrize("lease", ["inf", "nan"])
def test_cli_refuses_a_non_finite_lease_by_name(tmp_path, capsys, lease):
    path = _write(tmp_path, TWO_JOBS)
    assert main(["cluster", "simulate", path, "--policy", "ftf", "--lease", lease, "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "--lease" in err and "leave --lease out" in err


@pytest.mark.parametrize("lease", [math.inf, math.nan])
def test_simulate_refuses_a_non_finite_lease(lease):
    jobs = [SimJob("A", linear(2), 100, 0.0), SimJob("B", linear(2), 40, 10.0)]
    with pytest.raises(InputError, match="lease"):
        simulate(jobs, CAP2, "ftf", lease=lease)


def _one_job(request):
    return {"cluster": {"devices": "a100:4,cpu:12"},
            "jobs": [{"name": "a", "samples": 100, "request": request,
                      "throughput": {"accelerators": 1, "points": [[1, 0, 150], [4, 0, 300]]}}]}


@pytest.mark.parametrize("policy", ["fifo", "ftf", "even", "proportional", "tune"])
@pytest.mark.parametrize("request_", ["a100:8,cpu:2", "a100:1,cpu:13"])
def test_a_request_beyond_the_cluster_is_refused_for_every_policy(tmp_path, capsys, policy, request_):
    path = _write(tmp_path, _one_job(request_))
    assert main(["cluster", "simulate", path, "--policy", policy, "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "jobs[0] (a): request" in err and "the cluster has" in err


def test_a_request_above_a_measured_tables_accelerators_is_refused_not_clipped(tmp_path, capsys):
    path = _write(tmp_path, _one_job("a100:2,cpu:2"))
    assert main(["cluster", "simulate", path, "--policy", "fifo", "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert "jobs[0] (a): request" in err and "measured at 1 a100" in err


def test_a_request_above_the_jobs_limit_is_refused(tmp_path, capsys):
    doc = _one_job("a100:1,cpu:8")
    doc["jobs"][0]["limit"] = "cpu:4"
    assert main(["cluster", "simulate", _write(tmp_path, doc), "--policy", "fifo", "--no-cache"]) == 2
    assert "jobs[0] (a): request asks for 8 cpu, above its limit" in capsys.readouterr().err


def test_simulate_fifo_refuses_a_request_above_the_curves_limits():
    jobs = [SimJob("A", linear(2), 100, 0.0, (3, 0))]
    with pytest.raises(InputError, match="request"):
        simulate(jobs, Capacity(("acc", "cpu"), (4, 0), (False, True)), "fifo")


def test_a_request_within_the_table_runs_as_asked(tmp_path, capsys):
    path = _write(tmp_path, _one_job("a100:1,cpu:2"))
    assert main(["cluster", "simulate", path, "--policy", "fifo", "--no-cache", "--json"]) == 0
    job = json.loads(capsys.readouterr().out)["jobs"][0]
    assert job["allocation"] == {"a100": 1, "cpu": 2}


def test_simulate_table_labels_the_used_and_time_columns_as_the_first_allocation(tmp_path, capsys):
    path = _write(tmp_path, TWO_JOBS)
    assert main(["cluster", "simulate", path, "--policy", "even", "--no-cache"]) == 0
    header = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("job ")][0]
    assert "first allocation" in header and "first used" in header and "first time/sample" in header


def test_the_json_summary_counts_the_decisions_statuses():
    import dataclasses

    jobs = [SimJob("A", linear(2), 100, 0.0), SimJob("B", linear(2), 40, 10.0)]
    r = simulate(jobs, CAP2, "even")
    assert r.to_dict()["summary"]["statuses"] == {"rule": r.decisions}
    r = dataclasses.replace(r, statuses=("optimal", "time limit", "optimal"))
    assert r.to_dict()["summary"]["statuses"] == {"optimal": 2, "time limit": 1}


def test_a_time_limited_tune_milp_is_reported_in_the_table_and_the_json(tmp_path, capsys, monkeypatch):
    import dataclasses

    from placement.cluster import synergy

    real = synergy.solve_or_stop
    calls = []

    def stopped(*args, **kwargs):  # HiGHS stopped at the time limit with its start (the proportional picks)
        res = real(*args, **kwargs)
        calls.append(kwargs.get("time_limit"))
        return dataclasses.replace(res, status="time limit")

    monkeypatch.setattr(synergy, "solve_or_stop", stopped)
    table = {"accelerators": 1, "points": [[1, 0, 100], [12, 0, 1200]]}  # every job wants every core
    trio = [{"name": f"j{i}", "samples": 1e5, "throughput": table} for i in range(3)]
    jobs = _write(tmp_path, {"cluster": {"devices": "a100:4,cpu:12"}, "jobs": trio})
    out = str(tmp_path / "r.json")
    assert main(["cluster", "simulate", jobs, "--policy", "tune", "--no-cache", "--time-limit", "5",
                 "--out", out]) == 0
    text = capsys.readouterr().out
    assert 5 in calls, "no TUNE MILP ran: the case does not exercise the time limit"
    assert "stopped at --time-limit" in text
    assert json.load(open(out))["summary"]["statuses"].get("time limit", 0) >= 1


def test_no_cache_with_a_cache_dir_is_refused_by_name(tmp_path, capsys):
    path = _write(tmp_path, TWO_JOBS)
    assert main(["cluster", "simulate", path, "--policy", "even", "--no-cache",
                 "--cache-dir", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "--no-cache" in err and "--cache-dir" in err


def test_ctrl_c_under_progress_ends_the_bars_line_first(tmp_path, capsys, monkeypatch):
    from placement.cluster import synergy

    def interrupted(*args, progress=None, **kwargs):
        progress(90, 300)
        raise KeyboardInterrupt

    monkeypatch.setattr(synergy, "simulate_rounds", interrupted)
    path = _write(tmp_path, TWO_JOBS)
    assert main(["cluster", "simulate", path, "--policy", "tune", "--no-cache", "--progress"]) == 130
    err = capsys.readouterr().err
    assert "90/300 jobs done\nerror: interrupted" in err


def _docs():
    import pathlib

    return " ".join((pathlib.Path(__file__).parent.parent / "docs" / "clusters.md").read_text().split())


def test_docs_give_the_settings_of_the_exact_ftf_figure_on_synergys_trace():
    assert "--fairness exact --lease 300000 --time-limit 10" in _docs()


def test_lease_help_says_what_triggers_a_decision_for_each_policy(capsys):
    assert main(["cluster", "--help"]) == 0
    help_ = " ".join(capsys.readouterr().out.split())
    assert "also re-allocate every T" not in help_
    assert "proportional, tune, opt decide only at the start of each round" in help_
    assert "decide at every arrival and completion" in help_
    assert "Synergy's simulator): a job that arrives mid-round waits for the next round" in _docs()


def test_synergy_rounds_refuse_a_non_finite_round(tmp_path):
    from placement.cluster.command import synergy_jobs
    from placement.cluster.formats import read_jobs
    from placement.cluster.synergy import simulate_rounds

    jl = read_jobs(_write(tmp_path, TWO_JOBS))
    with pytest.raises(InputError, match="round"):
        simulate_rounds(synergy_jobs(jl, jl.cluster), jl.cluster, "tune", round_length=math.inf)
