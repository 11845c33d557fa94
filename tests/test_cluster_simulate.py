"""Simulation over time (work conserved, JCTs and rho as computed by hand), the job-list format and the
``placement cluster`` command."""

import json
import math
import os

import numpy as np
import pytest

from graphs.errors import InfeasibleError, InputError
from placement.cli import main
from placement.cluster.formats import parse_jobs
from placement.cluster.policies import POLICIES, Capacity
from placement.cluster.simulate import SimJob, allocate_once, simulate
from tests.test_cluster_policies import linear, table_curve

CAP2 = Capacity(("acc", "cpu"), (2, 0), (False, True))


def test_even_jcts_and_rho_match_a_hand_computation():
    # A (100 samples) alone on 2 accelerators from 0 to 10: 20 samples. B (40) arrives: 1 each, B done at
    # 50, A has 40 left; alone again on 2 until 70.
    jobs = [SimJob("A", linear(2), 100, 0.0), SimJob("B", linear(2), 40, 10.0)]
    r = simulate(jobs, CAP2, "even")
    a, b = r.jobs
    assert (a.finish, b.finish) == pytest.approx((70.0, 50.0))
    assert (a.jct, b.jct) == pytest.approx((70.0, 40.0))
    assert r.avg_jct == pytest.approx(55.0) and r.makespan == pytest.approx(70.0)
    # A's contention: 1 job for 10, 2 for 40, 1 for 20 -> N = 110 / 70; its share 2/N accelerators
    n = 110 / 70
    assert a.contention == pytest.approx(n)
    assert a.ideal_time == pytest.approx(100 / (2 / n))
    assert a.rho == pytest.approx(70 / (100 / (2 / n)))
    assert b.contention == pytest.approx(2.0) and b.rho == pytest.approx(40 / 40)
    assert r.utilisation == pytest.approx(1.0)
    assert r.decisions == 3


def test_fifo_runs_jobs_one_after_another_when_each_asks_for_everything():
    jobs = [SimJob("A", linear(2), 100, 0.0, (2, 0)), SimJob("B", linear(2), 40, 10.0, (2, 0))]
    r = simulate(jobs, CAP2, "fifo")
    assert [j.finish for j in r.jobs] == pytest.approx([50.0, 70.0])
    assert r.jobs[1].jct == pytest.approx(60.0)


def test_a_lease_adds_decisions_but_changes_nothing_when_nothing_changes():
    jobs = [SimJob("A", linear(2), 100, 0.0), SimJob("B", linear(2), 40, 10.0)]
    plain = simulate(jobs, CAP2, "even")
    leased = simulate(jobs, CAP2, "even", lease=7.0)
    assert leased.decisions > plain.decisions
    assert [j.finish for j in leased.jobs] == pytest.approx([j.finish for j in plain.jobs])


def _random_trace(rng, n=6):
    jobs = []
    for i in range(n):
        t1 = float(rng.uniform(1, 5))
        speed = rng.uniform(0.5, 1.0, size=4).cumprod()
        times = {(k, 0): t1 / (1 + sum(speed[:k - 1])) for k in range(1, 5)}
        times.update({(k, c): times[(k, 0)] / (1 + 0.1 * c * rng.random()) for k in range(1, 5)
                      for c in range(1, 3)})
        if rng.random() < 0.5:
            times[(0, 2)] = t1 * 6  # host cores alone can run it, slowly
        mem = {k: float(rng.uniform(0, 4)) for k in times if k[1]}
        curve = table_curve(times, limits=(4, 2), memory=mem)
        jobs.append(SimJob(f"j{i}", curve, float(rng.integers(20, 200)), float(rng.uniform(0, 100))))
    cap = Capacity(("acc", "cpu"), (4, 2), (False, True), 6.0)
    return jobs, cap


@pytest.mark.parametrize("policy", POLICIES)
def test_simulation_conserves_work_and_respects_capacity(policy):
    rng = np.random.default_rng(1)
    for _ in range(4):
        jobs, cap = _random_trace(rng)
        r = simulate(jobs, cap, policy, lease=25.0)
        done = [0.0] * len(jobs)
        for s in r.segments:
            assert s.end >= s.start
            for t, n in enumerate(cap.counts):
                assert sum(a.devices[t] for a in s.allocations if a is not None) <= n
            assert sum(a.host_memory for a in s.allocations if a is not None) <= cap.host_memory + 1e-9
            for i, a in enumerate(s.allocations):
                if a is not None and a.running:
                    done[i] += (s.end - s.start) / a.time_per_sample
        for j, o, d in zip(jobs, r.jobs, done):
            assert math.isfinite(o.finish) and o.finish >= j.arrival
            assert d == pytest.approx(j.samples, rel=1e-9) and o.done == j.samples
            # nothing runs for a job before it arrives or after it finishes
            for s in r.segments:
                a = s.allocations[jobs.index(j)]
                if a is not None:
                    assert s.start >= j.arrival - 1e-9 and s.end <= o.finish + 1e-9
        assert r.max_rho >= max(o.rho for o in r.jobs) - 1e-12
        assert 0 <= r.utilisation <= 1 + 1e-9


def test_allocate_once_holds_one_allocation_until_each_job_finishes():
    jobs = [SimJob("A", linear(4), 100, 0.0), SimJob("B", linear(4), 40, 0.0)]
    r = allocate_once(jobs, Capacity(("acc", "cpu"), (4, 0), (False, True)), "ftf")
    assert [j.allocation.devices for j in r.jobs] == [(2, 0), (2, 0)]
    assert [j.finish for j in r.jobs] == pytest.approx([50.0, 20.0])
    assert [j.rho for j in r.jobs] == pytest.approx([1.0, 1.0])
    r = allocate_once(jobs, Capacity(("acc", "cpu"), (4, 0), (False, True)), "fifo")
    assert r.jobs[0].allocation.devices == (4, 0) and math.isinf(r.jobs[1].finish)


def test_a_job_that_cannot_run_on_the_cluster_is_an_error():
    needs_three = table_curve({(3, 0): 1.0}, limits=(3, 0))
    with pytest.raises(InfeasibleError, match="cannot run"):
        simulate([SimJob("x", needs_three, 10)], CAP2, "ftf")
    with pytest.raises(InputError, match="request"):
        simulate([SimJob("x", linear(2), 10, request=(0, 0))], CAP2, "fifo")


# --------------------------------------------------------------------------- the job list
def test_job_list_errors_name_the_job_and_field(tmp_path):
    ok = {"cluster": {"devices": "a100:2,cpu:2"}, "jobs": [{"name": "a", "model": "m.onnx", "samples": 5}]}
    jl = parse_jobs(ok, base_dir=str(tmp_path))
    assert jl.jobs[0].model == str(tmp_path / "m.onnx") and jl.cluster.host_memory == math.inf
    cases = [
        ({"jobs": ok["jobs"]}, "missing top-level field 'cluster'"),
        ({"cluster": {"devices": "a100:2"}, "jobs": []}, "non-empty list"),
        ({"cluster": {"devices": "zz:2"}, "jobs": ok["jobs"]}, "cluster.devices"),
        ({**ok, "jobs": [{"name": "a", "model": "m.onnx"}]}, r"jobs\[0\] \(a\): missing field 'samples'"),
        ({**ok, "jobs": [{"model": "m.onnx", "samples": -1}]}, r"jobs\[0\]: samples must be positive"),
        ({**ok, "jobs": [{"model": "m.txt", "samples": 1}]}, "neither an ONNX model"),
        ({**ok, "jobs": [{"model": "w.json", "samples": 1, "training": True}]}, "only applies to ONNX"),
        ({**ok, "jobs": [{"model": "m.onnx", "samples": 1, "request": "h100:1"}]}, "no device kind 'h100'"),
        ({**ok, "jobs": [{"model": "m.onnx", "samples": 1, "colour": 3}]}, "unknown field"),
        ({**ok, "jobs": ok["jobs"] * 2}, "already used"),
        ({**ok, "lease": 0}, "lease must be positive"),
    ]
    for doc, msg in cases:
        with pytest.raises(InputError, match=msg):
            parse_jobs(doc, source="jobs.json")


# --------------------------------------------------------------------------- the command line
def write_job_list(folder) -> str:
    """Two jobs of a small CNN (one training, one asking for an A100) on ``a100:3,cpu:2``, written to
    ``folder``/jobs.json with the model beside it; the file's path."""
    from tests.onnx_models import save, small_cnn

    model = save(small_cnn(), str(folder / "cnn.onnx"))
    doc = {"cluster": {"devices": "a100:3,cpu:2", "host_memory_gb": 1}, "lease": 50,
           "jobs": [{"name": "a", "model": "cnn.onnx", "samples": 2000, "arrival": 0},
                    {"name": "b", "model": model, "training": True, "samples": 1000, "arrival": 5,
                     "request": "a100:1"}]}
    path = folder / "jobs.json"
    path.write_text(json.dumps(doc))
    return str(path)


@pytest.fixture
def job_list(tmp_path):
    return write_job_list(tmp_path)


def test_cli_allocates_and_writes_the_result(job_list, tmp_path, capsys):
    out = str(tmp_path / "res.json")
    assert main(["cluster", job_list, "--policy", "ftf", "--out", out, "--cache-dir",
                 str(tmp_path / "cache")]) == 0
    text = capsys.readouterr().out
    assert "policy ftf" in text and "max rho" in text and "avg JCT" in text
    res = json.load(open(out))
    assert res["schema"] == "placement-cluster" and res["mode"] == "allocation"
    for j in res["jobs"]:
        assert set(j) >= {"name", "allocation", "time_per_sample", "finish_time", "rho"}
        assert set(j["allocation"]) == {"a100", "cpu"}
    assert set(res["summary"]) >= {"max_rho", "avg_jct", "makespan", "utilisation"}
    assert os.listdir(tmp_path / "cache")


def test_cli_simulates_every_policy_with_a_plot(job_list, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    plot = str(tmp_path / "alloc.png")
    assert main(["cluster", "simulate", job_list, "--policy", "all", "--no-cache", "--json",
                 "--plot", plot]) == 0
    res = json.loads(capsys.readouterr().out)
    names = ["ftf", "joint", "even", "fifo", "fifo+proportional", "fifo+tune", "fifo+opt"]
    assert [r["policy"] for r in res["results"]] == names
    for r in res["results"]:
        assert r["mode"] == "simulation" and r["timeline"]
        assert all(j["finish_time"] is not None for j in r["jobs"])
    for pol in names:
        assert os.path.getsize(str(tmp_path / f"alloc-{pol}.png")) > 0


def test_cli_usage_errors(job_list, tmp_path, capsys):
    assert main(["cluster", "simulate"]) == 2
    assert main(["cluster", job_list, "--lease", "5", "--no-cache"]) == 2
    assert main(["cluster", str(tmp_path / "missing.json"), "--no-cache"]) == 2
    assert main(["cluster", job_list, "--policy", "best"]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err


def test_allocate_once_with_a_waiting_job_reports_the_time_the_allocation_holds():
    """By hand: B arrives at 5, so the one allocation is made then; FIFO gives A all 4 accelerators
    (100 samples at 1/4 each: done at 30) and B waits forever. The makespan is infinite, and utilisation
    is measured over [5, 30], when A holds all 4: 100%, not 0%."""
    from placement.cluster.command import format_result

    jobs = [SimJob("A", linear(4), 100, 0.0), SimJob("B", linear(4), 40, 5.0)]
    r = allocate_once(jobs, Capacity(("acc", "cpu"), (4, 0), (False, True)), "fifo")
    assert r.jobs[0].finish == pytest.approx(30.0) and math.isinf(r.jobs[1].finish)
    assert math.isinf(r.makespan) and r.allocated_span == pytest.approx(25.0)
    assert r.utilisation == pytest.approx(1.0) and r.utilisation_per_kind()["acc"] == pytest.approx(1.0)
    text = format_result(r)
    assert "at the last arrival (5" in text
    assert "utilisation 100% (acc 100%) while the allocation holds" in text


@pytest.mark.parametrize("flag, value, got", [("--time-limit", "0", "0.0"), ("--time-limit", "-1", "-1.0"),
                                              ("--curve-time-limit", "nan", "nan"),
                                              ("--curve-time-limit", "0", "0.0")])
def test_cli_time_limits_follow_the_one_rule(job_list, capsys, flag, value, got):
    # the command kept its own copy of the rule ("placement cluster: --time-limit must be positive")
    assert main(["cluster", job_list, flag, value, "--no-cache"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {flag} must be a positive number of seconds (inf: none), got {got}"]
