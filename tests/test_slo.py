"""Throughput under a latency target (and latency under a throughput target) against brute force."""

from __future__ import annotations

import math

import numpy as np
import pytest

from graphs.contract import colocation_items
from graphs.evaluate import evaluate
from graphs.latency import latency
from solvers import slo_ip
from solvers.base import SolveOptions, Status
from tests.instances import canonical_assignments, random_instance


def domain_points(inst):
    """(max-load, latency) of every serving-domain placement, up to renaming identical devices."""
    g, cl = inst.graph, inst.cluster
    cls, C = colocation_items(g)
    out = []
    for items_dev in canonical_assignments(C, cl):
        a = np.asarray(items_dev, np.int64)[cls]
        ev = latency(g, cl, a)
        if not ev.valid or not math.isfinite(ev.total) or max(ev.subgraphs_per_device().values(),
                                                                 default=0) > 1:
            continue
        out.append((evaluate(g, cl, a).max_load, ev.total))
    return out


def _instances(n, seed):
    rng = np.random.default_rng(seed)
    k = 0
    while k < n:
        inst = random_instance(rng, max_items=5, training=False)
        if inst.cluster.num_devices > 5:
            continue
        k += 1
        yield inst, rng


@pytest.mark.parametrize("seed", range(3))
def test_slo_equals_brute_force(seed):
    opts = SolveOptions(gap=1e-9, raw={"dp_warm_start": False})
    for inst, rng in _instances(8, seed):
        pts = domain_points(inst)
        g, cl = inst.graph, inst.cluster
        if not pts:
            sol = slo_ip.solve(g, cl, opts)
            assert sol.status == Status.INFEASIBLE
            continue
        lats = sorted(p[1] for p in pts)
        targets = [lats[0] * 0.999 - 1e-6, lats[0], lats[int(rng.integers(len(lats)))], math.inf]
        for L in targets:
            want = min((p[0] for p in pts if p[1] <= L * (1 + 1e-9) + 1e-12), default=math.inf)
            sol = slo_ip.solve(g, cl, opts, latency_max=L)
            if not math.isfinite(want):
                assert sol.status == Status.INFEASIBLE, (inst.label, L)
                continue
            assert sol.status == Status.OPTIMAL, (sol.status, sol.message)
            a = sol.assignment
            assert evaluate(g, cl, a).max_load == pytest.approx(sol.objective, rel=1e-9)
            assert latency(g, cl, a).total <= L * (1 + 1e-9) + 1e-12
            assert sol.objective == pytest.approx(want, rel=1e-6, abs=1e-9), (L, pts)


@pytest.mark.parametrize("seed", range(2))
def test_latency_under_a_throughput_target_equals_brute_force(seed):
    opts = SolveOptions(gap=1e-9, raw={"dp_warm_start": False})
    for inst, rng in _instances(8, 100 + seed):
        pts = domain_points(inst)
        if not pts:
            continue
        loads = sorted(p[0] for p in pts)
        for U in (loads[0], loads[int(rng.integers(len(loads)))], math.inf):
            want = min(p[1] for p in pts if p[0] <= U * (1 + 1e-9) + 1e-12)
            sol = slo_ip.solve(inst.graph, inst.cluster, opts, minimise="latency", max_load_max=U)
            assert sol.status == Status.OPTIMAL
            assert sol.objective == pytest.approx(want, rel=1e-6, abs=1e-9)
            assert sol.stats["max_load"] <= U * (1 + 1e-9) + 1e-12


def test_latency_path_bound_is_the_one_subgraph_one_and_stays_below_brute_force():
    """Minimising latency, the solver's path bound is :func:`latency_bound` for one subgraph per
    accelerator (its domain): never above the domain's optimum, and stronger than the general bound on
    some of these instances (so dropping the domain would show)."""
    from solvers.latency_ip import latency_bound

    opts = SolveOptions(gap=1e-9, raw={"dp_warm_start": False})
    stronger = 0
    for seed in range(3):
        for inst, _ in _instances(8, 300 + seed):
            pts = domain_points(inst)
            if not pts:
                continue
            sol = slo_ip.solve(inst.graph, inst.cluster, opts, minimise="latency")
            lb = sol.stats["path_bound"]
            assert lb <= min(p[1] for p in pts) * (1 + 1e-9) + 1e-12, inst.label
            general = latency_bound(inst.graph, inst.cluster)
            assert lb >= general * (1 - 1e-9) - 1e-12, inst.label
            stronger += lb > general * (1 + 1e-9) + 1e-12
    assert stronger > 0
