"""Stage-model job curves (placement/cluster/curves.py, problem_curve): every allocation's value
equals a separate stage-model dp run on that many devices, efficient points, and Piper-format jobs in a
job list get this curve."""

from __future__ import annotations

import dataclasses
import itertools
import math
import os

import numpy as np
import pytest

from placement.cluster.curves import CurveCache, job_curve, problem_curve
from placement.cluster.formats import parse_jobs
from solvers.base import Status
from solvers.dp_stages import solve_problem
from tests.test_dp_stages import random_problem


def _separate(p, counts) -> float:
    sub = p.with_options(kinds=tuple(dataclasses.replace(k, count=c) for k, c in zip(p.kinds, counts)))
    r = solve_problem(sub)
    assert r.status in (Status.OPTIMAL, Status.INFEASIBLE)
    return r.objective if r.status is Status.OPTIMAL else math.inf


@pytest.mark.parametrize("seed", range(3))
def test_curve_equals_separate_runs_per_allocation(seed):
    rng = np.random.default_rng(300 + seed)
    finite = 0
    for _ in range(25):
        p = random_problem(rng)
        c = problem_curve(p)
        assert c.exact and c.method == "stage-dp-per-count"
        assert c.limits == tuple(k.count for k in p.kinds)
        for counts in itertools.product(*(range(k.count + 1) for k in p.kinds)):
            want = math.inf if sum(counts) == 0 else _separate(p, counts)
            assert c.values[counts] == pytest.approx(want, rel=1e-9), counts
            finite += math.isfinite(want)
        for pt in c.points:  # each strictly faster than every allocation with one device fewer
            assert math.isfinite(pt.time_per_sample)
            for t, x in enumerate(pt.counts):
                if x:
                    assert pt.time_per_sample < c.values[pt.counts[:t] + (x - 1,) + pt.counts[t + 1:]]
    assert finite >= 15


def test_curve_maps_onto_the_cluster_kinds():
    rng = np.random.default_rng(7)
    p = random_problem(rng)
    names = ("cpu",) + tuple(k.name for k in p.kinds)
    c = problem_curve(p, kinds=names, base_memory=5.0)
    assert c.kinds == names and c.limits[0] == 0
    assert all(pt.counts[0] == 0 and pt.host_memory == 5.0 for pt in c.points)


def test_piper_job_gets_the_stage_model_curve(workloads, tmp_path):
    path = os.path.join(workloads, "piper", "gnmt.json")
    if not os.path.exists(path):
        pytest.skip("the Piper workloads are not among the shared workloads")
    jl = parse_jobs({"cluster": {"devices": "a100:3,cpu:2"},
                     "jobs": [{"model": path, "samples": 10, "limit": "a100:2"}]})
    cache = CurveCache(tmp_path / "cache")
    c = job_curve(jl.jobs[0], jl.cluster, cache=cache)
    assert c.method == "stage-dp-per-count" and c.kinds == ("a100", "cpu")
    assert c.limits == (2, 0)
    from graphs.piper import read_piper

    for n in (1, 2):
        want = solve_problem(read_piper(path, devices=n)).objective
        assert c.values[(n, 0)] == pytest.approx(want, rel=1e-9)
    assert job_curve(jl.jobs[0], jl.cluster, cache=cache) is c and cache.hits == 1
