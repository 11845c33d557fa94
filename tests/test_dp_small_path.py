"""The DP's small-lattice path (per-ideal kernels called from Python, leaf kernels run as numba's
pure-Python originals) must give exactly what the compiled chunk kernels give."""

import math

import numpy as np
import pytest

import solvers.dp as dp
from graphs.errors import InfeasibleError
from graphs.ideals import chain_ideals, enumerate_ideals
from tests.instances import random_instance


def _force(monkeypatch, small: bool) -> dict:
    """Route run_dp through one path only; count which kernels it called."""
    calls = {"chunk": 0, "ideal_by_ideal": 0, "py_leaf": 0, "compiled_leaf": 0}
    monkeypatch.setattr(dp, "_SMALL_LATTICE", math.inf if small else 0)
    monkeypatch.setattr(dp, "_PYTHON_WORK", math.inf if small else -1)
    for name in ("_dp_chunk", "_tie_chunk"):
        kernel = getattr(dp, name)

        def chunk(*a, _k=kernel):
            calls["chunk"] += 1
            return _k(*a)

        monkeypatch.setattr(dp, name, chunk)
    by_ideal, leaf = dp._ideal_by_ideal, dp._leaf

    def ideal_by_ideal(*a):
        calls["ideal_by_ideal"] += 1
        return by_ideal(*a)

    def counted_leaf(kernel, work):
        f = leaf(kernel, work)
        calls["py_leaf" if f is kernel.py_func else "compiled_leaf"] += 1
        return f

    monkeypatch.setattr(dp, "_ideal_by_ideal", ideal_by_ideal)
    monkeypatch.setattr(dp, "_leaf", counted_leaf)
    return calls


def _runs(inst, ub_from_chain: bool):
    prob = dp.prepare(inst.graph, inst.cluster)
    lattice = enumerate_ideals(prob.items.num_classes, prob.items.src, prob.items.dst)
    ub = math.inf
    if ub_from_chain:
        chain = dp.run_dp(prob, chain_ideals(prob.items.num_classes, np.arange(prob.items.num_classes)))
        ub = chain.value * (1 + 1e-9)
    return prob, lattice, ub


def _same(a: dp.DPRun, b: dp.DPRun, label: str) -> None:
    assert np.array_equal(a.table, b.table), label  # bit for bit, inf included
    assert (a.value == b.value or (math.isinf(a.value) and math.isinf(b.value))), label
    assert a.pairs == b.pairs and a.complete == b.complete and a.tie_break == b.tie_break, label
    assert len(a.stages) == len(b.stages), label
    for (ia, ta), (ib, tb) in zip(a.stages, b.stages):
        assert ta == tb and np.array_equal(ia, ib), label


@pytest.mark.parametrize("seed", range(3))
def test_small_path_gives_the_compiled_tables_on_random_instances(monkeypatch, seed):
    rng = np.random.default_rng(5200 + seed)
    ties = 0
    for i in range(25):
        inst = random_instance(rng, max_items=8, label=f"small-path{seed}-{i}")
        try:
            prob, lattice, ub = _runs(inst, ub_from_chain=bool(i % 2))
        except InfeasibleError:  # prepare() refuses an item no device can hold
            continue
        with monkeypatch.context() as m:
            small = _force(m, small=True)
            a = dp.run_dp(prob, lattice, ub=ub, tie_break=True)
        with monkeypatch.context() as m:
            big = _force(m, small=False)
            b = dp.run_dp(prob, lattice, ub=ub, tie_break=True)
        _same(a, b, inst.label)
        ties += a.tie_break == "done"
        # each run really took its own path
        assert small["chunk"] == 0 and small["ideal_by_ideal"] > 0 and small["compiled_leaf"] == 0
        assert big["ideal_by_ideal"] == 0 and big["chunk"] > 0 and big["py_leaf"] == 0
    assert ties >= 10  # the tie-break pass (its own kernels) was compared too


def test_estimate_skips_sampling_only_when_every_pair_is_affordable():
    rng = np.random.default_rng(5300)
    for i in range(20):
        inst = random_instance(rng, max_items=8, label=f"estimate-{i}")
        try:
            prob, lattice, _ = _runs(inst, ub_from_chain=False)
        except InfeasibleError:
            continue
        sampled = dp.estimate(prob, lattice, math.inf)
        N = lattice.num_ideals
        bound = dp.estimate(prob, lattice, math.inf, affordable=math.inf)
        assert bound.pairs == N * (N - 1) / 2 >= sampled.pairs, inst.label  # an upper bound
        assert bound.memory_bytes == sampled.memory_bytes
        # not affordable: the sample is walked, as without the option
        assert dp.estimate(prob, lattice, math.inf, affordable=bound.seconds / 2 - 1e-12) == sampled
