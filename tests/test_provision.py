"""The cheapest allocation for a throughput target, against an exhaustive search over allocations."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from graphs.errors import InputError
from placement.api import place
from placement.provision import EXAMPLE_PRICES, parse_prices, provision
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
            p = place(g, cl.with_counts(c))
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
        pts = {c: domain_points(Instance(g, cl.with_counts(c))) for c in _allocations(cl)}
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


def test_example_prices_are_written_in_the_format_their_name_is_read_in(tmp_path, capsys):
    """``--example-prices prices.json`` wrote TOML into a .json file, which ``--prices prices.json`` then
    refused as not valid JSON. A .toml name gets TOML, any other JSON; each reads back to the same
    prices."""
    import tomllib

    from placement.cli import main
    from placement.provision import read_prices

    want = parse_prices(tomllib.loads(EXAMPLE_PRICES))
    for name in ("prices.toml", "prices.json", "prices.txt"):
        path = tmp_path / name
        assert main(["provision", "--example-prices", str(path)]) == 0
        assert read_prices(path) == want, name
    assert (tmp_path / "prices.toml").read_text().startswith("# Prices per device-hour")
    assert (tmp_path / "prices.json").read_text().lstrip().startswith("{")
    capsys.readouterr()


@pytest.mark.parametrize("seed", range(40))
def test_the_cheapest_first_search_finds_the_cheapest_allocation_meeting_the_target(seed):
    """:func:`placement.provision.cheapest_first`, the latency-target search of both models, on random
    monotone throughputs (more devices never serve less) against every allocation: the first allocation
    in price order that meets the target, proven; a bound that rules some short allocations out and the
    pruning below proven-short ones never skip the answer, and every skipped allocation was short."""
    from placement.clock import Clock
    from placement.provision import Allocation, Tried, cheapest_first

    rng = np.random.default_rng(seed)
    counts = rng.integers(1, 4, size=rng.integers(1, 4))
    prices = rng.uniform(0.5, 3.0, size=counts.size)
    weight = rng.uniform(0.2, 2.0, size=counts.size)
    allocs = [c for c in itertools.product(*(range(n + 1) for n in counts)) if sum(c) > 0]
    order = sorted(allocs, key=lambda c: (float(np.dot(c, prices)), sum(c)))

    def serves(c):  # monotone: concave in each kind's count
        return float(np.dot(weight, np.sqrt(c)))

    target = float(rng.uniform(0.3, 1.1) * serves(tuple(counts)))
    bound_rules_out = {c for c in allocs if serves(c) < target and rng.random() < 0.4}
    solved = []

    def solve_at(c, time_limit):
        solved.append(c)
        a = Allocation(c, float(np.dot(c, prices)), 1.0 / serves(c), serves(c))
        return Tried(a, ("plan", c), short=serves(c) < target)

    found = cheapest_first(order, target, lambda c: c in bound_rules_out, solve_at, Clock(),
                           max_solves=10_000)
    expected = next((c for c in order if serves(c) >= target * (1 - 1e-12)), None)
    assert found.proven and found.stopped == ""
    assert (found.best.counts if found.best else None) == expected
    assert found.answer == (None if expected is None else ("plan", expected))
    assert all(serves(c) < target for c in solved[:-1] if c != expected)
    assert not set(solved) & bound_rules_out and found.solves == len(solved)
    # an unproven solve makes the answer unproven; the solve limit stops the search, saying so
    unproven = cheapest_first(order, target, lambda c: False,
                              lambda c, t: Tried(Allocation(c, 0.0, 1.0, 0.0, False)), Clock(),
                              max_solves=2)
    assert not unproven.proven and unproven.best is None
    assert unproven.stopped == ("the solve limit (2) was reached" if len(order) > 2 else "")
