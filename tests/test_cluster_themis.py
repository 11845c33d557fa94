"""Themis's auction and fairness knob in ``ftf`` (issue #26): the auction's allocation reaches the
largest product of rho improvements a brute force over every combination finds, the knob picks the
right bidders (every job at f = 1, at least one at a tiny f), the leftover goes to the others, hand
computed cases, and invalid knobs are clear errors in the API and on the command line."""

import functools
import json
import math

import numpy as np
import pytest

from graphs.errors import InputError
from placement.cli import main
from placement.cluster.policies import Capacity, JobState, allocate, bidders, fair_share_time
from placement.cluster.simulate import SimJob, simulate
from tests.test_cluster_policies import _feasible_combos, _fits, _random_case, linear

ACC = Capacity(("acc", "cpu"), (4, 0), (False, True))


def _wait_rho(job, share, lease):
    """rho if the job waits one lease and then runs on its fair share, from the definition."""
    return (job.elapsed + lease + job.remaining * share) / (job.samples * share)


def _run_rho(job, share, time_per_sample):
    return (job.elapsed + job.remaining * time_per_sample) / (job.samples * share)


def _log_gain(jobs, shares, lease, combo, who):
    """Sum over ``who`` of log(rho_wait / rho), a job that gets nothing counting 0 and an option that
    does not improve counting 0 too (the auction would not give it; the leftover may)."""
    total = 0.0
    for j in who:
        p = combo[j]
        if p is not None:
            total += max(0.0, math.log(_wait_rho(jobs[j], shares[j], lease)
                                       / _run_rho(jobs[j], shares[j], p.time_per_sample)))
    return total


@functools.cache
def _auction_cases() -> tuple:
    """The test below's 30 random cases (jobs, capacity) of seed 26, the same at each fairness: drawn once
    (drawing them, a throughput curve per random graph, was most of its time)."""
    rng = np.random.default_rng(26)
    return tuple(_random_case(rng) for _ in range(30))


@pytest.mark.parametrize("fairness", [1.0, 0.5, 1e-6])
def test_the_auction_reaches_the_brute_force_product_of_improvements(fairness):
    """Random small clusters and curves: the bidders (the ``ceil(f n)`` highest ``rho_wait``, at least
    one) get an allocation whose product of improvements equals the largest over every combination of
    curve points that fits, found by enumeration; everything fits the capacity."""
    lease = 5.0
    checked = partial = 0
    for jobs, cap in _auction_cases():
        shares = [fair_share_time(j.curve, cap, j.contention) for j in jobs]
        n = len(jobs)
        k = max(1, math.ceil(fairness * n - 1e-9))
        wr = [_wait_rho(j, s, lease) for j, s in zip(jobs, shares)]
        who = sorted(range(n), key=lambda j: (-wr[j], jobs[j].order, j))[:k]
        best = max(_log_gain(jobs, shares, lease, c, who) for c in _feasible_combos(jobs, cap))
        d = allocate("ftf", jobs, cap, lease=lease, share_times=shares, fairness=fairness)
        _fits(d.allocations, cap)
        assert d.status == "optimal"
        assert d.stats["bidders"] == k
        got = _log_gain(jobs, shares, lease, [a.point for a in d.allocations], who)
        assert got == pytest.approx(best, rel=1e-6, abs=1e-9)
        assert d.stats["log_product"] == pytest.approx(best, rel=1e-6, abs=1e-9)
        checked += best > 0
        partial += k < n
    assert checked >= 10  # most cases have something worth bidding for
    assert fairness == 1.0 or partial > 0


def test_bidders_every_job_at_one_at_least_one_at_a_tiny_knob():
    assert [bidders(1.0, n) for n in (1, 2, 7)] == [1, 2, 7]
    assert [bidders(1e-9, n) for n in (1, 5, 100)] == [1, 1, 1]
    assert bidders(0.5, 3) == 2 and bidders(0.5, 4) == 2 and bidders(0.2, 10) == 2 and bidders(0.21, 10) == 3


def _two_jobs():
    """Two perfectly scaling jobs (time per sample 1/k on k accelerators), 100 samples each, fair share
    time 0.5 (two of the four accelerators), no lease. ``a`` is behind (50 time units in, nothing
    done): T_id 50, rho_wait (50 + 100 * 0.5) / 50 = 2, rho on k: 1 + 2/k (3, 2, 1.67, 1.5), so its
    improvements are 2/3, 1, 1.2, 1.33. ``b`` is new: rho_wait 1, rho on k: 2/k, improvements 0.5, 1,
    1.5, 2. Only 3 or 4 accelerators improve either, so at most one of them can win."""
    return [JobState("a", linear(), 100, 100, 50.0, 2.0, 0), JobState("b", linear(), 100, 100, 0.0, 2.0, 1)]


def test_hand_computed_auction_and_knob():
    jobs = _two_jobs()
    # f = 1: both bid; b taking all four (product 2) beats a taking them (1.33): a waits
    d = allocate("ftf", jobs, ACC, share_times=[0.5, 0.5], fairness=1.0)
    assert [a.devices for a in d.allocations] == [(0, 0), (4, 0)]
    assert d.stats["log_product"] == pytest.approx(math.log(2.0))
    # f = 0.5: only the most unfair (a, rho_wait 2 against 1) bids and takes all four; nothing is left
    d = allocate("ftf", jobs, ACC, share_times=[0.5, 0.5], fairness=0.5)
    assert [a.devices for a in d.allocations] == [(4, 0), (0, 0)]
    assert d.stats["bidders"] == 1 and d.stats["log_product"] == pytest.approx(math.log(4 / 3))
    # no knob: max rho minimised (2 with 2 + 2 or 3 + 1), then the sum of rho (3 against 3.67): 2 + 2
    d = allocate("ftf", jobs, ACC, share_times=[0.5, 0.5])
    assert [a.devices for a in d.allocations] == [(2, 0), (2, 0)] and d.objective == pytest.approx(2.0)


def test_the_leftover_goes_to_the_jobs_that_did_not_bid():
    """``a`` (behind, the one bidder at f = 0.1) can use only two accelerators; the other two go to
    ``b`` and ``c`` by the exact ftf among them (one each: equal jobs, max rho minimised)."""
    jobs = [JobState("a", linear(2), 100, 100, 50.0, 3.0, 0), JobState("b", linear(), 100, 100, 0.0, 3.0, 1),
            JobState("c", linear(), 100, 100, 0.0, 3.0, 2)]
    d = allocate("ftf", jobs, ACC, share_times=[0.75] * 3, fairness=0.1)
    assert d.stats["bidders"] == 1 and d.stats["winners"] == 1
    assert [a.devices for a in d.allocations] == [(2, 0), (1, 0), (1, 0)]


def test_a_losing_bidder_still_gets_what_nobody_else_can_use():
    """f = 1, the two jobs of :func:`_two_jobs` on five accelerators: b wins four (improvement 2; a on
    four: 1.33, a on three and b on two: 1.2); the fifth is worthless to b's bid but the leftover ftf
    gives it to a, so no useful device idles."""
    cap = Capacity(("acc", "cpu"), (5, 0), (False, True))
    jobs = [JobState("a", linear(), 100, 100, 50.0, 2.0, 0), JobState("b", linear(), 100, 100, 0.0, 2.0, 1)]
    d = allocate("ftf", jobs, cap, share_times=[0.5, 0.5], fairness=1.0)
    assert [a.devices for a in d.allocations] == [(1, 0), (4, 0)]
    assert d.stats["winners"] == 1 and d.stats["waiting"] == 0


@pytest.mark.parametrize("bad", [0.0, -0.5, 1.5, math.nan, math.inf, True, "0.5"])
def test_invalid_knobs_are_input_errors(bad):
    jobs = _two_jobs()
    with pytest.raises(InputError, match="fairness knob"):
        allocate("ftf", jobs, ACC, share_times=[0.5, 0.5], fairness=bad)
    with pytest.raises(InputError, match="fairness knob"):
        simulate([SimJob("a", linear(), 10.0)], ACC, "ftf", fairness=bad)


def test_the_knob_is_ftfs_alone():
    with pytest.raises(InputError, match="applies to policy ftf"):
        allocate("joint", _two_jobs(), ACC, share_times=[0.5, 0.5], fairness=0.5)


def _table_jobs(tmp_path):
    points = [[c, 10, 100.0 * c] for c in (1, 3, 6, 12)]
    doc = {"cluster": {"devices": "a100:4,cpu:12", "host_memory_gb": 200},
           "jobs": [{"name": n, "samples": 3600, "arrival": 1000.0 * k,
                     "throughput": {"accelerators": 1, "points": points}}
                    for k, n in enumerate(("a", "b", "c"))]}
    path = tmp_path / "three.json"
    path.write_text(json.dumps(doc))
    return str(path)


@pytest.mark.parametrize("bad", ["0", "1.5", "-1", "nan", "half"])
def test_cli_rejects_an_invalid_knob_naming_the_option(tmp_path, capsys, bad):
    path = _table_jobs(tmp_path)
    assert main(["cluster", "simulate", path, "--policy", "ftf", "--fairness", bad, "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "--fairness" in err


@pytest.mark.parametrize("args", [["--policy", "joint"], ["--policy", "tune"], ["--policy", "even"],
                                  ["--policy", "tune", "--base", "ftf", "--fairness", "exact"]])
def test_cli_rejects_the_knob_where_nothing_uses_it(tmp_path, capsys, args):
    path = _table_jobs(tmp_path)
    if "--fairness" not in args:
        args = args + ["--fairness", "0.5"]
    assert main(["cluster", "simulate", path, *args, "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "--fairness applies to --policy ftf" in err


def test_cli_runs_the_auction(tmp_path, capsys):
    path = _table_jobs(tmp_path)
    assert main(["cluster", "simulate", path, "--policy", "ftf", "--fairness", "0.5", "--json",
                 "--no-cache"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["policy"] == "ftf" and doc["summary"]["stats"]["fairness"] == 0.5
    assert all(math.isfinite(j["finish_time"]) for j in doc["jobs"])
    assert main(["cluster", "simulate", path, "--policy", "ftf", "--fairness", "0.5", "--no-cache"]) == 0
    assert "auction, fairness knob 0.5" in capsys.readouterr().out
    # the defaults: simulate auctions with the knob at 0.1 (the fairest measured), 'exact' turns it off,
    # and the one-shot command is exact unless told otherwise
    for args, knob in ((["simulate"], 0.1), (["simulate", "--fairness", "exact"], None), ([], None)):
        argv = ["cluster", *args[:1], path, *args[1:], "--policy", "ftf", "--json", "--no-cache"]
        assert main(argv) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["summary"].get("stats", {}).get("fairness") == knob, args
    # the one-shot command, one decision held until each job finishes: the one bidder of three (f = 0.2)
    # is a, the earliest (it has waited longest: highest rho_wait); its rate grows with every core, so
    # it takes all 12, and b and c, left with none, wait for good
    assert main(["cluster", path, "--policy", "ftf", "--fairness", "0.2", "--json", "--no-cache"]) == 0
    doc = json.loads(capsys.readouterr().out)
    jobs = {j["name"]: j for j in doc["jobs"]}
    assert doc["mode"] == "allocation" and jobs["a"]["allocation"] == {"a100": 1, "cpu": 12}
    assert jobs["b"]["finish_time"] is None and jobs["c"]["finish_time"] is None
