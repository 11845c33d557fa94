"""The cheapest allocation for a throughput target, against an exhaustive search over allocations."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from graphs.errors import InputError
from placement.api import place
from placement.provision import EXAMPLE_PRICES, parse_prices, provision, sub_cluster
from tests.instances import Instance, random_instance
from tests.test_slo import domain_points


def _allocations(cluster):
    return [c for c in itertools.product(*(range(k.count + 1) for k in cluster.kinds)) if sum(c) > 0]


def _cheapest(values, prices, target):
    """Exhaustive: (price, samples/s) of the cheapest allocation meeting the target, or None."""
    ok = [(float(np.dot(c, prices)), 1e3 / v) for c, v in values.items()
          if math.isfinite(v) and 1e3 / v >= target * (1 - 1e-12)]
    return min(ok, key=lambda x: (x[0], -x[1])) if ok else None


@pytest.mark.parametrize("seed", range(4))
def test_provision_equals_exhaustive_search(seed):
    rng = np.random.default_rng(seed)
    for _ in range(6):
        inst = random_instance(rng, max_items=5, training=False)
        g, cl = inst.graph, inst.cluster
        prices = rng.uniform(0.1, 3.0, size=len(cl.kinds)).round(2)
        values = {}
        for c in _allocations(cl):
            p = place(g, sub_cluster(cl, c))
            values[c] = p.max_load if p.assignment is not None else math.inf
        finite = [1e3 / v for v in values.values() if math.isfinite(v)]
        targets = [0.5 * min(finite), float(rng.choice(finite)), max(finite), 2 * max(finite)] if finite \
            else [1.0]
        for target in targets:
            want = _cheapest(values, prices, target)
            got = provision(g, cl, prices, target)
            if want is None:
                assert got.best is None and got.proven
                continue
            assert got.best is not None and got.proven
            assert got.best.price == pytest.approx(want[0])
            assert got.best.samples_per_s >= target * (1 - 1e-9)
            assert got.best.max_load == pytest.approx(values[got.best.counts])
            # the efficient curve: every allocation is matched by an efficient one at most as dear
            for c, v in values.items():
                if math.isfinite(v):
                    price = float(np.dot(c, prices))
                    assert any(a.price <= price + 1e-9 and a.samples_per_s >= 1e3 / v * (1 - 1e-9)
                               for a in got.efficient)
            for a, b in zip(got.efficient, got.efficient[1:]):
                assert a.price < b.price + 1e-12 and a.samples_per_s < b.samples_per_s


@pytest.mark.parametrize("seed", range(2))
def test_provision_with_a_latency_target_equals_exhaustive_search(seed):
    rng = np.random.default_rng(50 + seed)
    done = 0
    while done < 4:
        inst = random_instance(rng, max_items=4, training=False)
        g, cl = inst.graph, inst.cluster
        if cl.num_devices > 4:
            continue
        done += 1
        prices = rng.uniform(0.1, 3.0, size=len(cl.kinds)).round(2)
        pts = {c: domain_points(Instance(g, sub_cluster(cl, c))) for c in _allocations(cl)}
        lats = sorted(lat for p in pts.values() for _, lat in p)
        if not lats:
            continue
        slo = lats[len(lats) // 2]
        values = {c: min((load for load, lat in p if lat <= slo * (1 + 1e-9)), default=math.inf)
                  for c, p in pts.items()}
        finite = [1e3 / v for v in values.values() if math.isfinite(v)]
        for target in (min(finite), max(finite), 2 * max(finite)):
            want = _cheapest(values, prices, target)
            got = provision(g, cl, prices, target, latency_slo=slo)
            assert got.proven
            if want is None:
                assert got.best is None
            else:
                assert got.best.price == pytest.approx(want[0])
                assert got.solution.stats["latency"] <= slo * (1 + 1e-9)


def test_example_prices_parse_and_bad_prices_are_explained():
    import tomllib

    prices = parse_prices(tomllib.loads(EXAMPLE_PRICES))
    assert prices["a100"] > prices["t4"] > prices["cpu"] > 0
    with pytest.raises(InputError, match="non-negative"):
        parse_prices({"prices": {"a100": -1}})
