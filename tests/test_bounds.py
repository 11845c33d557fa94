"""Lower bounds: never above the exact optimum (brute force, reference results), exact where they must be."""

import json
import math
import os

import numpy as np
import pytest

from graphs.model import Cluster, DeviceKind, OpGraph
from graphs.reference import read_workload
from solvers.bounds import bounds_of_items, item_bound, lower_bounds, work_bound
from solvers.dp import solve as dp_solve
from tests.instances import WORKLOADS, random_instance

TOL = 1e-9


@pytest.mark.parametrize("seed", range(3))
def test_bounds_never_exceed_the_dp_optimum(seed):
    """The DP is exact (checked against brute force in test_dp.py), and much faster than brute force."""
    rng = np.random.default_rng(500 + seed)
    tight = 0
    for i in range(100):
        inst = random_instance(rng, max_items=7, label=f"b{seed}-{i}")
        best = dp_solve(inst.graph, inst.cluster).objective
        b = lower_bounds(inst.graph, inst.cluster)
        assert b.value == max(b.item, b.work)
        if math.isinf(best):
            continue  # an infeasible instance may have any bound
        assert b.item <= best * (1 + TOL) + 1e-12, inst.label
        assert b.work <= best * (1 + TOL) + 1e-12, inst.label
        assert np.all(b.prices >= 0) and b.prices.max(initial=1.0) <= 1.0
        tight += b.value >= best * (1 - 1e-9)
    assert tight >= 1  # some instances are decided by their compute alone


def test_one_kind_is_the_largest_item_or_the_average():
    compute = np.array([[4.0, 1.0, 1.0, 1.0, 1.0]])
    mem = np.zeros(5)
    caps = np.array([math.inf])
    assert work_bound(compute, mem, np.array([2]), caps)[0] == pytest.approx(4.0)  # 8/2 = 4 = largest
    assert work_bound(compute, mem, np.array([1]), caps)[0] == pytest.approx(8.0)
    assert work_bound(compute * [[1, 0, 0, 0, 0]], mem, np.array([3]), caps)[0] == pytest.approx(4.0)


def test_two_kinds_weigh_each_node_by_its_own_time():
    # a fast kind (1 device) and a slow one (2 devices, 4x slower): fractional optimum balances
    # 1 fast + 2 slow: work w split so w_f = T, w_s * 4 = 2 T  ->  T (1 + 1/2) = W  ->  T = W / 1.5
    compute = np.array([[1.0] * 6, [4.0] * 6])
    b = bounds_of_items(compute, np.zeros(6), np.array([1, 2]), np.array([math.inf, math.inf]))
    assert b.work == pytest.approx(4.0)  # T = 6 / 1.5; an item (4.0 on the slow kind) just fits there
    assert b.prices[0] == pytest.approx(1.0) and b.prices[1] == pytest.approx(0.25)
    # "total work / all devices" on the cheapest kind would say 2.0, far too low for the max of a
    # single slow item; the threshold keeps slow-kind items out when T is below their slow time
    compute = np.array([[1.0] * 6, [10.0] * 6])
    b = bounds_of_items(compute, np.zeros(6), np.array([1, 2]), np.array([math.inf, math.inf]))
    assert b.work == pytest.approx(6.0)  # the slow kind cannot take any item below T = 10


def test_memory_limits_raise_the_bound():
    compute = np.array([[1.0] * 4, [1.0] * 4])
    free = work_bound(compute, np.zeros(4), np.array([1, 1]), np.array([math.inf, math.inf]))[0]
    tight = work_bound(compute, np.ones(4), np.array([1, 1]), np.array([1.0, math.inf]))[0]
    assert free == pytest.approx(2.0) and tight == pytest.approx(3.0)
    assert math.isinf(work_bound(compute, np.ones(4) * 2, np.array([1, 1]), np.array([1.0, 1.0]))[0])
    assert item_bound(compute, np.array([0.0, 0.0, 0.0, 5.0]), np.array([1, 1]), np.array([1.0, 9.0])) == 1.0


def test_unsupported_items_go_where_they_can():
    inf = math.inf
    compute = np.array([[1.0, 1.0, inf], [2.0, inf, 3.0]])
    b = bounds_of_items(compute, np.zeros(3), np.array([1, 1]), np.array([inf, inf]))
    assert b.item == 3.0 and b.work == pytest.approx(3.0)


def test_no_items():
    g = OpGraph.build(names=[], kinds=["gpu"], compute=np.zeros((1, 0)), comm=np.zeros((1, 0)),
                      memory=np.zeros(0), edges=[])
    b = lower_bounds(g, Cluster((DeviceKind("gpu", 2),)))
    assert b.value == 0.0


def _reference():
    path = os.path.join(WORKLOADS, "reference_results.json")
    if not os.path.exists(path):
        return {}
    return {k: v for k, v in json.load(open(path))["throughput"].items() if v["dp_max_load"] is not None}


_REF = _reference()


@pytest.mark.parametrize("key", sorted(_REF))
def test_bounds_below_reference_optima(workloads, key):
    w = read_workload(os.path.join(workloads, key))
    b = lower_bounds(w.graph, w.cluster)
    assert 0 < b.value <= _REF[key]["dp_max_load"] * (1 + TOL)
