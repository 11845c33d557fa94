"""The throughput–latency frontier: non-dominated, re-evaluable, complete, with the right ends."""

from __future__ import annotations

import math

import numpy as np
import pytest

from graphs.evaluate import evaluate
from graphs.latency import latency
from graphs.reference import Workload
from placement.api import place
from placement.serving import ServingPoint, batch_frontier, non_dominated
from solvers import latency_ip
from solvers.base import SolveOptions, Status
from tests.instances import random_instance
from tests.test_slo import domain_points


def pareto(pts):
    out = []
    for load, lat in sorted(pts):
        if not out or lat < out[-1][1] * (1 - 1e-9) - 1e-12:
            out.append((load, lat))
    return out


@pytest.mark.parametrize("seed", range(3))
def test_frontier_equals_brute_force_pareto_set(seed):
    rng = np.random.default_rng(seed)
    done = 0
    opts = SolveOptions(gap=1e-9, raw={"dp_warm_start": False})
    while done < 6:
        inst = random_instance(rng, max_items=5, training=False)
        if inst.cluster.num_devices > 5:
            continue
        done += 1
        g, cl = inst.graph, inst.cluster
        pts, proven = batch_frontier(Workload(g, cl), opts)
        want = pareto(domain_points(inst))
        if not want:
            assert pts == []
            continue
        assert proven and all(p.proven for p in pts)
        got = [(p.max_load, p.latency_ms) for p in pts]
        assert len(got) == len(want), (got, want)
        for (a, b), (c, d) in zip(got, want):
            assert a == pytest.approx(c, rel=1e-6, abs=1e-9) and b == pytest.approx(d, rel=1e-6, abs=1e-9)
        # mutually non-dominated, and each plan re-evaluates to its stated numbers
        for p in pts:
            a = p.placement.assignment
            assert evaluate(g, cl, a).max_load == pytest.approx(p.max_load, rel=1e-12)
            assert latency(g, cl, a).total == pytest.approx(p.latency_ms, rel=1e-12)
            for q in pts:
                if q is not p:
                    assert not (q.max_load <= p.max_load and q.latency_ms <= p.latency_ms)
        assert non_dominated(pts) == sorted(pts, key=lambda p: -p.samples_per_s)
        # the ends: the latency IP's optimum (one subgraph per accelerator), and at least as much
        # throughput as the DP's optimum (equal without host cores, where the domains coincide)
        lat = latency_ip.solve(g, cl, SolveOptions(objective="latency", gap=1e-9))
        assert lat.status == Status.OPTIMAL
        assert pts[-1].latency_ms == pytest.approx(lat.objective, rel=1e-6, abs=1e-9)
        dp = place(g, cl)
        if dp.assignment is not None:
            assert pts[0].max_load <= dp.max_load * (1 + 1e-9) + 1e-12
            if all(k.pays_communication for k in cl.kinds):
                assert pts[0].max_load == pytest.approx(dp.max_load, rel=1e-6, abs=1e-9)


def test_non_dominated_keeps_the_proven_one_of_points_equal_but_for_rounding():
    """The frontier table showed an unproven one-device-per-stage point where a proven stage plan had
    the same figures, 1e-13 apart: a float's last digits chose the label."""
    def pt(b, sps, lat, proven):
        return ServingPoint(b, None, sps, lat, proven)

    unproven, proven = pt(1, 3553.51 * (1 + 1e-13), 0.502036, False), pt(1, 3553.51, 0.502036, True)
    other = pt(1, 2000.0, 0.4, False)
    for order in ([unproven, proven, other], [proven, unproven, other]):
        assert non_dominated(order) == [proven, other]
    assert non_dominated([unproven, pt(2, 3553.51, 0.502036, True)]) == [unproven]  # another batch size


def test_non_dominated_keeps_the_smaller_batch_of_equal_points():
    def pt(b, sps, lat):
        return ServingPoint(b, None, sps, lat, True)

    pts = [pt(1, 10, 1.0), pt(2, 10, 1.0), pt(4, 20, 3.0), pt(8, 15, 4.0), pt(16, 5, 0.5)]
    got = non_dominated(pts)
    assert [(p.batch_size, p.samples_per_s) for p in got] == [(4, 20), (1, 10), (16, 5)]
    assert math.isfinite(got[0].latency_ms)
